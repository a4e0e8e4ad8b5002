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
	srv := mcp.NewServer(&mcp.Implementation{Name: "r2", Version: "1"}, nil)
	stream := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)})
	caps := newSessionCaps(srv, 10, 2)
	hs := httptest.NewServer(caps.wrap(stream))
	defer hs.Close()
	do := func(method, id, body string) (int, string) {
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
	open := func() string {
		t.Helper()
		code, id := do(http.MethodPost, "", init)
		if code != http.StatusOK || id == "" {
			t.Fatalf("initialize: %d %q", code, id)
		}
		do(http.MethodPost, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return id
	}
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
