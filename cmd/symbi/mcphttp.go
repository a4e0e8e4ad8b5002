package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"

	"symbi/internal/mcpserver"
	"symbi/internal/serve"
)

// httpFlags are symbi mcp's flags for serving Streamable HTTP (docs/http.md).
type httpFlags struct {
	addr              string
	tlsCert, tlsKey   string
	publicURL         string
	tokens            string
	jwks, issuer, aud string
	claim             string
	jwksAllowPrivate  bool
	jwksAllowInsecure bool
	maxPerCaller      int
	rate              float64
	maxSessions       int
	maxSessionsCaller int
	set               map[string]bool // the flags given explicitly (flag.FlagSet.Visit)
}

func (h *httpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.addr, "http", "", "serve MCP Streamable HTTP at `ADDR` (HOST:PORT; path /mcp) instead of stdio; without authentication only loopback addresses")
	fs.StringVar(&h.tlsCert, "tls-cert", "", "with --http: serve HTTPS with the certificate chain in `FILE` (PEM)")
	fs.StringVar(&h.tlsKey, "tls-key", "", "with --http: the private key of --tls-cert, `FILE` (PEM)")
	fs.StringVar(&h.publicURL, "public-url", "", "with --http: the base `URL` clients reach the server at, for the OAuth protected resource metadata (default: from --http and TLS)")
	fs.StringVar(&h.tokens, "auth-tokens", "", "with --http: require bearer tokens listed (hashed) in `FILE`; see symbi token add")
	fs.StringVar(&h.jwks, "auth-jwks", "", "with --http: require JWT bearer tokens signed by a key of the JWKS at `URL`")
	fs.StringVar(&h.issuer, "auth-issuer", "", "with --auth-jwks: the `ISSUER` (iss) tokens must name")
	fs.StringVar(&h.aud, "auth-audience", "", "with --auth-jwks: the `AUDIENCE` (aud) tokens must include")
	fs.StringVar(&h.claim, "auth-claim", "sub", "with --auth-jwks: the `CLAIM` that names the caller")
	fs.BoolVar(&h.jwksAllowPrivate, "auth-jwks-allow-private", false, "with --auth-jwks: allow the JWKS URL to resolve to a private or loopback address")
	fs.BoolVar(&h.jwksAllowInsecure, "auth-jwks-allow-insecure", false, "with --auth-jwks: allow an http:// JWKS URL")
	fs.IntVar(&h.maxPerCaller, "max-runs-per-caller", 0, "`N` runs in flight at most per caller; a call beyond it fails with busy (0: only --max-runs)")
	fs.IntVar(&h.maxSessions, "max-sessions", mcpserver.DefaultMaxSessions, "with --http: `N` sessions open at most in all; a client opening one more gets busy (HTTP 503)")
	fs.IntVar(&h.maxSessionsCaller, "max-sessions-per-caller", mcpserver.DefaultMaxSessionsPerCaller, "with --http: `N` sessions open at most per caller; one more closes the caller's least recently used idle session (busy, HTTP 429, when none is idle)")
	fs.Float64Var(&h.rate, "rate", 0, "`N` requests a second at most per caller (tool calls, resource reads, subscriptions), bursts of one second's worth; beyond it rate_limited (0: no limit)")
}

// check refuses inconsistent flags (a usage error).
func (h *httpFlags) check() error {
	switch {
	case h.addr == "" && (h.tlsCert != "" || h.tlsKey != "" || h.publicURL != "" || h.tokens != "" || h.jwks != ""):
		return errors.New("--tls-cert, --tls-key, --public-url, --auth-tokens and --auth-jwks go with --http")
	case (h.tlsCert == "") != (h.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case h.tokens != "" && h.jwks != "":
		return errors.New("give one of --auth-tokens and --auth-jwks, not both")
	case h.jwks != "" && (h.issuer == "" || h.aud == ""):
		return errors.New("--auth-jwks needs --auth-issuer and --auth-audience")
	case h.addr == "" && (h.set["max-sessions"] || h.set["max-sessions-per-caller"]):
		return errors.New("--max-sessions and --max-sessions-per-caller go with --http")
	case h.set["auth-claim"] && h.claim == "":
		return errors.New("--auth-claim needs a claim name (the default is sub)")
	case h.jwks == "" && (h.issuer != "" || h.aud != "" || h.jwksAllowPrivate || h.jwksAllowInsecure || h.set["auth-claim"]):
		return errors.New("--auth-issuer, --auth-audience, --auth-claim and --auth-jwks-allow-* go with --auth-jwks")
	case h.maxPerCaller < 0:
		return fmt.Errorf("--max-runs-per-caller %d: want 0 or more", h.maxPerCaller)
	case h.maxSessions < 1:
		return fmt.Errorf("--max-sessions %d: want 1 or more", h.maxSessions)
	case h.maxSessionsCaller < 1:
		return fmt.Errorf("--max-sessions-per-caller %d: want 1 or more", h.maxSessionsCaller)
	case h.rate < 0 || h.rate != h.rate:
		return fmt.Errorf("--rate %v: want 0 or more", h.rate)
	case h.publicURL != "" && h.tokens == "" && h.jwks == "":
		// It names the protected resource in the 401 challenge and the metadata, which
		// only an authenticated server serves.
		return errors.New("--public-url goes with --auth-tokens or --auth-jwks")
	case h.publicURL == "" && (h.tokens != "" || h.jwks != "") && wildcardHost(h.addr):
		return fmt.Errorf("--http %s listens on every address: give --public-url, the URL clients reach the server at — the 401 challenge and the protected resource metadata name it, and no client can reach %s", h.addr, h.addr)
	case h.publicURL != "":
		if u, err := url.Parse(h.publicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("--public-url %q: want the base URL clients use, http(s)://HOST[:PORT][/PATH], without query or fragment", h.publicURL)
		}
	}
	if h.addr != "" {
		return mcpserver.CheckListenAddr(h.addr, h.authenticated())
	}
	return nil
}

func (h *httpFlags) authenticated() bool { return h.tokens != "" || h.jwks != "" }

// options are the flags as package serve takes them.
func (h *httpFlags) options() serve.HTTPOptions {
	return serve.HTTPOptions{Addr: h.addr, TLSCert: h.tlsCert, TLSKey: h.tlsKey, PublicURL: h.publicURL, Tokens: h.tokens,
		JWKS: h.jwks, Issuer: h.issuer, Audience: h.aud, Claim: h.claim, JWKSAllowPrivate: h.jwksAllowPrivate,
		JWKSAllowInsecure: h.jwksAllowInsecure, MaxSessions: h.maxSessions, MaxSessionsCaller: h.maxSessionsCaller}
}

// wildcardHost reports whether addr (HOST:PORT) listens on every address: an empty host,
// 0.0.0.0 or :: (in any spelling, with a zone or IPv4-mapped).
func wildcardHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // --http's own check refuses it
	}
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.WithZone("").Unmap().IsUnspecified()
}
