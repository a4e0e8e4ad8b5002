package acp

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
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"symbi/internal/executors"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/proctest"
	"symbi/internal/workspace"
)

// guard bounds every wait so that a broken run fails a test instead of hanging it. It is
// not an expectation about speed.
const guard = 2 * time.Minute

var fakeBin string

func TestMain(m *testing.M) {
	// The SDK logs through slog's default logger (SetLogger is racy).
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	dir, err := os.MkdirTemp("", "acp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBin = filepath.Join(dir, "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", fakeBin, "symbi/cmd/fake-acp-agent").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's project, journal, workspace and script.
type env struct {
	t      *testing.T
	store  *journal.Store
	w      *journal.Writer
	ws     *workspace.Workspace
	dir    string // the workspace path
	aux    string // outside the workspace: script, record
	record string
	cfg    Config
}

func newEnv(t *testing.T, script map[string]any) *env {
	t.Helper()
	project := t.TempDir()
	root, err := os.Open(project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	store, err := journal.OpenStore(root, journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w, err := store.Create("coder", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Append(journal.Started{Agent: "coder", Mode: "delegated", Surface: "mcp-server", Prompt: "p"}); err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	aux := t.TempDir()
	e := &env{t: t, store: store, w: w, ws: ws, dir: dir, aux: aux, record: filepath.Join(aux, "record.jsonl")}
	script["record"] = e.record
	data, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	sp := filepath.Join(aux, "script.json")
	if err := os.WriteFile(sp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.cfg = Config{
		Executor:  &executors.Executor{Name: "fake", Command: []string{fakeBin, "--script", sp}},
		Workspace: ws,
		Journal:   w,
		Decide:    allowKinds("read", "edit", "think"),
		Prompt:    "Do the task.",
		Env:       append(os.Environ(), "GORACE=atexit_sleep_ms=0"),
	}
	return e
}

// recording is d keeping every tool use it is asked about, which seen returns.
func recording(d Decider) (_ Decider, seen func() []policy.ToolUse) {
	var mu sync.Mutex
	var uses []policy.ToolUse
	return func(u policy.ToolUse) policy.Decision {
			mu.Lock()
			uses = append(uses, u)
			mu.Unlock()
			return d(u)
		}, func() []policy.ToolUse {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(uses)
		}
}

func allowKinds(kinds ...string) Decider {
	return func(t policy.ToolUse) policy.Decision {
		if slices.Contains(kinds, t.Kind) && len(t.Outside) == 0 {
			return policy.Decision{Allow: true, Policies: []string{"allow-" + t.Kind}}
		}
		return policy.Decision{Policies: []string{}, Reason: "no policy allows " + t.Kind}
	}
}

// run runs the session. With a nil ctx, the run is bounded by the test binary's own
// deadline (go test -timeout) less a minute, not by a clock of the test's: a run slowed by
// -race and a busy machine is not cut short, and one that hangs fails the test with every
// goroutine's stack in its log.
func (e *env) run(ctx context.Context) Result {
	e.t.Helper()
	if ctx != nil {
		return Run(ctx, e.cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if d, ok := e.t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), d.Add(-time.Minute))
	}
	defer cancel()
	res := Run(ctx, e.cfg)
	if ctx.Err() != nil {
		buf := make([]byte, 8<<20)
		e.t.Logf("the run outlived the test's deadline; every goroutine:\n%s", buf[:runtime.Stack(buf, true)])
	}
	return res
}

// entries returns the journal's records after started.
func (e *env) entries() []journal.Entry {
	e.t.Helper()
	es, tail, err := journal.ReadEntries(e.w.Path())
	if err != nil || tail != 0 {
		e.t.Fatalf("ReadEntries: %v (tail %d)", err, tail)
	}
	return es[1:]
}

func types(es []journal.Entry) []string {
	var out []string
	for _, x := range es {
		out = append(out, x.Type)
	}
	return out
}

// collapsed is types with runs of agent_message / agent_thought folded into one.
func collapsed(es []journal.Entry) []string {
	var out []string
	for _, x := range types(es) {
		if len(out) > 0 && out[len(out)-1] == x && (x == journal.TypeAgentMessage || x == journal.TypeAgentThought) {
			continue
		}
		out = append(out, x)
	}
	return out
}

func data[T any](t *testing.T, x journal.Entry) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(x.Data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func ofType(es []journal.Entry, typ string) []journal.Entry {
	var out []journal.Entry
	for _, x := range es {
		if x.Type == typ {
			out = append(out, x)
		}
	}
	return out
}

// finishAndVerify writes what the caller would (policy_evaluated and terminated) and
// checks the journal verifies complete.
func (e *env) finishAndVerify(res Result) {
	e.t.Helper()
	switch res.Outcome {
	case OutcomeCompleted:
		if err := e.w.Append(journal.PolicyEvaluated{Action: "respond", Decision: "allow", PolicyIDs: []string{}, Errors: []string{},
			TextSHA256: sha(res.Text), TextBytes: int64(len(res.Text))}); err != nil {
			e.t.Fatal(err)
		}
		if err := e.w.Append(journal.Terminated{Reason: "completed", Released: true}); err != nil {
			e.t.Fatal(err)
		}
	case OutcomeError:
		if err := e.w.Append(journal.Terminated{Reason: "inference_failed", Error: "x"}); err != nil {
			e.t.Fatal(err)
		}
	default:
		if err := e.w.Append(journal.Terminated{Reason: res.Outcome}); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.w.Sync(); err != nil {
		e.t.Fatal(err)
	}
	r := journal.Verify(e.w.Path(), e.store.PublicKey(), journal.VerifyOptions{RunID: "run-1"})
	if !r.Complete {
		e.t.Fatalf("journal %s: %+v", r.Status, r.Problems)
	}
}

type event map[string]any

func (e *env) events() []event {
	e.t.Helper()
	b, err := os.ReadFile(e.record)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		e.t.Fatal(err)
	}
	var out []event
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" {
			continue
		}
		var ev event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			continue // a line being written
		}
		out = append(out, ev)
	}
	return out
}

func (e *env) eventsNamed(name string) []event {
	var out []event
	for _, ev := range e.events() {
		if ev["event"] == name {
			out = append(out, ev)
		}
	}
	return out
}

// waitEvent polls the record file until an event named name appears.
func (e *env) waitEvent(name string) {
	e.t.Helper()
	deadline := time.Now().Add(guard)
	for len(e.eventsNamed(name)) == 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("no %s event", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustOutcome(t *testing.T, res Result, want string) {
	t.Helper()
	if res.Outcome != want {
		t.Fatalf("outcome %q (err %v), want %q\nstderr: %s", res.Outcome, res.Err, want, res.Stderr)
	}
}

// ---------------------------------------------------------------------------------------

func TestCompletedSession(t *testing.T) {
	e := newEnv(t, map[string]any{
		"expect_prompt_contains": []string{"Do the task."},
		"steps": []any{
			map[string]any{"thought": "thinking ", "repeat": 3},
			map[string]any{"message": "Hello ", "repeat": 3},
			map[string]any{"message": "world"},
			map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "Read a", "locations": []string{"$CWD/a.txt", "/etc/passwd"},
				"raw_input": map[string]any{"p": 1}}},
			map[string]any{"tool_call_update": map[string]any{"id": "c1", "status": "completed", "raw_output": strings.Repeat("o", 3000)}},
			map[string]any{"plan": []any{"step one", map[string]any{"content": "step two", "priority": "high", "status": "in_progress"}}},
			map[string]any{"message": "!"},
		},
	})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if res.StopReason != "end_turn" || res.Text != "Hello Hello Hello world!" || res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	es := e.entries()
	want := []string{"session_started", "agent_thought", "agent_message", "tool_call", "tool_call_update", "plan", "agent_message", "session_finished"}
	if got := collapsed(es); !slices.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	st := data[journal.SessionStarted](t, es[0])
	if st.SessionID != "fake-session-1" || st.AgentName != "fake-acp-agent" || st.Workspace != e.dir || st.PromptSHA256 != sha("Do the task.") || st.ProtocolVersion != 1 {
		t.Fatalf("session_started %+v", st)
	}
	var chunks, tchunks int64
	var text string
	for _, x := range ofType(es, journal.TypeAgentMessage) {
		m := data[journal.AgentMessage](t, x)
		chunks += m.Chunks
		text += m.Text
	}
	for _, x := range ofType(es, journal.TypeAgentThought) {
		tchunks += data[journal.AgentMessage](t, x).Chunks
	}
	if chunks != 5 || tchunks != 3 || text != res.Text {
		t.Fatalf("coalesced %d message chunks %q, %d thought chunks", chunks, text, tchunks)
	}
	tc := data[journal.ToolCall](t, ofType(es, journal.TypeToolCall)[0])
	if tc.Kind != "read" || tc.RawInputSHA256 != sha(`{"p":1}`) || !slices.Contains(tc.Paths, "a.txt") {
		t.Fatalf("tool_call %+v", tc)
	}
	tu := data[journal.ToolCallUpdate](t, ofType(es, journal.TypeToolCallUpdate)[0])
	if tu.Status != "completed" || len(tu.Excerpt) != journal.MaxExcerptBytes || tu.RawOutputBytes != 3002 {
		t.Fatalf("tool_call_update %+v", tu)
	}
	pl := data[journal.Plan](t, ofType(es, journal.TypePlan)[0])
	if len(pl.Entries) != 2 || pl.Entries[1].Priority != "high" {
		t.Fatalf("plan %+v", pl)
	}
	fin := data[journal.SessionFinished](t, es[len(es)-1])
	if fin.Outcome != "completed" || fin.StopReason != "end_turn" || fin.Text != res.Text || fin.TextSHA256 != sha(res.Text) {
		t.Fatalf("session_finished %+v", fin)
	}
	e.finishAndVerify(res)
}

// TestUnknownStopReasonNotJournaled: a stop reason that is not one of ACP's is text the
// agent chose; it is journaled and returned as "other", never as sent — else an agent
// could end its turn with no answer and its words in the stop reason, carried in clear
// beside an empty answer whatever the gate decides.
func TestUnknownStopReasonNotJournaled(t *testing.T) {
	const words = "the secret is 4821"
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"stop_reason": words}}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	fin := data[journal.SessionFinished](t, ofType(e.entries(), journal.TypeSessionFinished)[0])
	if res.StopReason != "other" || fin.StopReason != "other" {
		t.Fatalf("stop reason %q, session_finished's %q; want other", res.StopReason, fin.StopReason)
	}
	e.finishAndVerify(res)
}

// TestToolCallUpdateJournaled: a tool_call_update that changes the call — its kind,
// title, locations or raw input, after its permission was decided — is journaled with what
// it changes, so that an auditor sees the call allowed as a read of a.txt become an execute
// on /etc/shadow; an update that changes only the status carries nothing else.
func TestToolCallUpdateJournaled(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "Read a", "locations": []string{"$CWD/a.txt"}}},
		map[string]any{"permission": map[string]any{"tool_call_id": "c1"}, "expect": "allow"},
		map[string]any{"tool_call_update": map[string]any{"id": "c1", "kind": "execute", "title": "Run b", "locations": []string{"$CWD/b.txt", "/etc/shadow"},
			"raw_input": map[string]any{"cmd": "cat /etc/shadow"}}},
		map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "fake-session-1",
			"update": map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "c1", "locations": []any{}}}}}, // the SDK omits an empty list
		map[string]any{"tool_call_update": map[string]any{"id": "c1", "status": "completed"}},
		map[string]any{"message": "done"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	ups := ofType(e.entries(), journal.TypeToolCallUpdate)
	if len(ups) != 3 {
		t.Fatalf("%d tool_call_update records, want 3", len(ups))
	}
	changed := data[journal.ToolCallUpdate](t, ups[0])
	if changed.Kind != "execute" || changed.Title != "Run b" || !slices.Equal(changed.Paths, []string{"b.txt", "/etc/shadow"}) ||
		changed.RawInputSHA256 != sha(`{"cmd":"cat /etc/shadow"}`) || changed.RawInputBytes != int64(len(`{"cmd":"cat /etc/shadow"}`)) {
		t.Fatalf("tool_call_update %+v, want the change journaled", changed)
	}
	if cleared := data[journal.ToolCallUpdate](t, ups[1]); cleared.Paths == nil || len(cleared.Paths) != 0 || !strings.Contains(string(ups[1].Data), `"paths":[]`) {
		t.Fatalf("tool_call_update %s, want the cleared locations journaled as paths []", ups[1].Data)
	}
	for _, field := range []string{"kind", "title", "paths", "raw_input_sha256", "raw_input_bytes"} {
		if strings.Contains(string(ups[2].Data), `"`+field+`"`) {
			t.Fatalf("tool_call_update %s carries %s, which it did not change", ups[2].Data, field)
		}
	}
	e.finishAndVerify(res)
}

func TestHashesOnly(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"thought": "secret"}, map[string]any{"message": "answer"},
		map[string]any{"tool_call_update": map[string]any{"id": "c1", "raw_output": "secret output"}}}})
	e.cfg.HashesOnly = true
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	for _, x := range e.entries() {
		if strings.Contains(string(x.Data), "secret") || strings.Contains(string(x.Data), "answer") {
			t.Fatalf("clear text journaled: %s %s", x.Type, x.Data)
		}
	}
	e.finishAndVerify(res)
}

// orderJournal checks, at each Sync after a permission_decided, that the fake has not
// yet recorded an answer to it: the decision is durable before the agent hears it.
type orderJournal struct {
	*journal.Writer
	e       *env
	mu      sync.Mutex
	pending []string // tool call ids decided, not yet synced
	checked int
	bad     []string
}

func (o *orderJournal) Append(r journal.Record) error {
	if p, ok := r.(journal.PermissionDecided); ok {
		o.mu.Lock()
		o.pending = append(o.pending, p.ToolCallID)
		o.mu.Unlock()
	}
	return o.Writer.Append(r)
}

func (o *orderJournal) Sync() error {
	err := o.Writer.Sync()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range o.pending {
		o.checked++
		for _, ev := range o.e.eventsNamed("permission") {
			if ev["tool_call_id"] == id {
				o.bad = append(o.bad, id)
			}
		}
	}
	o.pending = nil
	return err
}

func TestPermissions(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/a.txt"},
			"raw_input": map[string]any{"x": 1}}, "expect": "allow"},
		map[string]any{"permission": map[string]any{"tool_call_id": "p2", "kind": "execute", "title": "Run tests"}, "expect": "reject"},
		map[string]any{"permission": map[string]any{"tool_call_id": "p3", "kind": "edit", "title": "Edit outside", "locations": []string{"$CWD/../x"}}, "expect": "reject"},
		map[string]any{"permission": map[string]any{"tool_call_id": "p4", "kind": "bogus", "title": "?"}, "expect": "reject"},
		map[string]any{"message": "ok"},
	}})
	var seenFn func() []policy.ToolUse
	e.cfg.Decide, seenFn = recording(allowKinds("edit"))
	oj := &orderJournal{Writer: e.w, e: e}
	e.cfg.Journal = oj
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if oj.checked != 4 || len(oj.bad) != 0 {
		t.Fatalf("checked %d decisions; answered before durable: %v", oj.checked, oj.bad)
	}
	perms := e.eventsNamed("permission")
	got := []string{}
	for _, p := range perms {
		got = append(got, fmt.Sprint(p["tool_call_id"], ":", p["outcome"], ":", p["option_id"]))
	}
	want := []string{"p1:allow_once:allow", "p2:reject_once:reject", "p3:reject_once:reject", "p4:reject_once:reject"}
	if !slices.Equal(got, want) {
		t.Fatalf("the agent heard %v, want %v", got, want)
	}
	es := e.entries()
	pd := ofType(es, journal.TypePermissionDecided)
	if len(pd) != 4 {
		t.Fatalf("%d permission_decided", len(pd))
	}
	p1 := data[journal.PermissionDecided](t, pd[0])
	if p1.RequestID != "perm-1" || p1.Decision != "allow" || p1.OptionID != "allow" || !slices.Equal(p1.Paths, []string{"a.txt"}) || p1.Kind != "edit" || p1.PolicyIDs[0] != "allow-edit" {
		t.Fatalf("perm 1 %+v", p1)
	}
	p3 := data[journal.PermissionDecided](t, pd[2])
	if p3.Decision != "deny" || len(p3.Outside) != 1 {
		t.Fatalf("perm 3 %+v", p3)
	}
	p4 := data[journal.PermissionDecided](t, pd[3])
	if p4.Kind != "other" || p4.OptionID != "reject" {
		t.Fatalf("perm 4 %+v", p4)
	}
	seen := seenFn()
	if seen[0].RawInputSHA256 != sha(`{"x":1}`) || seen[0].Workspace != e.dir || seen[0].Title != "Edit a" {
		t.Fatalf("tool use %+v", seen[0])
	}
	e.finishAndVerify(res)
}

// TestPermissionWithoutOnceOption: symbi answers only an allow-once or reject-once option
// whose id names no other kind of option; without one the request is answered cancelled
// and journaled a deny saying so.
func TestPermissionWithoutOnceOption(t *testing.T) {
	for _, tt := range []struct {
		name    string
		options []any
	}{
		{"always only", []any{map[string]any{"id": "always", "kind": "allow_always", "name": "Always"}}},
		{"an id shared with always", []any{
			map[string]any{"id": "yes", "kind": "allow_once", "name": "Yes"},
			map[string]any{"id": "yes", "kind": "allow_always", "name": "Always"},
			map[string]any{"id": "no", "kind": "reject_once", "name": "No"}}},
		{"an id shared with always, always first", []any{
			map[string]any{"id": "no", "kind": "reject_once", "name": "No"},
			map[string]any{"id": "yes", "kind": "allow_always", "name": "Always"},
			map[string]any{"id": "yes", "kind": "allow_once", "name": "Yes"},
			map[string]any{"id": "yes", "kind": "allow_once", "name": "Yes again"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": []string{"$CWD/a.go"},
					"options": tt.options}, "expect": "cancelled"},
				map[string]any{"message": "not reached"},
			}})
			e.cfg.Decide = allowKinds("edit")
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCancelled)
			pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
			if pd.OptionID != "" || pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], "no allow_once option whose id names no other kind") {
				t.Fatalf("permission_decided %+v", pd)
			}
			e.finishAndVerify(res)
		})
	}
}

func TestFS(t *testing.T) {
	outsideDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(outsideDir, "secret.txt"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"read": "$CWD/a.txt", "expect_content": "hello\n"},
		map[string]any{"write": map[string]any{"path": "$CWD/b.txt", "content": "x"}, "expect_error": true},
		map[string]any{"read": "$CWD/../sibling/x", "expect_error": true},
		map[string]any{"read": "$CWD/link.txt", "expect_error": true},
		map[string]any{"read": filepath.Join(outsideDir, "secret.txt"), "expect_error": true},
		map[string]any{"message": "done"},
	}})
	if err := os.WriteFile(filepath.Join(e.dir, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outsideDir, "secret.txt"), filepath.Join(e.dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	e.cfg.Decide = allowKinds("read")
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if _, err := os.Stat(filepath.Join(e.dir, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b.txt written: %v", err)
	}
	es := e.entries()
	var got []string
	for _, x := range es {
		switch x.Type {
		case journal.TypePermissionDecided:
			p := data[journal.PermissionDecided](t, x)
			got = append(got, fmt.Sprintf("%s %s %s %d", p.RequestID, p.Kind, p.Decision, len(p.Outside)))
		case journal.TypeFSRead, journal.TypeFSWrite:
			f := data[journal.FSAccess](t, x)
			got = append(got, fmt.Sprintf("%s %s %s %d", x.Type, f.RequestID, f.Path, f.Bytes))
		}
	}
	want := []string{"fs-1 read allow 0", "fs_read fs-1 a.txt 6", "fs-2 edit deny 0", "fs-3 read deny 1", "fs-4 read deny 1", "fs-5 read deny 1"}
	if !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
	reads := e.eventsNamed("read")
	if len(reads) != 4 || reads[0]["ok"] != true || reads[2]["ok"] != false {
		t.Fatalf("reads %v", reads)
	}
	e.finishAndVerify(res)
}

func TestStartFailure(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{}})
	e.cfg.Executor.Command = []string{filepath.Join(t.TempDir(), "no-such-agent")}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if got := types(e.entries()); !slices.Equal(got, []string{"session_finished"}) {
		t.Fatalf("records %v", got)
	}
	e.finishAndVerify(res)
}

func TestPinMode(t *testing.T) {
	e := newEnv(t, map[string]any{"modes": []string{"default", "read-only"}, "require_mode": "read-only",
		"steps": []any{map[string]any{"message": "ok"}}})
	e.cfg.Executor.PinMode = "read-only"
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if sm := e.eventsNamed("set_mode"); len(sm) != 1 || sm[0]["mode"] != "read-only" {
		t.Fatalf("set_mode %v", sm)
	}
	if st := data[journal.SessionStarted](t, e.entries()[0]); st.Mode != "read-only" {
		t.Fatalf("session_started %+v", st)
	}
	e.finishAndVerify(res)
}

func TestPinModeAbsent(t *testing.T) {
	for _, modes := range [][]string{{"default"}, nil} {
		t.Run(fmt.Sprint(modes), func(t *testing.T) {
			sc := map[string]any{"steps": []any{map[string]any{"message": "ok"}}}
			if modes != nil {
				sc["modes"] = modes
			}
			e := newEnv(t, sc)
			e.cfg.Executor.PinMode = "read-only"
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			if !strings.Contains(res.Err.Error(), `pinned mode "read-only"`) {
				t.Fatalf("err %v", res.Err)
			}
			es := e.entries()
			if got := types(es); !slices.Equal(got, []string{"session_finished"}) {
				t.Fatalf("records %v", got)
			}
			if fin := data[journal.SessionFinished](t, es[0]); fin.Outcome != "error" || fin.Error == "" {
				t.Fatalf("session_finished %+v", fin)
			}
			if p := e.eventsNamed("prompt"); len(p) != 0 {
				t.Fatalf("a prompt was sent: %v", p)
			}
			e.finishAndVerify(res)
		})
	}
}

func TestCapabilities(t *testing.T) {
	e := newEnv(t, map[string]any{"forbid_terminal": true, "require_fs": true, "steps": []any{map[string]any{"message": "ok"}}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	ini := e.eventsNamed("initialize")
	if len(ini) != 1 {
		t.Fatalf("initialize %v", ini)
	}
	caps, _ := json.Marshal(ini[0]["client_capabilities"])
	if strings.Contains(string(caps), `"terminal":true`) || !strings.Contains(string(caps), `"readTextFile":true`) {
		t.Fatalf("capabilities %s", caps)
	}
	e.finishAndVerify(res)
}

func TestCancelHang(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": "working"}, map[string]any{"hang": true}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startRun(ctx, e.cfg)
	e.waitEvent("prompt")
	cancel()
	res := wait(t)
	mustOutcome(t, res, OutcomeCancelled)
	if res.StopReason != "cancelled" || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("result %+v", res)
	}
	if len(e.eventsNamed("cancel")) != 1 {
		t.Fatalf("no session/cancel received: %v", e.events())
	}
	e.finishAndVerify(res)
}

func TestCancelPendingPermission(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit"}, "expect": "cancelled"},
		map[string]any{"message": "not reached"},
	}})
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	e.cfg.Decide = func(policy.ToolUse) policy.Decision {
		close(entered) // once: one permission
		<-release      // a gate waiting for a human
		return policy.Decision{Allow: true}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startRun(ctx, e.cfg)
	select {
	case <-entered:
	case <-time.After(guard):
		t.Fatal("no permission request")
	}
	cancel()
	res := wait(t)
	mustOutcome(t, res, OutcomeCancelled)
	if p := e.eventsNamed("permission"); len(p) != 1 || p[0]["outcome"] != "cancelled" {
		t.Fatalf("the agent heard %v", p)
	}
	if pd := ofType(e.entries(), journal.TypePermissionDecided); len(pd) != 0 {
		t.Fatalf("a decision was journaled: %v", pd)
	}
	e.finishAndVerify(res)
}

func TestCancelIgnored(t *testing.T) {
	e := newEnv(t, map[string]any{"ignore_sigterm": true, "steps": []any{map[string]any{"hang": true, "ignore_cancel": true}}})
	e.cfg.Grace = 100 * time.Millisecond // configuration, not an expectation
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startRun(ctx, e.cfg)
	e.waitEvent("prompt")
	cancel()
	res := wait(t)
	mustOutcome(t, res, OutcomeCancelled)
	if !strings.Contains(res.Err.Error(), "grace") {
		t.Fatalf("err %v", res.Err)
	}
	pid := int(e.eventsNamed("start")[0]["pid"].(float64))
	if proctest.Alive(pid) {
		t.Fatalf("the agent %d is alive", pid)
	}
	e.finishAndVerify(res)
}

// TestCancelHurried: a cancelled session whose agent ignores session/cancel and SIGTERM,
// its grace an hour, ends at once when Hurry closes — closed before the cancel, or while
// the agent ignores session/cancel — its agent killed, the note saying why.
func TestCancelHurried(t *testing.T) {
	for _, early := range []bool{true, false} {
		t.Run(fmt.Sprintf("hurried before the cancel %v", early), func(t *testing.T) {
			e := newEnv(t, map[string]any{"ignore_sigterm": true, "steps": []any{map[string]any{"hang": true, "ignore_cancel": true}}})
			e.cfg.Grace = time.Hour // only Hurry can end the session within the test's guard
			hurry := make(chan struct{})
			e.cfg.Hurry = hurry
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := startRun(ctx, e.cfg)
			e.waitEvent("prompt")
			if early {
				close(hurry)
				cancel()
			} else {
				cancel()
				e.waitEvent("cancel")
				close(hurry)
			}
			res := wait(t)
			mustOutcome(t, res, OutcomeCancelled)
			if !errors.Is(res.Err, context.Canceled) || !strings.Contains(res.Err.Error(), hurriedNote) {
				t.Fatalf("err %v, want the hurried note", res.Err)
			}
			if pid := int(e.eventsNamed("start")[0]["pid"].(float64)); proctest.Alive(pid) {
				t.Fatalf("the agent %d is alive", pid)
			}
			fin := data[journal.SessionFinished](t, ofType(e.entries(), journal.TypeSessionFinished)[0])
			if !strings.Contains(fin.Error, hurriedNote) {
				t.Fatalf("session_finished %+v", fin)
			}
			e.finishAndVerify(res)
		})
	}
}

// startRun runs Run(ctx, cfg) on its own goroutine; wait returns its result, failing the
// test if none comes within guard.
func startRun(ctx context.Context, cfg Config) (wait func(t *testing.T) Result) {
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, cfg) }()
	return func(t *testing.T) Result {
		t.Helper()
		select {
		case res := <-done:
			return res
		case <-time.After(guard):
			t.Fatal("Run did not return")
			return Result{}
		}
	}
}

// expired is a context whose deadline passes when the test says so: the timeout outcome
// without a wall-clock expectation.
type expired struct {
	context.Context
	done chan struct{}
}

func (c *expired) Done() <-chan struct{} { return c.done }

func (c *expired) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func TestTimeout(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": "partial"}, map[string]any{"hang": true}}})
	ctx := &expired{Context: context.Background(), done: make(chan struct{})}
	wait := startRun(ctx, e.cfg)
	e.waitEvent("prompt")
	close(ctx.done)
	res := wait(t)
	mustOutcome(t, res, OutcomeTimeout)
	if !errors.Is(res.Err, context.DeadlineExceeded) || res.StopReason != "cancelled" {
		t.Fatalf("result %+v", res)
	}
	fin := data[journal.SessionFinished](t, ofType(e.entries(), journal.TypeSessionFinished)[0])
	if fin.Outcome != "timeout" {
		t.Fatalf("session_finished %+v", fin)
	}
	e.finishAndVerify(res)
}

func TestCancelledBeforeStart(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": "x"}}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := Run(ctx, e.cfg)
	mustOutcome(t, res, OutcomeCancelled)
	if got := types(e.entries()); !slices.Equal(got, []string{"session_finished"}) {
		t.Fatalf("records %v", got)
	}
	e.finishAndVerify(res)
}

func TestBackgroundChildKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"spawn_background": "sleep 1000", "pid_file": pidFile},
		map[string]any{"message": "spawned"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	pid := proctest.PID(t, pidFile)
	deadline := time.Now().Add(guard)
	for proctest.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the background child %d survived", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.finishAndVerify(res)
}

func TestBrokenAgents(t *testing.T) {
	for name, steps := range map[string][]any{
		"crash":     {map[string]any{"message": "hi"}, map[string]any{"crash": 7}},
		"garbage":   {map[string]any{"message": "hi"}, map[string]any{"garbage": "this is not json"}, map[string]any{"sleep": "1h"}},
		"flood":     {map[string]any{"flood": 4000, "text": strings.Repeat("x", 100)}},
		"big":       {map[string]any{"message": strings.Repeat("y", 1000), "repeat": 200}},
		"rpc error": {map[string]any{"message": "hi"}, map[string]any{"error": map[string]any{"code": 1, "message": "boom"}}},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": steps})
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			t.Logf("err: %v", res.Err)
			es := e.entries()
			if got := types(es); got[0] != "session_started" || got[len(got)-1] != "session_finished" {
				t.Fatalf("records %v", got)
			}
			fin := data[journal.SessionFinished](t, es[len(es)-1])
			if fin.Outcome != "error" || fin.Error == "" {
				t.Fatalf("session_finished %+v", fin)
			}
			pid := int(e.eventsNamed("start")[0]["pid"].(float64))
			if proctest.Alive(pid) {
				t.Fatalf("the agent %d is alive", pid)
			}
			e.finishAndVerify(res)
		})
	}
}

// failJournal fails its Sync once a permission_decided was appended.
type failJournal struct {
	*journal.Writer
	mu   sync.Mutex
	fail bool
}

var errDisk = errors.New("disk on fire")

func (f *failJournal) Append(r journal.Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := r.(journal.PermissionDecided); ok {
		f.fail = true
	}
	return f.Writer.Append(r)
}

func (f *failJournal) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errDisk
	}
	return f.Writer.Sync()
}

func TestJournalFailure(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit"}},
		map[string]any{"message": "should not matter"},
	}})
	e.cfg.Journal = &failJournal{Writer: e.w}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !errors.Is(res.Err, ErrJournal) || !errors.Is(res.Err, errDisk) {
		t.Fatalf("err %v", res.Err)
	}
	if p := e.eventsNamed("permission"); len(p) != 0 && p[0]["outcome"] == "allow_once" {
		t.Fatalf("the agent was allowed: %v", p)
	}
	pid := int(e.eventsNamed("start")[0]["pid"].(float64))
	if proctest.Alive(pid) {
		t.Fatalf("the agent %d is alive", pid)
	}
}

// panickyJournal panics when asked to append a record of type typ.
type panickyJournal struct {
	*journal.Writer
	typ string
}

func (p panickyJournal) Append(r journal.Record) error {
	if r.Type() == p.typ {
		panic("a bug while journaling " + p.typ)
	}
	return p.Writer.Append(r)
}

// TestPanicEndsSession: a panic in symbi's own code during a session — in the policy
// decision's goroutine, or in an ACP callback while the session's lock is held (a record
// being appended) — ends that session with an error wrapping ErrPanicked, the session's
// end still journaled; it does not end the process.
func TestPanicEndsSession(t *testing.T) {
	for _, tt := range []struct {
		name   string
		adjust func(e *env)
	}{
		{"in the decision", func(e *env) {
			e.cfg.Decide = func(policy.ToolUse) policy.Decision { panic("a bug in the policy decision") }
		}},
		{"in a callback, holding the lock", func(e *env) {
			e.cfg.Journal = panickyJournal{Writer: e.w, typ: journal.TypePermissionDecided}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/a.txt"}}},
				map[string]any{"message": "ok"},
			}})
			tt.adjust(e)
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			if !errors.Is(res.Err, ErrPanicked) {
				t.Fatalf("err %v, want ErrPanicked", res.Err)
			}
			if es := e.entries(); es[len(es)-1].Type != journal.TypeSessionFinished {
				t.Fatalf("the journal ends with %s, want session_finished", es[len(es)-1].Type)
			}
		})
	}
}

// TestPinnedModeSwitchDenied: under a pinned mode, a permission request of kind
// switch_mode — the agent asking to leave the pin — is denied before any policy, even one
// that permits every kind (switch_mode is "other" to the policies).
func TestPinnedModeSwitchDenied(t *testing.T) {
	e := newEnv(t, map[string]any{"modes": []string{"default", "read-only"}, "require_mode": "read-only",
		"steps": []any{
			map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "switch_mode", "title": "Exit plan mode"}},
			map[string]any{"message": "ok"},
		}})
	e.cfg.Executor.PinMode = "read-only"
	asked := false
	e.cfg.Decide = func(policy.ToolUse) policy.Decision {
		asked = true
		return policy.Decision{Allow: true, Policies: []string{"allow-everything"}}
	}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
	if asked || pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], "the pinned mode is kept") {
		t.Fatalf("permission_decided %+v (policy asked: %v); want a deny by rule \"the pinned mode is kept\", no policy asked", pd, asked)
	}
	e.finishAndVerify(res)
}

// TestPermissionInheritsToolCall: a session/request_permission is decided on the tool call
// it names as well as on what it repeats. Its toolCall is an ACP ToolCallUpdate: what it
// leaves out keeps the value the tool call was announced with (the Claude Code adapter
// sends {toolCallId, rawInput, title}, no kind, no locations). Decided on the request
// alone, an edit of policies/, of the audit store or of a file outside the workspace was
// Tool::"other" with no paths — past the rules that come before any policy, allowed by
// any policy permitting "other", and journaled as such. It is the edit it was announced as,
// refused by the rule that applies, and so journaled.
func TestPermissionInheritsToolCall(t *testing.T) {
	for _, tt := range []struct {
		name     string
		location string
		rule     string // what the refusal must name
	}{
		{"policies", "$CWD/policies/tools.cedar", "policies are protected"},
		{"audit store", "$CWD/.symbiont/governed/audit-signing.key", "the audit store is protected"},
		{"outside", "/etc/passwd", "outside the workspace"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"tool_call": map[string]any{"id": "t1", "kind": "edit", "title": "Edit file", "locations": []string{tt.location}}},
				// The permission request names the tool call by id only (as claude-agent-acp's
				// canUseTool does): no kind, no locations.
				map[string]any{"permission": map[string]any{"tool_call_id": "t1", "title": "Edit file"}},
				map[string]any{"message": "done"},
			}})
			// A broad policy: it permits what an adapter sends without a kind. That is every
			// request of the Claude Code adapter, so an operator must permit it to get
			// anything done.
			var seen func() []policy.ToolUse
			e.cfg.Decide, seen = recording(allowKinds("other"))
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			perms := e.eventsNamed("permission")
			if len(perms) != 1 {
				t.Fatalf("%d permission events", len(perms))
			}
			pds := ofType(e.entries(), journal.TypePermissionDecided)
			if len(pds) != 1 {
				t.Fatalf("%d permission_decided", len(pds))
			}
			pd := data[journal.PermissionDecided](t, pds[0])
			if perms[0]["outcome"] != "reject_once" || pd.Decision != "deny" {
				t.Errorf("the agent heard %v and the journal says %q (kind %q, paths %q, outside %q, policies %q): "+
					"a permission for tool call t1, announced as an edit of %s, was decided without its kind and locations",
					perms[0]["outcome"], pd.Decision, pd.Kind, pd.Paths, pd.Outside, pd.PolicyIDs, tt.location)
			}
			if !slices.ContainsFunc(pd.Errors, func(s string) bool { return strings.Contains(s, tt.rule) }) && len(pd.Outside) == 0 {
				t.Errorf("permission_decided %+v: want a refusal by rule %q", pd, tt.rule)
			}
			for _, u := range seen() {
				if u.Kind == "other" && len(u.Paths) == 0 && len(u.Outside) == 0 {
					t.Errorf("the policy was asked about Tool::%q with no paths for a tool call announced as an edit of %s", u.Kind, tt.location)
				}
			}
			e.finishAndVerify(res)
		})
	}
}

// TestPermissionKeepsToolCallKind: a permission request naming another kind than the one
// its tool call was announced with (announced a delete, asked as a read) is refused before
// any policy, by rule "a tool call keeps its kind": which of the two the agent will do is
// not the request's to say.
func TestPermissionKeepsToolCallKind(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"tool_call": map[string]any{"id": "t1", "kind": "delete", "title": "Remove a", "locations": []string{"$CWD/a.txt"}}},
		map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "read", "title": "Read a", "locations": []string{"$CWD/a.txt"}}},
		map[string]any{"message": "done"},
	}})
	e.cfg.Decide = allowKinds("read", "delete")
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
	if pd.Decision != "deny" || !slices.ContainsFunc(pd.Errors, func(s string) bool { return strings.Contains(s, "a tool call keeps its kind") }) {
		t.Fatalf("permission_decided %+v: want a refusal by rule \"a tool call keeps its kind\"", pd)
	}
	e.finishAndVerify(res)
}

// TestAnswerLimitNamed: a delegated agent's answer is at most 128 KiB; an agent that
// sends more ends the run in error naming the limit.
func TestAnswerLimitNamed(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": strings.Repeat("y", 1000), "repeat": 140}}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "the agent's answer exceeds 131072 bytes") {
		t.Fatalf("error %v, want the answer limit named", res.Err)
	}
}
