package schemapin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"symbi/internal/errcode"
)

// ErrRefusedAddress is wrapped by the error for a connection to a refused address.
var ErrRefusedAddress = errors.New("refused address")

// Addresses refused even with SYMBI_SCHEMAPIN_ALLOW_PRIVATE=1.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack instance metadata
	netip.MustParseAddr("fd00:ec2::254"),   // AWS instance metadata over IPv6
	netip.MustParseAddr("fd00:ec2::23"),    // AWS DNS over IPv6
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task credentials
	netip.MustParseAddr("168.63.129.16"),   // Azure WireServer (a public address)
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
}

// Private ranges, refused unless SYMBI_SCHEMAPIN_ALLOW_PRIVATE=1 (loopback, link-local,
// private, unspecified and multicast are checked through netip methods).
var privatePrefixes = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
}

// checkAddr reports why addr may not be connected to, or nil.
func checkAddr(addr netip.Addr, allowPrivate bool) error {
	addr = addr.Unmap()
	for _, m := range metadataAddrs {
		if addr == m {
			return fmt.Errorf("%w: %s is a cloud metadata address", ErrRefusedAddress, addr)
		}
	}
	var what string
	switch {
	case addr.IsUnspecified():
		what = "unspecified"
	case addr.IsMulticast():
		what = "multicast"
	case addr.Is4() && addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		what = "broadcast"
	}
	if what != "" {
		return fmt.Errorf("%w: %s is a %s address", ErrRefusedAddress, addr, what)
	}
	if allowPrivate {
		return nil
	}
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
		return fmt.Errorf("%w: %s is a %s address (set SYMBI_SCHEMAPIN_ALLOW_PRIVATE=1 to allow)", ErrRefusedAddress, addr, what)
	}
	return nil
}

// fetchKey downloads the key at rawURL under the safe-fetch rules.
func (v *Verifier) fetchKey(ctx context.Context, rawURL string) ([]byte, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: %v", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && v.allowInsecure:
	case u.Scheme == "http":
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: plain http is refused (use https, or set SYMBI_SCHEMAPIN_ALLOW_INSECURE=1)")
	default:
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: scheme %q is refused, want https", u.Scheme)
	}
	if u.Host == "" {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: no host")
	}
	if u.User != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: credentials in the URL are refused")
	}

	timeout := v.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	allowPrivate := v.allowPrivate
	dialer := &net.Dialer{
		// Control runs on the address actually being connected to, after DNS
		// resolution, so a name cannot resolve to one address when checked and
		// another when used.
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: cannot parse %q", ErrRefusedAddress, address)
			}
			return checkAddr(ap.Addr(), allowPrivate)
		},
	}
	transport := &http.Transport{
		Proxy:               nil, // a proxy would make the checked connection the proxy's
		DialContext:         dialer.DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: v.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: timeout,
		DisableKeepAlives:   true,
		ForceAttemptHTTP2:   true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: %v", err)
	}
	req.Header.Set("Accept", "application/json, application/x-pem-file, text/plain")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fetchError(ctx, err, timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: redirect (HTTP %d to %q) refused", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key URL: HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > MaxKeyDocBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "key URL: body of %d bytes is over the %d-byte limit", resp.ContentLength, MaxKeyDocBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxKeyDocBytes+1))
	if err != nil {
		return nil, fetchError(ctx, err, timeout)
	}
	if len(body) > MaxKeyDocBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "key URL: body is over the %d-byte limit", MaxKeyDocBytes)
	}
	return body, nil
}

// fetchError gives a transport error its code.
func fetchError(ctx context.Context, err error, timeout time.Duration) error {
	var ne net.Error
	switch {
	case errors.Is(err, ErrRefusedAddress):
		return errcode.Errorf(errcode.InvalidRequest, "key URL: %w", err)
	case errors.Is(ctx.Err(), context.Canceled):
		return errcode.Errorf(errcode.Cancelled, "key URL: %w", err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return errcode.Errorf(errcode.Timeout, "key URL: no answer within %s: %w", timeout, err)
	}
	return errcode.Errorf(errcode.InvalidRequest, "key URL: %w", err)
}

// DefaultTimeout bounds a whole key fetch: connection, TLS, headers and body.
const DefaultTimeout = 10 * time.Second
