package mcpserver_test

import (
	"bufio"
	"context"
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
	s := mcp.NewServer(&mcp.Implementation{Name: "x", Version: "1"}, nil)
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(s, mcpserver.HTTPOptions{MaxSessionsPerCaller: 1, Log: slog.New(slog.DiscardHandler)}))
	defer hs.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL + mcpserver.MCPPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.Ping(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	bad := `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":5}}`
	code, _, body := rawPost(t, hs.URL+mcpserver.MCPPath, "", bad)
	if !strings.Contains(body, `"error"`) {
		t.Fatalf("the malformed initialize was answered %d %s; want a JSON-RPC error", code, body)
	}
	if err := cs.Ping(context.Background(), nil); err != nil {
		t.Fatalf("after another client's failed initialize (no session opened), the caller's only session is gone: %v", err)
	}
}
