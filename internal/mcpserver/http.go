package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/auth"
	"symbi/internal/errcode"
)

// The paths of the HTTP server.
const (
	// MCPPath serves MCP Streamable HTTP.
	MCPPath = "/mcp"
	// MetadataPath serves the OAuth 2.0 protected resource metadata (RFC 9728), also at
	// MetadataPath+MCPPath (the form for a resource with a path).
	MetadataPath = auth.MetadataPath
)

// SessionIdle is how long an HTTP session may go without a request before the server
// closes it (its subscriptions end with it; a client reconnects with a new session).
const SessionIdle = 30 * time.Minute

// ConnIdle is how long a kept-alive HTTP connection may wait for its next request before
// the server closes it.
const ConnIdle = 2 * time.Minute

// NewHTTPServer returns the http.Server that serves handler: request headers within 30 s,
// and a kept-alive connection with no request in flight closed after idle — idle
// connections would otherwise hold, for ever, descriptors that runs need. There is no
// read or write timeout: event streams and long polls stay open while they serve.
func NewHTTPServer(handler http.Handler, idle time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// HTTPOptions configure NewHTTPHandler.
type HTTPOptions struct {
	// Verifier checks each request's bearer token and names its caller (internal/auth);
	// nil serves without authentication, which the caller of NewHTTPHandler allows only
	// on loopback addresses (CheckListenAddr).
	Verifier sdkauth.TokenVerifier
	// PublicURL is the server's base URL as clients reach it ("https://symbi.example.com"):
	// the protected resource is PublicURL+MCPPath, and 401 answers point to its metadata.
	PublicURL string
	// AuthorizationServers are the issuers the metadata names (JWT mode); empty for
	// static tokens.
	AuthorizationServers []string
	// MaxSessions and MaxSessionsPerCaller cap the sessions open at once, in all and of
	// one caller (0: DefaultMaxSessions, DefaultMaxSessionsPerCaller): see sessionCaps.
	MaxSessions, MaxSessionsPerCaller int
	// BodyBytes and BodyBytesPerCaller bound the bytes of request bodies held at once, in
	// all and of one caller (0: DefaultBodyBytes, DefaultBodyBytesPerCaller), and
	// BodyTimeout the time a body may take to arrive (0: DefaultBodyTimeout): see
	// bodyBudget.
	BodyBytes, BodyBytesPerCaller int64
	BodyTimeout                   time.Duration
	Log                           *slog.Logger
}

// NewHTTPHandler serves s over MCP Streamable HTTP at MCPPath: one MCP server, a session
// per client (capped in all and per caller: sessionCaps), requests of at most MaxMessageBytes
// and each one JSON-RPC message by the stdio transport's rules (screenHTTP), the SDK's DNS-rebinding protection
// (a request to a loopback address must name a loopback Host) and cross-origin
// protection (a browser request from another origin is refused). With a Verifier, every
// request to MCPPath needs a valid bearer token (401 with WWW-Authenticate pointing to
// the metadata otherwise), and the metadata is served at MetadataPath.
func NewHTTPHandler(s *mcp.Server, o HTTPOptions) http.Handler {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Logger:              o.Log,
		MaxRequestBodyBytes: MaxMessageBytes,
		SessionTimeout:      SessionIdle,
	})
	timeout := o.BodyTimeout
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	calls := &sessionCalls{}
	s.AddReceivingMiddleware(calls.middleware)
	h = newSessionCaps(s, o.MaxSessions, o.MaxSessionsPerCaller).wrap(calls.endOnDelete(screenHTTP(h, newBodyBudget(o.BodyBytes, o.BodyBytesPerCaller), timeout)))
	h = http.NewCrossOriginProtection().Handler(h)
	mux := http.NewServeMux()
	if o.Verifier != nil {
		h = streamUntilExpiry(h)
		base := strings.TrimSuffix(o.PublicURL, "/")
		origin, prefix := splitURL(base)
		meta := sdkauth.ProtectedResourceMetadataHandler(auth.Metadata(base+MCPPath, o.AuthorizationServers))
		mux.Handle(MetadataPath, meta)
		mux.Handle(MetadataPath+MCPPath, meta)
		if prefix != "" {
			// Behind a proxy that serves this server under prefix, and passes the
			// well-known path on unchanged.
			mux.Handle(MetadataPath+prefix+MCPPath, meta)
		}
		h = sdkauth.RequireBearerToken(o.Verifier, &sdkauth.RequireBearerTokenOptions{
			// RFC 9728 §3.1: the well-known path goes between the resource's host and
			// its path.
			ResourceMetadataURL: origin + MetadataPath + prefix + MCPPath,
			// The verifiers allow this much clock skew on exp themselves; the middleware's
			// own expiry check must agree.
			ClockSkew: auth.Leeway,
		})(h)
	}
	mux.Handle(MCPPath, h)
	return bodyDeadline(stallGuard(mux), timeout)
}

// bodyDeadline gives the body of every request that has one timeout to arrive, from the
// first handler on, authenticated or not. An answer given without reading the body — the
// bearer check's 401, a 404, a session cap's refusal — makes net/http read and discard
// what is left of it, before and after the answer, with no deadline of its own: a client
// that declared a body and sent none would hold its connection, a descriptor runs need,
// for ever. The deadline is cleared only where a body is read whole (screenHTTP).
func bodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 { // a declared length, or -1: chunked, or unknown
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		}
		next.ServeHTTP(w, r)
	})
}

// streamUntilExpiry ends a session's event stream (the GET that carries its notifications)
// when the JWT that opened it expires (its exp, plus the Leeway the verifier allows): the
// stream would otherwise go on sending for as long as the session lives, to a caller whose
// credential has lapsed. The client opens the stream again with a token that is valid, and
// is authenticated anew. A request with a body (a POST) is answered under the token it was
// authenticated with, and is not cut short. A static token does not expire (its
// TokenInfo's Expiration is the middleware's re-check interval, not the token's).
func streamUntilExpiry(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ti := sdkauth.TokenInfoFromContext(r.Context()); r.Method == http.MethodGet && ti != nil &&
			ti.Extra[auth.ExtraMethod] == auth.MethodJWT && !ti.Expiration.IsZero() {
			ctx, cancel := context.WithDeadline(r.Context(), ti.Expiration.Add(auth.Leeway))
			defer cancel()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// WriteStall bounds how long one write to a session's event stream may block. A client
// that stops reading — its TCP or HTTP/2 window full — would otherwise hold, for ever, the
// goroutine writing to it: for a notification, the one that sends every subscriber's.
const WriteStall = 10 * time.Second

// stallGuard gives each write and flush of a session's event stream (the GET that carries
// its notifications) a deadline of WriteStall from its start, cleared after it: the stream
// may stay open as long as it serves, but no single write waits longer for the client. A
// write past it fails, and the stream ends. Requests with a body are not wrapped: the
// server must see their writer as its own, to close the connection after a body refused
// as too large (http.MaxBytesReader) rather than wait for the rest of it.
func stallGuard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w = &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
		}
		h.ServeHTTP(w, r)
	})
}

type stallWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (s *stallWriter) guarded(f func() error) error {
	s.rc.SetWriteDeadline(time.Now().Add(WriteStall)) // unsupported (a test recorder): no bound
	defer s.rc.SetWriteDeadline(time.Time{})
	return f()
}

func (s *stallWriter) Write(p []byte) (n int, err error) {
	err = s.guarded(func() error { n, err = s.ResponseWriter.Write(p); return err })
	return n, err
}

func (s *stallWriter) Flush() { s.guarded(s.rc.Flush) }

// Unwrap lets http.ResponseController reach the connection's writer.
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// splitURL splits a base URL "https://host:port/prefix" into its origin
// ("https://host:port") and its path ("/prefix", or "" for none).
func splitURL(base string) (origin, path string) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return base, ""
	}
	return u.Scheme + "://" + u.Host, strings.TrimSuffix(u.EscapedPath(), "/")
}

// CheckListenAddr refuses an address symbi may not listen on: without authentication
// only loopback addresses ("127.0.0.1:8080", "[::1]:8080", "localhost:8080"), so that no
// one else on the network can run agents as this server's operator. An address without a
// host (":8080") listens on every interface.
func CheckListenAddr(addr string, authenticated bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT: %v", addr, err)
	}
	if authenticated {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() {
		if host == "" {
			host = "every interface"
		}
		return fmt.Errorf("--http %q listens on %s, which is not a loopback address: without authentication symbi serves HTTP only on 127.0.0.1, ::1 or localhost; configure --auth-tokens or --auth-jwks to serve other addresses", addr, host)
	}
	return nil
}

// ShutdownHTTP stops srv accepting at once, then waits until ctx ends for its requests to
// finish (long polls and event streams end with their sessions) before closing the rest.
func ShutdownHTTP(ctx context.Context, srv *http.Server) {
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
}

// screenHTTP refuses a POST body that is not one well-formed JSON-RPC message by the rules
// the stdio transport applies to a line (check): a batch, or a member name repeated in
// any object — which one reader may take first and another last — is answered HTTP 400
// with the JSON-RPC error stdio gives (-32600, or -32700 for malformed JSON), and goes no
// further. A body is read within timeout and counted in budget until its request is
// answered: past either, it is refused with busy (429 or 503) or 408. A body over
// MaxMessageBytes, or one that cannot be read, is left to the SDK, which answers 413 or
// 400 as before.
func screenHTTP(next http.Handler, budget *bodyBudget, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		caller := callerOf(r, auth.Anonymous.ID)
		body, taken, status, err := budget.readBody(w, r, caller, MaxMessageBytes, timeout)
		defer budget.give(caller, taken)
		switch {
		case status != 0:
			w.Header().Set("Connection", "close") // the rest of the body is not read
			refuse(w, status, err)
			return
		case errors.Is(err, errBodyTimeout):
			w.Header().Set("Connection", "close")
			refuse(w, http.StatusRequestTimeout, errcode.Errorf(errcode.InvalidRequest, "the request body did not arrive within %v of its headers", timeout))
			return
		case err != nil || len(body) > MaxMessageBytes:
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), &stickyErr{r.Body, err}), r.Body}
			next.ServeHTTP(w, r)
			return
		}
		if msg := bytes.Trim(body, jsonSpace); len(msg) > 0 {
			v := check(msg)
			if v.code != 0 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				reject(w, v.id, v.code, v.msg)
				return
			}
			if v.key != "" { // a request with an id
				var call struct {
					ID     any    `json:"id"`
					Method string `json:"method"`
				}
				json.Unmarshal(msg, &call)
				m := &methodNotFound{ResponseWriter: w, id: call.ID, method: call.Method}
				defer m.finish()
				w = m
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// methodNotFound answers, as stdio does, a request the SDK's transport refuses before
// dispatch with a plain-text HTTP 400, which no JSON-RPC client takes for the answer to its
// id: a method the server does not handle ("JSON RPC not handled: …", -32601), or one the
// SDK finds invalid ("invalid request: …": an id on a notification, params missing;
// -32600). That answer is held back and replaced by the JSON-RPC error with the
// request's id; any other answer passes through untouched.
type methodNotFound struct {
	http.ResponseWriter
	id     any
	method string
	held   *bytes.Buffer // a plain-text 400 of the SDK's, held back
}

func (m *methodNotFound) WriteHeader(code int) {
	if m.held == nil && code == http.StatusBadRequest && strings.HasPrefix(m.Header().Get("Content-Type"), "text/plain") {
		m.held = new(bytes.Buffer)
		return
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *methodNotFound) Write(p []byte) (int, error) {
	if m.held != nil {
		return m.held.Write(p)
	}
	return m.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer (the SDK flushes
// event streams through it).
func (m *methodNotFound) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// finish writes what was held back: the JSON-RPC error for a method not handled, or the
// SDK's refusal as it was.
func (m *methodNotFound) finish() {
	if m.held == nil {
		return
	}
	held := strings.TrimSpace(m.held.String())
	code, msg := 0, ""
	if strings.HasPrefix(held, "JSON RPC not handled") {
		code, msg = codeMethodNotFound, "method not found: "+errcode.Quote(m.method)
	} else if rest, ok := strings.CutPrefix(held, "invalid request"); ok {
		// The SDK's own check of the request (an id on a notification, params missing).
		code, msg = codeInvalidRequest, "invalid request"+errcode.Clip(rest)
	}
	if code == 0 {
		m.ResponseWriter.WriteHeader(http.StatusBadRequest)
		m.ResponseWriter.Write(m.held.Bytes())
		return
	}
	h := m.Header()
	h.Del("X-Content-Type-Options")
	h.Set("Content-Type", "application/json")
	m.ResponseWriter.WriteHeader(http.StatusBadRequest)
	reject(m.ResponseWriter, m.id, code, msg)
}

// stickyErr reads on from r, or returns err when it is set (the error the first read
// ended with).
type stickyErr struct {
	r   io.Reader
	err error
}

func (s *stickyErr) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	return s.r.Read(p)
}
