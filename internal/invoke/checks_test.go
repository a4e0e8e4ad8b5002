package invoke

// Checks of a governed run's contract at its edges: shutdown and Ended ordering, the
// caller's authentication reaching records and decisions, the approval wait, reasons
// only once ended, first records removed when not durable, panics ending a run, the
// agent's timeout, the workspace root, executors, and the held text's readers.

// Checks of the governed run's ordering, its status and the policy context it gives, each
// at the point where the product's rule would otherwise go unnoticed.

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
	"symbi/internal/proctest"
	"symbi/internal/workspace"
)

// TestShutdownWaitsForTerminated: Shutdown "waits until each [run in flight] has
// written its terminated record": the moment it returns, the journal of a run that was
// waiting on its provider already ends with terminated (cancelled, not released) and
// verifies complete — a server that exits right after Shutdown leaves no run unended.
func TestShutdownWaitsForTerminated(t *testing.T) {
	arrived := make(chan struct{}, 1)
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	f.model.OnRequest(func(loopback.Request) { arrived <- struct{}{} })
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "hang", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(hangGuard):
		t.Fatal("the provider was never called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := f.runner.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Read at once: no waiting on the run here.
	recs := payloads(t, run.Audit().Path)
	last := recs[len(recs)-1]
	var term journal.Terminated
	if last.Type != journal.TypeTerminated || json.Unmarshal(last.Data, &term) != nil || term.Reason != reasonCancelled || term.Released {
		t.Fatalf("when Shutdown returned the journal ended with %s %s; want terminated cancelled, not released", last.Type, last.Data)
	}
	waitEnd(t, run)
}

// TestEndedBeforeDone: Request.Ended "is called once the run has ended, before anyone
// hears that it did (Done closes after it)": what the caller holds for the run (its
// per-caller slot) is free before Done tells anyone the run is over.
func TestEndedBeforeDone(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	entered, proceed := make(chan struct{}), make(chan struct{})
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true, Ended: func() {
		close(entered)
		<-proceed
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(hangGuard):
		t.Fatal("Ended was never called")
	}
	select {
	case <-run.Done():
		t.Error("Done was closed before Ended returned: the run was heard to end while its caller's slot was still held")
	default:
	}
	close(proceed)
	if res, err := waitEnd(t, run); err != nil || res.Text != "the answer" {
		t.Fatalf("the run: %+v, %v", res, err)
	}
}

// callerAuthProject permits every answer but one asked for by a caller authenticated
// with a JWT (policies.md: context.caller_auth).
var callerAuthProject = map[string]string{
	"agents/helper.symbi": "agent helper { capabilities = [\"answer\"] }\n",
	"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n" +
		"@id(\"no-jwt\") forbid (principal, action == Action::\"respond\", resource) when { context.caller_auth == \"jwt\" };\n",
}

// TestCallerAuthReachesStartedAndPolicy: http.md — how the caller was authenticated
// goes into the started record and the respond decision's context.caller_auth. A stdio
// caller (Request.Caller empty) is recorded as caller stdio, caller_auth stdio; a caller
// authenticated by JWT is judged as such, and a policy forbidding that denies the answer.
func TestCallerAuthReachesStartedAndPolicy(t *testing.T) {
	f := newFixture(t, callerAuthProject, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	res, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	if err != nil {
		t.Fatalf("the stdio caller: %v", err)
	}
	var started journal.Started
	if err := json.Unmarshal(payloads(t, res.Audit.Path)[0].Data, &started); err != nil {
		t.Fatal(err)
	}
	if started.Caller != CallerStdio || started.CallerAuth != CallerStdio {
		t.Errorf("started: caller %q, caller_auth %q; want stdio, stdio", started.Caller, started.CallerAuth)
	}
	res, err = f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q", Caller: "ci", CallerAuth: "jwt"}, nil)
	if res != nil || !errors.Is(err, errcode.PolicyDenied) {
		t.Fatalf("a JWT caller under a policy forbidding JWT callers: %+v, %v; want policy_denied", res, err)
	}
}

// TestApprovalWaitIsLongerOfTimeouts: runs.md, human gates item 5 — "The wait is
// bounded: the agent's `with timeout` ... or `--approval-timeout` ..., whichever is
// longer ... The wait recorded in `approval_requested` (`timeout_ms`) is that one."
func TestApprovalWaitIsLongerOfTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  string        // the agent's with timeout
		approval time.Duration // --approval-timeout
		want     time.Duration
	}{
		{"the agent's timeout is longer", "5.minutes", time.Minute, 5 * time.Minute},
		{"--approval-timeout is longer", "5.minutes", 10 * time.Minute, 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{
				"agents/helper.symbi":    "agent helper {\n  with timeout = " + tc.timeout + " {}\n}\n",
				"policies/respond.cedar": gatedProject["policies/respond.cedar"],
			}, func(c *Config) { c.ApprovalTimeout = tc.approval }, loopback.WithReply(loopback.Reply{Text: "the answer"}))
			run := startAtGate(t, f, Request{Agent: "helper", Prompt: "q", Async: true})
			pend := run.Pending()
			run.Cancel(ErrCancelRequested)
			wantEndedCancelled(t, run, "cancelled at the gate")
			if pend == nil || pend.Deadline.Sub(pend.Since) != tc.want {
				t.Errorf("pending %+v; want a wait of %s", pend, tc.want)
			}
			n := 0
			for _, r := range payloads(t, run.Audit().Path) {
				if r.Type != journal.TypeApprovalRequested {
					continue
				}
				n++
				var ar journal.ApprovalRequested
				if err := json.Unmarshal(r.Data, &ar); err != nil || ar.TimeoutMS != tc.want.Milliseconds() {
					t.Errorf("approval_requested %s: want timeout_ms %d", r.Data, tc.want.Milliseconds())
				}
			}
			if n != 1 {
				t.Errorf("%d approval_requested records, want 1", n)
			}
		})
	}
}

// lockLedger takes the project ledger's flock of f and returns the function that gives it
// back, and the ledger's inode (for proctest.WaitFlockWaiter).
func lockLedger(t *testing.T, f *fixture) (unlock func(), ino uint64) {
	t.Helper()
	path := filepath.Join(f.dir, ".symbiont", ledger.FileName)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	unlock = proctest.LockFile(t, path)
	t.Cleanup(unlock)
	return unlock, st.Ino
}

// TestReasonOnlyOnceEnded: Run.Reason (run_status' terminal reason) is "" until the
// run has ended, and then what its journal's terminated says. A run in the middle of
// writing its end — here waiting for the project ledger, its entry not yet durable — is
// still running: it has no reason yet, neither audit_failed nor completed.
func TestReasonOnlyOnceEnded(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	withLedger(t, f)
	unlock, ino := lockLedger(t, f)
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	proctest.WaitFlockWaiter(t, ino, hangGuard) // the run is in the ledger append of its end
	if got := run.Reason(); got != "" {
		t.Errorf("while the run writes its end, Reason = %q; want \"\" (running)", got)
	}
	unlock()
	if res, err := waitEnd(t, run); err != nil || res.Text != "the answer" {
		t.Fatalf("the run: %+v, %v", res, err)
	}
	if got := run.Reason(); got != reasonCompleted {
		t.Errorf("once ended, Reason = %q; want completed", got)
	}
}

// TestRefusedResumeNotAwaiting: runs.md — a held run resumed under a policy set that
// cannot be used (deny_all) "ends the run policy_denied at once"; it does not wait at its
// gate again. Its journal still ends with approval_requested until its end is written, yet
// Awaiting (run_events' awaiting_approval) must not say it waits for a person.
func TestRefusedResumeNotAwaiting(t *testing.T) {
	f, h := heldAtGate(t, "not cedar", "", true)
	unlock, ino := lockLedger(t, f)
	run := f.runner.Resume(h)
	proctest.WaitFlockWaiter(t, ino, hangGuard) // the run is in the ledger append of its end
	if rc, awaiting := run.Awaiting(); awaiting {
		t.Errorf("a resumed run refused by a deny_all set is Awaiting (%+v); want not awaiting", rc)
	}
	unlock()
	if res, err := waitEnd(t, run); res != nil || errcode.Of(err) != errcode.PolicyDenied {
		t.Fatalf("the refused resumed run: %+v, %v; want policy_denied", res, err)
	}
}

// TestFirstRecordsNotDurableRemoved: docs/errors.md, audit_unavailable — "the run's
// first records could not be made durable (the empty file is removed, nothing was sent)".
// Here the journal gains a second name as it is opened, so the fsync of started and
// inference_requested is refused: the provider is never called, the file is gone from the
// journal directory, and neither the caller's error nor the run (run_status) names a
// journal that no longer exists.
func TestFirstRecordsNotDurableRemoved(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, func(s Stage) {
		if s == StageJournalOpened {
			linkSecondName(f.dir)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitEnd(t, run)
	var ie *Error
	if res != nil || errcode.Of(err) != errcode.AuditUnavailable || !errors.As(err, &ie) {
		t.Fatalf("first records not durable: %+v, %v; want audit_unavailable", res, err)
	}
	if ie.Audit != nil || run.Audit() != nil {
		t.Errorf("the caller's error names journal %+v, the run names %+v; want none: the empty journal was removed", ie.Audit, run.Audit())
	}
	if files := journalFiles(t, f.dir); len(files) != 0 {
		t.Errorf("journals left in the journal directory: %v; want the empty journal removed", files)
	}
	if n := len(f.model.Requests()); n != 0 {
		t.Errorf("%d provider requests; want none", n)
	}
	if got := run.Reason(); got != "" {
		t.Errorf("Reason = %q for a run that ended without a journal record; want \"\"", got)
	}
}

// TestCancelledAtGateUnrecordedIsAuditUnavailable: docs/errors.md — a run whose
// journal append fails during the run is audit_unavailable. A run cancelled while it
// waits at a human gate, whose terminated record can then not be written, is not reported
// to its caller as a plain cancellation: the caller is told the run is not recorded.
func TestCancelledAtGateUnrecordedIsAuditUnavailable(t *testing.T) {
	f := newFixture(t, gatedProject, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	atGate := make(chan struct{})
	f.runner.hook = func(point string) {
		if point == "awaiting approval" {
			linkSecondName(f.dir) // approval_requested is durable; the next append is refused
			close(atGate)
		}
	}
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-atGate:
	case <-time.After(hangGuard):
		t.Fatal("the run never waited at the gate")
	}
	run.Cancel(ErrCancelRequested)
	res, err := waitEnd(t, run)
	var ie *Error
	if res != nil || errcode.Of(err) != errcode.AuditUnavailable || !errors.As(err, &ie) || ie.Audit == nil {
		t.Fatalf("cancelled at the gate, its end unrecorded: %+v, %v; want audit_unavailable with the journal's reference", res, err)
	}
	if got := run.Reason(); got != reasonAuditFailed {
		t.Errorf("Reason = %q; want audit_failed", got)
	}
}

// nameBugProvider is a working provider whose Name panics: a bug reached only once the
// run is under way, before its journal is created.
type nameBugProvider struct{ inference.Provider }

func (nameBugProvider) Name() string { panic("a bug naming the provider") }

// TestPanicBeforeJournalEndsRunNotServer: a run's bug is the run's end, not the
// server's. A panic in the run after preflight but before its journal exists refuses that
// run (internal, no journal, no provider call) and frees its slot; the server goes on.
func TestPanicBeforeJournalEndsRunNotServer(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.Provider, c.MaxRuns = nameBugProvider{c.Provider}, 1 },
		loopback.WithReply(loopback.Reply{Text: "the answer"}))
	for i := range 2 { // with --max-runs 1, the second run finds the slot free
		run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		res, err := waitEnd(t, run)
		var ie *Error
		if res != nil || errcode.Of(err) != errcode.Internal || !errors.As(err, &ie) || ie.Audit != nil {
			t.Fatalf("run %d, a panic before the journal: %+v, %v; want internal, no journal", i, res, err)
		}
	}
	if files := journalFiles(t, f.dir); len(files) != 0 || len(f.model.Requests()) != 0 {
		t.Fatalf("%d journals, %d provider requests; want none", len(files), len(f.model.Requests()))
	}
}

// TestAgentTimeoutCutsProviderCall: product.md step 8 — the provider call's deadline is
// min(120 s, the agent's `with timeout`). With a 1 s timeout and a provider that never
// answers, the call is cut at the agent's deadline, not left to run to the 120 s cap: the
// run's terminated record says it lasted less than that cap.
func TestAgentTimeoutCutsProviderCall(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper {\n  with timeout = 1.seconds {}\n}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
	}, nil, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitEnd(t, run); errcode.Of(err) != errcode.Timeout {
		t.Fatalf("a hanging provider past the agent's 1 s timeout: %v; want timeout", err)
	}
	term := lastTerminated(t, run.Audit().Path)
	if term.Reason != reasonTimeout || term.DurationMS >= MaxDeadline.Milliseconds() {
		t.Errorf("terminated %+v: want timeout, well before the %s cap (the agent's timeout is 1 s)", term, MaxDeadline)
	}
}

// TestWorkspaceDefaultRootIsProject: docs/executors.md — without --workspace-root,
// workspaces may be only in the project directory; a start_run naming a directory outside
// it is invalid_request before anything is journaled or any agent started.
func TestWorkspaceDefaultRootIsProject(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, nil)
	outside, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true, Workspace: outside}, nil)
	if err == nil {
		waitEnd(t, run)
	}
	if !errors.Is(err, workspace.ErrWorkspaceNotInRoot) || errcode.Of(err) != errcode.InvalidRequest || journals(t, f) != 0 {
		t.Fatalf("start_run in %s, outside the project, no --workspace-root: %v (%d journals); want invalid_request, %v, before any journal",
			outside, err, journals(t, f), workspace.ErrWorkspaceNotInRoot)
	}
}

// TestUnregisteredExecutorRefused: a delegated agent whose executor this server has
// not registered (--executors) is refused_definition, naming the executor, before any
// journal.
func TestUnregisteredExecutorRefused(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, nil)
	f.runner.cfg.Executors = nil // the server runs without --executors
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true}, nil)
	if err == nil {
		waitEnd(t, run)
	}
	if errcode.Of(err) != errcode.RefusedDefinition || !strings.Contains(err.Error(), "not registered") || journals(t, f) != 0 {
		t.Fatalf("a delegated agent with no registered executor: %v (%d journals); want refused_definition naming the executor, before any journal", err, journals(t, f))
	}
}

// TestUseToolSeesCallerAuth: policies.md — the use_tool decision's context carries
// caller_auth, as respond's does. A policy forbidding tools to a caller authenticated by
// JWT denies such a caller's delegated agent its edit.
func TestUseToolSeesCallerAuth(t *testing.T) {
	f := contractFixture(t, "", []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/src/a.txt"}}},
		map[string]any{"message": "done"},
	}, map[string]string{
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
		"policies/tools.cedar": "@id(\"edits\") permit (principal, action == Action::\"use_tool\", resource == Tool::\"edit\");\n" +
			"@id(\"no-jwt-tools\") forbid (principal, action == Action::\"use_tool\", resource) when { context.caller_auth == \"jwt\" };\n",
	}, "")
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true, Caller: "ci", CallerAuth: "jwt"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitEnd(t, run)
	var recs []contractRec
	for _, p := range payloads(t, run.Audit().Path) {
		recs = append(recs, contractRec{p.Type, p.Data})
	}
	ds := contractDecisions(recs)
	if len(ds) != 1 || ds[0].Decision != "deny" {
		t.Fatalf("decisions %+v; want the JWT caller's edit denied by no-jwt-tools", ds)
	}
}

// TestHeldTextOnlyForAnswer: runs.md — the held answer's text is what its approver is
// shown (run_status approval.text); while a delegated agent's permission request waits, no
// answer is held, and HeldText has none to show.
func TestHeldTextOnlyForAnswer(t *testing.T) {
	run := newGateRun()
	end := run.p.gate.wait(Pending{Gate: "g", RequestID: "perm-1", Title: "Edit a", delegated: true})
	if text, ok := run.HeldText(); ok {
		t.Errorf("while a permission request waits, HeldText = %q, true; want none", text)
	}
	end()
	end = run.p.gate.wait(Pending{Gate: "g", TextBytes: int64(len("the answer")), text: "the answer"})
	defer end()
	if text, ok := run.HeldText(); !ok || text != "the answer" {
		t.Errorf("while the answer is held, HeldText = %q, %v; want the answer", text, ok)
	}
}
