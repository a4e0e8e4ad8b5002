package safefetch

import (
	"fmt"
	"net/netip"
)

// Addresses refused even with Options.AllowPrivate.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack instance metadata
	netip.MustParseAddr("fd00:ec2::254"),   // AWS instance metadata over IPv6
	netip.MustParseAddr("fd00:ec2::23"),    // AWS DNS over IPv6
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task credentials
	netip.MustParseAddr("168.63.129.16"),   // Azure WireServer (a public address)
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
	netip.MustParseAddr("fd20:ce::254"),    // GCP instance metadata over IPv6
	netip.MustParseAddr("fe80::a9fe:a9fe"), // OpenStack instance metadata over IPv6
}

// Private ranges, refused unless Options.AllowPrivate (loopback, link-local, private,
// unspecified and multicast are checked through netip methods).
var privatePrefixes = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
}

// checkAddr reports why addr may not be connected to, or nil; privateHint ends the
// refusal of an address that allowPrivate would permit.
func checkAddr(addr netip.Addr, allowPrivate bool, privateHint string) error {
	// A zone names an interface, not another host: the address is the same without it
	// (Linux ignores it for addresses that are not link-local).
	addr = addr.Unmap().WithZone("")
	for _, a := range append([]netip.Addr{addr}, embedded4(addr)...) {
		for _, m := range metadataAddrs {
			switch {
			case a == m && a == addr:
				return fmt.Errorf("%w: %s is a cloud metadata address", ErrRefusedAddress, addr)
			case a == m:
				return fmt.Errorf("%w: %s embeds %s, a cloud metadata address", ErrRefusedAddress, addr, a)
			}
		}
	}
	// Refused even with the opt-in, as the address itself or carried for a gateway
	// (without the opt-in every address that carries one is refused below, by its prefix).
	// In the local-use NAT64 prefix the places an IPv4 address may sit overlap: 0.0.0.0
	// is what a place the translator does not use reads as, not an address it carries.
	check := []netip.Addr{addr}
	if allowPrivate {
		check = append(check, embedded4(addr)...)
	}
	localNAT64 := netip.MustParsePrefix("64:ff9b:1::/48").Contains(addr)
	for _, a := range check {
		var what string
		switch {
		case a.IsUnspecified() && a != addr && localNAT64:
		case a.IsUnspecified():
			what = "unspecified"
		case a.IsMulticast():
			what = "multicast"
		case a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			what = "broadcast"
		}
		switch {
		case what != "" && a == addr:
			return fmt.Errorf("%w: %s is a %s address", ErrRefusedAddress, addr, what)
		case what != "":
			return fmt.Errorf("%w: %s embeds %s, a %s address", ErrRefusedAddress, addr, a, what)
		}
	}
	if allowPrivate {
		return nil
	}
	var what string
	switch {
	case addr.IsLoopback():
		what = "loopback"
	case addr.IsPrivate():
		what = "private"
	case addr.IsLinkLocalUnicast():
		what = "link-local"
	}
	for _, p := range privatePrefixes {
		if what == "" && p.prefix.Contains(addr) {
			what = p.what
		}
	}
	if what != "" {
		return fmt.Errorf("%w: %s is a %s address%s", ErrRefusedAddress, addr, what, hint(privateHint))
	}
	return nil
}

// embedded4 returns the IPv4 addresses an IPv6 address carries for translation or
// tunnelling — NAT64 (64:ff9b::/96; the local-use 64:ff9b:1::/48, whose translator may use
// any prefix length of RFC 6052 within it, so every place one puts the address is read),
// 6to4 (2002::/16, the four bytes after the prefix), IPv4-compatible (::/96) — which a
// gateway would reach.
func embedded4(addr netip.Addr) []netip.Addr {
	if !addr.Is6() {
		return nil
	}
	b := addr.As16()
	var out []netip.Addr
	if netip.MustParsePrefix("64:ff9b:1::/48").Contains(addr) {
		// RFC 6052 §2.2: the IPv4 bytes around byte 8 (always zero), for prefixes of 48,
		// 56, 64 and 96 bits.
		for _, at := range [][4]int{{6, 7, 9, 10}, {7, 9, 10, 11}, {9, 10, 11, 12}, {12, 13, 14, 15}} {
			out = append(out, netip.AddrFrom4([4]byte{b[at[0]], b[at[1]], b[at[2]], b[at[3]]}))
		}
	}
	for _, p := range []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("::/96")} {
		if p.Contains(addr) {
			out = append(out, netip.AddrFrom4([4]byte(b[12:16])))
		}
	}
	if netip.MustParsePrefix("2002::/16").Contains(addr) {
		out = append(out, netip.AddrFrom4([4]byte(b[2:6])))
	}
	return out
}
