package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/mcpserver"
)

// TestHTTPIdleConnectionClosed: a kept-alive connection that sends no further request is
// closed by the server (here after a short idle setting), so idle connections cannot hold
// the server's descriptors.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	srv := mcpserver.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		50*time.Millisecond, slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	rd := bufio.NewReader(conn)
	res, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.Close {
		t.Fatal("the server closed the connection with its answer; want it kept alive, then closed for idleness")
	}
	conn.SetReadDeadline(time.Now().Add(hangGuard)) // a failure guard, not an expectation
	if _, err := rd.ReadByte(); !errors.Is(err, io.EOF) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the idle connection was never closed")
		}
		t.Fatalf("read on the idle connection: %v, want EOF", err)
	}
}

// TestAuthenticatedWithoutToken: on a server whose requests must carry a bearer token, a
// request that reached a handler without one would be nobody — refused by every access
// decision — never the stdio caller, who owns the runs recorded without a caller.
func TestAuthenticatedWithoutToken(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{authenticated: true})
	res := call(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hi"})
	if !res.IsError || !strings.Contains(textOf(t, res), "access_denied") || !strings.Contains(textOf(t, res), "names no caller") {
		t.Fatalf("start_run without a token: %s", textOf(t, res))
	}
}

// httpInit is a raw client's first POST: initialize, without a session id.
const httpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// TestHTTPSessionCaps: the HTTP server keeps at most MaxSessionsPerCaller sessions of one
// caller — one more closes the caller's least recently used idle session, whose next
// request then fails, and is refused (429) when every one has a request in flight — and at
// most MaxSessions in all, past which one more is refused with busy naming the flag
// (HTTP 503); a session closed by its client frees its place.
func TestHTTPSessionCaps(t *testing.T) {
	type server struct {
		srv             *mcp.Server
		url             string
		entered         chan struct{} // the tool "hold" was called
		release         chan struct{} // and answers once this is closed
		connect         func() (*mcp.ClientSession, error)
		releaseOnce     sync.Once
		releaseHeldCall func()
	}
	newServer := func(t *testing.T, max, perCaller int) *server {
		s := &server{entered: make(chan struct{}, 10), release: make(chan struct{})}
		s.releaseHeldCall = func() { s.releaseOnce.Do(func() { close(s.release) }) }
		s.srv = mcp.NewServer(&mcp.Implementation{Name: "caps", Version: "1"}, nil)
		mcp.AddTool(s.srv, &mcp.Tool{Name: "hold"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			s.entered <- struct{}{}
			select {
			case <-s.release:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "held"}}}, nil, nil
		})
		hs := httptest.NewServer(mcpserver.NewHTTPHandler(s.srv, mcpserver.HTTPOptions{MaxSessions: max, MaxSessionsPerCaller: perCaller, Log: slog.New(slog.DiscardHandler)}))
		s.url = hs.URL + mcpserver.MCPPath
		var open []*mcp.ClientSession
		t.Cleanup(func() { // before hs.Close, which waits for the sessions' streams
			s.releaseHeldCall()
			for _, cs := range open {
				cs.Close()
			}
			hs.Close()
		})
		s.connect = func() (*mcp.ClientSession, error) {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url}, nil)
			if err == nil {
				open = append(open, cs)
			}
			return cs, err
		}
		return s
	}
	mustConnect := func(t *testing.T, s *server) *mcp.ClientSession {
		t.Helper()
		cs, err := s.connect()
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	live := func(s *server, id string) bool {
		for ss := range s.srv.Sessions() {
			if ss.ID() == id {
				return true
			}
		}
		return false
	}
	initialize := func(t *testing.T, s *server) (int, string) {
		t.Helper()
		// The SDK's client reports the status only: the refusal, read raw.
		req, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(httpInit))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(body)
	}
	// connectIdle connects once a session to evict is idle: a request is done on the
	// server just after its answer reached the client, and until then its session is busy
	// (a new one meanwhile is refused, 429).
	connectIdle := func(t *testing.T, s *server) *mcp.ClientSession {
		t.Helper()
		for began := time.Now(); ; {
			cs, err := s.connect()
			if err == nil {
				return cs
			}
			if !strings.Contains(err.Error(), "Too Many Requests") {
				t.Fatal(err)
			}
			if time.Since(began) > hangGuard {
				t.Fatalf("no session could be opened: %v", err)
			}
		}
	}
	ctx := context.Background()
	holdOn := func(s *server, cs *mcp.ClientSession) <-chan error {
		called := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hold"})
			called <- err
		}()
		<-s.entered // the call is in flight on the server
		return called
	}

	t.Run("per caller", func(t *testing.T) {
		s := newServer(t, 10, 2)
		a, b := mustConnect(t, s), mustConnect(t, s)
		called := holdOn(s, a) // a: the least recently used from here on, but busy
		if err := b.Ping(ctx, nil); err != nil {
			t.Fatal(err)
		}
		c := connectIdle(t, s) // evicts b, the only idle one
		for live(s, b.ID()) {  // closed asynchronously
			time.Sleep(time.Millisecond)
		}
		if err := b.Ping(ctx, nil); err == nil {
			t.Fatal("the evicted session still answers")
		}
		if err := c.Ping(ctx, nil); err != nil {
			t.Fatalf("the new session: %v", err)
		}
		s.releaseHeldCall()
		if err := <-called; err != nil {
			t.Fatalf("the busy session's call: %v", err)
		}
	})

	t.Run("every session busy", func(t *testing.T) {
		s := newServer(t, 10, 1)
		a := mustConnect(t, s)
		called := holdOn(s, a)
		if code, body := initialize(t, s); code != http.StatusTooManyRequests || !strings.Contains(body, `"message":"busy: `) || !strings.Contains(body, "--max-sessions-per-caller") {
			t.Fatalf("a session while the only one is busy: %d %s; want 429, busy naming --max-sessions-per-caller", code, body)
		}
		s.releaseHeldCall()
		if err := <-called; err != nil {
			t.Fatalf("the busy session's call: %v", err)
		}
		connectIdle(t, s) // a is idle now: it makes room
	})

	// A request the SDK refuses after the caps admitted it — a foreign Host on a loopback
	// address (DNS rebinding: a web page can send it), a body of the wrong type — closes
	// none of the caller's sessions, though the caller is at its cap.
	t.Run("a refused request closes nothing", func(t *testing.T) {
		s := newServer(t, 10, 1)
		a := mustConnect(t, s)
		for _, tt := range []struct {
			name, host, contentType string
			code                    int
		}{
			{"a foreign Host", "evil.example.com", "application/json", http.StatusForbidden},
			{"not JSON", "", "text/plain", http.StatusUnsupportedMediaType},
		} {
			for { // until a is idle (429 while its last request is still ending)
				req, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(httpInit))
				req.Header.Set("Content-Type", tt.contentType)
				req.Header.Set("Accept", "application/json, text/event-stream")
				if tt.host != "" {
					req.Host = tt.host
					req.Header.Set("Origin", "http://"+tt.host)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == tt.code {
					break
				}
				if res.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("%s: %d, want %d", tt.name, res.StatusCode, tt.code)
				}
			}
			if err := a.Ping(ctx, nil); err != nil {
				t.Fatalf("after %s refused, the caller's session: %v", tt.name, err)
			}
		}
	})

	// A session chosen to make room is closed only when no request of its is in flight,
	// and its requests from then on are answered 404 before they are begun: whatever the
	// race between a call on it and a new session, a call the server began is answered.
	t.Run("no call begun is cut off", func(t *testing.T) {
		for range 40 {
			s := newServer(t, 10, 1)
			a := mustConnect(t, s)
			called := make(chan error, 1)
			go func() {
				_, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "hold"})
				called <- err
			}()
			s.connect() // refused (429) if the call is in flight already; else a is evicted
			select {
			case <-s.entered: // begun: it must be answered
				s.releaseHeldCall()
				if err := <-called; err != nil {
					t.Fatalf("a call begun on a session chosen for eviction: %v", err)
				}
			case err := <-called: // never begun: refused as its session had ended
				if err == nil {
					t.Fatal("the held call answered without being begun")
				}
			}
		}
	})

	t.Run("in all", func(t *testing.T) {
		s := newServer(t, 2, 10)
		a := mustConnect(t, s)
		mustConnect(t, s)
		if code, body := initialize(t, s); code != http.StatusServiceUnavailable || !strings.Contains(body, `"message":"busy: `) || !strings.Contains(body, "(--max-sessions)") {
			t.Fatalf("a third session: %d %s; want 503, busy naming --max-sessions", code, body)
		}
		if err := a.Close(); err != nil { // DELETE
			t.Fatal(err)
		}
		for live(s, a.ID()) { // the server forgets the session once its streams have ended
			time.Sleep(time.Millisecond)
		}
		mustConnect(t, s)
	})
}

// bareHTTPSession serves an MCP server with no tools over HTTP with o (a discarding log
// unless o has one) and connects the go-sdk client to it: the MCP endpoint's URL and the
// client's session, both closed when the test ends.
func bareHTTPSession(t *testing.T, o mcpserver.HTTPOptions) (string, *mcp.ClientSession) {
	t.Helper()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(mcp.NewServer(&mcp.Implementation{Name: "bare", Version: "1"}, nil), o))
	t.Cleanup(hs.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL + mcpserver.MCPPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return hs.URL + mcpserver.MCPPath, cs
}

// TestHTTPScreensMessages: over HTTP as over stdio, a body that is not one JSON-RPC message
// — a batch, a member name repeated in any object, malformed JSON — is refused with the
// same JSON-RPC error, and the session goes on.
func TestHTTPScreensMessages(t *testing.T) {
	url, cs := bareHTTPSession(t, mcpserver.HTTPOptions{})
	tests := []struct {
		name, body, want string
		code             int
	}{
		{"repeated name in params", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a","name":"b"}}`, `member \"name\" appears twice`, -32600},
		{"repeated method", `{"jsonrpc":"2.0","id":7,"method":"tools/list","method":"ping"}`, `member \"method\" appears twice`, -32600},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, "batches are not supported", -32600},
		{"malformed", `{"jsonrpc":"2.0","id":7,`, "not valid JSON", -32700},
		{"a no-break space before", "\u00a0{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", "not valid JSON", -32700},
		{"not UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"_meta\":{\"x\":\"\xff\"}}}", "not valid UTF-8", -32700},
		{"a lone surrogate", `{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":{"x":"\udc00"}}}`, "escaped lone surrogate", -32600},
		{"a fractional id", `{"jsonrpc":"2.0","id":7.5,"method":"ping"}`, "cannot be answered exactly", -32600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", cs.ID())
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), tt.want) || !strings.Contains(string(body), fmt.Sprintf(`"code":%d`, tt.code)) {
				t.Fatalf("%s: %s %s; want 400, code %d, %q", tt.name, res.Status, body, tt.code, tt.want)
			}
		})
	}
	if err := cs.Ping(context.Background(), nil); err != nil {
		t.Fatalf("the session after the refusals: %v", err)
	}
}

// TestHTTPMetadataURL: a 401 names the protected resource metadata by RFC 9728 §3.1 — the
// well-known path between the host and the resource's path — also when the public URL has
// a path (a server behind a proxy, under a prefix), and the server serves the metadata at
// that path as well as at its own.
func TestHTTPMetadataURL(t *testing.T) {
	never := func(context.Context, string, *http.Request) (*sdkauth.TokenInfo, error) {
		return nil, sdkauth.ErrInvalidToken
	}
	for _, tt := range []struct {
		public, meta, served string
	}{
		{"https://symbi.example.com", "https://symbi.example.com/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource/mcp"},
		{"https://symbi.example.com:8443/", "https://symbi.example.com:8443/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"},
		{"https://symbi.example.com/team/a", "https://symbi.example.com/.well-known/oauth-protected-resource/team/a/mcp", "/.well-known/oauth-protected-resource/team/a/mcp"},
	} {
		t.Run(tt.public, func(t *testing.T) {
			srv := mcp.NewServer(&mcp.Implementation{Name: "meta", Version: "1"}, nil)
			hs := httptest.NewServer(mcpserver.NewHTTPHandler(srv, mcpserver.HTTPOptions{Verifier: never, PublicURL: tt.public, Log: slog.New(slog.DiscardHandler)}))
			defer hs.Close()
			res, err := http.Post(hs.URL+mcpserver.MCPPath, "application/json", strings.NewReader(httpInit))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if want := `Bearer resource_metadata="` + tt.meta + `"`; res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") != want {
				t.Errorf("%d, WWW-Authenticate %s; want 401 with %s", res.StatusCode, res.Header.Get("WWW-Authenticate"), want)
			}
			res, err = http.Get(hs.URL + tt.served)
			if err != nil {
				t.Fatal(err)
			}
			var meta struct {
				Resource string `json:"resource"`
			}
			err = json.NewDecoder(res.Body).Decode(&meta)
			res.Body.Close()
			if want := strings.TrimSuffix(tt.public, "/") + mcpserver.MCPPath; err != nil || meta.Resource != want {
				t.Errorf("GET %s: resource %q (%v), want %q", tt.served, meta.Resource, err, want)
			}
		})
	}
}

// TestHTTPBodyBounds: the bytes of request bodies the server holds — being read, or read and
// not yet answered — are bounded per caller (429, busy) and in all (503, busy), a body
// declared with its length counted before it is read; a body that does not arrive in time
// is answered 408; and once a stalled request ends, its bytes are free again.
func TestHTTPBodyBounds(t *testing.T) {
	newServer := func(t *testing.T, o mcpserver.HTTPOptions) string {
		srv := mcp.NewServer(&mcp.Implementation{Name: "bodies", Version: "1"}, nil)
		o.Log = slog.New(slog.DiscardHandler)
		hs := httptest.NewServer(mcpserver.NewHTTPHandler(srv, o))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	// stall sends the headers of a POST declaring length bytes, waits until the server
	// reads its body (its "100 Continue": the bytes are counted before the body is read),
	// and sends part of the body.
	stall := func(t *testing.T, base string, length int) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", strings.TrimPrefix(base, "http://"), length)
		rd := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(hangGuard)) // a failure guard, not an expectation
		if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 Continue") {
			t.Fatalf("the stalled request: %q, %v; want 100 Continue", line, err)
		}
		if _, err := rd.ReadString('\n'); err != nil { // the blank line ending it
			t.Fatal(err)
		}
		io.WriteString(c, `{"jsonrpc":`)
		return c, rd
	}
	// post sends an initialize padded with pad bytes and returns its status and body.
	post := func(t *testing.T, base string, pad int) (int, string) {
		t.Helper()
		body := strings.Replace(httpInit, `"name":"raw"`, `"name":"`+strings.Repeat("x", pad)+`"`, 1)
		req, _ := http.NewRequest(http.MethodPost, base+mcpserver.MCPPath, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// until posts until the answer's status is (or, with not, is not) code.
	until := func(t *testing.T, base string, code int, not bool) string {
		t.Helper()
		for deadline := time.Now().Add(hangGuard); time.Now().Before(deadline); {
			got, body := post(t, base, 200<<10)
			if (got == code) != not {
				return body
			}
		}
		t.Fatalf("no answer %d (not: %v) before the guard", code, not)
		return ""
	}
	for _, tt := range []struct {
		name string
		o    mcpserver.HTTPOptions
		code int
		want string
	}{
		{"per caller", mcpserver.HTTPOptions{BodyBytesPerCaller: 1 << 20}, http.StatusTooManyRequests, `caller \"anonymous\" has 900000 bytes of requests being read or served, and this one would take it past 1048576, the most one caller may have at once`},
		{"in all", mcpserver.HTTPOptions{BodyBytes: 1 << 20}, http.StatusServiceUnavailable, `the server holds 900000 bytes of requests being read or served, and this one would take it past 1048576, the most it holds at once`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := newServer(t, tt.o)
			// A small request alone: its bytes may still count for a moment after its
			// answer (they are given back as its handler returns), and must leave room for
			// the stalled request's 900,000.
			if code, body := post(t, base, 1); code != http.StatusOK {
				t.Fatalf("a request alone: %d %.200s", code, body)
			}
			c, _ := stall(t, base, 900_000)
			body := until(t, base, tt.code, false)
			if !strings.Contains(body, `"message":"busy: `) || !strings.Contains(body, tt.want) {
				t.Fatalf("refused: %s, want busy: …%s", body, tt.want)
			}
			c.Close() // its request ends: its bytes are free
			until(t, base, tt.code, true)
		})
	}
	t.Run("a body too slow", func(t *testing.T) {
		base := newServer(t, mcpserver.HTTPOptions{BodyTimeout: time.Second})
		_, rd := stall(t, base, 100)
		res, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "invalid_request: the request body did not arrive within 1s of its headers") {
			t.Fatalf("%d %s, want 408 naming the time", res.StatusCode, b)
		}
	})
}
