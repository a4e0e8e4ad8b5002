package runs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
)

// TestCancelOtherProcessAwaitingRefused: a run another server process holds at a human
// gate (its writer holds the journal, its last record approval_requested) is in flight
// there: cancel_run here is invalid_transition, never answered as an already finished run.
func TestCancelOtherProcessAwaitingRefused(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, heldAtGateRecords("alpha"), true)
	m := p.open(t)
	if st, err := m.Status(id); err != nil || st.Status != runs.StatusAwaitingApproval {
		t.Fatalf("premise: %+v, %v; want awaiting_approval", st, err)
	}
	st, already, err := m.Cancel(context.Background(), id)
	if errcode.Of(err) != errcode.InvalidTransition {
		t.Fatalf("cancel_run of another process's waiting run: %+v, already_finished %v, %v; want invalid_transition", st, already, err)
	}
}

// TestApproveFourEyes: over HTTP the built-in access default is four eyes: the caller
// that started a run may not approve it. alice's approve_run of her own held run is
// access_denied and decides nothing (the run still waits); carol's approval releases it.
func TestApproveFourEyes(t *testing.T) {
	s := startRestartServer(t, gateProject(t), echoModel(t), 0)
	alice, carol := runs.Caller{ID: "alice", Auth: "token"}, runs.Caller{ID: "carol", Auth: "token"}
	st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: alice.ID, CallerAuth: alice.Auth})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, s.m, st.RunID, runs.StatusAwaitingApproval)
	got, err := s.m.Approve(context.Background(), alice, st.RunID, "", invoke.ApprovalApprove, "I checked my own run")
	if errcode.Of(err) != errcode.AccessDenied {
		t.Fatalf("approve_run by the run's own caller over HTTP: %+v, %v; want access_denied (four eyes)", got, err)
	}
	if now, err := s.m.Status(st.RunID); err != nil || now.Status != runs.StatusAwaitingApproval || now.Approval == nil || now.Approval.Decision != "" {
		t.Fatalf("after the refused approval: %+v, %v; want the run still awaiting approval, undecided", now, err)
	}
	got, err = s.m.Approve(context.Background(), carol, st.RunID, "", invoke.ApprovalApprove, "checked the text")
	if err != nil || got.Status != runs.StatusCompleted {
		t.Fatalf("approve_run by another caller: %+v, %v; want completed", got, err)
	}
}

// startDelegatedServer serves a project whose agent coder is the fake ACP agent running
// steps, with use_tool of execute held at the gate commands-review; approval waits last
// approvalTimeout (0: the default, 24 h).
func startDelegatedServer(t *testing.T, steps []any, approvalTimeout time.Duration) *runs.Manager {
	t.Helper()
	aux := t.TempDir()
	fake := filepath.Join(aux, "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", fake, "symbi/cmd/fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	script := filepath.Join(aux, "script.json")
	b, _ := json.Marshal(map[string]any{"forbid_terminal": true, "steps": steps})
	if err := os.WriteFile(script, b, 0o644); err != nil {
		t.Fatal(err)
	}
	execs, _ := json.Marshal(map[string]any{"executors": map[string]any{"fake": map[string]any{"command": []string{fake, "--script", script}}}})
	reg, err := executors.Parse(execs, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeProject(t, map[string]string{
		"agents/coder.symbi": "metadata { executor = \"fake\" }\nagent coder {}\n",
		"policies/respond.cedar": `@id("respond") permit (principal, action == Action::"respond", resource);
@gate("human") @id("commands-review") forbid (principal, action == Action::"use_tool", resource == Tool::"execute");
`,
	})
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	agents, err := p.LoadRegistry(nil, dsl.Options{Executors: func(n string) bool { _, ok := reg.Get(n); return ok }})
	if err != nil {
		t.Fatal(err)
	}
	lw, _, err := ledger.OpenProject(p.Root(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lw.Close() })
	runner := invoke.New(invoke.Config{Project: p, Registry: agents, Policies: policy.Load(p.Root()), Ledger: lw,
		Executors: reg, ApprovalTimeout: approvalTimeout})
	m := runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: agents, Ledger: lw})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runner.Shutdown(ctx)
		m.Close()
	})
	return m
}

// TestHeldRequestTitleToApprover: the title of a delegated agent's held permission
// request is text the agent chose: run_status shows it to a caller who may approve the
// request while it waits (here the stdio caller, who approves its own runs), and the
// status of a reader with no right to approve does not carry it.
func TestHeldRequestTitleToApprover(t *testing.T) {
	m := startDelegatedServer(t, []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "execute", "title": "go test ./..."}, "expect": "allow"},
		map[string]any{"hang": true},
	}, 0)
	stdio := runs.Caller{ID: invoke.CallerStdio, Auth: "stdio"}
	st, _, err := m.Start(context.Background(), invoke.Request{Agent: "coder", Prompt: "run the tests", Async: true})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, m, st.RunID, runs.StatusAwaitingApproval)
	plain, err := m.Status(st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Approval == nil || plain.Approval.RequestID == "" || plain.Approval.Title != "" {
		t.Fatalf("run_status without an approver: approval %+v; want the held request named, its title withheld", plain.Approval)
	}
	got, err := m.StatusFor(stdio, st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Approval == nil || got.Approval.Title != "go test ./..." {
		t.Fatalf("run_status for the approver of the held request: approval %+v; want its title %q", got.Approval, "go test ./...")
	}
	if _, _, err := m.Cancel(context.Background(), st.RunID); err != nil {
		t.Fatal(err)
	}
}

// TestOwnRunPrunedKeepsNotReleased: a run this server ended without releasing its text
// (here cancelled while held at the gate) stays not released once symbi audit prune
// removes its journal while the server still serves: its status is what the ledger says
// of it, and nothing was released.
func TestOwnRunPrunedKeepsNotReleased(t *testing.T) {
	s := startRestartServer(t, gateProject(t), echoModel(t), 0)
	st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, s.m, st.RunID, runs.StatusAwaitingApproval)
	if got, _, err := s.m.Cancel(context.Background(), st.RunID); err != nil || got.Status != runs.StatusCancelled {
		t.Fatalf("cancel_run: %+v, %v", got, err)
	}
	s.m.Close() // the run's watcher has recorded its end
	dir := projectDirOf(t, st)
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if pruned, _, err := ledger.Prune(root, "", func(r string, _ time.Time) bool { return r == st.RunID }, false); err != nil || len(pruned) != 1 {
		t.Fatalf("prune: %v %+v", err, pruned)
	}
	got, err := s.m.Status(st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.JournalPruned || got.Status != runs.StatusCancelled || got.Released {
		t.Fatalf("the cancelled run, pruned: status %s, released %v, pruned %v; want cancelled, not released, pruned", got.Status, got.Released, got.JournalPruned)
	}
}

// TestStartCancelledBeforeIDNotLeftRunning: a start_run whose request ends before the
// run's id could be returned (here its context is cancelled before the call) does not
// leave the run going on unseen: the run is cancelled, and ends cancelled, its answer
// released to no one.
func TestStartCancelledBeforeIDNotLeftRunning(t *testing.T) {
	s := startRestartServer(t, gateProject(t), echoModel(t), 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var startErr error
	for range 20 {
		st, _, err := s.m.Start(ctx, invoke.Request{Agent: "helper", Prompt: "plain", Caller: "alice", CallerAuth: "token"})
		if err != nil {
			startErr = err
			break
		}
		// Its started record was durable before the cancelled request was looked at: the
		// caller has its id. Not the case under test; try again.
		if _, _, err := s.m.Cancel(context.Background(), st.RunID); err != nil {
			t.Fatal(err)
		}
	}
	if startErr == nil {
		t.Skip("every start_run had its started record durable before the cancelled request was looked at")
	}
	s.m.Close() // every run has ended and its end is in the index
	page, err := s.m.List(runs.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) == 0 {
		return // refused before its journal held a record
	}
	if got := page.Runs[0]; got.Status != runs.StatusCancelled || got.Released {
		t.Fatalf("start_run answered %v, and its run went on: status %s, released %v; want it cancelled, nothing released", startErr, got.Status, got.Released)
	}
}

// TestWaiterPlaceReturned: the bound on run_events calls waiting at once counts the
// calls waiting now, not every call that ever waited: after more than MaxWaiters long
// polls have each answered, the next long poll of a run in flight still waits.
func TestWaiterPlaceReturned(t *testing.T) {
	p := newTestProject(t, nil)
	done := p.run(t, "alpha", runs.StatusCompleted)
	live := newRunID(t)
	p.journalRun(t, "alpha", live, records("alpha", "", "", true), true) // in flight elsewhere
	m := p.open(t)
	all := int64(len(completeLines(readFile(t, p.journalPath("alpha", done)))))
	for i := range runs.MaxWaiters + 8 {
		evs, err := m.Events(context.Background(), done, all, 10, runs.MaxWait)
		if err != nil || !evs.Done {
			t.Fatalf("long poll %d of a finished run read to its end: %+v, %v; want done at once", i, evs, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := false
	runs.SetTestExternalWait(func() { waited = true; cancel() })
	defer runs.SetTestExternalWait(nil)
	evs, err := m.Events(ctx, live, 2, 10, runs.MaxWait)
	if err != nil {
		t.Fatal(err)
	}
	if !waited {
		t.Fatalf("the long poll of a run in flight answered at once (%+v) with no other call waiting: the places of the calls that had answered were never given back", evs)
	}
}

// TestLiveRunServesOnlyDurable: run_events of this server's run in flight serves only
// the records its writer has made durable: a line in the journal file beyond the writer's
// durable receipt (written, not yet synced) is not served, even one that verifies.
func TestLiveRunServesOnlyDurable(t *testing.T) {
	s := startRestartServer(t, gateProject(t), echoModel(t), 0)
	st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, s.m, st.RunID, runs.StatusAwaitingApproval)
	held, err := s.m.Status(st.RunID)
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(projectDirOf(t, st))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	store, err := journal.OpenStore(root, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	before := readFile(t, held.Journal)
	ls := completeLines(before)
	if int64(len(ls)) != held.Records {
		t.Fatalf("premise: the journal has %d lines, its durable receipt %d records", len(ls), held.Records)
	}
	payload := fmt.Sprintf(`{"v":1,"run_id":%q,"seq":%d,"prev":%q,"time":"2026-01-02T03:04:05.000Z","agent_id":%q,"type":%q,"data":{}}`,
		st.RunID, len(ls), hashLine(ls[len(ls)-1]), held.AgentID, journal.TypePolicyReevaluated)
	f, err := os.OpenFile(held.Journal, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(journal.Seal(store.SigningKey(), journal.SignatureContext, []byte(payload)))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(held.Journal, before, 0o600) // the writer's file as it left it
	evs, err := s.m.Events(context.Background(), st.RunID, 0, runs.MaxLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(evs.Events)) != held.Records || evs.NextCursor != held.Records {
		t.Fatalf("run_events served %d events (next_cursor %d) of a run whose writer has made %d durable", len(evs.Events), evs.NextCursor, held.Records)
	}
	// A cursor beyond the durable events is beyond the events so far.
	_, err = s.m.Events(context.Background(), st.RunID, held.Records+1, 10, 0)
	wantCode(t, err, errcode.InvalidRequest)
}

// TestHashesOnlyHeldRunDone: a run held at a gate when its server stopped, whose
// journal keeps only the held text's digest (SYMBI_JOURNAL_TEXT=hashes), cannot be
// resumed: read with no server running it is abandoned, and run_events is done once
// every event is read.
func TestHashesOnlyHeldRunDone(t *testing.T) {
	model := echoModel(t)
	first := startServerHashes(t, gateProject(t), model, 0, true)
	st, _, err := first.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, first.m, st.RunID, runs.StatusAwaitingApproval)
	dir := snapshotProject(t, projectDirOf(t, st)) // as a kill -9 leaves it
	first.stop()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	m, err := runs.Open(runs.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	var cursor int64
	for range 100 {
		evs, err := m.Events(context.Background(), st.RunID, cursor, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Events) == 0 {
			if evs.Status != runs.StatusAbandoned || !evs.Done {
				t.Fatalf("every event read: status %s, done %v; want abandoned, done (a hashes-only held run is never resumed)", evs.Status, evs.Done)
			}
			return
		}
		cursor = evs.NextCursor
	}
	t.Fatal("the run's events never ended")
}

// TestDecidedHeldRunStoppedIsDone: a journal left without its terminated record after
// its held answer was decided (approval_decided is its last record: the server stopped
// between the decision and the run's end) is not resumed — only a journal whose last
// record is the held answer's approval_requested, or a policy_reevaluated after it, is —
// so, with no server writing it, it is abandoned and run_events is done once every event
// is read.
func TestDecidedHeldRunStoppedIsDone(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, heldAtGateRecords("alpha", journal.ApprovalDecided{Decision: "approve", Approver: "carol", ApproverAuth: "token",
		Reason: "checked", Via: "approve_run"}), false)
	all := int64(len(completeLines(readFile(t, p.journalPath("alpha", id)))))
	evs, err := events(t, p.open(t), id, all, 10)
	if err != nil {
		t.Fatal(err)
	}
	if evs.Status != runs.StatusAbandoned || !evs.Done {
		t.Fatalf("every event read: status %s, done %v; want abandoned, done", evs.Status, evs.Done)
	}
}

// TestPerCallerBoundAfterEndedRuns: --max-runs-per-caller counts each run once: a run
// that has ended gives its place back once, however many times its end is reported, so
// after earlier runs have ended a caller at the bound is still refused with busy.
func TestPerCallerBoundAfterEndedRuns(t *testing.T) {
	s := startRestartServer(t, gateProject(t), echoModel(t), 1)
	plain := invoke.Request{Agent: "helper", Prompt: "plain", Caller: "alice", CallerAuth: "token"}
	for i := range 3 {
		if _, err := s.m.Invoke(context.Background(), plain, nil); err != nil {
			t.Fatalf("invoke %d: %v", i, err)
		}
	}
	s.m.Close() // every run's watcher has seen its end
	st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, s.m, st.RunID, runs.StatusAwaitingApproval)
	if got, _, err := s.m.Start(context.Background(), plain); errcode.Of(err) != errcode.Busy {
		t.Fatalf("alice's second run in flight started (%+v, %v) beyond --max-runs-per-caller 1; want busy", got, err)
	}
}

// TestDecidedWaitIsRunning: another process's run whose held answer has been decided
// (approval_decided durable, its end not yet written) waits for no one: it is running, not
// awaiting_approval, with the decision in its approval.
func TestDecidedWaitIsRunning(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, heldAtGateRecords("alpha", journal.ApprovalDecided{Decision: "approve", Approver: "carol", ApproverAuth: "token",
		Reason: "checked", Via: "approve_run"}), true) // its writer still holds it
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusRunning || st.Approval == nil || st.Approval.Decision != "approve" || st.Approval.Approver != "carol" {
		t.Fatalf("status %s, approval %+v; want running, approved by carol", st.Status, st.Approval)
	}
}

// TestOtherRequestDecidedStillWaits: a delegated run's held permission request waits
// until that request is decided: a permission_decided for another request (one no gate
// held) does not end the wait, and the run is still awaiting_approval of its request.
func TestOtherRequestDecidedStillWaits(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	recs := delegatedRecords("coder", "alice")[:2] // started, session_started
	recs = append(recs,
		journal.ApprovalRequested{Gate: "commands-review", RequestID: "perm-2", TimeoutMS: 60000, Kind: "execute", Title: "go test ./..."},
		journal.PermissionDecided{RequestID: "perm-3", Kind: "read", Title: "read README", Paths: []string{}, Outside: []string{}, Decision: "allow", PolicyIDs: []string{"reads"}, Errors: []string{}})
	p.journalRun(t, "coder", id, recs, true) // its writer still holds it
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusAwaitingApproval || st.Approval == nil || st.Approval.RequestID != "perm-2" {
		t.Fatalf("status %s, approval %+v; want awaiting_approval of perm-2", st.Status, st.Approval)
	}
}

// TestApprovalDeadline: a held answer's approval says when its wait ends: the time of
// its approval_requested record plus the timeout_ms it records.
func TestApprovalDeadline(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, heldAtGateRecords("alpha"), true) // timeout_ms 60000
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Approval == nil {
		t.Fatalf("status %s without approval", st.Status)
	}
	requested, err1 := time.Parse(time.RFC3339Nano, st.Approval.RequestedAt)
	deadline, err2 := time.Parse(time.RFC3339Nano, st.Approval.Deadline)
	if err1 != nil || err2 != nil {
		t.Fatalf("approval times %q, %q: %v, %v", st.Approval.RequestedAt, st.Approval.Deadline, err1, err2)
	}
	if got := deadline.Sub(requested); got != time.Minute {
		t.Fatalf("deadline %s is %v after the request %s; want the 60000 ms the wait records", st.Approval.Deadline, got, st.Approval.RequestedAt)
	}
}

// TestDelegatedReleasedText: the released text of a delegated run is its
// session_finished record's text, read back from the journal by run_status.
func TestDelegatedReleasedText(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	const answer = "the tests pass"
	recs := delegatedRecords("coder", "alice")[:2] // started, session_started
	recs = append(recs,
		journal.SessionFinished{Outcome: "completed", StopReason: "end_turn", TextSHA256: sum(answer), TextBytes: int64(len(answer)), Text: answer},
		journal.PolicyEvaluated{Action: "respond", Decision: "allow", PolicyIDs: []string{"p0"}, TextSHA256: sum(answer), TextBytes: int64(len(answer))},
		journal.Terminated{Reason: runs.StatusCompleted, Released: true, DurationMS: 42})
	p.journalRun(t, "coder", id, recs, false)
	p.recordRun(t, "coder", id, runs.StatusCompleted)
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusCompleted || !st.Released || st.Text == nil || *st.Text != answer {
		t.Fatalf("status %s, released %v, text %v; want completed, released, %q", st.Status, st.Released, deref(st.Text), answer)
	}
}

// TestRecoveredEntryNamesAnotherFile: a recovered ledger entry naming a file that is not
// its run's journal (<agent_id>.<run_id>.jsonl) is not what a server writes: the ledger
// does not verify, and every answer about runs fails closed.
func TestRecoveredEntryNamesAnotherFile(t *testing.T) {
	for _, file := range []string{"../../etc/passwd", "x.jsonl"} {
		t.Run(file, func(t *testing.T) {
			p := newTestProject(t, nil)
			id := p.run(t, "alpha", runs.StatusCompleted)
			if _, err := p.lw.Append(ledger.Recovered{RunID: newRunID(t), AgentID: policy.AgentID("alpha"), File: file,
				State: journal.StatusComplete, Records: 1, Head: journal.ZeroHash}); err != nil {
				t.Fatal(err)
			}
			_, err := runs.Open(runs.Config{Root: p.root, Ledger: p.lw})
			wantCode(t, err, errcode.AuditUnavailable, "not its journal")
			_, err = runs.New(runs.Config{Root: p.root}).Status(id)
			wantCode(t, err, errcode.AuditUnavailable, "not its journal")
		})
	}
}

// TestJournalNameWithBadAgentID: only a file named <agent_id>.<run_id>.jsonl with both
// ids well formed is a run's journal: a file whose agent part is not an id is no run, not
// even when it holds a journal that verifies.
func TestJournalNameWithBadAgentID(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", runs.StatusCompleted, "the answer", true), false)
	data := readFile(t, p.journalPath("alpha", id))
	if err := os.Remove(p.journalPath("alpha", id)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(p.store.Dir(), "not!an-id."+id+".jsonl"), data)
	for _, m := range []*runs.Manager{p.open(t), runs.New(runs.Config{Root: p.root})} {
		_, err := m.Status(id)
		wantCode(t, err, errcode.RunNotFound)
		page, err := m.List(runs.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Runs) != 0 {
			t.Fatalf("list_runs: %d runs, want none", len(page.Runs))
		}
	}
}

// TestListStatusFilterReachesOldest: list_runs with a status filter walks every run,
// however many newer runs the full status rules out: here two newer runs the ledger
// records completed whose journals never got their terminated record (audit_failed)
// come before the one completed run, and a page of one still finds it.
func TestListStatusFilterReachesOldest(t *testing.T) {
	p := newTestProject(t, nil)
	oldest := p.run(t, "alpha", runs.StatusCompleted)
	for range 2 {
		id := p.run(t, "alpha", runs.StatusCompleted)
		path := p.journalPath("alpha", id)
		ls := completeLines(readFile(t, path))
		writeFile(t, path, bytes.Join(ls[:len(ls)-1], nil)) // the terminated line never became durable
	}
	page, err := p.open(t).List(runs.Filter{Status: runs.StatusCompleted, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 1 || page.Runs[0].RunID != oldest {
		t.Fatalf("list_runs {status: completed, limit: 1}: %v; want [%s]", statusIDs(page.Runs), oldest)
	}
}

// TestEventsDefaultLimit: run_events without a limit serves a page of DefaultLimit
// (100) events, and its cursor goes on from there.
func TestEventsDefaultLimit(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	recs := delegatedRecords("coder", "alice")[:2] // started, session_started
	for range runs.DefaultLimit + 20 {
		recs = append(recs, journal.AgentMessage{Text: "working"})
	}
	p.journalRun(t, "coder", id, recs, false)
	m := p.open(t)
	evs, err := m.Events(context.Background(), id, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Events) != runs.DefaultLimit || evs.NextCursor != runs.DefaultLimit {
		t.Fatalf("run_events with no limit: %d events, next_cursor %d; want %d", len(evs.Events), evs.NextCursor, runs.DefaultLimit)
	}
	rest, err := m.Events(context.Background(), id, evs.NextCursor, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(rest.Events)) != int64(len(recs))-runs.DefaultLimit || rest.Events[0].Seq != runs.DefaultLimit {
		t.Fatalf("the next page: %d events from seq %d; want %d from %d", len(rest.Events), rest.Events[0].Seq, len(recs)-runs.DefaultLimit, runs.DefaultLimit)
	}
}

// TestApproverSeesOtherProcessHeldText: run_status shows the held answer of another
// process's run waiting at a gate (read from its journal) to a caller who may approve it —
// carol, who did not start it — and not to alice, who started it and may read it but, four
// eyes, may not approve it.
func TestApproverSeesOtherProcessHeldText(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, heldAtGateRecords("alpha"), true) // alice's run, held; its writer holds it
	m := p.open(t)
	got, err := m.StatusFor(runs.Caller{ID: "carol", Auth: "token"}, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != runs.StatusAwaitingApproval || got.Approval == nil || got.Approval.Text == nil || *got.Approval.Text != "tell ACME" {
		t.Fatalf("run_status for carol, who may approve: status %s, approval %+v; want the held text", got.Status, got.Approval)
	}
	got, err = m.StatusFor(runs.Caller{ID: "alice", Auth: "token"}, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Approval == nil || got.Approval.Text != nil {
		t.Fatalf("run_status for alice, who started the run and may not approve it: approval %+v; want no held text", got.Approval)
	}
}

// TestJournalOverSizeLimit: a journal larger than journal.MaxFileBytes is not read:
// its run's status names the problem and serves no text, and run_events of it fails with
// audit_unavailable — even when the lines it begins with are the whole run its ledger
// entry recorded.
func TestJournalOverSizeLimit(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	if err := os.Truncate(p.journalPath("alpha", id), journal.MaxFileBytes+1); err != nil { // sparse: no line added
		t.Fatal(err)
	}
	m := p.open(t)
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.JournalProblem == "" || st.Released || st.Text != nil {
		t.Fatalf("status of a run whose journal is past the size limit: problem %q, released %v, text %v; want a problem, nothing released", st.JournalProblem, st.Released, deref(st.Text))
	}
	_, err = events(t, m, id, 0, 10)
	wantCode(t, err, errcode.AuditUnavailable, "limit")
}

// TestPrunedRunEndedAt: a run whose journal was pruned still says when it ended: the
// time of its ledger entry.
func TestPrunedRunEndedAt(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	if pruned, _, err := ledger.Prune(p.root, "", func(r string, _ time.Time) bool { return r == id }, false); err != nil || len(pruned) != 1 {
		t.Fatalf("prune: %v %+v", err, pruned)
	}
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if !st.JournalPruned || st.EndedAt == "" {
		t.Fatalf("the pruned run: pruned %v, ended_at %q; want its ledger entry's time", st.JournalPruned, st.EndedAt)
	}
	if _, err := time.Parse(time.RFC3339Nano, st.EndedAt); err != nil {
		t.Fatalf("ended_at %q: %v", st.EndedAt, err)
	}
}

// TestAuthorizeStartNeedsRegistry: a Manager with no agent registry cannot decide
// start_run, and refuses it rather than allow it.
func TestAuthorizeStartNeedsRegistry(t *testing.T) {
	p := newTestProject(t, nil)
	err := p.open(t).AuthorizeStart(runs.Caller{ID: "alice", Auth: "token"}, "helper")
	wantCode(t, err, errcode.Internal)
}

// TestRunWithoutCallerIsStdios: a run recorded before callers were (no caller in its
// started record nor in its ledger entry) was a stdio server's: its caller is stdio.
func TestRunWithoutCallerIsStdios(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	recs := records("alpha", runs.StatusCompleted, "the answer", true)
	started := recs[0].(journal.Started)
	started.Caller, started.CallerAuth = "", ""
	recs[0] = started
	p.journalRun(t, "alpha", id, recs, false)
	ls := completeLines(readFile(t, p.journalPath("alpha", id)))
	if _, err := p.lw.Append(ledger.Run{RunID: id, AgentID: policy.AgentID("alpha"), Agent: "alpha",
		File: journal.FileName(policy.AgentID("alpha"), id), Reason: runs.StatusCompleted, Released: true,
		Records: int64(len(ls)), Head: hashLine(ls[len(ls)-1]), PrevHead: hashLine(ls[len(ls)-2])}); err != nil {
		t.Fatal(err)
	}
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Caller != invoke.CallerStdio {
		t.Fatalf("caller %q; want %q", st.Caller, invoke.CallerStdio)
	}
}

// TestBrokenStoreFailsClosed: a governed store that exists but cannot be opened (here
// its key file is not a key) is not a project with no runs yet: answers about runs fail
// closed with audit_unavailable, not run_not_found.
func TestBrokenStoreFailsClosed(t *testing.T) {
	dir := t.TempDir()
	gov := filepath.Join(dir, ".symbiont", "governed")
	if err := os.MkdirAll(gov, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(gov, journal.KeyFileName), []byte("short"))
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = runs.Open(runs.Config{Root: root})
	wantCode(t, err, errcode.AuditUnavailable)
	_, err = runs.New(runs.Config{Root: root}).Status(newRunID(t))
	wantCode(t, err, errcode.AuditUnavailable)
}
