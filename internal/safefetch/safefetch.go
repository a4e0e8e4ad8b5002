// Package safefetch downloads a small document from a URL that an operator or a client
// named, under rules that keep the server from being turned against its own network
// (server-side request forgery).
//
// Rules, for every Get:
//   - https only; plain http only with Options.AllowInsecure; any other scheme, a URL
//     without a host and a URL carrying credentials are refused;
//   - no proxy (a proxy would make the checked connection the proxy's) and no redirect
//     (a 3xx answer is an error naming its Location);
//   - the address of every connection is checked as it is made, after DNS resolution,
//     so a name cannot resolve to one address when checked and another when used:
//     loopback, private, link-local, carrier-grade NAT and other special-purpose
//     addresses are refused unless Options.AllowPrivate; unspecified, multicast,
//     broadcast and cloud metadata addresses (169.254.169.254, fd00:ec2::254 and the
//     like) are always refused;
//   - TLS 1.2 or later, verified against Options.RootCAs or the system roots;
//   - one timeout (Options.Timeout, default DefaultTimeout) bounds the whole exchange:
//     connection, TLS, headers and body;
//   - only HTTP 200 is a success, and its body may hold at most Options.MaxBytes.
//
// Errors carry an errcode: a refused URL or address, an HTTP error or a transport
// failure is invalid_request, a body over the limit limit_exceeded, no answer in time
// timeout, a cancelled context cancelled. Messages do not name the URL; callers add
// that context.
package safefetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

// DefaultTimeout bounds a whole fetch when Options.Timeout is zero or less.
const DefaultTimeout = 10 * time.Second

// ErrRefusedAddress is wrapped by the error for a connection to a refused address.
var ErrRefusedAddress = errors.New("refused address")

// Options are the caller's choices for one Get.
type Options struct {
	// AllowInsecure permits plain http URLs.
	AllowInsecure bool
	// AllowPrivate permits loopback, private, link-local and the other special-purpose
	// addresses; the always-refused ones stay refused.
	AllowPrivate bool
	// InsecureHint and PrivateHint, when set, end the refusal of a plain http URL and of
	// a private address in parentheses: they tell the reader how to opt in, e.g.
	// "set SYMBI_SCHEMAPIN_ALLOW_PRIVATE=1 to allow".
	InsecureHint, PrivateHint string
	// RootCAs, when set, replaces the system roots.
	RootCAs *x509.CertPool
	// Timeout bounds the whole exchange; zero or less means DefaultTimeout.
	Timeout time.Duration
	// MaxBytes is the largest body accepted; it must be positive.
	MaxBytes int64
	// Accept is the Accept header sent, if not empty.
	Accept string
}

// Get fetches rawURL under the package's rules and returns the body of its 200 answer.
func Get(ctx context.Context, rawURL string, o Options) ([]byte, error) {
	if o.MaxBytes <= 0 {
		return nil, errcode.Errorf(errcode.Internal, "safefetch: MaxBytes %d, want a positive limit", o.MaxBytes)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "not a valid URL: %v", urlCause(err))
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && o.AllowInsecure:
	case u.Scheme == "http":
		return nil, errcode.Errorf(errcode.InvalidRequest, "plain http is refused%s", hint(o.InsecureHint))
	default:
		return nil, errcode.Errorf(errcode.InvalidRequest, "scheme %q is refused, want https", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errcode.Errorf(errcode.InvalidRequest, "no host")
	}
	if u.User != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "credentials in the URL are refused")
	}

	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dialer := &net.Dialer{
		// Control runs on the address actually being connected to, after DNS
		// resolution, so a name cannot resolve to one address when checked and
		// another when used.
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: cannot parse %q", ErrRefusedAddress, address)
			}
			return checkAddr(ap.Addr(), o.AllowPrivate, o.PrivateHint)
		},
	}
	transport := &http.Transport{
		Proxy:               nil, // a proxy would make the checked connection the proxy's
		DialContext:         dialer.DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: timeout,
		DisableKeepAlives:   true,
		ForceAttemptHTTP2:   true,
		// The body is bounded by MaxBytes; the headers by this (Go's default is 10 MiB).
		MaxResponseHeaderBytes: MaxHeaderBytes,
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
		return nil, errcode.Errorf(errcode.InvalidRequest, "not a valid URL: %v", urlCause(err))
	}
	if o.Accept != "" {
		req.Header.Set("Accept", o.Accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fetchError(ctx, err, timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, errcode.Errorf(errcode.InvalidRequest, "redirect (HTTP %d to %s) refused", resp.StatusCode, errcode.Quote(resp.Header.Get("Location")))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, errcode.Errorf(errcode.InvalidRequest, "HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > o.MaxBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "body of %d bytes is over the %d-byte limit", resp.ContentLength, o.MaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, o.MaxBytes+1))
	if err != nil {
		return nil, fetchError(ctx, err, timeout)
	}
	if int64(len(body)) > o.MaxBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "body is over the %d-byte limit", o.MaxBytes)
	}
	return body, nil
}

// urlCause returns the cause of a *url.Error, whose own text quotes the whole URL (a
// query may hold a secret).
func urlCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// hint formats an opt-in hint for the end of a refusal.
func hint(h string) string {
	if h == "" {
		return ""
	}
	return " (" + h + ")"
}

// MaxHeaderBytes bounds the headers of an answer: more is refused as the transport
// refuses it ("server response headers exceeded …").
const MaxHeaderBytes = 64 << 10

// MaxCauseBytes bounds the text of a transport error in a fetch's error: net/http quotes
// a malformed status or header line whole, and the server chose those bytes.
const MaxCauseBytes = 512

// fetchError gives a transport error its code, without the URL the client's error names
// (a query may hold a secret; callers name what they fetched), its text cut to
// MaxCauseBytes (with its length).
func fetchError(ctx context.Context, err error, timeout time.Duration) error {
	err = clipped{urlCause(err)}
	var ne net.Error
	switch {
	case errors.Is(err, ErrRefusedAddress):
		return errcode.Wrap(errcode.InvalidRequest, err)
	case errors.Is(ctx.Err(), context.Canceled):
		return errcode.Wrap(errcode.Cancelled, err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return errcode.Errorf(errcode.Timeout, "no answer within %s: %w", timeout, err)
	}
	return errcode.Wrap(errcode.InvalidRequest, err)
}

// clipped is an error whose text is cut to MaxCauseBytes; errors.Is and errors.As see
// the error it holds.
type clipped struct{ err error }

func (c clipped) Error() string { return errcode.ClipTo(c.err.Error(), MaxCauseBytes) }
func (c clipped) Unwrap() error { return c.err }
