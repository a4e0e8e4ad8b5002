package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/journal"
	"symbi/internal/loopback"
	"symbi/internal/proctest"
	"symbi/internal/syncbuf"
)

// The client conformance suite: the clients people use — the TypeScript MCP SDK (under
// Claude Desktop, Claude Code, Cursor, VS Code and the MCP Inspector) and the MCP
// Inspector CLI, pinned in testdata/conformance/package-lock.json — and the go-sdk client,
// against the real symbi binary over real stdio, and the first two over Streamable HTTP
// (symbi mcp --http, with and without --auth-tokens). Each new tool or resource adds its
// checks here (testdata/conformance/sdk-client.mjs and the Inspector table below), once
// for every transport.

// conformanceDir holds the pinned npm packages and the TypeScript SDK driver.
var conformanceDir = filepath.Join("..", "..", "testdata", "conformance")

// conformanceVersions are the protocol versions the TypeScript SDK client initializes at.
var conformanceVersions = []string{"2025-03-26", "2025-06-18", "2025-11-25"}

// nodeClients returns the path of node, or skips the test when node or the pinned
// packages are missing — and fails it under CI=true, where the suite must never be
// silently skipped.
func nodeClients(t *testing.T) string {
	t.Helper()
	const howto = "install Node.js 20 or newer, then run `npm ci --prefix testdata/conformance` " +
		"(make test does it when npm is on PATH) and `go test ./cmd/symbi -run Conformance`"
	missing := func(what string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the client conformance suite cannot run: %s (CI=true: it is never skipped); %s", what, howto)
		}
		t.Skipf("client conformance suite skipped: %s; to run it, %s", what, howto)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	for _, pkg := range []string{"sdk", "inspector"} {
		if _, err := os.Stat(filepath.Join(conformanceDir, "node_modules", "@modelcontextprotocol", pkg, "package.json")); err != nil {
			missing("the pinned npm package @modelcontextprotocol/" + pkg + " is not installed")
		}
	}
	return node
}

// conformanceModel answers "hang" by holding the request until the client goes away,
// "leak" with text the test policy forbids, "hold:NAME" only once a request
// "release:NAME" has arrived (before or after it), "review:NAME" with "CUSTOMER ACME:
// NAME" (which confGatePolicy holds for a person), and anything else, "release:NAME"
// included, with "loopback answer: " and the prompt. A client thus keeps a run running
// for exactly as long as it needs, and ends it with another run: no clock.
func conformanceModel(t *testing.T) *loopback.Server {
	var mu sync.Mutex
	gates := map[string]chan struct{}{}
	gate := func(name string, open bool) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		g := gates[name]
		if g == nil {
			g = make(chan struct{})
			gates[name] = g
		}
		if open {
			select {
			case <-g:
			default:
				close(g)
			}
		}
		return g
	}
	m := startModel(t, loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		switch {
		case r.Prompt == "hang":
			return loopback.Reply{Fault: loopback.FaultHang}
		case r.Prompt == "leak":
			return loopback.Reply{Text: "FORBIDDEN -----BEGIN PRIVATE KEY-----"}
		case r.Prompt == "fail":
			return loopback.Reply{Status: http.StatusInternalServerError, Text: "the model broke"}
		case strings.HasPrefix(r.Prompt, "review:"):
			return loopback.Reply{Text: "CUSTOMER ACME: " + strings.TrimPrefix(r.Prompt, "review:")}
		case strings.HasPrefix(r.Prompt, "hold:"):
			<-gate(strings.TrimPrefix(r.Prompt, "hold:"), false)
		case strings.HasPrefix(r.Prompt, "release:"):
			gate(strings.TrimPrefix(r.Prompt, "release:"), true)
		}
		return loopback.Reply{Text: "loopback answer: " + r.Prompt}
	}))
	// Cleanups run last first: every gate opens before the model closes, which waits for
	// its handlers (a held run the server cancelled still has one).
	t.Cleanup(func() {
		mu.Lock()
		names := make([]string, 0, len(gates))
		for name := range gates {
			names = append(names, name)
		}
		mu.Unlock()
		for _, name := range names {
			gate(name, true)
		}
	})
	return m
}

// confDelegated is the conformance suite's delegated agent: the fake ACP agent
// (cmd/fake-acp-agent), registered as executor "fake" with --executors, behind the
// project's agent "coder", with a workspace in a granted --workspace-root. Its exported
// fields are what sdk-client.mjs reads as cfg.delegated.
type confDelegated struct {
	Agent     string `json:"agent"`
	Executor  string `json:"executor"`
	Workspace string `json:"workspace"` // inside the granted root: holds File
	Resolved  string `json:"resolved"`  // Workspace, symbolic links resolved
	File      string `json:"file"`      // relative to Workspace
	Content   string `json:"content"`   // File's
	Prompt    string `json:"prompt"`
	Answer    string `json:"answer"`   // the agent's message: the run's text
	Outside   string `json:"outside"`  // a directory outside every root
	Relative  string `json:"relative"` // Workspace as a relative path
	Symlink   string `json:"symlink"`  // a link inside the root to Outside
	// Args are the server's flags: --executors FILE --workspace-root ROOT.
	Args []string `json:"-"`
	// Script is the fake agent's script (FAKE_ACP_SCRIPT) for a run that completes: it
	// thinks, reports a read tool call, reads File through fs/read_text_file (expecting
	// Content), is refused an execute permission (policies/tools.cedar forbids execute)
	// and answers Answer. Hang's agent never finishes its turn.
	Script, Hang string `json:"-"`
}

// confFakeAgent builds cmd/fake-acp-agent once for t (and its subtests).
func confFakeAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake ACP agent: %v\n%s", err, out)
	}
	return bin
}

// confDelegate adds the delegated agent to the project dir, runs by the fake agent bin:
// agents/coder.symbi naming executor "fake", the repository's policies/tools.cedar, the
// executors file, a workspace root holding the workspace and a link out of it, a
// directory outside, and the scripts.
func confDelegate(t *testing.T, bin, dir string) *confDelegated {
	t.Helper()
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"),
		"metadata { executor = \"fake\", description = \"reviews code in a workspace\" }\nagent coder { capabilities = [\"code\"] }\n")
	tools, err := os.ReadFile(filepath.Join("..", "..", "policies", "tools.cedar"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "policies", "tools.cedar"), string(tools))
	tmp := t.TempDir()
	root, outside := filepath.Join(tmp, "root"), filepath.Join(tmp, "outside")
	d := &confDelegated{Agent: "coder", Executor: "fake", Workspace: filepath.Join(root, "ws"), File: "notes.txt",
		Content: "hello from the workspace\n", Prompt: "Summarize notes.txt", Answer: "notes.txt says hello from the workspace.",
		Outside: outside, Relative: "ws", Symlink: filepath.Join(root, "escape")}
	writeFile(t, filepath.Join(d.Workspace, d.File), d.Content)
	writeFile(t, filepath.Join(outside, "secret.txt"), "outside\n")
	if err := os.Symlink(outside, d.Symlink); err != nil {
		t.Fatal(err)
	}
	if d.Resolved, err = filepath.EvalSymlinks(d.Workspace); err != nil {
		t.Fatal(err)
	}
	execFile := filepath.Join(tmp, "executors.json")
	ex, _ := json.Marshal(map[string]any{"executors": map[string]any{d.Executor: map[string]any{"command": []string{bin}}}})
	writeFile(t, execFile, string(ex))
	if err := os.Chmod(execFile, 0o644); err != nil { // neither group nor others may write it
		t.Fatal(err)
	}
	d.Args = []string{"--executors", execFile, "--workspace-root", root}
	script, _ := json.Marshal(map[string]any{
		"forbid_terminal": true, "require_fs": true, "expect_prompt_contains": []string{d.Prompt},
		"steps": []map[string]any{
			{"thought": "Reading the notes."},
			{"tool_call": map[string]any{"id": "t0", "kind": "read", "title": "read " + d.File, "locations": []string{"$CWD/" + d.File}}},
			{"read": "$CWD/" + d.File, "expect_content": d.Content},
			{"permission": map[string]any{"tool_call_id": "t1", "kind": "execute", "title": "go test ./...", "locations": []string{"$CWD"}}, "expect": "reject"},
			{"message": d.Answer},
			{"stop_reason": "end_turn"},
		},
	})
	d.Script, d.Hang = filepath.Join(tmp, "script.json"), filepath.Join(tmp, "hang.json")
	writeFile(t, d.Script, string(script))
	writeFile(t, d.Hang, `{"steps": [{"thought": "Working."}, {"hang": true}]}`)
	return d
}

type checkResult struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// TestConformanceTypeScriptSDK runs testdata/conformance/sdk-client.mjs over stdio at each
// protocol version: initialize, tools/list under the SDK's own validation, every tool with
// good and bad arguments (structuredContent validated by the SDK against each
// outputSchema), resources, progress, and cancellation through an AbortSignal — whose
// journal must then end with terminated, reason cancelled — and a delegated agent (the
// fake ACP agent, registered with --executors) run by start_run in a workspace of a
// granted --workspace-root, and refused workspaces. Every journal the run leaves must
// verify.
func TestConformanceTypeScriptSDK(t *testing.T) {
	node := nodeClients(t)
	schemapinDir, err := filepath.Abs(schemaVectorDir)
	if err != nil {
		t.Fatal(err)
	}
	fake := confFakeAgent(t)
	for _, version := range conformanceVersions {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			confRunSDK(t, node, fake, schemapinDir, version, confStdio)
		})
	}
}

// TestConformanceTypeScriptSDKHTTP runs the same checks over Streamable HTTP with the
// SDK's StreamableHTTPClientTransport, against one symbi mcp --http: with --auth-tokens at
// each protocol version — the client sends its bearer token in a header, as configured
// clients do; a client without a token, or with a wrong one, cannot connect (401); a
// second caller's token cannot use the first's session and is denied its runs
// (access_denied, validated by the SDK like every result) — and without authentication
// (the loopback caller anonymous) at the newest version. Every run names its caller. The
// cancelled runs must have ended while the server kept serving; the server must then stop
// cleanly on SIGTERM.
func TestConformanceTypeScriptSDKHTTP(t *testing.T) {
	node := nodeClients(t)
	schemapinDir, err := filepath.Abs(schemaVectorDir)
	if err != nil {
		t.Fatal(err)
	}
	fake := confFakeAgent(t)
	for _, version := range conformanceVersions {
		t.Run("token/"+version, func(t *testing.T) {
			t.Parallel()
			confRunSDK(t, node, fake, schemapinDir, version, confHTTPTokens)
		})
	}
	version := conformanceVersions[len(conformanceVersions)-1]
	t.Run("anonymous/"+version, func(t *testing.T) {
		t.Parallel()
		confRunSDK(t, node, fake, schemapinDir, version, confHTTPAnonymous)
	})
}

// confGatePolicy is the TypeScript SDK suite's human gate (docs/runs.md, "Human approval
// gates"): every answer naming CUSTOMER ACME — the model's answer to "review:NAME" —
// waits for approve_run.
const confGatePolicy = `@gate("human") @id("conformance-review")
forbid (principal, action == Action::"respond", resource) when { context.response like "*CUSTOMER ACME*" };
`

// confTransport is how sdk-client.mjs reaches symbi.
type confTransport int

const (
	confStdio         confTransport = iota // it starts symbi mcp itself
	confHTTPTokens                         // symbi mcp --http --auth-tokens, callers alice and bob
	confHTTPAnonymous                      // symbi mcp --http on loopback without authentication
)

// confChecks are the checks sdk-client.mjs must run over every transport.
var confChecks = []string{"initialize", "tools/list", "invoke_agent/ok", "list_agents/ok", "parse_dsl/ok",
	"get_agent_dsl/ok", "get_agents_md/ok", "verify_schema/ok",
	"start_run/ok", "run_events/long poll", "run_events/ok", "run_events/withheld", "run_status/ok", "resolve_run/ok", "cancel_run/ok",
	"list_runs/ok", "list_runs/filters", "resolve_run/bad leaves the run running",
	"resources/list", "resources/read", "resources/read unknown", "resources/templates/list",
	"resources/read run", "resources/read unknown run", "resources/subscribe", "resources/unsubscribe", "resources/subscribe unknown run",
	"progress", "cancel", "ping", "logging/setLevel", "still serving",
	"delegated/list_agents", "delegated/start_run", "delegated/run_events", "delegated/run_status",
	"delegated/resources/read run", "delegated/list_runs", "invoke_agent/bad delegated agent",
	"start_run/bad workspace outside every root", "start_run/bad relative workspace",
	"start_run/bad workspace a symbolic link out of the root",
	"gate/invoke_agent approval_required", "gate/run_status awaiting_approval", "gate/run_events withheld", "gate/cancel_run held"}

// confApproverChecks are the human gate's decisions, run where someone may approve the
// client's runs: over stdio the client itself, over HTTP with tokens the other caller.
var confApproverChecks = []string{"gate/approve_run approve", "gate/approve_run reject"}

// confHTTPChecks are the further checks it must run over HTTP, and
// confTokenChecks those with --auth-tokens.
var (
	confHTTPChecks  = []string{"http/session", "http/terminate session", "http/gate approve_run own run access_denied"}
	confTokenChecks = []string{"http/no token", "http/wrong token", "http/no token, OAuth client",
		"http/session bound to its caller", "http/other caller connects",
		"http/other caller run_status access_denied", "http/other caller run_events access_denied",
		"http/other caller cancel_run access_denied", "http/other caller resolve_run access_denied",
		"http/other caller approve_run not awaiting approval", "http/approve_run own run access_denied",
		"http/other caller resources denied", "http/other caller list_runs", "http/gate other caller run_status approval.text"}
)

// confRunSDK runs sdk-client.mjs at version over transport against a fresh project with
// the delegated agent (the fake ACP agent bin), and requires every check to pass and the
// required ones to have run.
func confRunSDK(t *testing.T, node, fake, schemapinDir, version string, transport confTransport) {
	confRunSDKScript(t, "sdk-client.mjs", node, fake, schemapinDir, version, transport)
}

// confRunSDKScript is confRunSDK with script, sdk-client.mjs or a script that runs it
// (onerror.mjs), whose further checks are required too.
func confRunSDKScript(t *testing.T, script, node, fake, schemapinDir, version string, transport confTransport, further ...string) {
	dir := newE2EProject(t)
	model := conformanceModel(t)
	d := confDelegate(t, fake, dir)
	writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), confGatePolicy)
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"),
		"OPENAI_BASE_URL": model.URL(), "CHAT_MODEL": "loopback-test", "FAKE_ACP_SCRIPT": d.Script}
	cfg := map[string]any{"project": dir, "protocolVersion": version, "schemapin": schemapinDir, "delegated": d}
	var srv *confHTTPServer
	required := slices.Concat(confChecks, further)
	switch transport {
	case confStdio:
		cfg["symbi"], cfg["args"], cfg["env"] = symbiBin, d.Args, env
		required = slices.Concat(required, confApproverChecks)
	case confHTTPTokens:
		tokens := filepath.Join(t.TempDir(), "tokens")
		alice, bob := confTokenAdd(t, tokens, "alice"), confTokenAdd(t, tokens, "bob")
		srv = confServeHTTP(t, dir, env, append([]string{"--auth-tokens", tokens}, d.Args...))
		cfg["transport"], cfg["url"], cfg["token"], cfg["caller"], cfg["callerAuth"] = "http", srv.url, alice, "alice", "token"
		cfg["other"] = map[string]string{"caller": "bob", "token": bob}
		required = slices.Concat(required, confHTTPChecks, confTokenChecks, confApproverChecks)
	case confHTTPAnonymous:
		srv = confServeHTTP(t, dir, env, d.Args)
		cfg["transport"], cfg["url"], cfg["caller"], cfg["callerAuth"] = "http", srv.url, "anonymous", "none"
		required = slices.Concat(required, confHTTPChecks)
	}
	raw, _ := json.Marshal(cfg)
	ran := confRunChecks(t, node, script, raw, 10*time.Minute)
	for _, want := range required {
		if !ran[want] {
			t.Errorf("check %q did not run", want)
		}
	}
	for _, tool := range conformanceTools {
		bad := 0
		for c := range ran {
			if strings.HasPrefix(c, tool+"/bad ") {
				bad++
			}
		}
		if bad == 0 {
			t.Errorf("no bad-argument check of %s ran; every tool has at least one", tool)
		}
	}
	// Two runs of "hang": invoke_agent's, cancelled through an AbortSignal, and
	// start_run's, cancelled with cancel_run. Over HTTP both must have ended while the
	// server still serves; it then stops on SIGTERM, and every journal still verifies.
	checkConformanceJournals(t, dir, 2)
	if srv != nil {
		srv.stop(t)
		verifyJournals(t, dir)
	}
}

// confTokenAdd makes a bearer token for caller with symbi token add, its hash appended to
// the token file, and returns it.
func confTokenAdd(t *testing.T, file, caller string) string {
	t.Helper()
	out, err := exec.Command(symbiBin, "token", "add", "--file", file, caller).Output()
	token := strings.TrimSpace(string(out))
	if err != nil || token == "" {
		t.Fatalf("symbi token add %s: %v: %q", caller, err, out)
	}
	return token
}

// confHTTPServer is a symbi mcp --http serving on a loopback port the system chose.
type confHTTPServer struct {
	url    string // its MCP endpoint, http://127.0.0.1:PORT/mcp
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{} // closed once the process has exited, with err
	err    error
}

// confServingURL matches the URL of symbi mcp --http's "serving" log line.
var confServingURL = regexp.MustCompile(`msg=serving .*\bhttp=(http://127\.0\.0\.1:[0-9]+/mcp)\b`)

// confURLWriter keeps what the server logs and sends the URL of its serving line, once.
type confURLWriter struct {
	log   *syncbuf.Buffer
	url   chan string
	found bool // exec.Cmd writes from one goroutine
}

func (w *confURLWriter) Write(p []byte) (int, error) {
	n, err := w.log.Write(p)
	if !w.found {
		if m := confServingURL.FindStringSubmatch(w.log.String()); m != nil {
			w.found = true
			w.url <- m[1]
		}
	}
	return n, err
}

// confServeHTTP starts symbi mcp --project dir --http 127.0.0.1:0 with env and the further
// flags args, and waits for the URL it serves at (from its log). The test's cleanup kills
// a server still running.
func confServeHTTP(t *testing.T, dir string, env map[string]string, args []string) *confHTTPServer {
	t.Helper()
	s := &confHTTPServer{stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(symbiBin, append([]string{"mcp", "--project", dir, "--http", "127.0.0.1:0"}, args...)...)
	for k, v := range env {
		s.cmd.Env = append(s.cmd.Env, k+"="+v)
	}
	w := &confURLWriter{log: s.stderr, url: make(chan string, 1)}
	s.cmd.Stderr = w
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("symbi mcp --http stderr:\n%s", s.stderr.String())
		}
	})
	select {
	case s.url = <-w.url:
	case <-s.done:
		t.Fatalf("symbi mcp --http exited before serving: %v\n%s", s.err, s.stderr.String())
	case <-time.After(hangGuard):
		t.Fatalf("symbi mcp --http logged no serving line\n%s", s.stderr.String())
	}
	return s
}

// stop ends the server with SIGTERM, as an operator does, and requires it to exit 0.
func (s *confHTTPServer) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(hangGuard):
		t.Fatalf("symbi mcp --http did not exit on SIGTERM\n%s", s.stderr.String())
	}
	if s.err != nil {
		t.Errorf("symbi mcp --http, stopped with SIGTERM: %v", s.err)
	}
}

// conformanceTools are symbi's tools, each with checks of good and bad arguments.
var conformanceTools = []string{"approve_run", "cancel_run", "get_agent_dsl", "get_agents_md", "invoke_agent", "list_agents", "list_runs",
	"parse_dsl", "resolve_run", "run_events", "run_status", "start_run", "verify_schema"}

// checkConformanceJournals requires hangs journals of runs of "hang", waits for each to
// finish and requires it to end with terminated, reason cancelled, after the model had
// the request; then every journal of dir must verify complete.
func checkConformanceJournals(t *testing.T, dir string, hangs int) {
	t.Helper()
	var hang []string
	for _, f := range journals(t, dir) {
		if recs := records(t, f); len(recs) > 0 && recs[0]["data"].(map[string]any)["prompt"] == "hang" {
			hang = append(hang, f)
		}
	}
	if len(hang) != hangs {
		t.Fatalf("%d journals of cancelled runs, want %d", len(hang), hangs)
	}
	for _, f := range hang {
		// The run is owned by the server: it finishes after the call was cancelled, and
		// the server finishes it before exiting when the client closes. Wait for the
		// record.
		deadline := time.Now().Add(hangGuard)
		for lastRecordType(t, f) != "terminated" && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		recs := records(t, f)
		if got := types(recs); strings.Join(got, ",") != "started,inference_requested,inference_finished,terminated" {
			t.Fatalf("cancelled run's records %v", got)
		}
		if r := recs[3]["data"].(map[string]any)["reason"]; r != "cancelled" {
			t.Errorf("cancelled run's terminated reason %v, want cancelled", r)
		}
	}
	verifyJournals(t, dir)
}

// verifyJournals requires every journal of dir to verify complete.
func verifyJournals(t *testing.T, dir string) {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(dir, ".symbiont", "governed", "audit-signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.NewKeyFromSeed(key).Public().(ed25519.PublicKey)
	for _, f := range journals(t, dir) {
		if rep := journal.Verify(f, pub, journal.VerifyOptions{}); rep.ExitCode() != 0 {
			t.Errorf("%s does not verify complete: %+v", filepath.Base(f), rep)
		}
	}
}

// inspector runs the MCP Inspector in --cli mode against symbi mcp on dir and returns its
// exit code, stdout and stderr.
func inspector(t *testing.T, node, dir string, model *loopback.Server, args ...string) (int, []byte, string) {
	t.Helper()
	return confInspector(t, node, dir, []string{"OPENAI_BASE_URL=" + model.URL(), "CHAT_MODEL=loopback-test"}, nil, args...)
}

// confInspector is inspector with the server's environment env (KEY=VALUE, given with
// the Inspector's -e) and symbi mcp's further flags serverArgs. The Inspector starts
// symbi through outOfReachScript (see there); once the Inspector has exited,
// confInspector waits for the server to exit too.
func confInspector(t *testing.T, node, dir string, env, serverArgs []string, args ...string) (int, []byte, string) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "server.pid")
	argv := []string{"--cli", "-e", "SYMBI_SERVER_PID_FILE=" + pidFile}
	for _, kv := range env {
		argv = append(argv, "-e", kv)
	}
	argv = append(append(argv, outOfReachScript, "mcp", "--project", dir), serverArgs...)
	code, out, stderr := runInspectorCLI(t, node, append(argv, args...))
	if b, err := os.ReadFile(pidFile); err == nil {
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("the server's pid file holds %q", b)
		}
		waitExited(t, pid)
	}
	return code, out, stderr
}

// outOfReachScript is the path of a shell script (written by writeOutOfReach) that
// starts symbi with its arguments and the script's own stdin, stdout and stderr, writes
// symbi's pid to $SYMBI_SERVER_PID_FILE, and waits for it. The Inspector, once it has its
// answer, closes its server's input, then sends SIGTERM after 2 s and SIGKILL after 4 s,
// whether or not the server has finished. A server whose run is in flight when its input
// closes cancels the run and writes the run's last records before exiting; told again
// to stop, it hurries (TestE2EShutdownCancelsAsyncRuns and TestE2EDelegatedShutdown test
// both, with the client's timing). On a loaded machine even that can take longer than the
// Inspector waits, and a server killed by it would leave a run that the next invocation
// finds abandoned. The Inspector's timing is not under test here: its signals reach only
// the script, the server sees its input close and runs its own shutdown, and
// confInspector waits for it to exit.
var outOfReachScript string

// writeOutOfReach writes outOfReachScript beside symbi (in TestMain, before any test can
// fork a process that might hold the new file open).
func writeOutOfReach(dir string) error {
	outOfReachScript = filepath.Join(dir, "symbi-out-of-reach")
	// A command started with & by a non-interactive shell has its stdin replaced by
	// /dev/null before its own redirections: the script's stdin is kept on fd 3 first.
	script := "#!/bin/sh\nexec 3<&0\n" + shellQuote(symbiBin) + ` "$@" <&3 3<&- &` +
		"\necho $! > \"$SYMBI_SERVER_PID_FILE\"\nexec 3<&-\nwait $!\n"
	return os.WriteFile(outOfReachScript, []byte(script), 0o755)
}

// waitExited waits until the process pid has exited.
func waitExited(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); proctest.Alive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("the server %d did not exit", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runInspectorCLI runs the MCP Inspector's CLI with argv (within 5 minutes) and returns its
// exit code, stdout and stderr.
func runInspectorCLI(t *testing.T, node string, argv []string) (int, []byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli := filepath.Join("node_modules", "@modelcontextprotocol", "inspector", "cli", "build", "cli.js")
	cmd := exec.CommandContext(ctx, node, append([]string{cli}, argv...)...)
	cmd.Dir = conformanceDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("inspector: %v", err)
		}
		code = ee.ExitCode()
	}
	return code, out, stderr.String()
}

// TestConformanceInspectorCLI drives symbi with the MCP Inspector's CLI mode, as a person
// trying a server would: list and call tools (good and bad arguments), list and read
// resources and resource templates. Each invocation is its own server process on the
// same project: a run begun by one is answered for by the next, from the ledger.
func TestConformanceInspectorCLI(t *testing.T) {
	t.Parallel() // its own project, model and servers: the Inspector's node start-ups overlap
	node := nodeClients(t)
	dir := newE2EProject(t)
	model := conformanceModel(t)
	confInspectorSuite(t, dir, func(t *testing.T, args ...string) (int, []byte, string) {
		return inspector(t, node, dir, model, args...)
	}, nil)
}

// confInspect runs one Inspector CLI invocation with args (its --method and the rest)
// against symbi and returns its exit code, stdout and stderr.
type confInspect func(t *testing.T, args ...string) (int, []byte, string)

// confInspectorSuite is TestConformanceInspectorCLI's checks on the project dir, each
// invocation made with inspect. With shared nil each invocation starts its own server
// (stdio), which cancels the runs in flight when it exits; with shared, one server serves
// every invocation (HTTP) as the caller *shared: a run start_run leaves running is still
// running for the next invocation, which cancels it.
func confInspectorSuite(t *testing.T, dir string, inspect confInspect, shared *confCaller) {
	caller := confCaller{"stdio", "stdio"}
	if shared != nil {
		caller = *shared
	}
	pem, err := os.ReadFile(filepath.Join(schemaVectorDir, "signer.pub.pem"))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := os.ReadFile(filepath.Join(schemaVectorDir, "schema.signed.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The Inspector parses a --tool-arg value as JSON when it can, so a string that is
	// JSON text is given as a JSON string literal.
	schemaArg, _ := json.Marshal(string(schema))
	// run tries one Inspector invocation as a subtest: it must exit 0 and print a result
	// that passes check.
	run := func(name string, args []string, check func(r inspectorResult) error) {
		confRunInspector(t, inspect, name, args, check)
	}
	var answered string // the run id of invoke_agent's answer
	for _, tc := range []struct {
		name  string
		args  []string
		check func(r inspectorResult) error
	}{
		{"tools/list", []string{"--method", "tools/list"}, func(r inspectorResult) error {
			var names []string
			for _, tool := range r.Tools {
				names = append(names, tool.Name)
			}
			sort.Strings(names)
			if got := strings.Join(names, ","); got != strings.Join(conformanceTools, ",") {
				return fmt.Errorf("tools %s", got)
			}
			return nil
		}},
		{"invoke_agent", []string{"--method", "tools/call", "--tool-name", "invoke_agent", "--tool-arg", "agent=helper", "prompt=hello"}, func(r inspectorResult) error {
			if r.IsError || len(r.Content) != 1 || r.Content[0].Text != "loopback answer: hello" {
				return fmt.Errorf("result %+v", r)
			}
			a, _ := r.StructuredContent["audit"].(map[string]any)
			if a == nil || a["records"] != 5.0 {
				return fmt.Errorf("audit %v", r.StructuredContent["audit"])
			}
			answered, _ = a["run_id"].(string)
			return nil
		}},
		{"invoke_agent denied", []string{"--method", "tools/call", "--tool-name", "invoke_agent", "--tool-arg", "agent=helper", "prompt=leak"}, toolError("policy_denied")},
		{"invoke_agent unknown", []string{"--method", "tools/call", "--tool-name", "invoke_agent", "--tool-arg", "agent=nobody", "prompt=x"}, toolError("unknown_agent")},
		{"invoke_agent non-string prompt", []string{"--method", "tools/call", "--tool-name", "invoke_agent", "--tool-arg", "agent=helper", "prompt=42"}, toolError("invalid_request")},
		{"list_agents", []string{"--method", "tools/call", "--tool-name", "list_agents"}, func(r inspectorResult) error {
			if agents, _ := r.StructuredContent["agents"].([]any); r.IsError || len(agents) == 0 {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		}},
		{"list_agents unknown argument", []string{"--method", "tools/call", "--tool-name", "list_agents", "--tool-arg", "x=1"}, toolError("invalid_request")},
		{"parse_dsl", []string{"--method", "tools/call", "--tool-name", "parse_dsl", "--tool-arg", "file=agents/helper.symbi"}, func(r inspectorResult) error {
			if r.IsError || r.StructuredContent["valid"] != true {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		}},
		{"parse_dsl no argument", []string{"--method", "tools/call", "--tool-name", "parse_dsl"}, toolError("invalid_request")},
		{"get_agent_dsl", []string{"--method", "tools/call", "--tool-name", "get_agent_dsl", "--tool-arg", "agent=helper"}, func(r inspectorResult) error {
			if r.IsError || r.StructuredContent["file"] != "agents/helper.symbi" {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		}},
		{"get_agent_dsl unknown", []string{"--method", "tools/call", "--tool-name", "get_agent_dsl", "--tool-arg", "agent=nobody"}, toolError("unknown_agent")},
		{"get_agents_md", []string{"--method", "tools/call", "--tool-name", "get_agents_md"}, func(r inspectorResult) error {
			if r.IsError || len(r.Content) != 1 || !strings.HasPrefix(r.Content[0].Text, "# Test project") {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		}},
		{"verify_schema", []string{"--method", "tools/call", "--tool-name", "verify_schema", "--tool-arg", "schema=" + string(schemaArg), "public_key_pem=" + string(pem)}, func(r inspectorResult) error {
			if r.IsError || r.StructuredContent["verified"] != true {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		}},
		{"verify_schema no key", []string{"--method", "tools/call", "--tool-name", "verify_schema", "--tool-arg", "schema=" + string(schemaArg)}, toolError("invalid_request")},
		{"resources/list", []string{"--method", "resources/list"}, func(r inspectorResult) error {
			if len(r.Resources) != 1 || r.Resources[0].URI != "file:///AGENTS.md" {
				return fmt.Errorf("resources %+v", r.Resources)
			}
			return nil
		}},
		{"resources/read", []string{"--method", "resources/read", "--uri", "file:///AGENTS.md"}, func(r inspectorResult) error {
			if len(r.Contents) != 1 || r.Contents[0].MIMEType != "text/markdown" || !strings.HasPrefix(r.Contents[0].Text, "# Test project") {
				return fmt.Errorf("contents %+v", r.Contents)
			}
			return nil
		}},
	} {
		run(tc.name, tc.args, tc.check)
	}
	readUnknown := func(name, uri string) {
		t.Run(name, func(t *testing.T) {
			code, out, stderr := inspect(t, "--method", "resources/read", "--uri", uri)
			if code == 0 || !strings.Contains(stderr, "not found") {
				t.Errorf("reading an unknown resource: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
		})
	}
	readUnknown("resources/read unknown", "file:///etc/passwd")

	// Runs. start_run's run of "hang" is cancelled when that Inspector invocation ends
	// (its server cancels the runs in flight at exit); every later invocation, another
	// server process, answers for it and for invoke_agent's run from the project ledger.
	// A shared server keeps it running until the next invocation cancels it.
	if answered == "" {
		t.Fatal("invoke_agent gave no run id")
	}
	const missing = "0190a000-0000-7000-8000-000000000000" // a well-formed run id no run has
	var started, startedJournal string
	call := func(tool string, args ...string) []string {
		argv := []string{"--method", "tools/call", "--tool-name", tool}
		if len(args) > 0 {
			argv = append(append(argv, "--tool-arg"), args...)
		}
		return argv
	}
	run("start_run", call("start_run", "agent=helper", "prompt=hang"), func(r inspectorResult) error {
		sc := r.StructuredContent
		a, _ := sc["audit"].(map[string]any)
		if r.IsError || sc["status"] != "running" || sc["agent"] != "helper" || a == nil || a["run_id"] != sc["run_id"] {
			return fmt.Errorf("result %+v", r)
		}
		started, _ = sc["run_id"].(string)
		startedJournal, _ = a["path"].(string)
		return nil
	})
	if started == "" {
		t.Fatal("start_run gave no run id")
	}
	if shared != nil {
		run("cancel_run running", call("cancel_run", "run_id="+started), func(r inspectorResult) error {
			if sc := r.StructuredContent; r.IsError || sc["already_finished"] != false || sc["status"] != "cancelled" || sc["released"] != false {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		})
	}
	// The server that ran it has finished it (terminated) before the next invocation reads
	// it: wait for the record, as a client would for its events.
	deadline := time.Now().Add(hangGuard)
	for lastRecordType(t, startedJournal) != "terminated" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if recs := records(t, startedJournal); recs[len(recs)-1]["type"] != "terminated" || recs[len(recs)-1]["data"].(map[string]any)["reason"] != "cancelled" {
		t.Fatalf("start_run's run, cancelled (by its server's exit, or by cancel_run on a shared server): records %v, want it to end terminated, reason cancelled", types(recs))
	}
	run("start_run unknown agent", call("start_run", "agent=nobody", "prompt=x"), toolError("unknown_agent"))
	run("run_events", call("run_events", "run_id="+answered, "limit=2"), func(r inspectorResult) error {
		sc := r.StructuredContent
		evs, _ := sc["events"].([]any)
		if r.IsError || len(evs) != 2 || sc["next_cursor"] != 2.0 || sc["done"] != false || sc["status"] != "completed" {
			return fmt.Errorf("result %+v", r)
		}
		for i, e := range evs {
			ev, _ := e.(map[string]any)
			if line, _ := ev["line"].(string); ev["seq"] != float64(i) || !strings.HasPrefix(line, `{"payload":`) {
				return fmt.Errorf("event %d: %v", i, ev)
			}
		}
		return nil
	})
	run("run_events limit 0", call("run_events", "run_id="+answered, "limit=0"), toolError("invalid_request"))
	run("run_events wait_ms 30001", call("run_events", "run_id="+answered, "wait_ms=30001"), toolError("invalid_request"))
	run("run_status", call("run_status", "run_id="+answered), func(r inspectorResult) error {
		sc := r.StructuredContent
		if r.IsError || sc["status"] != "completed" || sc["released"] != true || sc["text"] != "loopback answer: hello" || sc["records"] != 5.0 ||
			sc["caller"] != caller.ID || sc["caller_auth"] != caller.Auth {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	runStatusName := "run_status of the run another process started"
	if shared != nil {
		runStatusName = "run_status of the cancelled run"
	}
	run(runStatusName, call("run_status", "run_id="+started), func(r inspectorResult) error {
		if sc := r.StructuredContent; r.IsError || sc["status"] != "cancelled" || sc["released"] != false || sc["ended_at"] == nil {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	run("run_status unknown", call("run_status", "run_id="+missing), toolError("run_not_found"))
	run("cancel_run", call("cancel_run", "run_id="+started), func(r inspectorResult) error {
		if sc := r.StructuredContent; r.IsError || sc["already_finished"] != true || sc["status"] != "cancelled" {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	run("cancel_run unknown", call("cancel_run", "run_id="+missing), toolError("run_not_found"))
	run("resolve_run", call("resolve_run", "run_id="+answered, "resolution=accepted", "note=checked by the Inspector"), func(r inspectorResult) error {
		res, _ := r.StructuredContent["resolution"].(map[string]any)
		if r.IsError || r.StructuredContent["status"] != "completed" || res == nil || res["value"] != "accepted" || res["revisions"] != 1.0 {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	run("resolve_run bad resolution", call("resolve_run", "run_id="+answered, "resolution=maybe"), toolError("invalid_request"))
	run("resolve_run unknown", call("resolve_run", "run_id="+missing, "resolution=accepted"), toolError("run_not_found"))
	// approve_run's refusals (a held run approved: TestConformanceInspectorCLIHTTP). Over
	// stdio the one caller may approve its own runs, and a completed run awaits nothing;
	// over HTTP a caller may not approve a run it started.
	notAwaiting := toolError("invalid_transition")
	if shared != nil {
		notAwaiting = toolError("access_denied")
	}
	run("approve_run not awaiting approval", call("approve_run", "run_id="+answered, "decision=approve", "reason=checked"), notAwaiting)
	run("approve_run bad decision", call("approve_run", "run_id="+answered, "decision=maybe", "reason=checked"), toolError("invalid_request"))
	run("approve_run reason over 4 KiB", call("approve_run", "run_id="+answered, "decision=reject", "reason="+strings.Repeat("r", 4097)), toolError("limit_exceeded"))
	run("approve_run unknown", call("approve_run", "run_id="+missing, "decision=approve", "reason=checked"), toolError("run_not_found"))
	run("list_runs", call("list_runs", "limit=1"), func(r inspectorResult) error {
		runs, _ := r.StructuredContent["runs"].([]any)
		if r.IsError || len(runs) != 1 || runs[0].(map[string]any)["run_id"] != started ||
			runs[0].(map[string]any)["caller"] != caller.ID || runs[0].(map[string]any)["caller_auth"] != caller.Auth {
			return fmt.Errorf("result %+v", r)
		}
		if c, _ := r.StructuredContent["next_cursor"].(string); c == "" {
			return fmt.Errorf("no next_cursor: %+v", r)
		}
		return nil
	})
	run("list_runs filters", call("list_runs", "status=completed", "resolution=accepted"), func(r inspectorResult) error {
		runs, _ := r.StructuredContent["runs"].([]any)
		if r.IsError || len(runs) != 1 || runs[0].(map[string]any)["run_id"] != answered {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	run("list_runs bad cursor", call("list_runs", "after=not-a-cursor"), toolError("invalid_request"))
	run("list_runs limit 1001", call("list_runs", "limit=1001"), toolError("invalid_request"))
	run("resources/templates/list", []string{"--method", "resources/templates/list"}, func(r inspectorResult) error {
		if tt := r.ResourceTemplates; len(tt) != 1 || tt[0].URITemplate != "symbi://runs/{run_id}" || tt[0].MIMEType != "application/json" {
			return fmt.Errorf("resource templates %+v", tt)
		}
		return nil
	})
	readRun := func(name, runID, status, resolution string) {
		run(name, []string{"--method", "resources/read", "--uri", "symbi://runs/" + runID}, func(r inspectorResult) error {
			if len(r.Contents) != 1 || r.Contents[0].URI != "symbi://runs/"+runID || r.Contents[0].MIMEType != "application/json" {
				return fmt.Errorf("contents %+v", r.Contents)
			}
			var st struct {
				RunID      string `json:"run_id"`
				Status     string `json:"status"`
				Resolution *struct {
					Value string `json:"value"`
				} `json:"resolution"`
			}
			if err := json.Unmarshal([]byte(r.Contents[0].Text), &st); err != nil {
				return fmt.Errorf("contents %q: %v", r.Contents[0].Text, err)
			}
			got := ""
			if st.Resolution != nil {
				got = st.Resolution.Value
			}
			if st.RunID != runID || st.Status != status || got != resolution {
				return fmt.Errorf("run %s: status %s, resolution %q; want %s, %q", st.RunID, st.Status, got, status, resolution)
			}
			return nil
		})
	}
	readRun("resources/read run", started, "cancelled", "")
	readRun("resources/read resolved run", answered, "completed", "accepted")
	readUnknown("resources/read unknown run", "symbi://runs/"+missing)

	// Every journal the invocations left verifies complete.
	verifyJournals(t, dir)
}

// TestConformanceInspectorCLIErrors: the error results of runs that fail, through the
// Inspector CLI, whose SDK validates each against the tool's outputSchema: the model
// failing (inference_failed) and its deadline passing (timeout), each with the run's
// audit reference; a server with no provider (no_provider); the run-access policies
// refusing the caller a start (access_denied). Every journal left verifies.
func TestConformanceInspectorCLIErrors(t *testing.T) {
	t.Parallel() // its own project, model and servers: the Inspector's node start-ups overlap
	node := nodeClients(t)
	dir := newE2EProject(t)
	model := conformanceModel(t)
	withModel := func(t *testing.T, args ...string) (int, []byte, string) {
		return inspector(t, node, dir, model, args...)
	}
	noProvider := func(t *testing.T, args ...string) (int, []byte, string) {
		return confInspector(t, node, dir, nil, nil, args...)
	}
	audited := func(code string) func(r inspectorResult) error {
		return func(r inspectorResult) error {
			if err := toolError(code)(r); err != nil {
				return err
			}
			if a, _ := r.StructuredContent["audit"].(map[string]any); a == nil || a["run_id"] == nil || a["records"] == nil {
				return fmt.Errorf("a %s error without the run's audit reference: %+v", code, r.StructuredContent)
			}
			return nil
		}
	}
	for _, c := range []struct {
		name    string
		inspect confInspect
		args    []string
		check   func(r inspectorResult) error
	}{
		{"invoke_agent inference_failed", withModel, confToolCall("invoke_agent", "agent=helper", "prompt=fail"), audited("inference_failed")},
		{"invoke_agent timeout", withModel, confToolCall("invoke_agent", "agent=slow", "prompt=hang"), audited("timeout")},
		{"invoke_agent no_provider", noProvider, confToolCall("invoke_agent", "agent=helper", "prompt=x"), toolError("no_provider")},
		{"start_run no_provider", noProvider, confToolCall("start_run", "agent=helper", "prompt=x"), toolError("no_provider")},
	} {
		confRunInspector(t, c.inspect, c.name, c.args, c.check)
	}
	writeFile(t, filepath.Join(dir, "policies", "access", "start.cedar"), `@id("no-starting") forbid (principal, action == Action::"start_run", resource);`+"\n")
	for _, tool := range []string{"invoke_agent", "start_run"} {
		confRunInspector(t, withModel, tool+" access_denied", confToolCall(tool, "agent=helper", "prompt=x"), func(r inspectorResult) error {
			if err := toolError("access_denied")(r); err != nil {
				return err
			}
			if txt := r.Content[0].Text; !strings.Contains(txt, "no-starting") {
				return fmt.Errorf("the denial does not name the deciding policy: %s", txt)
			}
			return nil
		})
	}
	verifyJournals(t, dir)
}

// confCaller is who a server names as a client's caller, and how it was authenticated.
type confCaller struct{ ID, Auth string }

// confInspectorURL runs the MCP Inspector in --cli mode against the Streamable HTTP
// server at url (--transport http) with the HTTP headers ("Name: value", each given
// with --header) and returns its exit code, stdout and stderr.
func confInspectorURL(t *testing.T, node, url string, headers []string, args ...string) (int, []byte, string) {
	t.Helper()
	argv := []string{"--cli", url, "--transport", "http"}
	for _, h := range headers {
		argv = append(argv, "--header", h)
	}
	return runInspectorCLI(t, node, append(argv, args...))
}

// confRunInspector tries one Inspector invocation (inspect with args) as the subtest name:
// it must exit 0 and print a result that passes check.
func confRunInspector(t *testing.T, inspect confInspect, name string, args []string, check func(r inspectorResult) error) {
	t.Run(name, func(t *testing.T) {
		code, out, stderr := inspect(t, args...)
		if code != 0 {
			t.Fatalf("inspector exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
		var r inspectorResult
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("inspector printed %q: %v", out, err)
		}
		if err := check(r); err != nil {
			t.Error(err)
		}
	})
}

// TestConformanceInspectorCLIHTTP is TestConformanceInspectorCLI over Streamable HTTP:
// the Inspector CLI with --transport http and the caller's bearer token in --header,
// every invocation a session of one symbi mcp --http --auth-tokens, the caller alice. A
// run start_run leaves running stays running for the next invocation, which cancels it.
// Then the delegated agent (the fake ACP agent, --executors, --workspace-root): listed,
// refused invoke_agent and workspaces outside the roots, and a run begun, followed with
// long polls to its end and read, all through the Inspector. Human gates: two of alice's
// answers held (confGatePolicy), one approved and one rejected by bob with approve_run. An
// invocation without a token or with a wrong one fails (401); another caller, bob, is denied alice's run
// (access_denied) and lists only its own. The server then stops on SIGTERM and every
// journal verifies.
func TestConformanceInspectorCLIHTTP(t *testing.T) {
	t.Parallel() // its own project, model and servers: the Inspector's node start-ups overlap
	node := nodeClients(t)
	dir := newE2EProject(t)
	model := conformanceModel(t)
	d := confDelegate(t, confFakeAgent(t), dir)
	tokens := filepath.Join(t.TempDir(), "tokens")
	alice, bob := confTokenAdd(t, tokens, "alice"), confTokenAdd(t, tokens, "bob")
	writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), confGatePolicy)
	srv := confServeHTTP(t, dir, map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"),
		"OPENAI_BASE_URL": model.URL(), "CHAT_MODEL": "loopback-test", "FAKE_ACP_SCRIPT": d.Script},
		append([]string{"--auth-tokens", tokens}, d.Args...))
	as := func(token string) confInspect {
		return func(t *testing.T, args ...string) (int, []byte, string) {
			var headers []string
			if token != "" {
				headers = []string{"Authorization: Bearer " + token}
			}
			return confInspectorURL(t, node, srv.url, headers, args...)
		}
	}
	confInspectorSuite(t, dir, as(alice), &confCaller{"alice", "token"})

	// The delegated agent, alice's run of it followed through the Inspector alone.
	inspect := as(alice)
	confRunInspector(t, inspect, "delegated/list_agents", confToolCall("list_agents"), d.listed)
	confRunInspector(t, inspect, "delegated/invoke_agent", confToolCall("invoke_agent", "agent="+d.Agent, "prompt=x"), d.refusedInvoke)
	for _, bad := range d.badWorkspaces() {
		confRunInspector(t, inspect, "delegated/start_run workspace "+bad.name, confToolCall("start_run", "agent="+d.Agent, "prompt=x", "workspace="+bad.workspace), bad.check)
	}
	var run string
	confRunInspector(t, inspect, "delegated/start_run", confToolCall("start_run", "agent="+d.Agent, "prompt="+d.Prompt, "workspace="+d.Workspace), func(r inspectorResult) error {
		sc := r.StructuredContent
		if a, _ := sc["audit"].(map[string]any); r.IsError || sc["status"] != "running" || sc["agent"] != d.Agent || a == nil || a["run_id"] != sc["run_id"] {
			return fmt.Errorf("result %+v", r)
		}
		run, _ = sc["run_id"].(string)
		return nil
	})
	if run == "" {
		t.Fatal("start_run gave no run id")
	}
	// Long polls, each its own invocation and session, until the run is done.
	t.Run("delegated/run_events long poll", func(t *testing.T) {
		cursor, polls := 0.0, 0
		for done := false; !done; polls++ {
			if polls == 100 {
				t.Fatalf("run %s not done after %d polls", run, polls)
			}
			code, out, stderr := inspect(t, confToolCall("run_events", "run_id="+run, fmt.Sprintf("after=%d", int(cursor)), "wait_ms=30000", "limit=1000")...)
			var r inspectorResult
			if code != 0 || json.Unmarshal(out, &r) != nil || r.IsError {
				t.Fatalf("inspector exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			cursor, _ = r.StructuredContent["next_cursor"].(float64)
			done, _ = r.StructuredContent["done"].(bool)
		}
		t.Logf("%d events in %d polls", int(cursor), polls)
	})
	confRunInspector(t, inspect, "delegated/run_status", confToolCall("run_status", "run_id="+run), d.completedStatus(confCaller{"alice", "token"}))
	confRunInspector(t, inspect, "delegated/run_events", confToolCall("run_events", "run_id="+run, "limit=1000"), d.completedEvents)
	confRunInspector(t, inspect, "delegated/resources/read run", []string{"--method", "resources/read", "--uri", "symbi://runs/" + run}, d.completedResource(run))
	confRunInspector(t, inspect, "delegated/list_runs", confToolCall("list_runs", "agent="+d.Agent), d.runsListed(run))

	// Human gates: alice's answers naming the customer wait for approve_run; bob, the
	// other caller, approves one and rejects another, all through the Inspector.
	held := func(name, prompt string) string {
		var id string
		confRunInspector(t, inspect, name+"/start_run", confToolCall("start_run", "agent=helper", "prompt="+prompt), func(r inspectorResult) error {
			if r.IsError || r.StructuredContent["status"] != "running" {
				return fmt.Errorf("result %+v", r)
			}
			id, _ = r.StructuredContent["run_id"].(string)
			return nil
		})
		if id == "" {
			t.Fatalf("%s: start_run gave no run id", name)
		}
		// The run reaches the gate once its answer is judged: follow its status there.
		t.Run(name+"/run_status awaiting_approval", func(t *testing.T) {
			deadline := time.Now().Add(hangGuard)
			for {
				code, out, stderr := inspect(t, confToolCall("run_status", "run_id="+id)...)
				var r inspectorResult
				if code != 0 || json.Unmarshal(out, &r) != nil || r.IsError {
					t.Fatalf("inspector exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
				}
				switch st := r.StructuredContent; {
				case st["status"] == "awaiting_approval":
					if a, _ := st["approval"].(map[string]any); a == nil || a["gate"] != "conformance-review" {
						t.Fatalf("awaiting approval: %v", st)
					}
					return
				case st["status"] != "running" || time.Now().After(deadline):
					t.Fatalf("run %s: %v, want it awaiting approval", id, st)
				}
			}
		})
		return id
	}
	approved := held("gate approve", "review:inspector")
	confRunInspector(t, as(bob), "gate approve/approve_run", confToolCall("approve_run", "run_id="+approved, "decision=approve", "reason=checked by the Inspector"), func(r inspectorResult) error {
		st := r.StructuredContent
		a, _ := st["approval"].(map[string]any)
		if r.IsError || st["status"] != "completed" || st["released"] != true || st["text"] != "CUSTOMER ACME: inspector" || a == nil ||
			a["decision"] != "approve" || a["approver"] != "bob" || a["approver_auth"] != "token" || a["reason"] != "checked by the Inspector" {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	confRunInspector(t, as(bob), "gate approve/approve_run again", confToolCall("approve_run", "run_id="+approved, "decision=reject", "reason=checked"), toolError("invalid_transition"))
	confRunInspector(t, inspect, "gate approve/run_status", confToolCall("run_status", "run_id="+approved), func(r inspectorResult) error {
		if st := r.StructuredContent; r.IsError || st["status"] != "completed" || st["text"] != "CUSTOMER ACME: inspector" {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	rejected := held("gate reject", "review:rejected")
	confRunInspector(t, as(bob), "gate reject/approve_run", confToolCall("approve_run", "run_id="+rejected, "decision=reject", "reason=names a customer"), func(r inspectorResult) error {
		st := r.StructuredContent
		reason, _ := st["reason"].(string)
		if r.IsError || st["status"] != "policy_denied" || st["released"] != false || st["text"] != nil ||
			!strings.Contains(reason, "rejected by bob: names a customer") || strings.Contains(fmt.Sprint(st), "CUSTOMER ACME") {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})

	// Without a token, or with a wrong one, the Inspector cannot connect; bob is denied
	// alice's run and lists only its own runs (none).
	// (The Inspector prints the 401's body, not its status: sdk-client.mjs checks the
	// status.)
	for _, c := range []struct{ name, token, body string }{
		{"no token", "", "no bearer token"},
		{"wrong token", "symbi_not-a-token", "invalid token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, stderr := as(c.token)(t, "--method", "tools/list")
			if code == 0 || !strings.Contains(stderr, "Failed to connect to MCP server: Streamable HTTP error: Error POSTing to endpoint: "+c.body) {
				t.Errorf("want a failure to connect, %q: exit %d\nstdout:\n%s\nstderr:\n%s", c.body, code, out, stderr)
			}
		})
	}
	confRunInspector(t, as(bob), "other caller run_status", confToolCall("run_status", "run_id="+run), func(r inspectorResult) error {
		if err := toolError("access_denied")(r); err != nil {
			return err
		}
		if txt := r.Content[0].Text; !strings.Contains(txt, `"bob"`) || !strings.Contains(txt, run) {
			return fmt.Errorf("the denial does not name the caller and the run: %s", txt)
		}
		return nil
	})
	confRunInspector(t, as(bob), "other caller list_runs", confToolCall("list_runs"), func(r inspectorResult) error {
		if runs, _ := r.StructuredContent["runs"].([]any); r.IsError || len(runs) != 0 {
			return fmt.Errorf("bob lists %+v", r)
		}
		return nil
	})
	t.Run("other caller resources/read", func(t *testing.T) {
		code, out, stderr := as(bob)(t, "--method", "resources/read", "--uri", "symbi://runs/"+run)
		if code == 0 || !strings.Contains(stderr, "access_denied") {
			t.Errorf("want access_denied: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
	})

	srv.stop(t)
	verifyJournals(t, dir)
}

// TestConformanceInspectorCLIDelegated drives a delegated agent with the MCP Inspector's
// CLI mode, the server started with --executors (the fake ACP agent) and
// --workspace-root, each invocation its own server process on the same project: list
// the agent, be refused invoke_agent, start it in a workspace, be refused workspaces
// outside the roots. The run start_run begins is cancelled when that invocation's server
// exits (its agent never finishes its turn) and the next invocations answer for it from
// the ledger; a run that completes is run with the go-sdk client and then read through
// the Inspector: run_status with its text, run_events, the run resource.
func TestConformanceInspectorCLIDelegated(t *testing.T) {
	t.Parallel() // its own project, model and servers: the Inspector's node start-ups overlap
	node := nodeClients(t)
	dir := newE2EProject(t)
	model := conformanceModel(t)
	d := confDelegate(t, confFakeAgent(t), dir)
	// run tries one Inspector invocation, its server's agent running script, as a subtest:
	// it must exit 0 and print a result that passes check.
	run := func(name, script string, args []string, check func(r inspectorResult) error) {
		t.Run(name, func(t *testing.T) {
			env := []string{"OPENAI_BASE_URL=" + model.URL(), "CHAT_MODEL=loopback-test", "FAKE_ACP_SCRIPT=" + script}
			code, out, stderr := confInspector(t, node, dir, env, d.Args, args...)
			if code != 0 {
				t.Fatalf("inspector exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			var r inspectorResult
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("inspector printed %q: %v", out, err)
			}
			if err := check(r); err != nil {
				t.Error(err)
			}
		})
	}
	run("list_agents", d.Script, confToolCall("list_agents"), d.listed)
	run("invoke_agent delegated", d.Script, confToolCall("invoke_agent", "agent="+d.Agent, "prompt=x"), d.refusedInvoke)
	var started, startedJournal string
	run("start_run", d.Hang, confToolCall("start_run", "agent="+d.Agent, "prompt="+d.Prompt, "workspace="+d.Workspace), func(r inspectorResult) error {
		sc := r.StructuredContent
		a, _ := sc["audit"].(map[string]any)
		if r.IsError || sc["status"] != "running" || sc["agent"] != d.Agent || a == nil || a["run_id"] != sc["run_id"] {
			return fmt.Errorf("result %+v", r)
		}
		started, _ = sc["run_id"].(string)
		startedJournal, _ = a["path"].(string)
		return nil
	})
	if started == "" {
		t.Fatal("start_run gave no run id")
	}
	// Its server cancelled it at exit: wait for the record, as a client would for its
	// events.
	deadline := time.Now().Add(hangGuard)
	for lastRecordType(t, startedJournal) != "terminated" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if recs := records(t, startedJournal); recs[len(recs)-1]["type"] != "terminated" || recs[len(recs)-1]["data"].(map[string]any)["reason"] != "cancelled" {
		t.Fatalf("start_run's run, left running when its server exited: records %v, want it to end terminated, reason cancelled", types(recs))
	}
	for _, bad := range d.badWorkspaces() {
		run("start_run workspace "+bad.name, d.Script, confToolCall("start_run", "agent="+d.Agent, "prompt=x", "workspace="+bad.workspace), bad.check)
	}

	// A delegated run that completes, begun and followed with the go-sdk client.
	cmd := exec.Command(symbiBin, append([]string{"mcp", "--project", dir}, d.Args...)...)
	cmd.Env = append(modelEnv(model), "FAKE_ACP_SCRIPT="+d.Script)
	s := connectSymbi(t, cmd, nil)
	res := s.call(t, "start_run", map[string]any{"agent": d.Agent, "prompt": d.Prompt, "workspace": d.Workspace})
	completed, _ := res.StructuredContent.(map[string]any)["run_id"].(string)
	if res.IsError || completed == "" {
		t.Fatalf("start_run: %s", text(res))
	}
	for cursor, done := 0.0, false; !done; {
		res := s.call(t, "run_events", map[string]any{"run_id": completed, "after": cursor, "wait_ms": 30000})
		page, _ := res.StructuredContent.(map[string]any)
		if res.IsError || page == nil {
			t.Fatalf("run_events: %s", text(res))
		}
		cursor, _ = page["next_cursor"].(float64)
		done, _ = page["done"].(bool)
	}
	s.session.Close()

	run("run_status", d.Script, confToolCall("run_status", "run_id="+completed), d.completedStatus(confCaller{"stdio", "stdio"}))
	run("run_events", d.Script, confToolCall("run_events", "run_id="+completed, "limit=1000"), d.completedEvents)
	run("run_status of the cancelled run", d.Script, confToolCall("run_status", "run_id="+started), func(r inspectorResult) error {
		if sc := r.StructuredContent; r.IsError || sc["status"] != "cancelled" || sc["released"] != false || sc["agent"] != d.Agent || sc["ended_at"] == nil {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	})
	run("resources/read run", d.Script, []string{"--method", "resources/read", "--uri", "symbi://runs/" + completed}, d.completedResource(completed))
	// The refused start_runs started no run.
	run("list_runs", d.Script, confToolCall("list_runs", "agent="+d.Agent), d.runsListed(started, completed))

	// Every journal the invocations left verifies complete.
	verifyJournals(t, dir)
}

// listed checks list_agents' result: the delegated agent is listed, invocable, with its
// mode and executor.
func (d *confDelegated) listed(r inspectorResult) error {
	agents, _ := r.StructuredContent["agents"].([]any)
	for _, a := range agents {
		if e, _ := a.(map[string]any); e["name"] == d.Agent {
			if r.IsError || e["mode"] != "delegated" || e["executor"] != d.Executor || e["invocable"] != true {
				return fmt.Errorf("entry %v", e)
			}
			return nil
		}
	}
	return fmt.Errorf("%s is not listed: %+v", d.Agent, r)
}

// refusedInvoke checks invoke_agent's refusal of the delegated agent: refused_definition,
// naming start_run.
func (d *confDelegated) refusedInvoke(r inspectorResult) error {
	if err := toolError("refused_definition")(r); err != nil {
		return err
	}
	if !strings.Contains(r.Content[0].Text, "start_run") {
		return fmt.Errorf("the refusal does not name start_run: %s", r.Content[0].Text)
	}
	return nil
}

// confBadWorkspace is a workspace start_run refuses, with the check of its refusal.
type confBadWorkspace struct {
	name, workspace string
	check           func(r inspectorResult) error
}

// badWorkspaces are workspaces start_run refuses the delegated agent: each an
// invalid_request naming the rule it breaks.
func (d *confDelegated) badWorkspaces() []confBadWorkspace {
	var bad []confBadWorkspace
	for _, b := range []struct{ name, workspace, rule string }{
		{"outside every root", d.Outside, "inside a workspace root"},
		{"relative", d.Relative, "absolute workspace"},
		{"a symbolic link out of the root", d.Symlink, "inside a workspace root"},
	} {
		bad = append(bad, confBadWorkspace{b.name, b.workspace, func(r inspectorResult) error {
			if err := toolError("invalid_request")(r); err != nil {
				return err
			}
			if !strings.Contains(r.Content[0].Text, b.rule) {
				return fmt.Errorf("the error does not name rule %q: %s", b.rule, r.Content[0].Text)
			}
			return nil
		}})
	}
	return bad
}

// completedStatus checks run_status of the delegated run that completed, started by
// caller: its text is the agent's answer.
func (d *confDelegated) completedStatus(caller confCaller) func(r inspectorResult) error {
	return func(r inspectorResult) error {
		sc := r.StructuredContent
		if r.IsError || sc["status"] != "completed" || sc["released"] != true || sc["text"] != d.Answer || sc["agent"] != d.Agent ||
			sc["caller"] != caller.ID || sc["caller_auth"] != caller.Auth {
			return fmt.Errorf("result %+v", r)
		}
		return nil
	}
}

// completedEvents checks run_events of the delegated run that completed, from cursor 0:
// every event, from started and session_started to terminated, the agent's reports and
// symbi's decisions between.
func (d *confDelegated) completedEvents(r inspectorResult) error {
	sc := r.StructuredContent
	evs, _ := sc["events"].([]any)
	var got []string
	for _, e := range evs {
		ev, _ := e.(map[string]any)
		got = append(got, fmt.Sprint(ev["type"]))
	}
	all := "," + strings.Join(got, ",") + ","
	if r.IsError || sc["done"] != true || sc["status"] != "completed" || !strings.HasPrefix(all, ",started,session_started,") ||
		!strings.HasSuffix(all, ",session_finished,policy_evaluated,terminated,") {
		return fmt.Errorf("events %s: %+v", all, r)
	}
	for _, want := range []string{"agent_thought", "tool_call", "permission_decided", "fs_read", "agent_message"} {
		if !strings.Contains(all, ","+want+",") {
			return fmt.Errorf("no %s event: %s", want, all)
		}
	}
	return nil
}

// completedResource checks the run resource of the delegated run id that completed.
func (d *confDelegated) completedResource(id string) func(r inspectorResult) error {
	return func(r inspectorResult) error {
		if len(r.Contents) != 1 || r.Contents[0].URI != "symbi://runs/"+id || r.Contents[0].MIMEType != "application/json" {
			return fmt.Errorf("contents %+v", r.Contents)
		}
		var st struct {
			RunID  string `json:"run_id"`
			Status string `json:"status"`
			Text   string `json:"text"`
		}
		if err := json.Unmarshal([]byte(r.Contents[0].Text), &st); err != nil || st.RunID != id || st.Status != "completed" || st.Text != d.Answer {
			return fmt.Errorf("contents %q: %v", r.Contents[0].Text, err)
		}
		return nil
	}
}

// runsListed checks list_runs of the delegated agent: exactly the runs ids.
func (d *confDelegated) runsListed(ids ...string) func(r inspectorResult) error {
	return func(r inspectorResult) error {
		runs, _ := r.StructuredContent["runs"].([]any)
		var got []string
		for _, x := range runs {
			got = append(got, fmt.Sprint(x.(map[string]any)["run_id"]))
		}
		sort.Strings(got)
		want := slices.Sorted(slices.Values(ids))
		if r.IsError || strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("runs of %s %v, want %v", d.Agent, got, want)
		}
		return nil
	}
}

// confToolCall is the Inspector's arguments calling tool with args (KEY=VALUE).
func confToolCall(tool string, args ...string) []string {
	argv := []string{"--method", "tools/call", "--tool-name", tool}
	if len(args) > 0 {
		argv = append(append(argv, "--tool-arg"), args...)
	}
	return argv
}

// toolError checks that the Inspector printed a tool error (isError, never a protocol
// error) whose text and structured error carry code.
func toolError(code string) func(r inspectorResult) error {
	return func(r inspectorResult) error {
		if !r.IsError || len(r.Content) != 1 || !strings.HasPrefix(r.Content[0].Text, code+": ") {
			return fmt.Errorf("want a %s tool error, got %+v", code, r)
		}
		if e, _ := r.StructuredContent["error"].(map[string]any); e == nil || e["code"] != code {
			return fmt.Errorf("structuredContent.error %v, want code %s", r.StructuredContent["error"], code)
		}
		return nil
	}
}

// inspectorResult is what the Inspector CLI prints: a method's result as JSON.
type inspectorResult struct {
	Content []struct {
		Type, Text string
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	Tools             []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Resources []struct {
		URI string `json:"uri"`
	} `json:"resources"`
	ResourceTemplates []struct {
		URITemplate string `json:"uriTemplate"`
		MIMEType    string `json:"mimeType"`
	} `json:"resourceTemplates"`
	Contents []struct {
		URI, MIMEType, Text string
	} `json:"contents"`
}

// TestConformanceGoSDK is the go-sdk client at its default protocol version (2026-07-28,
// negotiated with server/discover): every tool's structuredContent — of good calls and of
// tool errors — validates against the tool's advertised outputSchema, which the go-sdk
// client itself does not check. A held answer approved with approve_run, and its
// refusals; a delegated agent's results too.
func TestConformanceGoSDK(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), confGatePolicy)
	model := conformanceModel(t)
	s := startSymbi(t, dir, modelEnv(model), nil)
	if v := s.session.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("negotiated protocol version %s, want 2026-07-28", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	list, err := s.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Resolved{}
	for _, tool := range list.Tools {
		raw, _ := json.Marshal(tool.OutputSchema)
		var sch jsonschema.Schema
		if err := json.Unmarshal(raw, &sch); err != nil {
			t.Fatalf("%s: outputSchema: %v", tool.Name, err)
		}
		if schemas[tool.Name], err = sch.Resolve(nil); err != nil {
			t.Fatalf("%s: outputSchema does not resolve: %v", tool.Name, err)
		}
	}
	pem, _ := os.ReadFile(filepath.Join(schemaVectorDir, "signer.pub.pem"))
	schema, _ := os.ReadFile(filepath.Join(schemaVectorDir, "schema.signed.json"))
	for _, tc := range []struct {
		tool    string
		args    map[string]any
		isError bool
	}{
		{"invoke_agent", map[string]any{"agent": "helper", "prompt": "hello"}, false},
		{"invoke_agent", map[string]any{"agent": "helper", "prompt": "leak"}, true},
		{"invoke_agent", map[string]any{"agent": "nobody", "prompt": "x"}, true},
		{"list_agents", map[string]any{}, false},
		{"list_agents", map[string]any{"x": 1}, true},
		{"parse_dsl", map[string]any{"content": "agent a {}"}, false},
		{"parse_dsl", map[string]any{"content": "agent a {"}, false},
		{"parse_dsl", map[string]any{}, true},
		{"get_agent_dsl", map[string]any{"agent": "helper"}, false},
		{"get_agent_dsl", map[string]any{"agent": "nobody"}, true},
		{"get_agents_md", map[string]any{}, false},
		{"verify_schema", map[string]any{"schema": string(schema), "public_key_pem": string(pem)}, false},
		{"verify_schema", map[string]any{"schema": string(schema)}, true},
	} {
		res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			t.Fatalf("%s %v: %v", tc.tool, tc.args, err)
		}
		if res.IsError != tc.isError {
			t.Errorf("%s %v: isError %v, want %v: %s", tc.tool, tc.args, res.IsError, tc.isError, text(res))
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		if err := schemas[tc.tool].Validate(v); err != nil {
			t.Errorf("%s %v: structuredContent does not match the outputSchema: %v\n%s", tc.tool, tc.args, err, raw)
		}
	}

	// The run tools, each result and each error validated the same way.
	check := func(tool string, args map[string]any, isError bool) map[string]any {
		t.Helper()
		res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s %v: %v", tool, args, err)
		}
		if res.IsError != isError {
			t.Fatalf("%s %v: isError %v, want %v: %s", tool, args, res.IsError, isError, text(res))
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		if err := schemas[tool].Validate(v); err != nil {
			t.Errorf("%s %v: structuredContent does not match the outputSchema: %v\n%s", tool, args, err, raw)
		}
		return v
	}
	id, _ := check("start_run", map[string]any{"agent": "helper", "prompt": "hello"}, false)["run_id"].(string)
	for done, polls := false, 0; !done; polls++ {
		if polls == 100 {
			t.Fatalf("run %s not done after %d long polls", id, polls)
		}
		done, _ = check("run_events", map[string]any{"run_id": id, "wait_ms": 30000, "limit": 1000}, false)["done"].(bool)
	}
	check("run_events", map[string]any{"run_id": id, "after": 2, "limit": 2}, false)
	check("run_status", map[string]any{"run_id": id}, false)
	check("resolve_run", map[string]any{"run_id": id, "resolution": "accepted", "note": "ok"}, false)
	if v := check("cancel_run", map[string]any{"run_id": id}, false); v["already_finished"] != true || v["status"] != "completed" {
		t.Errorf("cancel_run of a finished run: %v", v)
	}
	check("list_runs", map[string]any{"limit": 1}, false)
	check("list_runs", map[string]any{"resolution": "unresolved", "status": "completed"}, false)
	unknown := "0190a000-0000-7000-8000-000000000000"
	check("start_run", map[string]any{"agent": "nobody", "prompt": "x"}, true)
	check("run_events", map[string]any{"run_id": id, "limit": 0}, true)
	check("run_status", map[string]any{"run_id": unknown}, true)
	check("cancel_run", map[string]any{"run_id": unknown}, true)
	check("list_runs", map[string]any{"after": "x"}, true)
	check("resolve_run", map[string]any{"run_id": id, "resolution": "maybe"}, true)

	// A held answer (confGatePolicy): over stdio the one caller approves its own runs.
	held, _ := check("start_run", map[string]any{"agent": "helper", "prompt": "review:go-sdk"}, false)["run_id"].(string)
	for cursor := 0.0; ; {
		page := check("run_events", map[string]any{"run_id": held, "after": cursor, "wait_ms": 30000, "limit": 1000}, false)
		if page["status"] == "awaiting_approval" {
			break
		}
		if page["done"] == true {
			t.Fatalf("the held run ended: %v", page)
		}
		cursor, _ = page["next_cursor"].(float64)
	}
	check("approve_run", map[string]any{"run_id": held, "decision": "maybe", "reason": "checked"}, true)
	check("approve_run", map[string]any{"run_id": held, "decision": "approve", "reason": strings.Repeat("r", 4097)}, true)
	check("approve_run", map[string]any{"run_id": held, "decision": "approve", "reason": "checked", "request_id": "x"}, true)
	if v := check("approve_run", map[string]any{"run_id": held, "decision": "approve", "reason": "ok"}, false); v["status"] != "completed" || v["text"] != "CUSTOMER ACME: go-sdk" {
		t.Errorf("approve_run: %v", v)
	}
	check("approve_run", map[string]any{"run_id": held, "decision": "reject", "reason": "checked"}, true)
	check("approve_run", map[string]any{"run_id": unknown, "decision": "approve", "reason": "checked"}, true)

	// A delegated agent, on a server started with --executors and --workspace-root: the
	// checks above go to it from here on.
	dd := newE2EProject(t)
	d := confDelegate(t, confFakeAgent(t), dd)
	cmd := exec.Command(symbiBin, append([]string{"mcp", "--project", dd}, d.Args...)...)
	cmd.Env = append(modelEnv(model), "FAKE_ACP_SCRIPT="+d.Script)
	s = connectSymbi(t, cmd, nil)
	listed := false
	for _, a := range check("list_agents", map[string]any{}, false)["agents"].([]any) {
		if e := a.(map[string]any); e["name"] == d.Agent {
			listed = e["mode"] == "delegated" && e["executor"] == d.Executor && e["invocable"] == true
		}
	}
	if !listed {
		t.Errorf("list_agents does not list %s as delegated, executor %s", d.Agent, d.Executor)
	}
	check("invoke_agent", map[string]any{"agent": d.Agent, "prompt": "x"}, true)
	id, _ = check("start_run", map[string]any{"agent": d.Agent, "prompt": d.Prompt, "workspace": d.Workspace}, false)["run_id"].(string)
	for done := false; !done; {
		done, _ = check("run_events", map[string]any{"run_id": id, "wait_ms": 30000, "limit": 1000}, false)["done"].(bool)
	}
	if v := check("run_status", map[string]any{"run_id": id}, false); v["status"] != "completed" || v["text"] != d.Answer {
		t.Errorf("the delegated run: %v", v)
	}
	for _, ws := range []string{d.Outside, d.Relative, d.Symlink} {
		check("start_run", map[string]any{"agent": d.Agent, "prompt": "x", "workspace": ws}, true)
	}
}

// confRunChecks runs the node script with the configuration raw in the suite's directory,
// each check line it prints ({"check", "ok", "detail"}) a subtest, and returns the checks
// that ran.
func confRunChecks(t *testing.T, node, script string, raw []byte, timeout time.Duration) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, string(raw))
	cmd.Dir = conformanceDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", script, err, out, stderr.String())
	}
	ran := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c checkResult
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s printed %q: %v", script, sc.Text(), err)
		}
		ran[c.Check] = true
		t.Run(c.Check, func(t *testing.T) {
			if !c.OK {
				t.Error(c.Detail)
			} else if c.Detail != "" {
				t.Log(c.Detail)
			}
		})
	}
	return ran
}
