package mcpserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/auth"
	"symbi/internal/ledger"
	"symbi/internal/mcpserver"
	"symbi/internal/runs"
)

// TestListenAddr: "Without authentication configured it binds only
// loopback addresses and refuses any other" (spec http.md); docs/http.md: "--http accepts
// only a loopback address (127.0.0.1, ::1, localhost); any other ... is refused". A host
// name other than localhost — one that merely ends in "localhost" included — is not a
// loopback address.
func TestListenAddr(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080", "127.1.2.3:80"} {
		if err := mcpserver.CheckListenAddr(addr, false); err != nil {
			t.Errorf("CheckListenAddr(%q, false) = %v, want nil (a loopback address)", addr, err)
		}
	}
	for _, addr := range []string{"example.com:8080", "myhost:8080", "notlocalhost:8080", "evil.localhost:8080", ":8080", "0.0.0.0:8080", "[::]:8080"} {
		if err := mcpserver.CheckListenAddr(addr, false); err == nil {
			t.Errorf("CheckListenAddr(%q, false) = nil, want a refusal: not a loopback address and no authentication", addr)
		}
		if err := mcpserver.CheckListenAddr(addr, true); err != nil {
			t.Errorf("CheckListenAddr(%q, true) = %v, want nil with authentication", addr, err)
		}
	}
}

const rawInitBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// postRaw sends body to a fresh HTTP handler with options o, declared with its length
// or (chunked) without, and returns the answer's status and body.
func postRaw(t *testing.T, o mcpserver.HTTPOptions, body string, chunked bool) (int, string) {
	t.Helper()
	o.Log = slog.New(slog.DiscardHandler)
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(mcp.NewServer(&mcp.Implementation{Name: "budget", Version: "1"}, nil), o))
	defer hs.Close()
	var rd io.Reader = strings.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // no length known: net/http sends it chunked
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+mcpserver.MCPPath, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestBodyBudgetBounds: BodyBytesPerCaller and BodyBytes "bound the bytes
// of request bodies held at once": a body of exactly the bound is served, one byte more
// is refused — 429 for the caller's bound, 503 for the server's.
func TestBodyBudgetBounds(t *testing.T) {
	n := int64(len(rawInitBody))
	for _, tt := range []struct {
		name string
		o    mcpserver.HTTPOptions
		code int // the refusal one byte short
	}{
		{"per caller", mcpserver.HTTPOptions{BodyBytesPerCaller: n}, http.StatusTooManyRequests},
		{"in all", mcpserver.HTTPOptions{BodyBytes: n}, http.StatusServiceUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := postRaw(t, tt.o, rawInitBody, false); code != http.StatusOK {
				t.Fatalf("a body of exactly the bound (%d bytes): %d %.300s, want 200", n, code, body)
			}
			short := tt.o
			if short.BodyBytesPerCaller != 0 {
				short.BodyBytesPerCaller--
			} else {
				short.BodyBytes--
			}
			if code, body := postRaw(t, short, rawInitBody, false); code != tt.code || !strings.Contains(body, "busy: ") {
				t.Fatalf("a body one byte past the bound: %d %.300s, want %d busy", code, body, tt.code)
			}
		})
	}
}

// TestChunkedBodyCounted: bodyBudget's contract — "one sent in chunks is
// counted as it arrives" — so a chunked body past the caller's budget is refused 429, like
// one declared with its length.
func TestChunkedBodyCounted(t *testing.T) {
	pad := strings.Repeat("x", 200<<10)
	body := strings.Replace(rawInitBody, `"name":"raw"`, `"name":"`+pad+`"`, 1)
	o := mcpserver.HTTPOptions{BodyBytesPerCaller: 64 << 10}
	for _, chunked := range []bool{false, true} {
		code, got := postRaw(t, o, body, chunked)
		if code != http.StatusTooManyRequests || !strings.Contains(got, "busy: ") {
			t.Errorf("a %d-byte body (chunked %v), caller budget 64 KiB: %d %.200s, want 429 busy", len(body), chunked, code, got)
		}
	}
}

// TestResourceReadRateLimited: Config.Rate is "the requests a second each
// caller may make (tool calls, resource reads and subscriptions)". With a frozen clock and
// a rate of 1, a second resources/read is refused rate_limited.
func TestResourceReadRateLimited(t *testing.T) {
	frozen := time.Now()
	cs := serve(t, testProject(t, nil), serveOpts{rate: 1, now: func() time.Time { return frozen }})
	ctx := context.Background()
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.AgentsMDURI}); err != nil {
		t.Fatalf("the first read, within the rate: %v", err)
	}
	_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.AgentsMDURI})
	if err == nil || !strings.Contains(err.Error(), "rate_limited") {
		t.Fatalf("a second resources/read at a rate of 1 a second, clock frozen: %v, want rate_limited", err)
	}
}

// TestRunEventsNeedsReadAccess: spec http.md: read_run covers "run_status,
// run_events, the run resource, list_runs filtering", and by default a caller may "read
// ... only its own runs". mallory's run_events of alice's run is refused and returns none
// of its events.
func TestRunEventsNeedsReadAccess(t *testing.T) {
	model := newGatedModel(t)
	s := serveStackTLS(t, testProject(t, nil), model.env())
	alice := s.connect(t, "alice", nil, true)
	mallory := s.connect(t, "mallory", nil, true)
	arun := finishedRun(t, alice)
	res := call(t, mallory, "run_events", map[string]any{"run_id": arun})
	if !res.IsError {
		t.Fatalf("mallory read alice's run events: %.400s", textOf(t, res))
	}
	if text := textOf(t, res); strings.Contains(text, "alice") || strings.Contains(text, "started") {
		t.Fatalf("mallory's refused run_events names alice's run's content: %q", text)
	}
}

// TestProtocolErrorClippedJustOver: "clipErrors bounds the message of
// every protocol error a request is answered with at MaxErrorMessage bytes". The existing
// TestProtocolErrorsClipped uses a 100,000-byte name; a name of 2,000 bytes — whose error
// is over the bound by less than a few KiB — must be clipped too.
func TestProtocolErrorClippedJustOver(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	name := strings.Repeat("x", 2000)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("an unknown tool: %v, want a JSON-RPC error", err)
	}
	if len(we.Message) > mcpserver.MaxErrorMessage {
		t.Fatalf("an unknown tool of a %d-byte name: a message of %d bytes, more than MaxErrorMessage (%d)", len(name), len(we.Message), mcpserver.MaxErrorMessage)
	}
}

// TestInvokeAgentNeedsStartAccess: docs/http.md's access table: "start_run
// (start_run and invoke_agent)". A forbid on start_run refuses invoke_agent too
// (access_denied naming the policy), not only start_run.
func TestInvokeAgentNeedsStartAccess(t *testing.T) {
	model := newGatedModel(t)
	files := map[string]string{"policies/access/start.cedar": `@id("no-starting") forbid (principal, action == Action::"start_run", resource);
`}
	cs := serve(t, testProject(t, files), serveOpts{env: model.env()})
	for _, tool := range []string{"invoke_agent", "start_run"} {
		wantToolError(t, call(t, cs, tool, map[string]any{"agent": "helper", "prompt": "hi"}), "access_denied", "no-starting")
	}
}

// TestBrokenLedgerIsNotNotFound: resourceError's contract — "not found for
// a run that does not exist ..., else the coded error itself — a ledger that no longer
// verifies is not "not found"". Once the project ledger shrinks under the server, reading
// a run resource is the coded audit_unavailable error, not "resource not found".
func TestBrokenLedgerIsNotNotFound(t *testing.T) {
	model := newGatedModel(t)
	dir := testProject(t, nil)
	id := finishedRun(t, serve(t, dir, serveOpts{env: model.env()}))
	// Asked of another server on the project: to the server that ran it, the run may still
	// be its own run in flight for a moment after its journal ended, answered without the
	// ledger (runs.md) — here it is always read.
	cs := serve(t, dir, serveOpts{env: model.env()})
	var st runs.Status
	callOK(t, cs, "run_status", map[string]any{"run_id": id}, &st) // the ledger is read
	if err := os.Truncate(filepath.Join(dir, ".symbiont", ledger.FileName), 0); err != nil {
		t.Fatal(err)
	}
	_, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: mcpserver.RunURIPrefix + id})
	if err == nil || !strings.Contains(err.Error(), "audit_unavailable") || strings.Contains(strings.ToLower(err.Error()), "not found") {
		t.Fatalf("reading a run resource once the ledger no longer verifies: %v, want the coded audit_unavailable error, not not-found", err)
	}
}

// TestRateLimiterBoundsCallers: ratelimit.go — "maxBuckets bounds the
// callers a rateLimiter tracks at once; past it, buckets that have refilled completely ...
// are dropped first", and when none has, the oldest. Observed from outside: a caller over
// its rate (clock nearly frozen) is forgotten once 4096 (maxBuckets) other callers have
// made a request, and its next request is served from a new bucket.
func TestRateLimiterBoundsCallers(t *testing.T) {
	const maxBuckets = 4096 // mcpserver's unexported bound
	var tick atomic.Int64
	base := time.Now()
	now := func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Microsecond) }
	var srv *mcp.Server
	serve(t, testProject(t, nil), serveOpts{rate: 1, now: now, server: &srv})
	var caller atomic.Value
	caller.Store("c0")
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if r, ok := req.(*mcp.CallToolRequest); ok {
				r.Extra = &mcp.RequestExtra{TokenInfo: &sdkauth.TokenInfo{UserID: caller.Load().(string),
					Expiration: time.Now().Add(time.Hour), Extra: map[string]any{auth.ExtraMethod: auth.MethodToken}}}
			}
			return next(ctx, method, req)
		}
	})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list := func(id string) *mcp.CallToolResult {
		caller.Store(id)
		return call(t, cs, "list_agents", map[string]any{})
	}
	if res := list("c0"); res.IsError {
		t.Fatalf("c0's first request: %s", textOf(t, res))
	}
	wantToolError(t, list("c0"), "rate_limited")
	for i := 1; i <= maxBuckets; i++ {
		if res := list(fmt.Sprint("c", i)); res.IsError {
			t.Fatalf("caller c%d's first request: %s", i, textOf(t, res))
		}
	}
	if res := list("c0"); res.IsError {
		t.Fatalf("after %d other callers, c0 (the oldest bucket, not refilled) is still tracked: %s — the limiter keeps more than maxBuckets callers", maxBuckets, textOf(t, res))
	}
}

// TestEvictedSessionIs404: sessionCaps — "From the moment it is closed the
// evicted session's requests are answered 404 here, before the SDK sees them, so none is
// begun and then cut off by the close." The close of an evicted session waits for what it
// still serves: here a tool call whose HTTP request the client gave up (the session is
// idle, so it may be evicted) but whose handler still runs. While that close waits, a
// request on the evicted session is answered 404.
func TestEvictedSessionIs404(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "evict", Version: "1"}, nil)
	started, release := make(chan struct{}, 1), make(chan struct{})
	mcp.AddTool(srv, &mcp.Tool{Name: "block", InputSchema: &jsonschema.Schema{Type: "object"}}, func(ctx context.Context, _ *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		<-release // deaf to its cancellation: the session's close waits for it
		return &mcp.CallToolResult{}, nil, nil
	})
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(srv, mcpserver.HTTPOptions{
		Verifier: prefixVerifier, PublicURL: "http://symbi.test", MaxSessions: 10, MaxSessionsPerCaller: 1,
		Log: slog.New(slog.DiscardHandler),
	}))
	defer hs.Close()
	url := hs.URL + mcpserver.MCPPath
	var open []*mcp.ClientSession
	defer func() {
		for _, cs := range open {
			cs.Close()
		}
	}()
	defer close(release) // first of all: the blocked handler lets the sessions close
	connect := func() (*mcp.ClientSession, error) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "alice", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: url, DisableStandaloneSSE: true, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearerRT{token: "tok-alice", base: &http.Transport{}}},
		}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err == nil {
			open = append(open, cs)
		}
		return cs, err
	}
	s1, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	called := make(chan error, 1)
	go func() {
		_, err := s1.CallTool(ctx, &mcp.CallToolParams{Name: "block", Arguments: map[string]any{}})
		called <- err
	}()
	select {
	case <-started:
	case <-time.After(hangGuard): // a failure guard
		t.Fatal("the tool call did not start")
	}
	cancel() // the client gives up its request; the handler runs on
	<-called
	// alice, at her cap, opens another session: s1 is evicted once its POST has ended.
	for opened := time.Now(); ; {
		if _, err := connect(); err == nil {
			break
		} else if !strings.Contains(err.Error(), "Too Many Requests") {
			t.Fatal(err)
		}
		if time.Since(opened) > hangGuard {
			t.Fatal("alice could not open a second session: s1 never became idle")
		}
	}
	// s1's close now waits for the blocked handler: a request on s1 meanwhile.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer tok-alice")
	req.Header.Set("Mcp-Session-Id", s1.ID())
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	rctx, rcancel := context.WithTimeout(context.Background(), hangGuard)
	defer rcancel()
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req.WithContext(rctx))
	if err != nil {
		t.Fatalf("a request on the evicted session while it closes: %v, want a 404 answer", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("a request on the evicted session while it closes: %d %q, want 404", res.StatusCode, body)
	}
}
