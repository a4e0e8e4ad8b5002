package mcpserver_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/auth"
	"symbi/internal/mcpserver"
)

// expiringVerifier authenticates "jwt" as a JWT caller whose token expires (with the
// verifiers' Leeway) 3 s after the request, and "static" as a static-token caller whose
// TokenInfo says the same 1 s after it.
func expiringVerifier(_ context.Context, tok string, _ *http.Request) (*sdkauth.TokenInfo, error) {
	switch tok {
	case "jwt":
		return &sdkauth.TokenInfo{UserID: "ci", Expiration: time.Now().Add(3*time.Second - auth.Leeway),
			Extra: map[string]any{auth.ExtraMethod: auth.MethodJWT}}, nil
	case "static":
		return &sdkauth.TokenInfo{UserID: "ops", Expiration: time.Now().Add(time.Second - auth.Leeway),
			Extra: map[string]any{auth.ExtraMethod: auth.MethodToken}}, nil
	}
	return nil, sdkauth.ErrInvalidToken
}

// bearerDo sends req with the bearer token tok on a connection of its own.
func bearerDo(t *testing.T, req *http.Request, tok string) *http.Response {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// openStream initializes a session as tok's caller and opens its event stream (GET).
func openStream(t *testing.T, url, tok string) (session string, stream *http.Response) {
	t.Helper()
	post := func(session, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		res := bearerDo(t, req, tok)
		io.ReadAll(res.Body)
		res.Body.Close()
		return res
	}
	res := post("", httpInit)
	if session = res.Header.Get("Mcp-Session-Id"); res.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize as %s: %s", tok, res.Status)
	}
	if res := post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); res.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized as %s: %s", tok, res.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	stream = bearerDo(t, req, tok)
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("the event stream of %s: %s", tok, stream.Status)
	}
	t.Cleanup(func() { stream.Body.Close() })
	return session, stream
}

// TestHTTPStreamEndsAtTokenExpiry: a session's event stream opened with a JWT ends when
// the token expires (exp, with the Leeway the verifier allows), so that a caller whose
// credential has lapsed is sent nothing more on it; the session itself goes on, for a
// request with a valid token. A stream opened with a static token is not ended by its
// TokenInfo's Expiration, which is not the token's.
func TestHTTPStreamEndsAtTokenExpiry(t *testing.T) {
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(mcp.NewServer(&mcp.Implementation{Name: "expiry", Version: "1"}, nil),
		mcpserver.HTTPOptions{Verifier: expiringVerifier, PublicURL: "http://127.0.0.1", Log: slog.New(slog.DiscardHandler)}))
	t.Cleanup(hs.Close) // after the streams' bodies are closed (cleanups run last first)
	url := hs.URL + mcpserver.MCPPath

	_, static := openStream(t, url, "static")
	staticEnded := make(chan struct{})
	go func() { io.Copy(io.Discard, static.Body); close(staticEnded) }()
	session, stream := openStream(t, url, "jwt")

	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, stream.Body); ended <- err }()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("the JWT caller's event stream ended with %v, want its end", err)
		}
	case <-time.After(hangGuard): // a failure guard
		t.Fatal("the JWT caller's event stream goes on past its token's expiry")
	}
	select {
	case <-staticEnded:
		t.Error("the static-token caller's event stream ended with its TokenInfo's Expiration")
	default:
	}

	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	res := bearerDo(t, req, "jwt")
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"id":3`) {
		t.Fatalf("a ping of the session after its stream ended: %s %s", res.Status, body)
	}
}
