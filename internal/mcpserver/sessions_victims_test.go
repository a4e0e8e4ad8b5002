package mcpserver

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestSessionVictimsReplaced: a caller over its cap (3 sessions, cap 2, all idle) opens one
// more: the reservation marks its two least recently used sessions s1 and s2. By the time
// the new session exists s1 has a request in flight, so a replacement is chosen for it —
// never s2, the reservation's own other victim, which is closed too: the replacement is
// s3, and the caller is left at its cap.
func TestSessionVictimsReplaced(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "r", Version: "1"}, nil)
	stream := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)})
	caps := newSessionCaps(srv, 10, 3)
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
	s1, s2, s3 := open(), open(), open()
	caller := caps.anonymous

	caps.mu.Lock()
	caps.perCaller = 2 // the caller now holds one session more than its cap, all idle
	base := time.Now().Add(-time.Hour)
	caps.used[s1], caps.used[s2], caps.used[s3] = base, base.Add(time.Second), base.Add(2*time.Second)
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
