package safefetch

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	tests := []struct {
		addr         string
		refused      string // substring of the refusal without opt-in; "" = allowed
		refusedOptIn bool   // still refused with AllowPrivate
	}{
		{"93.184.215.14", "", false},
		{"2606:4700::1111", "", false},
		{"127.0.0.1", "loopback", false},
		{"127.200.0.9", "loopback", false},
		{"::1", "loopback", false},
		{"::ffff:127.0.0.1", "loopback", false},
		{"10.1.2.3", "private", false},
		{"172.16.0.1", "private", false},
		{"192.168.1.1", "private", false},
		{"fd12::1", "private", false},
		{"169.254.1.1", "link-local", false},
		{"fe80::1", "link-local", false},
		{"100.64.0.1", "carrier-grade NAT", false},
		{"0.1.2.3", "this network", false},
		{"64:ff9b::7f00:1", "NAT64", false},
		{"fec0::1", "site-local", false},
		{"240.0.0.1", "reserved", false},
		{"169.254.169.254", "cloud metadata", true},
		{"::ffff:169.254.169.254", "cloud metadata", true},
		{"fd00:ec2::254", "cloud metadata", true},
		{"fd00:ec2::23", "cloud metadata", true},
		{"169.254.170.2", "cloud metadata", true},
		{"168.63.129.16", "cloud metadata", true},
		{"100.100.100.200", "cloud metadata", true},
		// A zone does not make another host; translated and tunnelled forms reach the
		// embedded IPv4 address through a gateway.
		{"fd00:ec2::254%1", "cloud metadata", true},
		{"fd00:ec2::254%eth0", "cloud metadata", true},
		{"64:ff9b::a9fe:a9fe", "embeds 169.254.169.254", true},
		{"2002:a9fe:a9fe::1", "embeds 169.254.169.254", true},
		{"::a9fe:a9fe", "embeds 169.254.169.254", true},
		// The local-use NAT64 prefix (RFC 8215), with the IPv4 address where a /48, /56,
		// /64 or /96 translator puts it (RFC 6052 §2.2).
		{"64:ff9b:1:a9fe:a9:fe00::", "embeds 169.254.169.254", true},
		{"64:ff9b:1:00a9:00fe:a9fe::", "embeds 169.254.169.254", true},
		{"64:ff9b:1::a9:fea9:fe00:0", "embeds 169.254.169.254", true},
		{"64:ff9b:1::a9fe:a9fe", "embeds 169.254.169.254", true},
		{"64:ff9b:1::7f00:1", "NAT64", false},
		{"fd20:ce::254", "cloud metadata", true},    // GCP over IPv6
		{"fe80::a9fe:a9fe", "cloud metadata", true}, // OpenStack over IPv6
		{"::7f00:1", "IPv4-compatible", false},
		{"2002:7f00:1::", "6to4", false},
		{"0.0.0.0", "unspecified", true},
		{"::", "unspecified", true},
		{"224.0.0.1", "multicast", true},
		{"ff02::1", "multicast", true},
		{"255.255.255.255", "broadcast", true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tt.addr)
			err := checkAddr(a, false, "set X=1 to allow")
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else if !errors.Is(err, ErrRefusedAddress) || !strings.Contains(err.Error(), tt.refused) {
				t.Fatalf("error %v, want refusal naming %q", err, tt.refused)
			} else if hinted := strings.HasSuffix(err.Error(), " (set X=1 to allow)"); hinted == tt.refusedOptIn {
				// The hint names the opt-in only where the opt-in would help.
				t.Fatalf("error %q: hinted %v, want %v", err, hinted, !tt.refusedOptIn)
			}
			if err := checkAddr(a, true, ""); (err != nil) != tt.refusedOptIn {
				t.Fatalf("with opt-in: error %v, want refused=%v", err, tt.refusedOptIn)
			}
		})
	}
}

// TestParseErrorDoesNotNameURL: a URL that fails to parse must be refused without
// echoing the URL back, since its query may hold a secret.
// docs/schemapin.md "Fetching a key URL safely": "names no URL in its errors (a query may
// hold a secret) but a refused redirect's Location"; package comment: "Messages do not
// name the URL; callers add that context."
// (A *url.Error's own text is `parse "<whole URL>": ...`.)
func TestParseErrorDoesNotNameURL(t *testing.T) {
	for _, u := range []string{
		"https://example.com/%zz?access_token=s3cr3t-value",  // bad escape
		"https://example.com/\x7f?access_token=s3cr3t-value", // control character
		" https://example.com/?access_token=s3cr3t-value",    // leading space
		"https://exa mple.com/?access_token=s3cr3t-value",    // space in host
	} {
		_, err := Get(context.Background(), u, Options{MaxBytes: 100})
		if err == nil {
			t.Fatalf("%q accepted", u)
		}
		if strings.Contains(err.Error(), "s3cr3t-value") {
			t.Errorf("error for %q names the URL and its secret: %v", u, err)
		}
	}
}

// TestEmbeddedAlwaysRefusedWithOptIn: an IPv6 address that carries, for a NAT64 /
// 6to4 / IPv4-compatible gateway, an IPv4 address of the always-refused kinds
// (unspecified, broadcast, multicast) must stay refused with AllowPrivate, as the
// embedded cloud-metadata addresses already are.
// docs/schemapin.md: "always refuses, even with the opt-in: unspecified (0.0.0.0, ::),
// multicast, broadcast (255.255.255.255) and cloud metadata addresses (...), also when an
// IPv6 address carries one for a gateway (NAT64 64:ff9b::/96, and the local-use
// 64:ff9b:1::/48 ...; 6to4; IPv4-compatible)."
func TestEmbeddedAlwaysRefusedWithOptIn(t *testing.T) {
	for _, a := range []string{
		"64:ff9b::",            // NAT64 of 0.0.0.0 (the gateway's own host)
		"64:ff9b::ffff:ffff",   // NAT64 of 255.255.255.255
		"64:ff9b::e000:1",      // NAT64 of 224.0.0.1
		"64:ff9b:1::ffff:ffff", // local-use NAT64 /96 of 255.255.255.255
		"2002::1",              // 6to4 of 0.0.0.0
		"2002:e000:1::1",       // 6to4 of 224.0.0.1
		"::ffff:ffff",          // IPv4-compatible 255.255.255.255
	} {
		err := checkAddr(netip.MustParseAddr(a), true, "")
		if !errors.Is(err, ErrRefusedAddress) {
			t.Errorf("%s allowed with AllowPrivate (err %v): it embeds an always-refused IPv4 address", a, err)
		}
	}
}
