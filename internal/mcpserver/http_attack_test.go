package mcpserver_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/auth"
	"symbi/internal/mcpserver"
	"symbi/internal/runs"
)

// rawPost sends one POST to url on a connection of its own and reads the answer to its
// end: with net/http's server, the end of a body (the last chunk, or a body sent whole
// once the handler returned) comes only after the handler — and its deferred accounting
// — has returned.
func rawPost(t *testing.T, url, session, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// TestHTTPSessionCapOverflow: the session chosen to make room for a new one is closed only
// if it is still idle once the new session exists; when it is busy by then and no other
// session of the caller is idle, the caller keeps one session more than its cap until it
// next opens one — which closes as many idle sessions as bring it below its cap, not one:
// the caller is not locked out (429) with every session idle.
func TestHTTPSessionCapOverflow(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	srv := mcp.NewServer(&mcp.Implementation{Name: "caps", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "held"}}}, nil, nil
	})
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(srv, mcpserver.HTTPOptions{MaxSessions: 10, MaxSessionsPerCaller: 1, Log: slog.New(slog.DiscardHandler)}))
	defer hs.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	url := hs.URL + mcpserver.MCPPath

	// Session 1, initialized and idle.
	code, hdr, body := rawPost(t, url, "", httpInit)
	s1 := hdr.Get("Mcp-Session-Id")
	if code != http.StatusOK || s1 == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	if code, _, body := rawPost(t, url, s1, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}

	// An initialize whose body is slow: its reservation is made (session 1 chosen to
	// close) when the server starts reading the body (100 Continue).
	host := strings.TrimPrefix(hs.URL, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", host, len(httpInit))
	rd := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(hangGuard)) // a failure guard
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 Continue") {
		t.Fatalf("slow initialize: %q %v", line, err)
	}
	rd.ReadString('\n')

	// Meanwhile session 1 gets a call, in flight until released.
	held := make(chan int, 1)
	go func() {
		code, _, _ := rawPost(t, url, s1, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hold","arguments":{}}}`)
		held <- code
	}()
	<-entered

	// The slow initialize completes: session 2 exists, session 1 (busy) is kept.
	io.WriteString(c, httpInit)
	res, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("the second session: %d", res.StatusCode)
	}
	close(release)
	if code := <-held; code != http.StatusOK {
		t.Fatalf("the held call: %d", code)
	}

	// Both sessions are idle now (their requests' handlers have returned). Opening one
	// more must close the least recently used idle ones to make room.
	code, _, body = rawPost(t, url, "", httpInit)
	if code != http.StatusOK {
		t.Fatalf("a new session while both of the caller's sessions are idle: %d %s\nwant 200 (the least recently used idle session closed to make room)", code, strings.TrimSpace(body))
	}
}

// tlsStack is the whole server symbi mcp --http builds (runs, ledger, Cedar access,
// static tokens), served over TLS by mcpserver.NewHTTPServer as with --tls-cert.
type tlsStack struct {
	url  string // https://127.0.0.1:PORT/mcp
	pool *x509.CertPool
}

// tlsTokens are the callers of serveStackTLS and their bearer tokens.
var tlsTokens = map[string]string{"alice": "tok-alice", "mallory": "tok-mallory"}

func serveStackTLS(t *testing.T, dir string, env map[string]string) *tlsStack {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	srv, runner, closeServer := newServer(t, dir, serveOpts{env: env, authenticated: true})
	t.Cleanup(closeServer)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		runner.Shutdown(ctx)
	})
	var lines strings.Builder
	for name, tok := range tlsTokens {
		fmt.Fprintf(&lines, "%s sha256:%x\n", name, sha256.Sum256([]byte(tok)))
	}
	tokens, err := auth.ParseTokens([]byte(lines.String()))
	if err != nil {
		t.Fatal(err)
	}
	cert, pool := selfSignedCert(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + ln.Addr().String()
	hsrv := mcpserver.NewHTTPServer(mcpserver.NewHTTPHandler(srv, mcpserver.HTTPOptions{Verifier: tokens.Verify, PublicURL: base, Log: log}), mcpserver.ConnIdle, log)
	hsrv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	go hsrv.ServeTLS(ln, "", "")
	t.Cleanup(func() { hsrv.Close() })
	return &tlsStack{url: base + mcpserver.MCPPath, pool: pool}
}

// selfSignedCert makes a self-signed certificate for 127.0.0.1.
func selfSignedCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// bearerRT adds a bearer token to every request.
type bearerRT struct {
	token string
	base  http.RoundTripper
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect connects the go-sdk client as caller (its token), over a connection pool of
// its own.
func (s *tlsStack) connect(t *testing.T, caller string, opts *mcp.ClientOptions, noStandaloneSSE bool) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.pool}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "tls-" + caller, Version: "1"}, opts).Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: s.url, HTTPClient: &http.Client{Transport: bearerRT{token: tlsTokens[caller], base: tr}}, DisableStandaloneSSE: noStandaloneSSE,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); tr.CloseIdleConnections() })
	return cs
}

// finishedRun starts a run of helper, waits for its end and returns its id.
func finishedRun(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	var st startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hi"}, &st)
	var cursor int64
	for polls := 0; ; polls++ {
		if polls == 100 {
			t.Fatalf("run %s not done after %d long polls", st.RunID, polls)
		}
		var ev runs.Events
		callOK(t, cs, "run_events", map[string]any{"run_id": st.RunID, "after": cursor, "wait_ms": 30000}, &ev)
		cursor = ev.NextCursor
		if ev.Done {
			return st.RunID
		}
	}
}

// TestHTTPStalledStream: notifications/resources/updated are sent by one goroutine for
// every run and every session, each write waiting for the client. A caller whose event
// stream takes no data — an HTTP/2 client (the protocol --tls-cert serves) granting a
// one-byte flow-control window on its GET stream — holds that sender no longer than
// WriteStall: its write fails then, and other callers' subscriptions are notified.
func TestHTTPStalledStream(t *testing.T) {
	model := newGatedModel(t)
	s := serveStackTLS(t, testProject(t, nil), model.env())
	ctx := context.Background()

	// alice follows her runs by subscription.
	updated := make(chan string, 16)
	alice := s.connect(t, "alice", &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		select {
		case updated <- req.Params.URI:
		default:
		}
	}}, false)

	// mallory opens a session, and its event stream with a one-byte window.
	mallory := s.connect(t, "mallory", nil, true)
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.pool}, ForceAttemptHTTP2: true,
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 1}}
	gctx, stopGET := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(gctx, http.MethodGet, s.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", mallory.ID())
	req.Header.Set("Authorization", "Bearer "+tlsTokens["mallory"])
	res, err := (&http.Client{Transport: h2}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopGET(); res.Body.Close(); h2.CloseIdleConnections() })
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
		t.Fatalf("mallory's event stream: %s %s", res.Proto, res.Status)
	}

	// mallory subscribes to its own finished run and resolves it: the server notifies
	// mallory's session, on the stream that does not take data.
	mrun := finishedRun(t, mallory)
	if err := mallory.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.RunURIPrefix + mrun}); err != nil {
		t.Fatal(err)
	}
	callOK(t, mallory, "resolve_run", map[string]any{"run_id": mrun, "resolution": "accepted"}, &runs.Status{})

	// alice's own run, subscribed, resolved: she must be told.
	arun := finishedRun(t, alice)
	uri := mcpserver.RunURIPrefix + arun
	if err := alice.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	callOK(t, alice, "resolve_run", map[string]any{"run_id": arun, "resolution": "accepted"}, &runs.Status{})
	select {
	case got := <-updated:
		if got != uri {
			t.Fatalf("notification for %s, want %s", got, uri)
		}
	case <-time.After(WriteStallGuard): // a failure guard: the notification is sent once the stalled write gives up
		t.Fatal("alice was never notified of her run's resolution: the notification sender is stuck on mallory's stalled event stream")
	}
}

// TestHTTPDenialsKeepTheRun: a caller that may not read another caller's run learns
// nothing of what read_run protects (its caller, its status) from the refusals: the
// built-in default's denial of run_status, cancel_run, resolve_run and of the run
// resource does not name the run's owner, and approve_run — which the default lets any
// other caller ask — does not tell the status of a run not waiting for approval. A denial
// names the caller, the action, the run and the deciding policies (docs/http.md).
func TestHTTPDenialsKeepTheRun(t *testing.T) {
	model := newGatedModel(t)
	s := serveStackTLS(t, testProject(t, nil), model.env())
	alice := s.connect(t, "alice", nil, true)
	mallory := s.connect(t, "mallory", nil, true)
	arun := finishedRun(t, alice)
	var st runs.Status
	callOK(t, alice, "run_status", map[string]any{"run_id": arun}, &st)
	if st.Caller != "alice" || st.Status != runs.StatusCompleted {
		t.Fatalf("alice's run: caller %q status %q", st.Caller, st.Status)
	}
	for _, tt := range []struct {
		tool string
		args map[string]any
	}{
		{"run_status", map[string]any{"run_id": arun}},
		{"cancel_run", map[string]any{"run_id": arun}},
		{"resolve_run", map[string]any{"run_id": arun, "resolution": "rejected"}},
		{"approve_run", map[string]any{"run_id": arun, "decision": "approve", "reason": "checked"}},
	} {
		res := call(t, mallory, tt.tool, tt.args)
		if !res.IsError {
			t.Errorf("mallory's %s of alice's run succeeded: %s", tt.tool, textOf(t, res))
			continue
		}
		text := textOf(t, res)
		if strings.Contains(text, `alice`) || strings.Contains(text, string(runs.StatusCompleted)) {
			t.Errorf("mallory's %s of alice's run, which mallory may not read: %q — names its owner or its status", tt.tool, text)
		}
	}
	_, err := mallory.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: mcpserver.RunURIPrefix + arun})
	if err == nil || strings.Contains(err.Error(), "alice") {
		t.Errorf("mallory's read of alice's run resource: %v — names its owner", err)
	}
}

// WriteStallGuard is how long TestHTTPStalledStream waits for a notification that one
// stalled write delays by up to mcpserver.WriteStall: generously more, on a busy machine.
const WriteStallGuard = 12 * mcpserver.WriteStall

// prefixVerifier authenticates "tok-<id>" as the token caller <id>.
func prefixVerifier(_ context.Context, tok string, _ *http.Request) (*sdkauth.TokenInfo, error) {
	id, ok := strings.CutPrefix(tok, "tok-")
	if !ok || !auth.ValidCallerID(id) || auth.Reserved(id) {
		return nil, sdkauth.ErrInvalidToken
	}
	return &sdkauth.TokenInfo{UserID: id, Expiration: time.Now().Add(time.Hour), Extra: map[string]any{auth.ExtraMethod: auth.MethodToken}}, nil
}

// TestHTTPForeignRequestTouchesNoSession: a request another caller makes on a session
// (refused by the SDK, 403) moves neither the session's use nor its business in the
// session caps: here mallory's request on alice's stale session s1 does not save s1 from
// eviction when alice opens one more session than her cap — her least recently used
// session, s1, goes, not s2, the one she used last.
func TestHTTPForeignRequestTouchesNoSession(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "caps", Version: "1"}, nil)
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(srv, mcpserver.HTTPOptions{
		Verifier: prefixVerifier, PublicURL: "http://symbi.test", MaxSessions: 10, MaxSessionsPerCaller: 2,
		Log: slog.New(slog.DiscardHandler),
	}))
	var open []*mcp.ClientSession
	t.Cleanup(func() {
		for _, cs := range open {
			cs.Close()
		}
		hs.Close()
	})
	url := hs.URL + mcpserver.MCPPath
	connect := func(caller string) (*mcp.ClientSession, error) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: caller, Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: url, DisableStandaloneSSE: true,
			HTTPClient: &http.Client{Transport: bearerRT{token: "tok-" + caller, base: &http.Transport{}}},
		}, nil)
		if err == nil {
			open = append(open, cs)
		}
		return cs, err
	}
	live := func(id string) bool {
		for ss := range srv.Sessions() {
			if ss.ID() == id {
				return true
			}
		}
		return false
	}
	ctx := context.Background()

	s1, err := connect("alice")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := connect("alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Ping(ctx, nil); err != nil { // s2 is alice's most recently used session
		t.Fatal(err)
	}

	// mallory names alice's stale session: refused, as it must be.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer tok-mallory")
	req.Header.Set("Mcp-Session-Id", s1.ID())
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("mallory's request on alice's session: %d, want 403", res.StatusCode)
	}

	// alice, at her cap, opens a third session: her least recently used one must go.
	for opened := time.Now(); ; {
		if _, err := connect("alice"); err == nil {
			break
		} else if !strings.Contains(err.Error(), "Too Many Requests") {
			t.Fatal(err)
		}
		if time.Since(opened) > hangGuard {
			t.Fatal("alice could not open a third session: none of hers became idle")
		}
	}
	deadline := time.Now().Add(hangGuard)
	for live(s1.ID()) && live(s2.ID()) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !live(s2.ID()) {
		t.Fatalf("alice's session s2, the one she used last, was evicted; s1 (unused by alice since it opened, only named by mallory's refused request) was kept (live: %v)", live(s1.ID()))
	}
	if live(s1.ID()) {
		t.Fatal("no session of alice's was evicted")
	}
}

// TestHTTPSubscriptionFollowsReadAccess: a subscription is notified only while its caller
// may read the run. mallory, who may approve alice's run, may read it — and subscribe to
// it — while it waits at the gate; once she has decided, she may read it no more, and the
// run's later changes (its release, its end, alice's resolution) are not told to her
// session, not even as a bare URI.
func TestHTTPSubscriptionFollowsReadAccess(t *testing.T) {
	model := newGatedModel(t)
	s := serveStackTLS(t, testProject(t, gatePolicies), model.env())
	ctx := context.Background()
	notified := func(ch chan string) *mcp.ClientOptions {
		return &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			ch <- req.Params.URI
		}}
	}
	aliceGot, malloryGot := make(chan string, 64), make(chan string, 64)
	alice := s.connect(t, "alice", notified(aliceGot), false)
	mallory := s.connect(t, "mallory", notified(malloryGot), false)
	aliceCall := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, alice, name, args, out) }

	var st startContent
	aliceCall("start_run", map[string]any{"agent": "helper", "prompt": "write to ACME"}, &st)
	held := mcpserver.RunURIPrefix + st.RunID
	awaitStatus(t, aliceCall, st.RunID, runs.StatusAwaitingApproval)
	if err := mallory.Subscribe(ctx, &mcp.SubscribeParams{URI: held}); err != nil {
		t.Fatalf("the approver may not subscribe to the run waiting for her: %v", err)
	}
	if err := alice.Subscribe(ctx, &mcp.SubscribeParams{URI: held}); err != nil {
		t.Fatal(err)
	}
	callOK(t, mallory, "approve_run", map[string]any{"run_id": st.RunID, "decision": "approve", "reason": "checked"}, &runs.Status{})
	awaitStatus(t, aliceCall, st.RunID, runs.StatusCompleted)
	wantToolError(t, call(t, mallory, "run_status", map[string]any{"run_id": st.RunID}), "access_denied")
	aliceCall("resolve_run", map[string]any{"run_id": st.RunID, "resolution": "accepted"}, &runs.Status{})
	// alice, the owner, is told of her run's changes.
	select {
	case got := <-aliceGot:
		if got != held {
			t.Fatalf("alice notified of %s, want %s", got, held)
		}
	case <-time.After(hangGuard): // a hang guard, not a timing expectation
		t.Fatal("alice, the run's owner, was never notified of its changes")
	}

	// mallory's own run, subscribed and resolved: its notification is sent after those of
	// alice's run, on the same stream, so by the time it arrives any notification of
	// alice's run sent to mallory has arrived too.
	own := finishedRun(t, mallory)
	ownURI := mcpserver.RunURIPrefix + own
	if err := mallory.Subscribe(ctx, &mcp.SubscribeParams{URI: ownURI}); err != nil {
		t.Fatal(err)
	}
	callOK(t, mallory, "resolve_run", map[string]any{"run_id": own, "resolution": "accepted"}, &runs.Status{})
	for {
		var got string
		select {
		case got = <-malloryGot:
		case <-time.After(hangGuard):
			t.Fatal("mallory was never notified of her own run's resolution")
		}
		if got == held {
			t.Fatalf("mallory, who may no longer read %s, was notified of its change", st.RunID)
		}
		if got == ownURI {
			break
		}
	}
}
