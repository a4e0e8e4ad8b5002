package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"symbi/internal/proctest"
	"symbi/internal/syncbuf"
)

// guard bounds every wait so that a broken fake fails a test instead of hanging it. It
// is not an expectation about speed: nothing here should take more than a fraction of it.
const guard = 2 * time.Minute

var (
	fakeBin     string
	raceEnabled bool // set by race_test.go
)

// logSink receives the SDK's diagnostics. They go through slog's default logger because
// acp-go-sdk's SetLogger is a data race: it writes a field that the connection's
// goroutines, started by the constructor, read unsynchronised. Tests run one at a time;
// each points the sink at its own buffer.
type logSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *logSink) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}

var sdkLogs = &logSink{}

// TestMain builds the fake once, into a temporary directory, as a real program.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(sdkLogs, nil)))
	dir, err := os.MkdirTemp("", "fake-acp-agent-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBin = filepath.Join(dir, "fake-acp-agent")
	args := []string{"build", "-o", fakeBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---------------------------------------------------------------------------------------
// A minimal ACP client.

type testClient struct {
	root string // fs requests outside it fail

	// permission answers session/request_permission; nil selects the allow_once option.
	permission func(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error)
	// onUpdate, if set, runs (outside the lock) before an update is noted.
	onUpdate func(acp.SessionNotification)

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	updates []acp.SessionNotification
	perms   []acp.RequestPermissionRequest
	reads   []acp.ReadTextFileRequest
	writes  []acp.WriteTextFileRequest
}

var _ acp.Client = (*testClient)(nil)

func (c *testClient) note(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

// waitFor waits until cond, called with c.mu held, holds.
func (c *testClient) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(guard)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// requests returns copies of the requests the client has served.
func (c *testClient) requests() (perms []acp.RequestPermissionRequest, reads []acp.ReadTextFileRequest, writes []acp.WriteTextFileRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(perms, c.perms...), append(reads, c.reads...), append(writes, c.writes...)
}

func (c *testClient) snapshot() []acp.SessionNotification {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]acp.SessionNotification(nil), c.updates...)
}

func (c *testClient) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	if c.onUpdate != nil {
		c.onUpdate(n)
	}
	c.note(func() { c.updates = append(c.updates, n) })
	return nil
}

func (c *testClient) RequestPermission(ctx context.Context, r acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	c.note(func() { c.perms = append(c.perms, r) })
	if c.permission != nil {
		return c.permission(ctx, r)
	}
	return selectKind(acp.PermissionOptionKindAllowOnce)(ctx, r)
}

func selectKind(kind acp.PermissionOptionKind) func(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return func(_ context.Context, r acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		for _, o := range r.Options {
			if o.Kind == kind {
				return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeSelected(o.OptionId)}, nil
			}
		}
		return acp.RequestPermissionResponse{}, fmt.Errorf("no option of kind %s", kind)
	}
}

func (c *testClient) inside(path string) error {
	rel, err := filepath.Rel(c.root, path)
	if !filepath.IsAbs(path) || err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return acp.NewInvalidParams(map[string]any{"error": "outside the workspace: " + path})
	}
	return nil
}

func (c *testClient) ReadTextFile(_ context.Context, r acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	c.note(func() { c.reads = append(c.reads, r) })
	if err := c.inside(r.Path); err != nil {
		return acp.ReadTextFileResponse{}, err
	}
	b, err := os.ReadFile(r.Path)
	if err != nil {
		return acp.ReadTextFileResponse{}, err
	}
	return acp.ReadTextFileResponse{Content: string(b)}, nil
}

func (c *testClient) WriteTextFile(_ context.Context, r acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	c.note(func() { c.writes = append(c.writes, r) })
	if err := c.inside(r.Path); err != nil {
		return acp.WriteTextFileResponse{}, err
	}
	return acp.WriteTextFileResponse{}, os.WriteFile(r.Path, []byte(r.Content), 0o644)
}

func (c *testClient) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}

func (c *testClient) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}

func (c *testClient) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}

func (c *testClient) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}

func (c *testClient) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

// ---------------------------------------------------------------------------------------
// The fake as a subprocess.

type agentProc struct {
	t      *testing.T
	dir    string // the workspace, and the fake's cwd
	record string
	cmd    *exec.Cmd
	conn   *acp.ClientSideConnection
	client *testClient
	stdin  *os.File
	done   chan struct{} // closed when the fake has been waited for

	stderr syncbuf.Buffer // the fake's stderr
	wire   syncbuf.Buffer // everything the fake wrote to stdout
	sdkLog syncbuf.Buffer // the client SDK's diagnostics
}

type startOpts struct {
	scriptInEnv bool // name the script with FAKE_ACP_SCRIPT rather than --script
}

func startAgent(t *testing.T, sc map[string]any, c *testClient) *agentProc {
	return startAgentWith(t, sc, c, startOpts{})
}

// startAgentWith writes the script (adding a record file unless it names one), starts
// the fake in its own process group and connects an SDK client to it.
func startAgentWith(t *testing.T, sc map[string]any, c *testClient, o startOpts) *agentProc {
	t.Helper()
	dir := t.TempDir()
	if c == nil {
		c = &testClient{}
	}
	c.root = dir
	p := &agentProc{t: t, dir: dir, client: c, done: make(chan struct{})}
	if _, ok := sc["record"]; !ok {
		sc["record"] = filepath.Join(dir, "record.jsonl")
	}
	p.record, _ = sc["record"].(string)
	data, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptPath, data, 0o644); err != nil {
		t.Fatal(err)
	}

	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if o.scriptInEnv {
		p.cmd = exec.Command(fakeBin)
		p.cmd.Env = append(os.Environ(), "FAKE_ACP_SCRIPT="+scriptPath)
	} else {
		p.cmd = exec.Command(fakeBin, "--script", scriptPath)
		p.cmd.Env = os.Environ()
	}
	// A race-built program sleeps a second before exiting 0, unless told not to.
	p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0")
	p.cmd.Dir = dir
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	p.stdin = inW
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	sdkLogs.set(&p.sdkLog)
	p.conn = acp.NewClientSideConnection(c, inW, io.TeeReader(outR, &p.wire))
	t.Cleanup(func() {
		defer sdkLogs.set(nil)
		p.stdin.Close()
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // the whole group: no orphans
		select {
		case <-p.done:
		case <-time.After(guard):
			t.Errorf("the fake (pid %d) did not end", p.cmd.Process.Pid)
		}
		outR.Close()
		if strings.Contains(p.stderr.String(), "DATA RACE") {
			t.Errorf("the fake has a data race:\n%s", p.stderr.String())
		}
	})
	return p
}

func ctxGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

var fsCaps = acp.ClientCapabilities{Fs: acp.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}}

func (p *agentProc) initialize(caps acp.ClientCapabilities) (acp.InitializeResponse, error) {
	return p.conn.Initialize(ctxGuard(p.t), acp.InitializeRequest{
		ProtocolVersion:    acp.ProtocolVersionNumber,
		ClientCapabilities: caps,
		ClientInfo:         &acp.Implementation{Name: "fake-acp-agent-test", Version: "0"},
	})
}

func (p *agentProc) newSession() (acp.NewSessionResponse, error) {
	return p.conn.NewSession(ctxGuard(p.t), acp.NewSessionRequest{Cwd: p.dir, McpServers: []acp.McpServer{}})
}

// handshake initializes (offering fs, not terminals) and opens a session in p.dir.
func (p *agentProc) handshake() acp.SessionId {
	p.t.Helper()
	if _, err := p.initialize(fsCaps); err != nil {
		p.t.Fatalf("initialize: %v\n%s", err, p.stderr.String())
	}
	s, err := p.newSession()
	if err != nil {
		p.t.Fatalf("session/new: %v\n%s", err, p.stderr.String())
	}
	return s.SessionId
}

func (p *agentProc) prompt(sid acp.SessionId, text string) (acp.PromptResponse, error) {
	return p.conn.Prompt(ctxGuard(p.t), acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

type promptResult struct {
	resp acp.PromptResponse
	err  error
}

func (p *agentProc) promptAsync(sid acp.SessionId, text string) <-chan promptResult {
	ch := make(chan promptResult, 1)
	go func() {
		r, err := p.prompt(sid, text)
		ch <- promptResult{r, err}
	}()
	return ch
}

func (p *agentProc) result(ch <-chan promptResult) promptResult {
	p.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(guard):
		p.t.Fatalf("the prompt did not end\n%s", p.stderr.String())
		return promptResult{}
	}
}

// wait waits for the fake to exit and returns its exit code (-1 if a signal ended it).
func (p *agentProc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(guard):
		p.t.Fatalf("the fake did not exit\n%s", p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// finish closes the fake's stdin and checks that it exits 0.
func (p *agentProc) finish() {
	p.t.Helper()
	p.stdin.Close()
	if code := p.wait(); code != 0 {
		p.t.Fatalf("the fake exited %d, want 0\n%s", code, p.stderr.String())
	}
}

// expectExit checks that the fake exits with code and says so on stderr.
func (p *agentProc) expectExit(code int, stderrHas string) {
	p.t.Helper()
	if got := p.wait(); got != code {
		p.t.Fatalf("the fake exited %d, want %d\n%s", got, code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), stderrHas) {
		p.t.Errorf("stderr lacks %q:\n%s", stderrHas, p.stderr.String())
	}
}

func (p *agentProc) events() []map[string]any {
	p.t.Helper()
	data, err := os.ReadFile(p.record)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		p.t.Fatal(err)
	}
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			p.t.Fatalf("record line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func (p *agentProc) eventsNamed(name string) []map[string]any {
	var out []map[string]any
	for _, ev := range p.events() {
		if ev["event"] == name {
			out = append(out, ev)
		}
	}
	return out
}

// waitEvent polls the record until an event of that name appears.
func (p *agentProc) waitEvent(name string) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(guard)
	for time.Now().Before(deadline) {
		if evs := p.eventsNamed(name); len(evs) > 0 {
			return evs[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.t.Fatalf("no %q event in the record\n%s", name, p.stderr.String())
	return nil
}

// describe renders an update compactly for comparisons.
func describe(u acp.SessionUpdate) string {
	text := func(c acp.ContentBlock) string {
		if c.Text != nil {
			return c.Text.Text
		}
		return "?"
	}
	switch {
	case u.AgentMessageChunk != nil:
		return "message:" + text(u.AgentMessageChunk.Content)
	case u.AgentThoughtChunk != nil:
		return "thought:" + text(u.AgentThoughtChunk.Content)
	case u.Plan != nil:
		return fmt.Sprintf("plan:%d", len(u.Plan.Entries))
	case u.ToolCall != nil:
		return "tool_call:" + string(u.ToolCall.ToolCallId)
	case u.ToolCallUpdate != nil:
		return "tool_call_update:" + string(u.ToolCallUpdate.ToolCallId)
	case u.CurrentModeUpdate != nil:
		return "mode:" + string(u.CurrentModeUpdate.CurrentModeId)
	}
	return "other"
}

func (p *agentProc) described() []string {
	var out []string
	for _, n := range p.client.snapshot() {
		out = append(out, describe(n.Update))
	}
	return out
}

func steps(s ...map[string]any) map[string]any { return map[string]any{"steps": s} }

// ---------------------------------------------------------------------------------------
// Tests

func TestInitializeSessionAndEmptyTurn(t *testing.T) {
	p := startAgent(t, steps(), nil)
	init, err := p.initialize(fsCaps)
	if err != nil {
		t.Fatalf("initialize: %v\n%s", err, p.stderr.String())
	}
	if init.AgentInfo == nil || init.AgentInfo.Name != "fake-acp-agent" || init.AgentInfo.Version != Version {
		t.Errorf("agentInfo = %+v", init.AgentInfo)
	}
	if init.ProtocolVersion != acp.ProtocolVersionNumber || init.AgentCapabilities.LoadSession {
		t.Errorf("initialize = %+v", init)
	}
	s, err := p.newSession()
	if err != nil {
		t.Fatal(err)
	}
	if s.SessionId != "fake-session-1" || s.Modes != nil {
		t.Errorf("session/new = %+v", s)
	}
	r, err := p.prompt(s.SessionId, "hello there")
	if err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v", r, err)
	}
	p.finish()

	var names []string
	for _, ev := range p.events() {
		names = append(names, ev["event"].(string))
	}
	if want := []string{"start", "initialize", "session_new", "prompt", "prompt_end", "eof"}; !reflect.DeepEqual(names, want) {
		t.Errorf("events = %q, want %q", names, want)
	}
	start := p.eventsNamed("start")[0]
	if int(start["pid"].(float64)) != p.cmd.Process.Pid || start["pgid"] != start["pid"] || start["cwd"] != p.dir {
		t.Errorf("start event = %v (pid %d, dir %s)", start, p.cmd.Process.Pid, p.dir)
	}
	if ev := p.eventsNamed("prompt")[0]; ev["text"] != "hello there" {
		t.Errorf("prompt event = %v", ev)
	}
	if ev := p.eventsNamed("session_new")[0]; ev["cwd"] != p.dir {
		t.Errorf("session_new event = %v", ev)
	}
	caps := p.eventsNamed("initialize")[0]["client_capabilities"].(map[string]any)["fs"].(map[string]any)
	if caps["readTextFile"] != true || caps["writeTextFile"] != true {
		t.Errorf("recorded client capabilities = %v", caps)
	}
}

func TestScriptFromEnvironment(t *testing.T) {
	p := startAgentWith(t, steps(obj{"message": "from env"}), nil, startOpts{scriptInEnv: true})
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v", r, err)
	}
	if got := p.described(); !reflect.DeepEqual(got, []string{"message:from env"}) {
		t.Errorf("updates = %q", got)
	}
	p.finish()
}

func TestMessagesAndThoughts(t *testing.T) {
	p := startAgent(t, steps(
		obj{"message": "Hello"},
		obj{"thought": "thinking", "repeat": 2},
		obj{"sleep": "1ms"},
		obj{"message": "world", "repeat": 3},
	), nil)
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v", r, err)
	}
	want := []string{"message:Hello", "thought:thinking", "thought:thinking", "message:world", "message:world", "message:world"}
	if got := p.described(); !reflect.DeepEqual(got, want) {
		t.Errorf("updates = %q, want %q", got, want)
	}
	for _, n := range p.client.snapshot() {
		if n.SessionId != sid {
			t.Errorf("update for session %q, want %q", n.SessionId, sid)
		}
	}
	p.finish()
}

func TestPlan(t *testing.T) {
	p := startAgent(t, steps(
		obj{"plan": []any{"first", obj{"content": "second", "priority": "high", "status": "in_progress"}}},
		obj{"plan": []any{}},
	), nil)
	sid := p.handshake()
	if _, err := p.prompt(sid, "x"); err != nil {
		t.Fatal(err)
	}
	ups := p.client.snapshot()
	if len(ups) != 2 || ups[0].Update.Plan == nil || ups[1].Update.Plan == nil {
		t.Fatalf("updates = %q", p.described())
	}
	want := []acp.PlanEntry{
		{Content: "first", Priority: acp.PlanEntryPriorityMedium, Status: acp.PlanEntryStatusPending},
		{Content: "second", Priority: acp.PlanEntryPriorityHigh, Status: acp.PlanEntryStatusInProgress},
	}
	if !reflect.DeepEqual(ups[0].Update.Plan.Entries, want) {
		t.Errorf("plan = %+v, want %+v", ups[0].Update.Plan.Entries, want)
	}
	if len(ups[1].Update.Plan.Entries) != 0 || !strings.Contains(p.wire.String(), `"entries":[]`) {
		t.Errorf("empty plan = %+v; wire:\n%s", ups[1].Update.Plan, p.wire.String())
	}
	p.finish()
}

func TestToolCalls(t *testing.T) {
	p := startAgent(t, steps(
		obj{"tool_call": obj{
			"id": "call-1", "kind": "edit", "title": "Edit a.txt",
			"locations": []string{"$CWD/a.txt", "../outside.txt"},
			"raw_input": obj{"path": "a.txt", "n": 1}, "content": "a diff",
		}},
		obj{"tool_call_update": obj{"id": "call-1", "status": "in_progress"}},
		obj{"tool_call_update": obj{"id": "call-1", "status": "completed", "raw_output": obj{"ok": true}, "title": "Edited a.txt"}},
	), nil)
	sid := p.handshake()
	if _, err := p.prompt(sid, "x"); err != nil {
		t.Fatal(err)
	}
	want := []string{"tool_call:call-1", "tool_call_update:call-1", "tool_call_update:call-1"}
	if got := p.described(); !reflect.DeepEqual(got, want) {
		t.Fatalf("updates = %q, want %q", got, want)
	}
	ups := p.client.snapshot()
	tc := ups[0].Update.ToolCall
	if tc.Kind != acp.ToolKindEdit || tc.Title != "Edit a.txt" || tc.Status != acp.ToolCallStatusPending {
		t.Errorf("tool_call = %+v", tc)
	}
	if len(tc.Locations) != 2 || tc.Locations[0].Path != filepath.Join(p.dir, "a.txt") || tc.Locations[1].Path != "../outside.txt" {
		t.Errorf("locations = %+v", tc.Locations)
	}
	if !reflect.DeepEqual(tc.RawInput, map[string]any{"path": "a.txt", "n": float64(1)}) {
		t.Errorf("raw input = %#v", tc.RawInput)
	}
	if len(tc.Content) != 1 || tc.Content[0].Content == nil || tc.Content[0].Content.Content.Text == nil || tc.Content[0].Content.Content.Text.Text != "a diff" {
		t.Errorf("content = %+v", tc.Content)
	}
	u1, u2 := ups[1].Update.ToolCallUpdate, ups[2].Update.ToolCallUpdate
	if u1.Status == nil || *u1.Status != acp.ToolCallStatusInProgress || u1.Title != nil || u1.RawOutput != nil {
		t.Errorf("first update = %+v", u1)
	}
	if u2.Status == nil || *u2.Status != acp.ToolCallStatusCompleted || u2.Title == nil || *u2.Title != "Edited a.txt" ||
		!reflect.DeepEqual(u2.RawOutput, map[string]any{"ok": true}) {
		t.Errorf("second update = %+v", u2)
	}
	p.finish()
}

func permissionScript(expect string) map[string]any {
	st := obj{"permission": obj{
		"tool_call_id": "call-7", "kind": "execute", "title": "Run make",
		"locations": []string{"$CWD/Makefile"}, "raw_input": obj{"command": "make"},
	}}
	if expect != "" {
		st["expect"] = expect
	}
	return steps(st, obj{"message": "after"})
}

func TestPermissionRequestShape(t *testing.T) {
	p := startAgent(t, permissionScript("allow"), nil)
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v\n%s", r, err, p.stderr.String())
	}
	p.finish()
	perms, _, _ := p.client.requests()
	if len(perms) != 1 {
		t.Fatalf("permission requests: %d", len(perms))
	}
	req := perms[0]
	wantOpts := []acp.PermissionOption{
		{OptionId: "allow", Kind: acp.PermissionOptionKindAllowOnce, Name: "Allow once"},
		{OptionId: "allow-always", Kind: acp.PermissionOptionKindAllowAlways, Name: "Always allow"},
		{OptionId: "reject", Kind: acp.PermissionOptionKindRejectOnce, Name: "Reject once"},
		{OptionId: "reject-always", Kind: acp.PermissionOptionKindRejectAlways, Name: "Always reject"},
	}
	if !reflect.DeepEqual(req.Options, wantOpts) {
		t.Errorf("options = %+v", req.Options)
	}
	tc := req.ToolCall
	if req.SessionId != sid || tc.ToolCallId != "call-7" || tc.Kind == nil || *tc.Kind != acp.ToolKindExecute ||
		tc.Title == nil || *tc.Title != "Run make" || len(tc.Locations) != 1 || tc.Locations[0].Path != filepath.Join(p.dir, "Makefile") ||
		!reflect.DeepEqual(tc.RawInput, map[string]any{"command": "make"}) {
		t.Errorf("permission request = %+v", req)
	}
	if ev := p.eventsNamed("permission")[0]; ev["outcome"] != "allow_once" || ev["option_id"] != "allow" || ev["tool_call_id"] != "call-7" {
		t.Errorf("permission event = %v", ev)
	}
}

func TestPermissionOutcomes(t *testing.T) {
	selectID := func(id string) func(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		return func(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
			return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeSelected(acp.PermissionOptionId(id))}, nil
		}
	}
	fail := func(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		return acp.RequestPermissionResponse{}, acp.NewInternalError(map[string]any{"error": "no"})
	}
	for _, tc := range []struct {
		name    string
		answer  func(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error)
		expect  string
		outcome string
		exit    int
	}{
		{"allow once", selectKind(acp.PermissionOptionKindAllowOnce), "allow", "allow_once", 0},
		{"reject once", selectKind(acp.PermissionOptionKindRejectOnce), "reject", "reject_once", 0},
		{"allow always expected", selectKind(acp.PermissionOptionKindAllowAlways), "allow_always", "allow_always", 0},
		{"allow always is not allow", selectKind(acp.PermissionOptionKindAllowAlways), "allow", "allow_always", 3},
		{"reject always is not reject", selectKind(acp.PermissionOptionKindRejectAlways), "reject", "reject_always", 3},
		{"rejected when allow expected", selectKind(acp.PermissionOptionKindRejectOnce), "allow", "reject_once", 3},
		{"unknown option", selectID("yes-please"), "allow", "unknown_option", 3},
		{"unknown option expected", selectID("yes-please"), "unknown_option", "unknown_option", 0},
		{"client error expected", fail, "error", "error", 0},
		{"client error", fail, "reject", "error", 3},
		{"no expectation", selectKind(acp.PermissionOptionKindAllowAlways), "", "allow_always", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startAgent(t, permissionScript(tc.expect), &testClient{permission: tc.answer})
			sid := p.handshake()
			r, err := p.prompt(sid, "x")
			if tc.exit == 0 {
				if err != nil || r.StopReason != acp.StopReasonEndTurn {
					t.Fatalf("prompt = %+v, %v\n%s", r, err, p.stderr.String())
				}
				if got := p.described(); !reflect.DeepEqual(got, []string{"message:after"}) {
					t.Errorf("updates = %q", got)
				}
				p.finish()
			} else {
				if err == nil {
					t.Fatalf("prompt = %+v, want an error (the fake exits)", r)
				}
				p.expectExit(tc.exit, "expectation failed")
			}
			if ev := p.eventsNamed("permission"); len(ev) != 1 || ev[0]["outcome"] != tc.outcome {
				t.Errorf("permission events = %v, want outcome %q", ev, tc.outcome)
			}
		})
	}
}

func TestPermissionCustomOptions(t *testing.T) {
	c := &testClient{permission: selectKind(acp.PermissionOptionKindRejectOnce)}
	p := startAgent(t, steps(obj{
		"permission": obj{"tool_call_id": "c", "options": []any{
			obj{"id": "yes", "kind": "allow_once"}, obj{"id": "no", "kind": "reject_once", "name": "No"},
		}},
		"expect": "reject",
	}), c)
	sid := p.handshake()
	if _, err := p.prompt(sid, "x"); err != nil {
		t.Fatal(err)
	}
	p.finish()
	want := []acp.PermissionOption{
		{OptionId: "yes", Kind: acp.PermissionOptionKindAllowOnce, Name: "yes"},
		{OptionId: "no", Kind: acp.PermissionOptionKindRejectOnce, Name: "No"},
	}
	perms, _, _ := c.requests()
	if got := perms[0].Options; !reflect.DeepEqual(got, want) {
		t.Errorf("options = %+v", got)
	}
	if got := perms[0].ToolCall; got.Kind != nil || got.Title != nil {
		t.Errorf("kind and title should be absent: %+v", got)
	}
}

// TestPermissionCancelled is ACP's cancellation: the client sends session/cancel, answers
// the pending permission request "cancelled", and the turn ends with stop reason
// cancelled.
func TestPermissionCancelled(t *testing.T) {
	asked := make(chan acp.RequestPermissionRequest, 1)
	answer := make(chan acp.RequestPermissionResponse, 1)
	c := &testClient{permission: func(_ context.Context, r acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
		asked <- r
		return <-answer, nil
	}}
	p := startAgent(t, steps(
		obj{"message": "asking"},
		obj{"permission": obj{"tool_call_id": "c1", "kind": "delete"}, "expect": "cancelled"},
		obj{"message": "unreachable"},
	), c)
	sid := p.handshake()
	res := p.promptAsync(sid, "x")
	select {
	case <-asked:
	case <-time.After(guard):
		t.Fatalf("no permission request\n%s", p.stderr.String())
	}
	if err := p.conn.Cancel(ctxGuard(t), acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	p.waitEvent("cancel")
	answer <- acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}
	r := p.result(res)
	if r.err != nil || r.resp.StopReason != acp.StopReasonCancelled {
		t.Fatalf("prompt = %+v, %v", r.resp, r.err)
	}
	if got := p.described(); !reflect.DeepEqual(got, []string{"message:asking"}) {
		t.Errorf("updates = %q", got)
	}
	p.finish()
	if ev := p.eventsNamed("permission")[0]; ev["outcome"] != "cancelled" {
		t.Errorf("permission event = %v", ev)
	}
	if ev := p.eventsNamed("prompt_end")[0]; ev["stop_reason"] != "cancelled" {
		t.Errorf("prompt_end event = %v", ev)
	}
}

func TestFileSystem(t *testing.T) {
	p := startAgent(t, steps(
		obj{"read": "$CWD/in.txt", "expect_error": false, "expect_content": "hello\nworld\n", "line": 2, "limit": 5},
		obj{"read": "$CWD/missing.txt", "expect_error": true},
		obj{"read": "$CWD/../escape.txt", "expect_error": true},
		obj{"write": obj{"path": "$CWD/out.txt", "content": "written"}, "expect_error": false},
		obj{"write": obj{"path": "/etc/fake-acp-agent-nope", "content": "x"}, "expect_error": true},
		obj{"read": "relative.txt"},
		obj{"message": "done"},
	), nil)
	if err := os.WriteFile(filepath.Join(p.dir, "in.txt"), []byte("hello\nworld\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v\n%s", r, err, p.stderr.String())
	}
	p.finish()
	if b, err := os.ReadFile(filepath.Join(p.dir, "out.txt")); err != nil || string(b) != "written" {
		t.Errorf("out.txt = %q, %v", b, err)
	}
	_, reads, writes := p.client.requests()
	if len(reads) != 4 {
		t.Fatalf("reads = %+v", reads)
	}
	r0 := reads[0]
	if r0.SessionId != sid || r0.Path != filepath.Join(p.dir, "in.txt") || r0.Line == nil || *r0.Line != 2 || r0.Limit == nil || *r0.Limit != 5 {
		t.Errorf("first read = %+v", r0)
	}
	if reads[2].Path != p.dir+"/../escape.txt" || reads[3].Path != "relative.txt" || reads[3].Line != nil {
		t.Errorf("paths are not sent as written: %+v", reads)
	}
	if len(writes) != 2 || writes[0].Content != "written" {
		t.Errorf("writes = %+v", writes)
	}
	var oks []any
	for _, ev := range append(p.eventsNamed("read"), p.eventsNamed("write")...) {
		oks = append(oks, ev["ok"])
	}
	if want := []any{true, false, false, false, true, false}; !reflect.DeepEqual(oks, want) {
		t.Errorf("read/write ok = %v, want %v", oks, want)
	}
	if ev := p.eventsNamed("read")[0]; ev["content"] != "hello\nworld\n" {
		t.Errorf("read event = %v", ev)
	}
}

func TestFileSystemExpectationsFail(t *testing.T) {
	for _, tc := range []struct {
		name string
		step map[string]any
	}{
		{"read succeeds, error expected", obj{"read": "$CWD/in.txt", "expect_error": true}},
		{"read fails, success expected", obj{"read": "$CWD/missing.txt", "expect_error": false}},
		{"read content differs", obj{"read": "$CWD/in.txt", "expect_content": "other"}},
		{"write succeeds, error expected", obj{"write": obj{"path": "$CWD/w.txt", "content": "x"}, "expect_error": true}},
		{"write fails, success expected", obj{"write": obj{"path": "$CWD/../w.txt", "content": "x"}, "expect_error": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startAgent(t, steps(tc.step, obj{"message": "unreachable"}), nil)
			if err := os.WriteFile(filepath.Join(p.dir, "in.txt"), []byte("in"), 0o644); err != nil {
				t.Fatal(err)
			}
			sid := p.handshake()
			if r, err := p.prompt(sid, "x"); err == nil {
				t.Fatalf("prompt = %+v, want an error (the fake exits)", r)
			}
			p.expectExit(3, "expectation failed")
		})
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for proctest.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSpawnBackground leaves children behind: they outlive the fake, in its process
// group, until whoever ran it kills the group.
func TestSpawnBackground(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	p := startAgent(t, steps(
		obj{"spawn_background": "sleep 1000", "pid_file": pidFile},
		obj{"spawn_background": []string{"sleep", "1001"}},
		obj{"message": "spawned"},
	), nil)
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v\n%s", r, err, p.stderr.String())
	}
	first := proctest.PID(t, pidFile)
	spawns := p.eventsNamed("spawn")
	if len(spawns) != 2 || int(spawns[0]["pid"].(float64)) != first {
		t.Fatalf("spawn events = %v (pid file: %d)", spawns, first)
	}
	second := int(spawns[1]["pid"].(float64))
	group := p.cmd.Process.Pid
	for _, pid := range []int{first, second} {
		if !proctest.Alive(pid) {
			t.Fatalf("child %d is not running", pid)
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != group {
			t.Errorf("child %d is in group %d (%v), want the fake's %d", pid, g, err, group)
		}
	}

	p.finish() // the fake exits 0 on EOF and leaves its children behind
	for _, pid := range []int{first, second} {
		if !proctest.Alive(pid) {
			t.Errorf("child %d died with the fake; it should have been left behind", pid)
		}
	}
	if err := syscall.Kill(-group, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the group: %v", err)
	}
	waitGone(t, first)
	waitGone(t, second)
}

func TestHangUntilCancel(t *testing.T) {
	p := startAgent(t, steps(obj{"message": "working"}, obj{"hang": true}, obj{"message": "unreachable"}), nil)
	sid := p.handshake()
	res := p.promptAsync(sid, "x")
	p.client.waitFor(t, "the first message", func() bool { return len(p.client.updates) > 0 })
	if err := p.conn.Cancel(ctxGuard(t), acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	r := p.result(res)
	if r.err != nil || r.resp.StopReason != acp.StopReasonCancelled {
		t.Fatalf("prompt = %+v, %v", r.resp, r.err)
	}
	if got := p.described(); !reflect.DeepEqual(got, []string{"message:working"}) {
		t.Errorf("updates = %q", got)
	}
	// The SDK cancels the prompt's context before it calls Agent.Cancel, so the
	// cancelled answer may come first; closing stdin then could end the fake before
	// Cancel ran.
	p.waitEvent("cancel")
	p.finish()
}

func sigIgnored(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return m&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return false
}

// TestHangIgnoringCancelAndSIGTERM is the agent a client must kill: it ignores
// session/cancel and SIGTERM, so only SIGKILL ends it.
func TestHangIgnoringCancelAndSIGTERM(t *testing.T) {
	p := startAgent(t, map[string]any{
		"ignore_sigterm": true,
		"steps":          []any{obj{"message": "working"}, obj{"hang": true, "ignore_cancel": true}},
	}, nil)
	sid := p.handshake()
	res := p.promptAsync(sid, "x")
	p.client.waitFor(t, "the first message", func() bool { return len(p.client.updates) > 0 })
	if !sigIgnored(t, p.cmd.Process.Pid, syscall.SIGTERM) {
		t.Errorf("SIGTERM is not ignored")
	}
	if err := p.conn.Cancel(ctxGuard(t), acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	p.waitEvent("cancel")
	select {
	case r := <-res:
		t.Fatalf("the prompt ended despite ignore_cancel: %+v, %v", r.resp, r.err)
	default:
	}
	group := p.cmd.Process.Pid
	_ = syscall.Kill(-group, syscall.SIGTERM)
	_ = syscall.Kill(-group, syscall.SIGKILL)
	p.wait()
	if ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the fake ended with %v, want killed by SIGKILL", p.cmd.ProcessState)
	}
	if r := p.result(res); r.err == nil {
		t.Errorf("prompt = %+v, want an error: the agent is gone", r.resp)
	}
}

func TestCrash(t *testing.T) {
	p := startAgent(t, steps(obj{"message": "before"}, obj{"crash": 7}, obj{"message": "unreachable"}), nil)
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err == nil {
		t.Fatalf("prompt = %+v, want an error", r)
	}
	if code := p.wait(); code != 7 {
		t.Fatalf("exit code %d, want 7\n%s", code, p.stderr.String())
	}
	if ev := p.eventsNamed("crash"); len(ev) != 1 {
		t.Errorf("events = %v", p.events())
	}
}

// TestGarbageAndRaw documents what the SDK client makes of malformed output: a line that
// is not JSON is skipped (and logged), an update of unknown kind is handed to the client
// as a session_info_update, and a session/update without an update is handed over with
// no variant set.
func TestGarbageAndRaw(t *testing.T) {
	unknown := obj{"jsonrpc": "2.0", "method": "session/update", "params": obj{"sessionId": "fake-session-1", "update": obj{"sessionUpdate": "no_such_update"}}}
	empty := obj{"jsonrpc": "2.0", "method": "session/update", "params": obj{"sessionId": "fake-session-1"}}
	p := startAgent(t, steps(
		obj{"garbage": "this is not JSON-RPC"},
		obj{"garbage": "{\"half\": \n"},
		obj{"raw": unknown},
		obj{"raw": empty},
		obj{"message": "after"},
	), nil)
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v\n%s", r, err, p.stderr.String())
	}
	p.finish()
	wire := p.wire.String()
	unknownLine, _ := json.Marshal(unknown)
	emptyLine, _ := json.Marshal(empty)
	for _, want := range []string{"\nthis is not JSON-RPC\n", "\n{\"half\": \n", "\n" + string(unknownLine) + "\n", "\n" + string(emptyLine) + "\n"} {
		if !strings.Contains(wire, want) {
			t.Errorf("stdout lacks %q:\n%s", want, wire)
		}
	}
	if n := strings.Count(p.sdkLog.String(), "failed to parse incoming message"); n != 2 {
		t.Errorf("the SDK logged %d parse failures, want 2:\n%s", n, p.sdkLog.String())
	}
	ups := p.client.snapshot()
	if len(ups) != 3 || describe(ups[2].Update) != "message:after" {
		t.Fatalf("updates = %q", p.described())
	}
	if ups[0].Update.SessionInfoUpdate == nil {
		t.Errorf("unknown update decoded as %+v", ups[0].Update)
	}
	if ups[1].Update.Validate() == nil {
		t.Errorf("empty update decoded as %+v", ups[1].Update)
	}
}

func TestFlood(t *testing.T) {
	const n = 1000 // below the SDK's notification queue (1024): see the next test
	p := startAgent(t, steps(obj{"flood": n, "text": "f"}, obj{"message": "end"}), nil)
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt = %+v, %v", r, err)
	}
	got := p.described()
	if len(got) != n+1 || got[0] != "message:f" || got[n-1] != "message:f" || got[n] != "message:end" {
		t.Errorf("%d updates, want %d flood chunks then the end", len(got), n)
	}
	p.finish()
}

// TestFloodOverflowsTheClientSDK documents acp-go-sdk: notifications are handled one at a
// time from a queue of 1024; when a handler is slow and the queue fills, the client
// connection is closed ("notification queue overflow") and the pending prompt fails.
func TestFloodOverflowsTheClientSDK(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // frees the SDK's notification goroutine at the end
	c := &testClient{onUpdate: func(acp.SessionNotification) { <-release }}
	p := startAgent(t, steps(obj{"flood": 5000}), c)
	sid := p.handshake()
	if r, err := p.prompt(sid, "x"); err == nil {
		t.Fatalf("prompt = %+v, want an error", r)
	}
	if !strings.Contains(p.sdkLog.String(), "notification queue overflow") {
		t.Errorf("SDK log:\n%s", p.sdkLog.String())
	}
}

func TestStopReasons(t *testing.T) {
	for _, reason := range []string{"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled", "not_a_stop_reason"} {
		t.Run(reason, func(t *testing.T) {
			p := startAgent(t, steps(obj{"message": "m"}, obj{"stop_reason": reason}, obj{"message": "unreachable"}), nil)
			sid := p.handshake()
			r, err := p.prompt(sid, "x")
			if err != nil || string(r.StopReason) != reason {
				t.Fatalf("prompt = %+v, %v", r, err)
			}
			if got := p.described(); !reflect.DeepEqual(got, []string{"message:m"}) {
				t.Errorf("updates = %q", got)
			}
			p.finish()
		})
	}
}

func TestErrorStep(t *testing.T) {
	p := startAgent(t, steps(obj{"error": obj{"code": -32042, "message": "boom"}}), nil)
	sid := p.handshake()
	_, err := p.prompt(sid, "x")
	var re *acp.RequestError
	if !errors.As(err, &re) || re.Code != -32042 || re.Message != "boom" {
		t.Fatalf("prompt error = %v", err)
	}
	p.finish()
}

var threeModes = []string{"default", "read-only", "plan"}

func TestModes(t *testing.T) {
	t.Run("offered, set and required", func(t *testing.T) {
		p := startAgent(t, map[string]any{"modes": threeModes, "require_mode": "read-only", "steps": []any{}}, nil)
		if _, err := p.initialize(fsCaps); err != nil {
			t.Fatal(err)
		}
		s, err := p.newSession()
		if err != nil {
			t.Fatal(err)
		}
		if s.Modes == nil || s.Modes.CurrentModeId != "default" || len(s.Modes.AvailableModes) != 3 ||
			s.Modes.AvailableModes[1].Id != "read-only" || s.Modes.AvailableModes[1].Name != "read-only" {
			t.Fatalf("modes = %+v", s.Modes)
		}
		ctx := ctxGuard(t)
		if _, err := p.conn.SetSessionMode(ctx, acp.SetSessionModeRequest{SessionId: s.SessionId, ModeId: "yolo"}); err == nil {
			t.Errorf("set_mode accepted a mode not offered")
		}
		if _, err := p.conn.SetSessionMode(ctx, acp.SetSessionModeRequest{SessionId: s.SessionId, ModeId: "read-only"}); err != nil {
			t.Fatal(err)
		}
		if r, err := p.prompt(s.SessionId, "x"); err != nil || r.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("prompt = %+v, %v\n%s", r, err, p.stderr.String())
		}
		p.finish()
		if ev := p.eventsNamed("set_mode"); len(ev) != 1 || ev[0]["mode"] != "read-only" {
			t.Errorf("set_mode events = %v", ev)
		}
	})
	t.Run("required but not set", func(t *testing.T) {
		p := startAgent(t, map[string]any{"modes": threeModes, "require_mode": "read-only", "steps": []any{}}, nil)
		sid := p.handshake()
		if r, err := p.prompt(sid, "x"); err == nil {
			t.Fatalf("prompt = %+v, want an error", r)
		}
		p.expectExit(4, "mode violation")
	})
	t.Run("required and initial", func(t *testing.T) {
		p := startAgent(t, map[string]any{"modes": threeModes, "current_mode": "read-only", "require_mode": "read-only", "steps": []any{}}, nil)
		if _, err := p.initialize(fsCaps); err != nil {
			t.Fatal(err)
		}
		s, err := p.newSession()
		if err != nil || s.Modes == nil || s.Modes.CurrentModeId != "read-only" {
			t.Fatalf("session/new = %+v, %v", s, err)
		}
		if _, err := p.prompt(s.SessionId, "x"); err != nil {
			t.Fatal(err)
		}
		p.finish()
	})
	t.Run("none offered", func(t *testing.T) {
		p := startAgent(t, steps(), nil)
		sid := p.handshake()
		if _, err := p.conn.SetSessionMode(ctxGuard(t), acp.SetSessionModeRequest{SessionId: sid, ModeId: "default"}); err == nil {
			t.Errorf("set_mode accepted a mode when none is offered")
		}
		if _, err := p.prompt(sid, "x"); err != nil {
			t.Fatal(err)
		}
		p.finish()
	})
	t.Run("the agent switches itself", func(t *testing.T) {
		p := startAgent(t, map[string]any{"modes": threeModes, "current_mode": "read-only", "steps": []any{obj{"mode_update": "default"}}}, nil)
		sid := p.handshake()
		if _, err := p.prompt(sid, "x"); err != nil {
			t.Fatal(err)
		}
		if got := p.described(); !reflect.DeepEqual(got, []string{"mode:default"}) {
			t.Errorf("updates = %q", got)
		}
		p.finish()
		if ev := p.eventsNamed("mode_update"); len(ev) != 1 || ev[0]["mode"] != "default" {
			t.Errorf("mode_update events = %v", ev)
		}
	})
}

func TestCapabilities(t *testing.T) {
	t.Run("terminal offered", func(t *testing.T) {
		p := startAgent(t, map[string]any{"forbid_terminal": true, "steps": []any{}}, nil)
		caps := fsCaps
		caps.Terminal = true
		if _, err := p.initialize(caps); err == nil {
			t.Fatalf("initialize succeeded")
		}
		p.expectExit(5, "capability violation")
	})
	t.Run("terminal not offered", func(t *testing.T) {
		p := startAgent(t, map[string]any{"forbid_terminal": true, "require_fs": true, "steps": []any{}}, nil)
		sid := p.handshake()
		if _, err := p.prompt(sid, "x"); err != nil {
			t.Fatal(err)
		}
		p.finish()
	})
	t.Run("fs not offered", func(t *testing.T) {
		p := startAgent(t, map[string]any{"require_fs": true, "steps": []any{}}, nil)
		if _, err := p.initialize(acp.ClientCapabilities{Fs: acp.FileSystemCapabilities{ReadTextFile: true}}); err == nil {
			t.Fatalf("initialize succeeded")
		}
		p.expectExit(5, "capability violation")
	})
}

func TestExpectPromptContains(t *testing.T) {
	sc := func() map[string]any {
		return map[string]any{"expect_prompt_contains": []string{"INSTRUCTIONS", "TASK"}, "steps": []any{}}
	}
	p := startAgent(t, sc(), nil)
	sid := p.handshake()
	if _, err := p.prompt(sid, "INSTRUCTIONS\n\nTASK"); err != nil {
		t.Fatal(err)
	}
	p.finish()

	p = startAgent(t, sc(), nil)
	sid = p.handshake()
	if _, err := p.prompt(sid, "TASK only"); err == nil {
		t.Fatal("prompt succeeded")
	}
	p.expectExit(3, "expectation failed")
}

func TestLinger(t *testing.T) {
	p := startAgent(t, map[string]any{"linger": true, "steps": []any{}}, nil)
	p.handshake()
	p.stdin.Close()
	p.waitEvent("eof")
	select {
	case <-p.done:
		t.Fatalf("the fake exited on EOF despite linger\n%s", p.stderr.String())
	default:
	}
	// The cleanup kills it.
}

func TestScriptErrors(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"unknown field", `{"steps": [], "bogus": 1}`, "unknown field"},
		{"unknown step field", `{"steps": [{"mesage": "x"}]}`, "unknown field"},
		{"two actions", `{"steps": [{"message": "x", "thought": "y"}]}`, "exactly one action"},
		{"no action", `{"steps": [{}]}`, "exactly one action"},
		{"misplaced modifier", `{"steps": [{"message": "x", "expect": "allow"}]}`, "does not go with"},
		{"bad expectation", `{"steps": [{"permission": {"tool_call_id": "c"}, "expect": "maybe"}]}`, "not a permission outcome"},
		{"bad sleep", `{"steps": [{"sleep": "soon"}]}`, "not a duration"},
		{"empty spawn", `{"steps": [{"spawn_background": ""}]}`, "empty command"},
		{"negative stall", `{"steps": [{"stall": -1}]}`, "stall must not be negative"},
		{"unknown stall point", `{"stall_at": "prompt"}`, "not initialize or session_new"},
		{"current mode not offered", `{"modes": ["a"], "current_mode": "b"}`, "not one of modes"},
		{"relative record", `{"record": "rec.jsonl"}`, "absolute"},
		{"trailing data", `{} {}`, "trailing data"},
		{"not JSON", `steps:`, "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "script.json")
			if err := os.WriteFile(path, []byte(tc.script), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(fakeBin, "--script", path).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %v, output %q; want exit 2 mentioning %q", err, out, tc.want)
			}
		})
	}
	t.Run("no script", func(t *testing.T) {
		cmd := exec.Command(fakeBin)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "FAKE_ACP_SCRIPT=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "no script") {
			t.Errorf("exit %v, output %q", err, out)
		}
	})
}
