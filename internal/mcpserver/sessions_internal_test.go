package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestVictimEndedByItself: a caller at its cap (2) opens a third session; the reservation
// marks its oldest idle session s1. Before the new session exists, s1 ends by itself (its
// client's DELETE), and another caller's request prunes it from the caps. The caller then
// has room: opening the new session closes nothing (an evicted session's requests are
// answered 404 from the moment it is chosen, so no wait is needed to see one).
func TestVictimEndedByItself(t *testing.T) {
	caps, do, open := newCapsServer(t, 2)
	s1 := open()
	s2 := open()

	key, _, err := caps.reserve(caps.anonymous) // the third session's request arrives
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := do(http.MethodDelete, s1, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE s1: %d", code)
	}
	for caps.live()[s1] != nil { // the SDK forgets it once its streams have ended
		time.Sleep(time.Millisecond)
	}
	k2, _, err := caps.reserve("someone-else") // prunes s1, which ended, from owner
	if err != nil {
		t.Fatal(err)
	}
	caps.opened(k2, "")
	caps.opened(key, "s3") // the third session exists
	if code, _ := do(http.MethodPost, s2, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); code != http.StatusOK {
		t.Fatalf("s2, idle and under the cap once s1 ended by itself, answered %d: evicted to make room that was already there", code)
	}
}

// TestRecoverPanics: a request whose handling panics is answered with an internal error —
// a tool error for a tool call, a JSON-RPC error for anything else — and the panic goes no
// further, so the server keeps serving.
func TestRecoverPanics(t *testing.T) {
	var logged strings.Builder
	mw := recoverPanics(slog.New(slog.NewTextHandler(&logged, nil)))
	h := mw(func(context.Context, string, mcp.Request) (mcp.Result, error) { panic("a bug") })
	res, err := h(context.Background(), "tools/call", &mcp.CallToolRequest{})
	tr, ok := res.(*mcp.CallToolResult)
	if err != nil || !ok || !tr.IsError || !strings.Contains(tr.Content[0].(*mcp.TextContent).Text, "internal: tools/call failed on an internal error") {
		t.Fatalf("tools/call: %#v, %v; want an internal tool error", res, err)
	}
	res, err = h(context.Background(), "resources/read", &mcp.ReadResourceRequest{})
	var je *jsonrpc.Error
	if res != nil || !errors.As(err, &je) || je.Code != codeServerError || !strings.HasPrefix(je.Message, "internal: ") {
		t.Fatalf("resources/read: %#v, %v; want a -32000 internal error", res, err)
	}
	if !strings.Contains(logged.String(), "a request's handling panicked") || !strings.Contains(logged.String(), "a bug") {
		t.Errorf("the panic was not logged: %s", logged.String())
	}
}

// newCapsServer serves an MCP server over HTTP behind session caps of 10 sessions in all
// and perCaller of one caller, and returns the caps, a function making one raw request
// (its status and session id header) and one opening a session (its id).
func newCapsServer(t *testing.T, perCaller int) (caps *sessionCaps, do func(method, id, body string) (int, string), open func() string) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "caps", Version: "1"}, nil)
	stream := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)})
	caps = newSessionCaps(srv, 10, perCaller)
	hs := httptest.NewServer(caps.wrap(stream))
	t.Cleanup(hs.Close)
	do = func(method, id, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if id != "" {
			req.Header.Set(sessionHeader, id)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header.Get(sessionHeader)
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	open = func() string {
		t.Helper()
		code, id := do(http.MethodPost, "", init)
		if code != http.StatusOK || id == "" {
			t.Fatalf("initialize: %d %q", code, id)
		}
		do(http.MethodPost, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return id
	}
	return caps, do, open
}

// TestSessionVictimsReplaced: a caller over its cap (3 sessions, cap 2, all idle) opens one
// more: the reservation marks its two least recently used sessions s1 and s2. By the time
// the new session exists s1 has a request in flight, so a replacement is chosen for it —
// never s2, the reservation's own other victim, which is closed too: the replacement is
// s3, and the caller is left at its cap.
func TestSessionVictimsReplaced(t *testing.T) {
	caps, _, open := newCapsServer(t, 3)
	s1, s2, s3 := open(), open(), open()
	caller := caps.anonymous

	caps.mu.Lock()
	caps.perCaller = 2                                    // the caller now holds one session more than its cap, all idle
	caps.used[s1], caps.used[s2], caps.used[s3] = 1, 2, 3 // used in that order, before anything since
	caps.mu.Unlock()

	key, status, err := caps.reserve(caller) // a fourth initialize arrives
	if err != nil {
		t.Fatalf("reserve: %d %v", status, err)
	}
	caps.mu.Lock()
	victims := caps.pending[key].victims
	caps.busy[s1]++ // s1 gets a request before the new session exists
	caps.mu.Unlock()
	if len(victims) != 2 || victims[0] != s1 || victims[1] != s2 {
		t.Fatalf("victims %v, want [s1 s2]", victims)
	}
	caps.opened(key, "s4") // the new session exists

	caps.mu.Lock()
	var kept []string
	for id, by := range caps.owner {
		if by == caller && !caps.evicting[id] {
			kept = append(kept, id)
		}
	}
	s3Kept := caps.owner[s3] != "" && !caps.evicting[s3]
	caps.mu.Unlock()
	if len(kept) > 2 {
		t.Fatalf("after the new session opened the caller holds %d sessions (cap 2): s3 idle and kept (%v), because s1's replacement was s2, the reservation's own other victim",
			len(kept), s3Kept)
	}
}

// TestRateLimitRetryBounded: a --rate so slow that the wait would overflow a
// time.Duration names the bound (maxRetry) as the wait, never a negative one.
func TestRateLimitRetryBounded(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newRateLimiter(1e-10, func() time.Time { return now })
	if ok, _ := l.allow("alice"); !ok {
		t.Fatal("the first request was refused")
	}
	ok, wait := l.allow("alice")
	if ok {
		t.Fatal("the second request was allowed")
	}
	if wait != maxRetry {
		t.Fatalf("the refusal says retry in %s; want the bound, %s (not an overflowed, negative wait)", wait.Round(time.Millisecond), maxRetry)
	}
}

// TestDeleteEndsCallsBegunMeanwhile: a tools/call of a session that begins while a DELETE
// of that session is being served — after the DELETE scanned the calls in flight, before
// the session is closed — is cancelled at once, as the calls found in flight are; one of
// another user, or naming another protocol version, is not, and once the DELETE has been
// served a call is registered as usual.
func TestDeleteEndsCallsBegunMeanwhile(t *testing.T) {
	c := &sessionCalls{}
	entered, release := make(chan struct{}), make(chan struct{})
	h := c.endOnDelete(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release // the SDK closing the session, waiting for its requests
	}))
	served := make(chan struct{})
	go func() {
		defer close(served)
		r := httptest.NewRequest(http.MethodDelete, "http://127.0.0.1/mcp", nil)
		r.Header.Set(sessionHeader, "s1")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}()
	<-entered
	call := func(user, version string) (context.Context, func()) {
		ctx, cancel := context.WithCancelCause(context.Background())
		unregister := c.register("s1", &sessionCall{user: user, version: version, cancel: cancel})
		return ctx, func() { unregister(); cancel(nil) }
	}
	ctx, done := call("", "2025-11-25")
	defer done()
	if !errors.Is(context.Cause(ctx), ErrSessionEnded) {
		t.Errorf("a call begun while its session's DELETE is served: cause %v, want ErrSessionEnded", context.Cause(ctx))
	}
	other, doneOther := call("mallory", "2025-11-25")
	defer doneOther()
	if other.Err() != nil {
		t.Errorf("another user's call was cancelled by the DELETE: %v", context.Cause(other))
	}
	close(release)
	<-served
	after, doneAfter := call("", "2025-11-25")
	defer doneAfter()
	if after.Err() != nil {
		t.Errorf("a call after the DELETE was served was cancelled: %v", context.Cause(after))
	}
}
