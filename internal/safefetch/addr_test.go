package safefetch

import (
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
