package mcpserver_test

// Regression tests of the tool and resource handlers: each guards a defect that was
// found and fixed.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/mcpserver"
)

// advertisedOutputSchemas returns the resolved output schema of every tool cs lists.
func advertisedOutputSchemas(t *testing.T, cs *mcp.ClientSession) map[string]*jsonschema.Resolved {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*jsonschema.Resolved{}
	for _, tool := range res.Tools {
		raw, _ := json.Marshal(tool.OutputSchema)
		var s jsonschema.Schema
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		r, err := s.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		out[tool.Name] = r
	}
	return out
}

// validateStructured checks res's structuredContent against the tool's advertised output schema,
// as a TypeScript-SDK client does.
func validateStructured(t *testing.T, schemas map[string]*jsonschema.Resolved, tool string, res *mcp.CallToolResult) {
	t.Helper()
	var v any
	if err := json.Unmarshal(structuredJSON(t, res), &v); err != nil {
		t.Fatal(err)
	}
	if err := schemas[tool].Validate(v); err != nil {
		t.Errorf("%s: structuredContent does not validate against its output schema: %v", tool, err)
	}
}

// TestParseDSLNumberWithLeadingZero: `version = 007` parses (a number is `digits ("_"
// digits)* ("." digits)?`), and parse_dsl returns its views with the number as valid JSON,
// its result valid against the advertised output schema — not an internal error from
// encoding a JSON number with leading zeros.
func TestParseDSLNumberWithLeadingZero(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	sch := advertisedOutputSchemas(t, cs)
	for _, src := range []string{
		"metadata { version = 007 }\nagent a {}\n",
		"schedule nightly { at = 01 }\n",
		"agent a {\n  capabilities = [\"x\"]\n  with retries = 00 {}\n}\n",
	} {
		res := call(t, cs, "parse_dsl", map[string]any{"content": src})
		if res.IsError {
			t.Errorf("parse_dsl of %q (which parses) is a tool error: %s", src, textOf(t, res))
			continue
		}
		validateStructured(t, sch, "parse_dsl", res)
		var out struct {
			Valid bool `json:"valid"`
		}
		if err := json.Unmarshal(structuredJSON(t, res), &out); err != nil || !out.Valid {
			t.Errorf("parse_dsl of %q: valid=%v (%v)", src, out.Valid, err)
		}
	}
}

// TestEmptySourceIsTheTextContent: get_agent_dsl and get_agents_md return the file as the
// text content, also when it is empty — not the JSON of the structured result, text the
// file does not hold.
func TestEmptySourceIsTheTextContent(t *testing.T) {
	cs := serve(t, testProject(t, map[string]string{"AGENTS.md": "", "agents/empty.symbi": ""}), serveOpts{})
	res := call(t, cs, "get_agent_dsl", map[string]any{"agent": "empty"})
	if res.IsError {
		t.Fatalf("get_agent_dsl: %s", textOf(t, res))
	}
	if got := textOf(t, res); got != "" {
		t.Errorf("get_agent_dsl of an empty file: text content %q, want the raw source \"\"", got)
	}
	res = call(t, cs, "get_agents_md", map[string]any{})
	if res.IsError {
		t.Fatalf("get_agents_md: %s", textOf(t, res))
	}
	if got := textOf(t, res); got != "" {
		t.Errorf("get_agents_md of an empty AGENTS.md: text content %q, want the file's text \"\"", got)
	}
}

// TestAgentsMDResourceRefusalNamesTheRule: a listed file:///AGENTS.md that grows past
// 64 KiB (or becomes a symlink) is refused on read with -32000 "<code>: <message>" naming
// the rule, as get_agents_md refuses it — not "resource not found", which is only for a
// missing file or another URI.
func TestAgentsMDResourceRefusalNamesTheRule(t *testing.T) {
	dir := testProject(t, nil)
	cs := serve(t, dir, serveOpts{})
	big := "# big\n" + strings.Repeat("x", 70<<10)
	if err := os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	wantToolError(t, call(t, cs, "get_agents_md", map[string]any{}), "limit_exceeded")
	_, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: mcpserver.AgentsMDURI})
	if err == nil {
		t.Fatal("reading an AGENTS.md over 64 KiB succeeded")
	}
	if !strings.Contains(err.Error(), "limit_exceeded") {
		t.Errorf("reading the listed AGENTS.md resource over its 64 KiB limit: %v; want the refusal naming its rule (limit_exceeded), not resource-not-found", err)
	}
}

// TestApproveRunRequestIDQuoted: a request_id that names no waiting request is quoted in
// the invalid_transition message as every caller-given name is (errcode.Quote: quoted,
// cut after 256 bytes): a 100 KB one does not come back whole, and a newline in it
// cannot forge a line of the message.
func TestApproveRunRequestIDQuoted(t *testing.T) {
	model := newGatedModel(t)
	cs := serve(t, testProject(t, gatePolicies), serveOpts{env: model.env()})
	model.open()
	res := call(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "write to ACME"})
	wantToolError(t, res, "approval_required")
	var held struct {
		Audit struct {
			RunID string `json:"run_id"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(structuredJSON(t, res), &held); err != nil || held.Audit.RunID == "" {
		t.Fatalf("no run id: %v", err)
	}
	long := strings.Repeat("r", 100_000)
	msg := wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": held.Audit.RunID, "request_id": long, "decision": "approve", "reason": "checked"}), "invalid_transition")
	if len(msg) > 4096 {
		t.Errorf("the refusal of a 100000-byte request_id is %d bytes: the caller's value is echoed uncut", len(msg))
	}
	msg = wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": held.Audit.RunID, "request_id": "p1\ninvalid_transition: forged", "decision": "approve", "reason": "checked"}), "invalid_transition")
	if strings.Contains(msg, "\n") {
		t.Errorf("a request_id with a newline is echoed raw, forging a line of the message: %q", msg)
	}
	var c cancelContent
	callOK(t, cs, "cancel_run", map[string]any{"run_id": held.Audit.RunID}, &c)
}

// TestResolveRunArgumentsBeforeState: resolve_run checks its arguments before it looks the
// run up, as approve_run and run_events do: a resolution outside the four values of an
// unknown run is invalid_request, not run_not_found.
func TestResolveRunArgumentsBeforeState(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	missing := "0190a000-0000-7000-8000-000000000000"
	wantToolError(t, call(t, cs, "resolve_run", map[string]any{"run_id": missing, "resolution": "maybe"}), "invalid_request", "resolution")
	wantToolError(t, call(t, cs, "resolve_run", map[string]any{"run_id": missing, "resolution": "accepted", "note": strings.Repeat("n", 4097)}), "limit_exceeded", "4 KiB")
}

// TestRateLimitCountsListenSubscriptions: --rate counts tool calls, resource reads and
// subscriptions, also those made with subscriptions/listen (protocol 2026-07-28): a caller
// over its rate is refused either way.
func TestRateLimitCountsListenSubscriptions(t *testing.T) {
	model := newGatedModel(t)
	defer model.open()
	dir := testProject(t, nil)
	// A frozen clock: the bucket (one request) never refills.
	frozen := time.Now()
	srv, runID := rateServer(t, dir, model.env(), func() time.Time { return frozen })
	// The answer to each subscriptions/listen: the stream the 2026-07-28 client opens in
	// the background for a subscription.
	listened := make(chan error, 10)
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if method == "subscriptions/listen" {
				listened <- err
			}
			return res, err
		}
	})
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			updated := make(chan string, 10)
			ct, st := mcp.NewInMemoryTransports()
			ctx := context.Background()
			if _, err := srv.Connect(ctx, st, nil); err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{
				ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
			}).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			// The caller (stdio) spent its one request starting the run: it is over its rate.
			wantToolError(t, call(t, cs, "list_agents", map[string]any{}), "rate_limited")
			err = cs.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.RunURIPrefix + runID})
			if version != "2025-11-25" {
				// The listen stream is opened in the background: its answer is the refusal.
				select {
				case err = <-listened:
				case <-time.After(hangGuard): // a failure guard
					t.Fatal("the subscriptions/listen request was not answered")
				}
			}
			if err == nil || !strings.Contains(err.Error(), "rate_limited") {
				t.Errorf("a caller over its rate subscribing (protocol %s): %v, want rate_limited", version, err)
			}
			if sessions, _ := mcpserver.Subscriptions(srv); sessions != 0 {
				t.Fatalf("a caller over its rate subscribed (protocol %s): the subscription was not counted", version)
			}
		})
	}
}

// rateServer serves dir with Config.Rate 1 on clock now, starts one held run of helper
// through a first client (which spends the stdio caller's one request) and returns the
// server and the run's id.
func rateServer(t *testing.T, dir string, env map[string]string, now func() time.Time) (*mcp.Server, string) {
	t.Helper()
	var srv *mcp.Server
	cs := serve(t, dir, serveOpts{env: env, rate: 1, now: now, server: &srv, version: "2025-11-25"})
	var started startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hold"}, &started)
	return srv, started.RunID
}

// TestRecoverPanicsOutermost: recoverPanics is the outermost middleware, so a panic in
// another middleware's path — here in the rate limiter's clock — is the request's failure
// (an internal tool error), not the end of the server process. The request runs in a
// child process, which the panic would otherwise end.
func TestRecoverPanicsOutermost(t *testing.T) {
	if os.Getenv("SYMBI_TEST_PANIC_CHILD") == "1" {
		recoverPanicsChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRecoverPanicsOutermost$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SYMBI_TEST_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ANSWERED internal") {
		t.Fatalf("a panic in the rate limiter's path ended the server process (%v): recoverPanics is not the outermost middleware\n%.3000s", err, out)
	}
}

func recoverPanicsChild(t *testing.T) {
	var armed atomic.Bool
	now := func() time.Time {
		if armed.Load() {
			panic("a bug in the rate limiter's path")
		}
		return time.Now()
	}
	cs := serve(t, testProject(t, nil), serveOpts{rate: 100, now: now})
	armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_agents", Arguments: map[string]any{}})
	if err == nil && res.IsError && strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "internal: ") {
		t.Log("ANSWERED internal")
	} else {
		t.Logf("answered %v, %v", res, err)
	}
}

// TestProtocolErrorsClipped: a protocol error's message is at most MaxErrorMessage bytes
// and says how long the text was, its code kept: the SDK's own refusals (an unknown tool
// or prompt) quote the caller's text whole, here 100,000 bytes of it.
func TestProtocolErrorsClipped(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	long := strings.Repeat("x", 100000)
	ctx := context.Background()
	_, toolErr := cs.CallTool(ctx, &mcp.CallToolParams{Name: long, Arguments: map[string]any{}})
	_, promptErr := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: long})
	for what, err := range map[string]error{"an unknown tool": toolErr, "an unknown prompt": promptErr} {
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			t.Fatalf("%s: %v, want a JSON-RPC error", what, err)
		}
		if len(we.Message) > mcpserver.MaxErrorMessage || !strings.Contains(we.Message, "(100") || we.Code == 0 {
			t.Errorf("%s: code %d, %d bytes of message: %.120s…", what, we.Code, len(we.Message), we.Message)
		}
	}
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("the session after the refusals: %v", err)
	}
}
