package mcpserver_test

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

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
