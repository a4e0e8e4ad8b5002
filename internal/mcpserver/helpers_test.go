package mcpserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/inference"
	"symbi/internal/invoke"
	"symbi/internal/ledger"
	"symbi/internal/mcpserver"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
	"symbi/internal/schemapin"
)

// The tests serve real project directories in t.TempDir() through mcpserver.New and talk
// to them with the go-sdk client over in-memory transports.

// testAgents are the agent files of the test project.
var testAgents = map[string]string{
	"agents/helper.symbi": `metadata { description = "answers questions", version = "1.0" }
agent helper {
  capabilities = ["answer"]
}
`,
	"agents/alias.symbi": `agent aliased_name {
  capabilities = ["summarize", "answer"]
}
`,
	"agents/refused.symbi": `agent refused(topic: String) {
  capabilities = ["answer"]
}
`,
	"agents/broken.symbi": "agent broken {\n  capabilities = [\n",
	"agents/dup.symbi":    "agent dup {}\n",
	"agents/dup.dsl":      "agent dup {}\n",
	"agents/legacy.dsl":   "agent legacy {}\n",
	"agents/notes.txt":    "not an agent file\n",
}

const testAgentsMD = "# Test project\n\n<!-- agents-md:auto-start -->\nBe brief.\n<!-- agents-md:auto-end -->\n"

// newProject writes files (paths relative to a fresh directory) and returns the directory.
func newProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		writeFile(t, filepath.Join(dir, rel), content)
	}
	return dir
}

// testProject is newProject with the test agents, AGENTS.md and extra files.
func testProject(t *testing.T, extra map[string]string) string {
	t.Helper()
	files := map[string]string{"AGENTS.md": testAgentsMD}
	for k, v := range testAgents {
		files[k] = v
	}
	for k, v := range extra {
		files[k] = v
	}
	return newProject(t, files)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// serveOpts are the knobs of serve.
type serveOpts struct {
	env     map[string]string   // the environment the provider and verifier read
	schemas *schemapin.Verifier // nil: schemapin.NewVerifier(env)
	client  *mcp.ClientOptions
	version string // the protocol version the client offers; "" for the SDK's latest
	// approvalTimeout bounds a wait at a human gate (0: the default, 24 h).
	approvalTimeout time.Duration
	// server, when set, is where the server is put, for more clients to connect to.
	server **mcp.Server
	// authenticated serves as with bearer tokens (Config.Authenticated); the in-memory
	// client sends none.
	authenticated bool
	// rate and now are Config.Rate and Config.Now (0 and nil: no rate limit).
	rate float64
	now  func() time.Time
}

// serve serves the project at dir the way symbi mcp does and returns a connected client
// session. Everything is closed when the test ends.
func serve(t *testing.T, dir string, o serveOpts) *mcp.ClientSession {
	t.Helper()
	cs, stop := serveStoppable(t, dir, o)
	t.Cleanup(stop)
	return cs
}

// serveStoppable is serve whose server the test stops (stop is idempotent): the client
// leaves, the runs in flight are cancelled and finish their journals, and the project's
// ledger and directory are closed.
func serveStoppable(t *testing.T, dir string, o serveOpts) (cs *mcp.ClientSession, stop func()) {
	t.Helper()
	var cleanups []func()
	stop = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		cleanups = nil
	}
	srv, runner, closeServer := newServer(t, dir, o)
	cleanups = append(cleanups, closeServer)
	if o.server != nil {
		*o.server = srv
	}
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err = mcp.NewClient(&mcp.Implementation{Name: "mcpserver-test", Version: "1"}, o.client).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: o.version})
	if err != nil {
		t.Fatal(err)
	}
	cleanups = append(cleanups, func() {
		cs.Close()
		ss.Wait()
		sctx, scancel := context.WithTimeout(context.Background(), hangGuard)
		defer scancel()
		if err := runner.Shutdown(sctx); err != nil {
			t.Errorf("runner shutdown: %v", err)
		}
	})
	return cs, stop
}

// newServer builds the MCP server of the project dir as symbi mcp does — its ledger
// opened and reconciled, a runner, a run manager — with o's options, and returns it, its
// runner, and the function that closes the ledger and the project (after the runner has
// been shut down).
func newServer(t *testing.T, dir string, o serveOpts) (*mcp.Server, *invoke.Runner, func()) {
	t.Helper()
	getenv := func(k string) string { return o.env[k] }
	log := slog.New(slog.DiscardHandler)
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := p.LoadRegistry(log)
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	prov, provErr := inference.FromEnv(getenv)
	if provErr != nil {
		prov = nil
	}
	lw, _, err := ledger.OpenProject(p.Root(), "")
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Provider: prov, ProviderErr: provErr, Ledger: lw, Log: log,
		ApprovalTimeout: o.approvalTimeout})
	schemas := o.schemas
	if schemas == nil {
		schemas = schemapin.NewVerifier(getenv)
	}
	srv := mcpserver.New(mcpserver.Config{Project: p, Registry: reg, Runs: runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg, Ledger: lw, Access: policy.LoadAccess(p.Root())}), Schemas: schemas, Log: log, Authenticated: o.authenticated, Rate: o.rate, Now: o.now})
	return srv, runner, func() {
		lw.Close()
		p.Close()
	}
}

// call calls a tool; args may be a map or raw JSON. A protocol error fails the test.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %s: protocol error %v", name, err)
	}
	return res
}

// textOf returns the result's only content item, which must be text.
func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("%d content items, want 1: %+v", len(res.Content), res.Content)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	return tc.Text
}

// structuredJSON returns the result's structuredContent re-encoded as JSON.
func structuredJSON(t *testing.T, res *mcp.CallToolResult) []byte {
	t.Helper()
	if res.StructuredContent == nil {
		t.Fatal("no structuredContent")
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// decodeStrict decodes raw into v, refusing fields v does not have.
func decodeStrict(t *testing.T, raw []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
}

// errorContent is the structuredContent of a failed call.
type errorContent struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Audit json.RawMessage `json:"audit,omitempty"`
}

// wantToolError asserts that res is a tool error with code whose message contains each
// of substrs, that its text is "<code>: <message>" and that structuredContent carries
// the same code and message. It returns the message.
func wantToolError(t *testing.T, res *mcp.CallToolResult, code string, substrs ...string) string {
	t.Helper()
	if !res.IsError {
		t.Fatalf("not an error result: %s %s", textOf(t, res), structuredJSON(t, res))
	}
	var ec errorContent
	decodeStrict(t, structuredJSON(t, res), &ec)
	text := textOf(t, res)
	if ec.Error.Code != code || text != code+": "+ec.Error.Message {
		t.Fatalf("error text %q, structured code %q message %q; want code %q with text \"<code>: <message>\"", text, ec.Error.Code, ec.Error.Message, code)
	}
	for _, s := range substrs {
		if !strings.Contains(ec.Error.Message, s) {
			t.Errorf("message %q does not contain %q", ec.Error.Message, s)
		}
	}
	return ec.Error.Message
}

// hangGuard bounds a wait that only a hang reaches. It is never an expectation of speed:
// under -race on a busy machine the work it guards may take far longer than on an idle one.
const hangGuard = 5 * time.Minute
