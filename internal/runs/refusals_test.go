package runs_test

// Security checks of runs: refusals of approve_run and resolve_run arguments and
// transitions, access decisions (who may list, read, start, approve, and see released
// text), the bound on waiting run_events calls, answers and digests withheld from runs
// that released nothing, receipts that journals are judged by, and answers that fail
// closed when the ledger is replaced or gains an entry this version refuses. Each test
// names the check it holds to.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
)

// TestApproveArgumentsBeforeLookup: approve_run's arguments are checked before the run
// is looked up: a decision that is neither approve nor reject, a reason one byte over
// 4 KiB, and a reason of only invisible format characters (a zero-width space, which
// strings.TrimSpace keeps) are refused for themselves — not answered as run_not_found.
func TestApproveArgumentsBeforeLookup(t *testing.T) {
	p := newTestProject(t, nil)
	p.run(t, "alpha", runs.StatusCompleted)
	m := p.open(t)
	by := runs.Caller{ID: "bob", Auth: "token"}
	unknown := newRunID(t)
	ctx := context.Background()
	_, err := m.Approve(ctx, by, unknown, "", "maybe", "checked it")
	wantCode(t, err, errcode.InvalidRequest, "want approve or reject")
	_, err = m.Approve(ctx, by, unknown, "", invoke.ApprovalApprove, strings.Repeat("r", journal.MaxApprovalReasonBytes+1))
	wantCode(t, err, errcode.LimitExceeded, "the limit is")
	_, err = m.Approve(ctx, by, unknown, "", invoke.ApprovalApprove, "\u200b\u200e")
	wantCode(t, err, errcode.InvalidRequest, "reason is blank")
	// At the bound, the reason is taken: the refusal is then the run's.
	_, err = m.Approve(ctx, by, unknown, "", invoke.ApprovalApprove, strings.Repeat("r", journal.MaxApprovalReasonBytes))
	wantCode(t, err, errcode.RunNotFound)
}

// TestListReaderFilters: list_runs with a Reader lists only the runs that reader may
// read: under the built-in default, mallory sees none of the stdio caller's runs, while
// the runs' own caller sees them all.
func TestListReaderFilters(t *testing.T) {
	p := newTestProject(t, nil)
	for range 3 {
		p.run(t, "alpha", runs.StatusCompleted)
	}
	m := p.open(t)
	all, err := m.List(runs.Filter{})
	if err != nil || len(all.Runs) != 3 {
		t.Fatalf("premise: %d runs, %v", len(all.Runs), err)
	}
	page, err := m.List(runs.Filter{Reader: &runs.Caller{ID: "mallory", Auth: "token"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 0 {
		t.Fatalf("list_runs for mallory lists %d runs of the stdio caller she may not read", len(page.Runs))
	}
	own, err := m.List(runs.Filter{Reader: &runs.Caller{ID: "stdio", Auth: "stdio"}})
	if err != nil || len(own.Runs) != 3 {
		t.Fatalf("list_runs for the runs' own caller: %d runs, %v", len(own.Runs), err)
	}
}

// TestWaitersBound: at most MaxWaiters run_events calls wait at once; the next answers
// at once, as with wait_ms 0, so waiting calls cannot pile up without bound. No timing:
// the test counts the calls that begin to wait (testExternalWait, once per waiting call),
// and holds each of the first MaxWaiters there, its place among the waiters taken, until
// the next call has answered — so none of them can end its wait first, however slow the
// machine.
func TestWaitersBound(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", "", "", true), true) // in flight elsewhere: held, no writer here
	m := p.open(t)
	var began atomic.Int64
	started := make(chan struct{}, runs.MaxWaiters+8)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	extra, cancelExtra := context.WithCancel(context.Background())
	defer cancelExtra()
	runs.SetTestExternalWait(func() {
		if began.Add(1) > runs.MaxWaiters {
			cancelExtra() // the call past the bound began to wait: end it, the test fails below
			return
		}
		started <- struct{}{}
		<-release
	})
	defer runs.SetTestExternalWait(nil)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { releaseAll(); cancel(); wg.Wait() }()
	for range runs.MaxWaiters {
		wg.Go(func() {
			if _, err := m.Events(ctx, id, 2, 10, runs.MaxWait); err != nil {
				t.Error(err)
			}
		})
	}
	guard := time.NewTimer(5 * time.Minute) // a failure guard, not an expectation
	defer guard.Stop()
	for i := range runs.MaxWaiters {
		select {
		case <-started:
		case <-guard.C:
			t.Fatalf("only %d of %d calls began to wait", i, runs.MaxWaiters)
		}
	}
	evs, err := m.Events(extra, id, 2, 10, runs.MaxWait)
	releaseAll()
	if err != nil {
		t.Fatal(err)
	}
	if n := began.Load(); n != runs.MaxWaiters {
		t.Fatalf("%d calls began to wait; want %d: the call past MaxWaiters waited instead of answering at once", n, runs.MaxWaiters)
	}
	if len(evs.Events) != 0 || evs.Done {
		t.Fatalf("the answer at once: %+v", evs)
	}
}

// TestReleasedNeedsWholeJournal: a run is released only when its journal, verified and
// whole, ends with a terminated record saying so: a line after that record which does not
// verify leaves the run not released, and run_events withholds its answer.
func TestReleasedNeedsWholeJournal(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	f, err := os.OpenFile(p.journalPath("alpha", id), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(`{"payload":{},"signature":"AAAA"}` + "\n"))
	f.Close()
	m := p.open(t)
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Released || st.Text != nil || st.JournalProblem == "" {
		t.Fatalf("status of a journal with a bad line after terminated: released %v, text %v, problem %q; want not released, no text, the problem", st.Released, st.Text != nil, st.JournalProblem)
	}
	evs, err := events(t, m, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Events {
		if ev.Type == journal.TypeInferenceFinished && ev.Line != "" {
			t.Fatalf("run_events serves the answer of a run that did not release it: %q", ev.Line)
		}
	}
}

// TestOneLineShortOtherHead: a journal one line short of its run entry is accepted only
// when it ends at the entry's prev_head; ending elsewhere it is truncated or replaced,
// and the run is not released.
func TestOneLineShortOtherHead(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", "", "", true), false) // two records, no terminated
	if _, err := p.lw.Append(ledger.Run{RunID: id, AgentID: policy.AgentID("alpha"), Agent: "alpha", File: journal.FileName(policy.AgentID("alpha"), id),
		Reason: runs.StatusCompleted, Released: true, Records: 3, Head: strings.Repeat("a", 64), PrevHead: strings.Repeat("b", 64), Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.JournalProblem, "truncated or replaced") || st.Released {
		t.Fatalf("status %s, released %v, problem %q; want the journal refused as truncated or replaced", st.Status, st.Released, st.JournalProblem)
	}
}

// appendPrunedEntry appends the pruned entry of run id of agent as its journal is on
// disk, with the given reason and released.
func appendPrunedEntry(t *testing.T, p *testProject, agent, id string, reason string, released bool) {
	t.Helper()
	ls := completeLines(readFile(t, p.journalPath(agent, id)))
	if _, err := p.lw.Append(ledger.Pruned{RunID: id, File: filepath.Base(p.journalPath(agent, id)), Records: int64(len(ls)),
		Head: hashLine(ls[len(ls)-1]), Reason: reason, Released: released}); err != nil {
		t.Fatal(err)
	}
}

// TestPrunedStillOnDiskNoEvents: a run the ledger records as pruned has no events, even
// while its journal is still on disk (a prune stopped between its two writes).
func TestPrunedStillOnDiskNoEvents(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	appendPrunedEntry(t, p, "alpha", id, runs.StatusCompleted, true)
	m := p.open(t)
	_, err := events(t, m, id, 0, 10)
	wantCode(t, err, errcode.NotFound, "pruned")
	// A released run pruned: its status makes no claim about a journal that is no longer
	// read.
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.TextRetained != nil {
		t.Fatalf("a pruned run's status says text_retained %v of a journal it did not read", *st.TextRetained)
	}
}

// TestResolvedHeldRunDone: a run held at a gate when its server stopped, then resolved
// while no server ran, is never resumed: run_events of it reports it abandoned and done
// once every event is read.
func TestResolvedHeldRunDone(t *testing.T) {
	model := echoModel(t)
	dir, runID := heldThenStopped(t, model, 0)
	if _, err := cliResolve(t, dir, runID, "superseded"); err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	m, err := runs.Open(runs.Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	page, err := m.Events(context.Background(), runID, 0, runs.MaxLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if page.Status != runs.StatusAbandoned || !page.Done {
		t.Fatalf("run_events of a held run resolved while no server ran: status %s, done %v; want abandoned, done", page.Status, page.Done)
	}
}

// sealRawLine signs one journal line with the project key, with raw v and data.
func sealRawLine(p *testProject, v, runID, agentID string, seq int, prev, typ, data string) []byte {
	payload := `{"v":` + v + `,"run_id":"` + runID + `","seq":` + strconv.Itoa(seq) + `,"prev":"` + prev +
		`","time":"2026-01-02T03:04:05.000Z","agent_id":"` + agentID + `","type":"` + typ + `","data":` + data + `}`
	return journal.Seal(p.store.SigningKey(), journal.SignatureContext, []byte(payload))
}

// TestJournalLineVersion: a journal line signed with the project key whose v is not 1
// is not served, nor anything after it: this version cannot vouch for what a line of
// another version means.
func TestJournalLineVersion(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	agentID := policy.AgentID("alpha")
	good := sealJournal(t, p.store.SigningKey(), "alpha", id, records("alpha", runs.StatusCancelled, "", true))
	ls := completeLines(good)
	second := sealRawLine(p, "2", id, agentID, 1, hashLine(ls[0]), journal.TypeInferenceRequested, `{"call_id":"call-1"}`)
	data := append(append([]byte{}, ls[0]...), second...)
	writeFile(t, p.journalPath("alpha", id), data)
	evs, err := events(t, p.open(t), id, 0, 0)
	if err != nil {
		wantCode(t, err, errcode.AuditUnavailable)
		return
	}
	for _, ev := range evs.Events {
		if ev.Seq >= 1 {
			t.Fatalf("run_events serves seq %d, a line of version 2: %q", ev.Seq, ev.Line)
		}
	}
}

// TestDigestsWithheld: a run the gate denied, journaled in hashes-only mode, keeps its
// answer's digest from run_events — in inference_finished and policy_evaluated alike: a
// short answer is had back by hashing guesses.
func TestDigestsWithheld(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, records("alpha", runs.StatusPolicyDenied, "yes", false), false)
	p.recordRun(t, "alpha", id, runs.StatusPolicyDenied)
	digest := sum("yes")
	evs, err := events(t, p.open(t), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Events {
		if strings.Contains(ev.Line, digest) {
			t.Errorf("run_events serves the denied answer's digest in its %s line", ev.Type)
		}
	}
}

// TestAgentWrittenWithheld: every record holding text a delegated agent chose is
// withheld while the run released nothing — its session_started (name and version) and
// an fs_read (the path it read) among them: the agent could carry the denied answer in
// any of them.
func TestAgentWrittenWithheld(t *testing.T) {
	const secret = "BEGIN-PRIVATE-KEY-MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
	p := newTestProject(t, nil)
	m := p.open(t)
	id := newRunID(t)
	recs := []journal.Record{
		delegatedStarted(),
		journal.SessionStarted{Executor: "fake", Command: []string{"/bin/fake"}, Workspace: "/ws", ProtocolVersion: 1,
			AgentName: secret, AgentVersion: secret, SessionID: "s1", PromptSHA256: sum("p"), PromptBytes: 1},
		journal.PermissionDecided{RequestID: "r1", Kind: "read", Title: "read", Paths: []string{}, Outside: []string{}, Decision: "allow",
			PolicyIDs: []string{"reads"}, Errors: []string{}},
		journal.FSRead{RequestID: "r1", Path: secret + ".txt", Bytes: 1, SHA256: sum("x")},
		journal.SessionFinished{Outcome: "completed", StopReason: "end_turn", TextSHA256: sum(""), TextBytes: 0},
		journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{"needs-output"}, Errors: []string{}, TextSHA256: sum(""), TextBytes: 0},
		journal.Terminated{Reason: runs.StatusPolicyDenied, DurationMS: 42, Error: "denied by policy needs-output"},
	}
	p.journalRun(t, "coder", id, recs, false)
	p.recordRun(t, "coder", id, runs.StatusPolicyDenied)
	for _, typ := range inClear(t, m, id, secret) {
		t.Errorf("run_events serves, for a run that released nothing, a %s record holding text the delegated agent chose", typ)
	}
}

// heldAtGateRecords are the records of alice's run whose answer is held at gate g1,
// followed by more.
func heldAtGateRecords(agent string, more ...journal.Record) []journal.Record {
	recs := records(agent, runs.StatusPolicyDenied, "tell ACME", true)
	recs = recs[:len(recs)-1] // no terminated: the run waits
	recs[0] = func() journal.Record {
		s := recs[0].(journal.Started)
		s.Caller, s.CallerAuth = "alice", "token"
		return s
	}()
	recs = append(recs, journal.ApprovalRequested{Gate: "g1", TextSHA256: sum("tell ACME"), TextBytes: int64(len("tell ACME")), TimeoutMS: 60000})
	return append(recs, more...)
}

// TestReevaluatedOtherGateEndsWait: a held answer judged again and denied by another
// gate than the one it waits at is no longer waiting for a person: another process's run
// in that state is running, not awaiting_approval.
func TestReevaluatedOtherGateEndsWait(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, heldAtGateRecords("alpha", journal.PolicyReevaluated{PolicyMode: "cedar", PolicyDigest: sum("p"),
		Decision: "deny", PolicyIDs: []string{"g2"}, Errors: []string{}, Gate: "g2", TextSHA256: sum("tell ACME")}), true)
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusRunning {
		t.Fatalf("status %s; want running (the wait at g1 ended when g2 denied the answer)", st.Status)
	}
}

// TestResolveAwaitingRefused: resolve_run of a run awaiting approval is
// invalid_transition — only a finished run can be resolved; a waiting run is decided by
// approve_run.
func TestResolveAwaitingRefused(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	p.journalRun(t, "alpha", id, heldAtGateRecords("alpha"), true) // another process's run, held at its gate
	m := p.open(t)
	if st, err := m.Status(id); err != nil || st.Status != runs.StatusAwaitingApproval {
		t.Fatalf("premise: %+v, %v", st, err)
	}
	_, err := m.Resolve(id, "accepted", "", runs.Caller{ID: "alice", Auth: "token"})
	wantCode(t, err, errcode.InvalidTransition)
}

// TestLedgerReplaced: a ledger file replaced by another (same bytes, another inode)
// after the index read it makes answers fail closed with audit_unavailable: the index
// no longer describes the file.
func TestLedgerReplaced(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	m := runs.New(runs.Config{Root: p.root})
	if _, err := m.List(runs.Filter{}); err != nil {
		t.Fatal(err)
	}
	data := readFile(t, p.ledgerPath())
	tmp := p.ledgerPath() + ".new"
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, p.ledgerPath()); err != nil {
		t.Fatal(err)
	}
	_, err := m.Status(newRunID(t))
	wantCode(t, err, errcode.AuditUnavailable, "replaced")
	_, err = m.List(runs.Filter{})
	wantCode(t, err, errcode.AuditUnavailable, "replaced")
	_ = id
}

// TestDirectoryNamedLikeJournal: what is not a regular file in the governed directory
// is no run, whatever its name: it is neither listed nor found by id.
func TestDirectoryNamedLikeJournal(t *testing.T) {
	p := newTestProject(t, nil)
	p.run(t, "alpha", runs.StatusCompleted)
	scanned := newRunID(t)
	if err := os.Mkdir(p.journalPath("alpha", scanned), 0o700); err != nil {
		t.Fatal(err)
	}
	m := p.open(t)
	page, err := m.List(runs.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Runs {
		if r.RunID == scanned {
			t.Fatalf("list_runs lists a directory named like a journal as run %s", scanned)
		}
	}
	later := newRunID(t)
	if err := os.Mkdir(p.journalPath("alpha", later), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = m.Status(later)
	wantCode(t, err, errcode.RunNotFound)
}

// TestPrunedOtherHeadNotShort: a pruned entry is taken for a journal one line short of
// its run entry only when it ends at that entry's prev_head: one short at another head is
// not "the end never written".
func TestPrunedOtherHeadNotShort(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	ls := completeLines(readFile(t, p.journalPath("alpha", id)))
	if _, err := p.lw.Append(ledger.Pruned{RunID: id, File: filepath.Base(p.journalPath("alpha", id)), Records: int64(len(ls) - 1),
		Head: strings.Repeat("e", 64)}); err != nil {
		t.Fatal(err)
	}
	st, err := p.open(t).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(st.JournalProblem, "had no terminated record") {
		t.Fatalf("status %s, problem %q: a pruned entry at another head was taken for the journal one line short of its entry", st.Status, st.JournalProblem)
	}
}

// TestBadEntryFailsFirstAnswer: the first answer after the ledger gains an entry this
// version refuses (one naming another file) already fails closed, for list_runs and
// status alike.
func TestBadEntryFailsFirstAnswer(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	m := p.open(t)
	if _, err := p.lw.Append(ledger.Run{RunID: newRunID(t), AgentID: policy.AgentID("alpha"), Agent: "alpha", File: "x.jsonl", Reason: "completed", Released: true}); err != nil {
		t.Fatal(err)
	}
	_, err := m.List(runs.Filter{})
	wantCode(t, err, errcode.AuditUnavailable, "not its journal")
	_, err = m.Status(id)
	wantCode(t, err, errcode.AuditUnavailable, "not its journal")
}

// TestResolveHoldsScanLock: resolve_run of a run no server in this process writes
// decides holding the governed directory's scan lock exclusively: a journal a server has
// just created and not yet locked is not taken for abandoned.
func TestResolveHoldsScanLock(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	m := p.open(t)
	var probed error
	var once sync.Once
	runs.SetTestBeforeBuild(func() {
		once.Do(func() {
			fd, err := unix.Open(p.store.Dir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				probed = err
				return
			}
			defer unix.Close(fd)
			probed = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
			if probed == nil {
				unix.Flock(fd, unix.LOCK_UN)
			}
		})
	})
	defer runs.SetTestBeforeBuild(nil)
	if _, err := m.Resolve(id, "accepted", "", runs.Caller{ID: "stdio", Auth: "stdio"}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(probed, unix.EWOULDBLOCK) {
		t.Fatalf("a shared scan lock while resolve_run decides: %v; want EWOULDBLOCK (held exclusively)", probed)
	}
}

// TestResolveTextOnlyToReaders: resolve_run answers with the released text only to a
// caller that may read the run: mallory's resolution carries no text, the run's own
// caller's does.
func TestResolveTextOnlyToReaders(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	m := p.open(t)
	st, err := m.Resolve(id, "accepted", "", runs.Caller{ID: "mallory", Auth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Text != nil {
		t.Fatalf("resolve_run by mallory, who may not read the stdio caller's run, answers with its text %q", *st.Text)
	}
	own, err := m.Resolve(id, "accepted", "", runs.Caller{ID: "stdio", Auth: "stdio"})
	if err != nil || own.Text == nil {
		t.Fatalf("resolve_run by the run's own caller: %+v, %v; want its text", own, err)
	}
}

// TestResolveNoteUTF8: CheckResolution refuses a note that is not UTF-8: signed as it
// stands, it would read as other text.
func TestResolveNoteUTF8(t *testing.T) {
	wantCode(t, runs.CheckResolution("accepted", "ok \xff"), errcode.InvalidRequest, "UTF-8")
}

// TestReleasedOnlyWhenCompleted: run_events serves the answer in clear only for a run
// whose status is completed and released: a signed journal and entry that say
// policy_denied yet released (which no server writes) leave the answer withheld.
func TestReleasedOnlyWhenCompleted(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	recs := records("alpha", runs.StatusPolicyDenied, "the denied answer", true)
	term := recs[len(recs)-1].(journal.Terminated)
	term.Released = true
	recs[len(recs)-1] = term
	writeFile(t, p.journalPath("alpha", id), sealJournal(t, p.store.SigningKey(), "alpha", id, recs))
	p.recordRun(t, "alpha", id, runs.StatusPolicyDenied)
	for _, typ := range inClear(t, p.open(t), id, "the denied answer") {
		t.Errorf("run_events serves a policy_denied run's answer in clear, in its %s line", typ)
	}
}

// ---- access: a served gated project with run-access policies -----------------------------

// accessPolicyFiles is the gated project with access policies: bob may not read any run
// nor start one; every other caller may start runs.
func accessPolicyFiles() map[string]string {
	files := map[string]string{}
	for k, v := range gateFiles {
		files[k] = v
	}
	files["policies/access/access.cedar"] = `@id("no-bob-read") forbid (principal == Caller::"bob", action == Action::"read_run", resource);
@id("anyone-starts") permit (principal, action == Action::"start_run", resource);
@id("no-bob-start") forbid (principal == Caller::"bob", action == Action::"start_run", resource);
`
	return files
}

// startAccessServer serves dir as startRestartServer does, with its access policies
// loaded (in Cedar mode) and given to the Manager.
func startAccessServer(t *testing.T, dir string, model interface{ URL() string }) *runs.Manager {
	t.Helper()
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := p.LoadRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	lw, _, err := ledger.OpenProject(p.Root(), "")
	if err != nil {
		t.Fatal(err)
	}
	prov, err := inference.NewOpenAI(model.URL(), "", "test-model")
	if err != nil {
		t.Fatal(err)
	}
	access := policy.LoadAccess(p.Root())
	if access.Mode != policy.ModeCedar {
		t.Fatalf("access policies: mode %s (%s)", access.Mode, access.Reason)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Provider: prov, Ledger: lw})
	m := runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg, Ledger: lw, Access: access})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runner.Shutdown(ctx)
		m.Close()
		lw.Close()
		p.Close()
	})
	return m
}

// TestAccessDecisions: the run-access decisions against Cedar policies.
//   - read_run is widened for an approver of a waiting run only when nothing decided
//     against the read: bob, whom a forbid denies read_run, may not read alice's waiting
//     run though he may approve it; carol, whom no policy names, may.
//   - approve_run's answer carries the released text only to an approver who may read the
//     run.
//   - start_run is decided (AuthorizeStart): bob is forbidden it, carol is not.
func TestAccessDecisions(t *testing.T) {
	m := startAccessServer(t, writeProject(t, accessPolicyFiles()), echoModel(t))
	bob, carol := runs.Caller{ID: "bob", Auth: "token"}, runs.Caller{ID: "carol", Auth: "token"}
	wantCode(t, m.AuthorizeStart(bob, "helper"), errcode.AccessDenied, "no-bob-start")
	if err := m.AuthorizeStart(carol, "helper"); err != nil {
		t.Fatalf("start_run by carol: %v", err)
	}
	st, _, err := m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, m, st.RunID, runs.StatusAwaitingApproval)
	if _, err := m.StatusFor(carol, st.RunID); err != nil {
		t.Fatalf("carol, who may approve the waiting run and whom no policy denies read_run: %v", err)
	}
	_, err = m.StatusFor(bob, st.RunID)
	wantCode(t, err, errcode.AccessDenied, "no-bob-read")
	got, err := m.Approve(context.Background(), bob, st.RunID, "", invoke.ApprovalApprove, "checked the text")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != runs.StatusCompleted {
		t.Fatalf("after bob's approval: %s", got.Status)
	}
	if got.Text != nil {
		t.Fatalf("approve_run answers bob, whom a forbid denies read_run, with the released text %q", *got.Text)
	}
}

// TestUnreadableDataWithheld: a record whose data cannot be read as an object (here a
// signed inference_finished whose data is a bare string: no server writes one) is withheld
// while the run released nothing, rather than guessed about: what cannot be read may
// carry the answer.
func TestUnreadableDataWithheld(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	agentID := policy.AgentID("alpha")
	ls := completeLines(sealJournal(t, p.store.SigningKey(), "alpha", id, records("alpha", "", "", true))) // started, inference_requested
	third := sealRawLine(p, "1", id, agentID, 2, hashLine(ls[1]), journal.TypeInferenceFinished, `"SECRET-ANSWER"`)
	writeFile(t, p.journalPath("alpha", id), append(append(append([]byte{}, ls[0]...), ls[1]...), third...))
	for _, typ := range inClear(t, p.open(t), id, "SECRET-ANSWER") {
		t.Errorf("run_events serves an unreadable %s record of a run that released nothing, in clear", typ)
	}
}

// TestRecoveredAfterRunEntryIgnored: a recovered entry after a run's run entry (which
// no writer appends: the writer refuses it, ErrKnown) does not replace the receipt the run
// was recorded with: a journal replaced after its run entry, with a signed recovered
// entry naming the replacement, is still truncated or replaced, and its text is not
// served.
func TestRecoveredAfterRunEntryIgnored(t *testing.T) {
	p := newTestProject(t, nil)
	id := p.run(t, "alpha", runs.StatusCompleted)
	key := p.store.SigningKey()
	forged := sealJournal(t, key, "alpha", id, records("alpha", runs.StatusCompleted, "EVIL ANSWER", true))
	writeFile(t, p.journalPath("alpha", id), forged)
	fl := completeLines(forged)
	rec, err := json.Marshal(ledger.Recovered{RunID: id, AgentID: policy.AgentID("alpha"), File: journal.FileName(policy.AgentID("alpha"), id),
		State: journal.StatusComplete, Records: int64(len(fl)), Head: hashLine(fl[len(fl)-1])})
	if err != nil {
		t.Fatal(err)
	}
	old := readFile(t, p.ledgerPath())
	ver := ledger.Verify(old, p.pub)
	if len(ver.Problems) != 0 {
		t.Fatal(ver.Problems)
	}
	n := len(ver.Entries)
	payload := `{"v":1,"seq":` + strconv.Itoa(n) + `,"prev":"` + ver.Entries[n-1].Hash + `","time":"2026-01-02T03:04:05.000Z","type":"recovered","data":` + string(rec) + `}`
	writeFile(t, p.ledgerPath(), append(old, journal.Seal(key, ledger.Context, []byte(payload))...))
	if v := ledger.Verify(readFile(t, p.ledgerPath()), p.pub); len(v.Problems) != 0 || len(v.Entries) != n+1 {
		t.Fatalf("premise: the forged line does not verify: %v", v.Problems)
	}
	st, err := runs.New(runs.Config{Root: p.root}).Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Text != nil || st.Released || !strings.Contains(st.JournalProblem, "truncated or replaced") {
		t.Fatalf("status released %v, text %v, problem %q; want the replaced journal refused against the run entry", st.Released, st.Text != nil, st.JournalProblem)
	}
}
