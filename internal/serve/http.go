package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"symbi/internal/auth"
	"symbi/internal/mcpserver"
	"symbi/internal/runs"
)

// HTTPOptions are the operator's choices for serving Streamable HTTP (docs/http.md). The
// command checks the flags' consistency; HTTP itself refuses what would be unsafe: an
// address other than loopback without authentication (mcpserver.CheckListenAddr).
type HTTPOptions struct {
	Addr              string // HOST:PORT
	TLSCert, TLSKey   string // PEM files; both or neither
	PublicURL         string // the base URL clients use (empty: from Addr and TLS)
	Tokens            string // the bearer tokens file
	JWKS              string // the JWKS URL of JWT bearer tokens
	Issuer, Audience  string
	Claim             string // the claim naming the caller
	JWKSAllowPrivate  bool
	JWKSAllowInsecure bool
	MaxSessions       int
	MaxSessionsCaller int
}

// HTTP serves the project over Streamable HTTP until a stop signal (o.Watch) or the HTTP
// server's failure: it then stops accepting, cancels the runs in flight, waits for their
// journals to end, and closes. What the operator gave that can fail — the tokens file, the
// JWK set, the certificate, the address — is taken before the server is assembled, so
// that such a failure leaves the project as it found it (the runs waiting at a gate stay
// waiting, for the next server).
func HTTP(o Options, h HTTPOptions) error {
	if err := mcpserver.CheckListenAddr(h.Addr, h.Tokens != "" || h.JWKS != ""); err != nil {
		return err
	}
	catchSIGPIPE()
	log := o.Log
	opts := mcpserver.HTTPOptions{Log: log, MaxSessions: h.MaxSessions, MaxSessionsPerCaller: h.MaxSessionsCaller}
	method := "none"
	var authAttrs []any
	switch {
	case h.Tokens != "":
		tokens, err := auth.LoadTokens(h.Tokens)
		if err != nil {
			return fmt.Errorf("--auth-tokens: %w", err)
		}
		opts.Verifier, method = tokens.Verify, auth.MethodToken
		authAttrs = append(authAttrs, "tokens", tokens.Len())
	case h.JWKS != "":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		jwt, err := auth.NewJWT(ctx, auth.JWTConfig{JWKSURL: h.JWKS, Issuer: h.Issuer, Audience: h.Audience, Claim: h.Claim,
			AllowPrivate: h.JWKSAllowPrivate, AllowInsecure: h.JWKSAllowInsecure, Log: log})
		cancel()
		if err != nil {
			return fmt.Errorf("--auth-jwks: %w", err)
		}
		opts.Verifier, opts.AuthorizationServers, method = jwt.Verify, []string{h.Issuer}, auth.MethodJWT
	}
	// The certificate is loaded before listening, so that one that cannot be used stops
	// the server at start, before it says it serves.
	var tlsConfig *tls.Config
	scheme := "http"
	if h.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(h.TLSCert, h.TLSKey)
		if err != nil {
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", h.TLSCert, h.TLSKey, err)
		}
		tlsConfig, scheme = &tls.Config{Certificates: []tls.Certificate{cert}}, "https"
	}
	ln, err := net.Listen("tcp", h.Addr)
	if err != nil {
		return fmt.Errorf("--http %s: %w", h.Addr, err)
	}
	s, err := open(o)
	if err != nil {
		ln.Close()
		return err
	}
	defer s.close()
	s.loadRegistry()
	watch, cfg, attrs := o.Watch, s.cfg, append(s.attrs, authAttrs...)
	if opts.Verifier == nil {
		// Everyone who can reach a loopback address is one caller.
		cfg.Caller = runs.Caller{ID: auth.Anonymous.ID, Auth: auth.Anonymous.Method}
	}
	cfg.Authenticated = opts.Verifier != nil
	// A trailing slash would double the one of the paths below.
	opts.PublicURL = strings.TrimSuffix(h.PublicURL, "/")
	if opts.PublicURL == "" {
		opts.PublicURL = scheme + "://" + ln.Addr().String()
	}
	server := mcpserver.New(cfg)
	srv := mcpserver.NewHTTPServer(mcpserver.NewHTTPHandler(server, opts), mcpserver.ConnIdle, log)
	srv.TLSConfig = tlsConfig
	s.armShutdown()
	serveDone := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			serveDone <- srv.ServeTLS(ln, "", "") // the certificate of srv.TLSConfig
		} else {
			serveDone <- srv.Serve(ln)
		}
	}()
	// listen is the address bound (the port chosen for ":0"); http the URL clients use.
	log.Info("serving", append(attrs, "listen", ln.Addr().String(), "http", opts.PublicURL+mcpserver.MCPPath, "auth", method)...)
	var serveErr error
	select {
	case serveErr = <-serveDone:
		watch.begin(fmt.Sprintf("the HTTP server stopped: %v", serveErr))
	case <-watch.Context().Done():
	}
	// Stop accepting at once; cancel the runs and let each write terminated; then give
	// the requests still open (long polls, event streams) TransportGrace to end.
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace+TransportGrace)
	defer cancel()
	shut := make(chan struct{})
	go func() { mcpserver.ShutdownHTTP(ctx, srv); close(shut) }()
	shutdownRuns(s.runner, log)
	select {
	case <-shut:
	case <-time.After(TransportGrace):
		srv.Close()
		<-shut
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("HTTP server: %w", serveErr)
	}
	return nil
}
