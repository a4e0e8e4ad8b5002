package runs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
)

// delegatedRecords are the records of a delegated run of agent, still working, whose
// first permission request was held at a gate and whose wait ended without a decision
// (the wait ran out: the agent heard a deny, with no approval_decided), and which then
// went on working.
func delegatedRecords(agent, caller string) []journal.Record {
	started := journal.Started{Agent: agent, File: "agents/" + agent + ".symbi", SourceSHA256: sum("source"),
		DeclarationSHA256: sum("decl"), Mode: "delegated", Surface: "mcp-server", Caller: caller, CallerAuth: "token",
		ServerVersion: "test", DeadlineMS: 1800000, Provider: "acp", Model: "fake",
		PolicyMode: "cedar", PromptSHA256: sum("hello"), PromptBytes: 5, InstructionsSHA256: sum(""), Prompt: "hello"}
	return []journal.Record{
		started,
		journal.SessionStarted{Executor: "fake", Command: []string{"/bin/fake"}, Workspace: "/tmp/ws", ProtocolVersion: 1, SessionID: "s1", PromptSHA256: sum("p"), PromptBytes: 1},
		journal.ApprovalRequested{Gate: "commands-review", RequestID: "perm-1", TimeoutMS: 1, Kind: "execute", Title: "go test ./..."},
		// The wait ran out: the agent hears a deny; no approval_decided (journal machine).
		journal.PermissionDecided{RequestID: "perm-1", Kind: "execute", Title: "go test ./...", Paths: []string{}, Outside: []string{}, Decision: "deny", PolicyIDs: []string{"commands-review"}, Errors: []string{}},
		journal.ToolCall{ToolCallID: "t2", Kind: "read", Title: "read README", Status: "pending", Paths: []string{"README.md"}, RawInputSHA256: sum("")},
	}
}

// TestWaitEndedByPermissionDecided: a delegated run whose held permission request ended
// without a decision (its wait ran out, or was cut short) and which goes on working waits
// for no one. Its status is running — the wait closes at its permission_decided, as the
// journal writer counts it — not awaiting_approval: it is not listed among the runs
// waiting for a person, and an approver who did not start it may not read it. Here the
// run is another process's (its writer holds the journal); TestWaitEndedLiveDelegatedRun
// is the same with this server's own run.
func TestWaitEndedByPermissionDecided(t *testing.T) {
	p := newTestProject(t, nil)
	m := p.open(t)
	id := newRunID(t)
	p.journalRun(t, "coder", id, delegatedRecords("coder", "alice"), true) // its writer still holds it: in flight

	evs, err := events(t, m, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusRunning {
		t.Errorf("run_status says %s (approval %+v; run_events says %s): the held request's wait ended at the permission_decided that followed it, nothing waits for a person",
			st.Status, st.Approval, evs.Status)
	}
	page, err := m.List(runs.Filter{Status: runs.StatusAwaitingApproval})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 0 {
		t.Errorf("list_runs {status: awaiting_approval} lists %s, which waits for no decision", page.Runs[0].RunID)
	}
	// bob did not start the run; he may approve runs others started, so while a run
	// awaits approval he may read it. This one awaits nothing: he may not.
	if _, err := m.StatusFor(runs.Caller{ID: "bob", Auth: "token"}, id); err == nil {
		t.Errorf("bob, who did not start the run, reads it as an approver although it waits for no decision")
	}
}

// TestHeldExternalRunEventsStatus: another process's delegated run held at a gate — its
// journal ends with the approval_requested of a permission request no decision followed,
// its writer holds it — is awaiting_approval, and run_events says so as run_status does.
func TestHeldExternalRunEventsStatus(t *testing.T) {
	p := newTestProject(t, nil)
	m := p.open(t)
	id := newRunID(t)
	p.journalRun(t, "coder", id, delegatedRecords("coder", "alice")[:3], true) // up to the held request: in flight
	st, err := m.Status(id)
	if err != nil || st.Status != runs.StatusAwaitingApproval {
		t.Fatalf("run_status: %+v, %v; want awaiting_approval", st, err)
	}
	evs, err := events(t, m, id, 0, 100)
	if err != nil || evs.Status != runs.StatusAwaitingApproval || evs.Done {
		t.Fatalf("run_events: %+v, %v; want awaiting_approval, not done, as run_status says", evs, err)
	}
}

// TestHeldStoppedRunNotDone: a run held at a gate when its server stopped (its journal ends
// with approval_requested, its text in clear, the ledger has no entry) reads as abandoned
// while no server runs, but run_events does not say done: the next server to start on the
// project resumes it, and its journal goes on — here with the approval's events.
func TestHeldStoppedRunNotDone(t *testing.T) {
	model := echoModel(t)
	dir, runID := heldThenStopped(t, model, 0) // the project as kill -9 leaves it

	// symbi runs events, while no server runs: the files alone.
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	offline, err := runs.Open(runs.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	page, err := offline.Events(context.Background(), runID, 0, runs.MaxLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if page.Status != runs.StatusAbandoned || page.Done {
		t.Fatalf("run_events of the held run while no server runs: status %s, done %v; want abandoned, not done (a server resumes it)", page.Status, page.Done)
	}

	second := startRestartServer(t, dir, model, 0)
	if _, err := second.m.Approve(context.Background(), runs.Caller{ID: "bob", Auth: "token"}, runID, "", invoke.ApprovalApprove, "checked"); err != nil {
		t.Fatalf("approve_run of the resumed run: %v", err)
	}
	more, err := second.m.Events(context.Background(), runID, page.NextCursor, runs.MaxLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(more.Events) == 0 || !more.Done || more.Status != runs.StatusCompleted {
		t.Fatalf("run_events after the resumed run was approved: %d events, done %v, status %s; want its approval's events, done, completed", len(more.Events), more.Done, more.Status)
	}
}

// TestOverruledHeldRunNotDone: a run held at a gate whose journal ends with
// approval_requested and then a policy_reevaluated that denied the answer at no gate (a
// resuming server judged it again under changed policies and stopped before its
// terminated line) is resumed by the next server (invoke.ReopenHeld), which ends it
// policy_denied: while no server runs, run_events does not say done.
func TestOverruledHeldRunNotDone(t *testing.T) {
	model := echoModel(t)
	dir, runID := heldThenStopped(t, model, 0)
	name := journal.FileName(policy.AgentID("helper"), runID)

	// The journal as a resuming server that judged the held answer again, denied at no
	// gate, leaves it when it stops before its terminated line.
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	store, err := journal.OpenStore(root, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, recs, err := store.Reopen(name)
	if err != nil {
		t.Fatal(err)
	}
	var req struct {
		TextSHA256 string `json:"text_sha256"`
	}
	if last := recs[len(recs)-1]; last.Type != journal.TypeApprovalRequested || json.Unmarshal(last.Data, &req) != nil {
		t.Fatalf("the held journal ends with %s", last.Type)
	}
	if err := w.Append(journal.PolicyReevaluated{PolicyMode: "cedar", PolicyDigest: "changed", Decision: "deny",
		PolicyIDs: []string{"no-acme"}, Errors: []string{}, Gate: "", TextSHA256: req.TextSHA256}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Premise: the next server resumes this journal (and then ends it policy_denied).
	h, err := invoke.ReopenHeld(store, name)
	if err != nil || h == nil {
		t.Fatalf("premise: ReopenHeld of the overruled journal: %v, %v; want it resumed", h, err)
	}
	h.Close()
	store.Close()

	offline, err := runs.Open(runs.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	page, err := offline.Events(context.Background(), runID, 0, runs.MaxLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if page.Done {
		t.Fatalf("run_events of the overruled held run while no server runs: status %s, done; want not done (a server resumes it)", page.Status)
	}

	second := startRestartServer(t, dir, model, 0)
	awaitStatus(t, second.m, runID, runs.StatusPolicyDenied)
	more, err := second.m.Events(context.Background(), runID, page.NextCursor, runs.MaxLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(more.Events) == 0 || !more.Done {
		t.Fatalf("run_events once the next server ended the run: %d events, done %v; want its terminated, done", len(more.Events), more.Done)
	}
}

// ---- a server fixture: project, ledger, runner and Manager, as symbi mcp builds them ----

// gateFiles is a project whose answers naming ACME are held for a person.
var gateFiles = map[string]string{
	"agents/helper.symbi": "agent helper {\n  capabilities = [\"answer\"]\n}\n",
	"policies/respond.cedar": `@id("respond") permit (principal, action == Action::"respond", resource);
@gate("human") @id("customer-names") forbid (principal, action == Action::"respond", resource) when { context.response like "*ACME*" };
`,
}

func gateProject(t *testing.T) string { return writeProject(t, gateFiles) }

// writeProject writes files (relative path → content) into a new directory and returns it.
func writeProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func echoModel(t *testing.T) *loopback.Server {
	t.Helper()
	model := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	if err := model.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	return model
}

type restartServer struct {
	runner *invoke.Runner
	m      *runs.Manager
	held   []string // the run ids resumed at start-up
	stop   func()
}

// startRestartServer serves dir as package serve does: the ledger opened and
// reconciled, held runs reopened and resumed, a Manager over the runner.
func startRestartServer(t *testing.T, dir string, model *loopback.Server, maxPerCaller int) *restartServer {
	t.Helper()
	return startServerHashes(t, dir, model, maxPerCaller, false)
}

// startServerHashes is startRestartServer with the journal keeping only digests of text
// when hashesOnly (SYMBI_JOURNAL_TEXT=hashes).
func startServerHashes(t *testing.T, dir string, model *loopback.Server, maxPerCaller int, hashesOnly bool) *restartServer {
	t.Helper()
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := p.LoadRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	var held []*invoke.Held
	lw, _, err := ledger.OpenProjectResuming(p.Root(), "", func(store *journal.Store, name string) {
		if h, err := invoke.ReopenHeld(store, name); err == nil && h != nil {
			held = append(held, h)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := inference.NewOpenAI(model.URL(), "", "test-model")
	if err != nil {
		t.Fatal(err)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Provider: prov, Ledger: lw, HashesOnly: hashesOnly})
	m := runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg, Ledger: lw, MaxRunsPerCaller: maxPerCaller})
	s := &restartServer{runner: runner, m: m}
	for _, h := range held {
		s.held = append(s.held, h.RunID())
		m.Resume(h)
	}
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := runner.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			m.Close()
			lw.Close()
			p.Close()
		})
	}
	t.Cleanup(s.stop)
	return s
}

// awaitStatus long-polls the run's events until its status is want.
func awaitStatus(t *testing.T, m *runs.Manager, id, want string) {
	t.Helper()
	var cursor int64
	for range 1000 {
		evs, err := m.Events(context.Background(), id, cursor, 100, runs.MaxWait)
		if err != nil {
			t.Fatal(err)
		}
		if evs.Status == want {
			return
		}
		if evs.Done {
			t.Fatalf("run %s ended %s, want %s", id, evs.Status, want)
		}
		cursor = evs.NextCursor
	}
	t.Fatalf("run %s never reached %s", id, want)
}

// snapshotProject copies the project directory as a kill -9 of its server would leave
// it at this moment: every file, with its mode.
func snapshotProject(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return err
			}
			return os.Chmod(dst, info.Mode().Perm())
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

// projectDirOf is the project directory of the run st (its journal is in
// <dir>/.symbiont/governed).
func projectDirOf(t *testing.T, st *runs.Status) string {
	t.Helper()
	return filepath.Dir(filepath.Dir(filepath.Dir(st.Journal)))
}

// TestResumedRunCountsForItsCaller: --max-runs-per-caller bounds the runs one caller has
// in flight. alice's run held at a gate counts while the server that started it serves,
// and after a restart (kill -9), resumed and waiting, it still counts as alice's: her
// second run is busy both times.
func TestResumedRunCountsForItsCaller(t *testing.T) {
	model := echoModel(t)
	first := startRestartServer(t, gateProject(t), model, 1)
	alice := invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"}
	st, _, err := first.m.Start(context.Background(), alice)
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, first.m, st.RunID, runs.StatusAwaitingApproval)
	plain := invoke.Request{Agent: "helper", Prompt: "plain", Caller: "alice", CallerAuth: "token"}
	if _, _, err := first.m.Start(context.Background(), plain); errcode.Of(err) != errcode.Busy {
		t.Fatalf("before the restart, alice's second run: %v; want busy (her held run is in flight)", err)
	}
	dir := snapshotProject(t, projectDirOf(t, st))
	first.stop()

	second := startRestartServer(t, dir, model, 1)
	if len(second.held) != 1 || second.held[0] != st.RunID {
		t.Fatalf("resumed %v, want [%s]", second.held, st.RunID)
	}
	if got, err := second.m.Status(st.RunID); err != nil || got.Status != runs.StatusAwaitingApproval {
		t.Fatalf("after the restart: %+v, %v; want awaiting_approval", got, err)
	}
	if got, _, err := second.m.Start(context.Background(), plain); errcode.Of(err) != errcode.Busy {
		id := ""
		if got != nil {
			id = got.RunID
		}
		t.Fatalf("after the restart, alice's second run %s started (err %v) while her resumed run %s still waits; want busy (--max-runs-per-caller 1)", id, err, st.RunID)
	}
}

// TestWaitEndedLiveDelegatedRun is TestWaitEndedByPermissionDecided with this server's
// own run: a delegated agent (cmd/fake-acp-agent) asks to run a command, a
// @gate("human") forbid holds the request, no one decides it before the wait
// (--approval-timeout) runs out, the agent hears reject and works on. run_status says
// running, as run_events does (not awaiting_approval of a request approve_run would
// refuse as not waiting).
func TestWaitEndedLiveDelegatedRun(t *testing.T) {
	m := startDelegatedServer(t, []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "execute", "title": "go test ./..."}, "expect": "reject"},
		map[string]any{"message": "I will read the code instead."},
		map[string]any{"hang": true},
	}, time.Millisecond)

	st, _, err := m.Start(context.Background(), invoke.Request{Agent: "coder", Prompt: "run the tests", Async: true})
	if err != nil {
		t.Fatal(err)
	}
	// Read the events until the agent's message after the timed-out request is durable.
	var cursor int64
	var page *runs.Events
	for seen := false; !seen; {
		if page, err = m.Events(context.Background(), st.RunID, cursor, 100, runs.MaxWait); err != nil {
			t.Fatal(err)
		}
		if page.Done {
			t.Fatalf("the run ended %s", page.Status)
		}
		for _, ev := range page.Events {
			seen = seen || ev.Type == journal.TypeAgentMessage
		}
		cursor = page.NextCursor
	}
	got, err := m.Status(st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != runs.StatusRunning {
		t.Errorf("run_status: %s (approval %+v); run_events: %s — the held request's wait is over (permission_decided deny), the agent works on",
			got.Status, got.Approval, page.Status)
	}
	if got.Approval != nil && got.Approval.RequestID != "" {
		_, err := m.Approve(context.Background(), runs.Caller{ID: "stdio", Auth: "stdio"}, st.RunID, got.Approval.RequestID, "approve", "checked the request")
		if got.Status == runs.StatusAwaitingApproval && err != nil {
			t.Errorf("run_status says the run awaits approval of %s, and approve_run of it answers: %v", got.Approval.RequestID, err)
		}
	}
}

// TestResumedRunIsThisServers: a run held at a gate when the last server stopped is this
// server's from the moment Manager.Resume returns, not once a goroutine has adopted it: a
// cancel_run right after start-up cancels it, not refused as "in flight in another server
// process" (with one P, the watcher would not have run yet).
func TestResumedRunIsThisServers(t *testing.T) {
	model := echoModel(t)
	dir, runID := heldThenStopped(t, model, 0)

	// One P: the watcher goroutine Manager.Resume starts runs only when this one blocks,
	// as a request arriving at once may find it.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	second := startRestartServer(t, dir, model, 0) // returns once Manager.Resume has returned
	got, already, err := second.m.Cancel(context.Background(), runID)
	if err != nil || already || got.Status != runs.StatusCancelled {
		t.Fatalf("cancel_run of the resumed run right after start-up: %+v, already_finished %v, %v; want cancelled", got, already, err)
	}
}

// TestExternalInFlightFactsNotStale: another process's run in flight has its
// facts kept until its journal changes (size, inode). A record appended while a status is
// being built — after the journal was read, before its facts were — does not leave the
// facts of the older bytes marked current: once the writer pauses (a request held at a
// gate may wait for hours), the status says what the journal says.
func TestExternalInFlightFactsNotStale(t *testing.T) {
	p := newTestProject(t, nil)
	m := p.open(t)
	id := newRunID(t)
	w := p.journalRun(t, "coder", id, delegatedRecords("coder", "alice")[:2], true)
	tool := func(i int) journal.ToolCall {
		return journal.ToolCall{ToolCallID: fmt.Sprintf("t%d", i), Kind: "read", Title: "read README", Status: "pending", Paths: []string{"README.md"}, RawInputSHA256: sum("")}
	}
	n := 2
	for ; n < 10; n++ {
		if err := w.Append(tool(n)); err != nil {
			t.Fatal(err)
		}
	}
	// The record that comes while a status is built — after the journal was read, before
	// its facts were — is the writer's request held at a gate: it then waits (for hours,
	// perhaps) and writes nothing more.
	runs.SetTestAfterRead(func() {
		runs.SetTestAfterRead(nil)
		if err := w.Append(journal.ApprovalRequested{Gate: "commands-review", RequestID: "perm-1", TimeoutMS: 600000, Kind: "execute", Title: "go test ./..."}); err != nil {
			t.Error(err)
		}
		if err := w.Sync(); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { runs.SetTestAfterRead(nil) })
	if _, err := m.Status(id); err != nil {
		t.Fatal(err)
	}
	n++
	for i := 0; i < 3; i++ {
		st, err := m.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Records != int64(n) || st.Status != runs.StatusAwaitingApproval {
			t.Fatalf("run_status says %s with %d records; the journal, unchanged since, holds %d and ends with a held request (awaiting_approval): the facts of older bytes are kept as current", st.Status, st.Records, n)
		}
	}
}

// cliResolve resolves runID in the project dir as `symbi runs resolve` does: the files
// alone, a ledger writer, no server.
func cliResolve(t *testing.T, dir, runID, value string) (*runs.Status, error) {
	t.Helper()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	store, err := journal.OpenStore(root, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lw, err := ledger.Open(root, store.SigningKey())
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Close()
	m, err := runs.Open(runs.Config{Root: root, Ledger: lw})
	if err != nil {
		t.Fatal(err)
	}
	return m.Resolve(runID, value, "the run was abandoned; superseded by another", runs.Caller{ID: "cli:reviewer", Auth: "os"})
}

// TestResolvedHeldRunNotResumed: a server is killed while a run of it waits at a human
// gate; before the next server starts, `symbi runs resolve` sees the run abandoned (no
// terminated record, no writer) and records a resolution. The next server does not resume
// it — a resolution concludes about a finished run — so it stays abandoned, resolved, and
// nothing can release its text.
func TestResolvedHeldRunNotResumed(t *testing.T) {
	model := echoModel(t)
	dir, runID := heldThenStopped(t, model, 0)

	res, err := cliResolve(t, dir, runID, "superseded")
	if err != nil || res.Status != runs.StatusAbandoned {
		t.Fatalf("resolve of the held run between servers: %+v, %v; want it resolved as abandoned", res, err)
	}

	second := startRestartServer(t, dir, model, 0)
	got, err := second.m.Status(runID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != runs.StatusAbandoned || got.Resolution == nil || got.Resolution.Value != "superseded" || got.Released {
		t.Fatalf("the held run resolved while no server ran it, after the next server started: %s, resolution %+v, released %v; want abandoned, superseded, nothing released",
			got.Status, got.Resolution, got.Released)
	}
	if _, err := second.m.Approve(context.Background(), runs.Caller{ID: "bob", Auth: "token"}, runID, "", invoke.ApprovalApprove, "ok"); errcode.Of(err) != errcode.InvalidTransition {
		t.Fatalf("approve_run of the resolved run: %v; want invalid_transition", err)
	}
}

// TestHashesOnlyApproverSeesHeldText: in hashes-only mode the journal keeps only the held
// answer's digest, yet its approver sees what it decides: run_status shows the text the
// run holds, to a caller who may approve it, and still not to the requester (four eyes).
func TestHashesOnlyApproverSeesHeldText(t *testing.T) {
	s := startServerHashes(t, gateProject(t), echoModel(t), 0, true)
	st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, s.m, st.RunID, runs.StatusAwaitingApproval)
	got, err := s.m.StatusFor(runs.Caller{ID: "bob", Auth: "token"}, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Approval == nil || got.Approval.Text == nil || *got.Approval.Text != "echo: tell ACME" {
		t.Fatalf("the approver's run_status in hashes-only mode: %+v; want approval.text, the held answer", got.Approval)
	}
	own, err := s.m.StatusFor(runs.Caller{ID: "alice", Auth: "token"}, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if own.Approval == nil || own.Approval.Text != nil {
		t.Fatalf("the requester's run_status: %+v; want approval without its text (four eyes)", own.Approval)
	}
}

// heldThenStopped serves a gated project, starts alice's run held at the gate, and stops
// the server with the run still waiting (the project as a kill -9 leaves it): the project
// directory, for the next server, and the run's id.
func heldThenStopped(t *testing.T, model *loopback.Server, maxPerCaller int) (dir, runID string) {
	t.Helper()
	first := startRestartServer(t, gateProject(t), model, maxPerCaller)
	st, _, err := first.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, first.m, st.RunID, runs.StatusAwaitingApproval)
	dir = snapshotProject(t, projectDirOf(t, st))
	first.stop()
	return dir, st.RunID
}
