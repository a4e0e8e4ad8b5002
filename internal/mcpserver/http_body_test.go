package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/mcpserver"
	"symbi/internal/runs"
)

// TestUnsentBodyHoldsNoConnection: a request whose body is declared (Content-Length, or
// chunked) but never sent is answered, and its connection closed, once the body timeout
// passes — also when the answer comes before anything reads the body (the bearer check's
// 401, the 404 of an unknown path), which needs no token. net/http reads and discards an
// unread body around the answer with no deadline of its own; without one, anyone who can
// reach the port could pin any number of connections (docs/http.md).
func TestUnsentBodyHoldsNoConnection(t *testing.T) {
	verifier := func(context.Context, string, *http.Request) (*sdkauth.TokenInfo, error) {
		return nil, sdkauth.ErrInvalidToken // every token is refused: the client has none
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	log := slog.New(slog.DiscardHandler)
	const bodyTimeout = time.Second
	h := mcpserver.NewHTTPHandler(s, mcpserver.HTTPOptions{Verifier: verifier, PublicURL: "http://127.0.0.1", BodyTimeout: bodyTimeout, Log: log})
	srv := mcpserver.NewHTTPServer(h, time.Second, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	for _, tt := range []struct{ name, req string }{
		{"unauthenticated POST, Content-Length", "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"},
		{"unauthenticated POST, chunked", "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n"},
		{"unknown path, Content-Length", "GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.req); err != nil {
				t.Fatal(err)
			}
			// A hang guard: the server answers (401/404) and closes once the body timeout
			// (1 s) has passed.
			conn.SetReadDeadline(time.Now().Add(hangGuard))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("no answer and no close %v after the headers: the unsent body holds the connection", hangGuard)
			}
			if err == nil {
				res.Body.Close()
			}
		})
	}
}

// TestFailedInitializeEvictsNoSession: a POST without a session id whose initialize fails
// (params of the wrong type) closes none of the caller's sessions, though the SDK's
// answer names the session it opened and closes at once: the session to close is closed
// only once the new session exists (docs/http.md).
func TestFailedInitializeEvictsNoSession(t *testing.T) {
	url, cs := bareHTTPSession(t, mcpserver.HTTPOptions{MaxSessionsPerCaller: 1})
	if err := cs.Ping(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	bad := `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":5}}`
	code, _, body := rawPost(t, url, "", bad)
	if !strings.Contains(body, `"error"`) {
		t.Fatalf("the malformed initialize was answered %d %s; want a JSON-RPC error", code, body)
	}
	if err := cs.Ping(context.Background(), nil); err != nil {
		t.Fatalf("after another client's failed initialize (no session opened), the caller's only session is gone: %v", err)
	}
}

// heldCall is an HTTP session whose invoke_agent waits on the gated model.
type heldCall struct {
	model *gatedModel
	url   string             // the MCP endpoint
	sid   string             // the session holding the call
	obs   *mcp.ClientSession // another session of the same (anonymous) caller, which may read the run
	runID string
}

// startHeldCall serves a project over HTTP, opens a raw session and sends it an
// invoke_agent the gated model holds, and returns once the run waits on the model.
func startHeldCall(t *testing.T) *heldCall {
	t.Helper()
	h := &heldCall{model: newGatedModel(t)}
	srv, runner, closeServer := newServer(t, testProject(t, nil), serveOpts{env: h.model.env()})
	t.Cleanup(closeServer)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		runner.Shutdown(ctx)
	})
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(srv, mcpserver.HTTPOptions{Log: slog.New(slog.DiscardHandler)}))
	t.Cleanup(hs.Close)
	h.url = hs.URL + mcpserver.MCPPath
	obs, err := mcp.NewClient(&mcp.Implementation{Name: "observer", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: h.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { obs.Close() })
	h.obs = obs

	_, hdr, body := rawPost(t, h.url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"leaver","version":"1"}}}`)
	if h.sid = hdr.Get("Mcp-Session-Id"); h.sid == "" {
		t.Fatalf("initialize: no session (%s)", body)
	}
	rawPost(t, h.url, h.sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":"helper","prompt":"hold please"}}}`))
	call.Header.Set("Content-Type", "application/json")
	call.Header.Set("Accept", "application/json, text/event-stream")
	call.Header.Set("Mcp-Session-Id", h.sid)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	go func() {
		if res, err := (&http.Client{Transport: tr}).Do(call); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}()

	// The run exists and waits on the model (a hang guard bounds the wait for it).
	for deadline := time.Now().Add(hangGuard); h.runID == "" && time.Now().Before(deadline); {
		var page struct {
			Runs []runs.Status `json:"runs"`
		}
		callOK(t, obs, "list_runs", map[string]any{}, &page)
		if len(page.Runs) == 1 && page.Runs[0].Status == runs.StatusRunning && page.Runs[0].Records >= 2 {
			h.runID = page.Runs[0].RunID
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if h.runID == "" {
		t.Fatal("the invoke_agent's run never started")
	}
	return h
}

// delete sends a DELETE of the session, changed by mutate, and returns its status.
func (h *heldCall) delete(t *testing.T, mutate func(*http.Request)) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, h.url, nil)
	req.Header.Set("Mcp-Session-Id", h.sid)
	mutate(req)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// await waits for the run to reach status want (awaitStatus).
func (h *heldCall) await(t *testing.T, want string) {
	t.Helper()
	awaitStatus(t, func(name string, args map[string]any, out any) { t.Helper(); callOK(t, h.obs, name, args, out) }, h.runID, want)
}

// TestDeleteCancelsSessionCalls: a client that ends its HTTP session (DELETE) while an
// invoke_agent of it waits on the model has its call cancelled — nobody can receive the
// answer — so the run ends cancelled at once, not at its deadline holding its slots, and
// the DELETE is answered without waiting for it.
func TestDeleteCancelsSessionCalls(t *testing.T) {
	h := startHeldCall(t)
	if code := h.delete(t, func(*http.Request) {}); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d", code)
	}
	h.await(t, runs.StatusCancelled)
}

// TestHTTPUnknownMethodIsJSONRPC: over Streamable HTTP, as over stdio, a request whose
// method the server does not handle is answered with the JSON-RPC error -32601 carrying
// its id (docs/errors.md) — not the SDK transport's plain-text HTTP 400, which no JSON-RPC
// client reads as the answer to its request. The method's name is quoted bounded.
func TestHTTPUnknownMethodIsJSONRPC(t *testing.T) {
	url, cs := bareHTTPSession(t, mcpserver.HTTPOptions{})
	for _, method := range []string{"bogus/method", strings.Repeat("m", 100_000)} {
		code, hdr, body := rawPost(t, url, cs.ID(), `{"jsonrpc":"2.0","id":7,"method":"`+method+`"}`)
		var res struct {
			ID    int `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil || res.ID != 7 || res.Error.Code != -32601 ||
			!strings.Contains(res.Error.Message, "method not found") || len(body) > 1<<10 || hdr.Get("Content-Type") != "application/json" {
			t.Fatalf("unknown method %.20s…: %d %s %.300q", method, code, hdr.Get("Content-Type"), body)
		}
	}
	// The session goes on.
	if err := cs.Ping(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPInvalidRequestIsJSONRPC: a request the SDK's transport finds invalid before
// dispatch — params missing, an id on a notification — is answered over HTTP, as over
// stdio, with a JSON-RPC error carrying its id, not the transport's plain-text 400 no
// JSON-RPC client takes for the answer to its request.
func TestHTTPInvalidRequestIsJSONRPC(t *testing.T) {
	w := startWire(t, testProject(t, nil))
	w.initialize(t)
	url, cs := bareHTTPSession(t, mcpserver.HTTPOptions{})
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":7,"method":"notifications/initialized"}`,
	} {
		w.send(t, msg)
		stdio := w.next(t)
		if stdio.Error == nil || string(stdio.ID) != "7" {
			t.Fatalf("stdio answered %s with %+v; the premise (a JSON-RPC error with id 7) does not hold", msg, stdio)
		}
		code, hdr, body := rawPost(t, url, cs.ID(), msg)
		var res struct {
			ID    json.RawMessage `json:"id"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &res); err != nil || res.Error == nil || string(res.ID) != "7" {
			t.Errorf("%s: stdio answers the JSON-RPC error %d with id 7; HTTP answers %d %s %q", msg, stdio.Error.Code, code, hdr.Get("Content-Type"), body)
		}
	}
}

// TestRefusedDeleteCancelsNothing: a DELETE the server refuses — an unsupported
// Mcp-Protocol-Version (400), a non-loopback Host on a loopback server (the DNS-rebinding
// protection, 403) — leaves the session open and has no effect: its invoke_agent is not
// cancelled, and answers once the model does.
func TestRefusedDeleteCancelsNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*http.Request)
	}{
		{"unsupported protocol version", func(r *http.Request) { r.Header.Set("Mcp-Protocol-Version", "1999-01-01") }},
		{"DNS-rebinding Host", func(r *http.Request) { r.Host = "rebind.example" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHeldCall(t)
			if code := h.delete(t, tc.mutate); code/100 == 2 {
				t.Fatalf("the premise fails: the DELETE was honoured (%d)", code)
			}
			// The model answers now: a run the refused DELETE cancelled would end cancelled.
			h.model.open()
			h.await(t, runs.StatusCompleted)
		})
	}
}
