package invoke

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
	"symbi/internal/proctest"
)

// checkEndedCancelled checks that a run ended cancelled everywhere: the caller's
// answer, Run.Reason (run_status), the journal's terminated record and the ledger's entry —
// with nothing released.
func checkEndedCancelled(t *testing.T, f *fixture, run *Run, res *Result, err error) {
	t.Helper()
	if res != nil || errcode.Of(err) != errcode.Cancelled {
		var text string
		if res != nil {
			text = res.Text
		}
		t.Errorf("cancel_run was acknowledged before the release, yet the run's outcome is text %q, err %v; want no text and cancelled", text, err)
	}
	if run.Reason() != reasonCancelled {
		t.Errorf("Run.Reason (run_status) is %q; want cancelled", run.Reason())
	}
	a := run.Audit()
	if a == nil {
		t.Fatal("the run has no journal")
	}
	recs := payloads(t, a.Path)
	last := recs[len(recs)-1]
	var term journal.Terminated
	if last.Type != journal.TypeTerminated || json.Unmarshal(last.Data, &term) != nil {
		t.Fatalf("the journal's last record is %s %s", last.Type, last.Data)
	}
	if term.Reason != reasonCancelled || term.Released {
		t.Errorf("the journal's terminated says %s released=%v; want cancelled, not released", term.Reason, term.Released)
	}
	entries := ledgerRunEntries(t, f.dir, a.RunID)
	if len(entries) != 1 {
		t.Fatalf("%d ledger run entries for the run; want 1", len(entries))
	}
	if entries[0].Reason != reasonCancelled || entries[0].Released {
		t.Errorf("the ledger's run entry says %s released=%v; want cancelled, not released", entries[0].Reason, entries[0].Released)
	}
}

// TestCancelBetweenInferenceAndRelease: cancel_run (ErrCancelRequested)
// reaches a start_run run after its inference has returned and before the policy gate —
// the caller has not stopped waiting, so the outcome compare-and-swap is still open and
// only the ctx check before release stands between the cancel and a release. The run must
// end cancelled with no text released, in the caller's answer, the journal, the ledger and
// Run.Reason alike.
func TestCancelBetweenInferenceAndRelease(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	withLedger(t, f)
	run, res, err := cancelAt(t, f, "inferred")
	checkEndedCancelled(t, f, run, res, err)
	verifyComplete(t, run.Audit())
}

// TestCancelBetweenApprovalAndRelease: a run held at a human gate is
// approved; while the approval's ledger entry is being appended (the run has taken the
// decision, it is past the gate's select), cancel_run reaches it. The approval is
// recorded, but the run must then end cancelled, releasing nothing.
func TestCancelBetweenApprovalAndRelease(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper {}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n@gate(\"human\") @id(\"review\")\nforbid (principal, action == Action::\"respond\", resource);\n",
	}, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	withLedger(t, f)
	ledgerPath := filepath.Join(f.dir, ".symbiont", ledger.FileName)
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "hold this", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-run.awaiting()
	var st unix.Stat_t
	if err := unix.Stat(ledgerPath, &st); err != nil {
		t.Fatal(err)
	}
	unlock := proctest.LockFile(t, ledgerPath)
	defer unlock()
	approved := make(chan error, 1)
	go func() {
		approved <- run.Approve(context.Background(), Approval{Decision: ApprovalApprove, Approver: "bob", Reason: "checked"})
	}()
	proctest.WaitFlockWaiter(t, st.Ino, hangGuard) // the run took the decision and is appending its approval entry
	run.Cancel(ErrCancelRequested)
	unlock()
	if err := <-approved; err != nil {
		t.Fatalf("approve_run: %v", err)
	}
	<-run.Done()
	res, err := run.Wait(context.Background())
	checkEndedCancelled(t, f, run, res, err)
	verifyComplete(t, run.Audit())
}

// TestCancelBeforeInference: cancel_run reaches a run whose started and
// inference_requested records are durable (what start_run waits for) but whose provider
// call has not been made yet. The run ends cancelled everywhere, the model is never asked,
// and its inference_finished says cancelled.
func TestCancelBeforeInference(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	withLedger(t, f)
	held, proceed := make(chan struct{}), make(chan struct{})
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, func(s Stage) {
		if s == StageRequestSent {
			close(held)
			<-proceed
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-held
	if run.Durable().Records < 2 {
		t.Fatalf("at the request, %d durable records; want started and inference_requested", run.Durable().Records)
	}
	run.Cancel(ErrCancelRequested)
	close(proceed)
	<-run.Done()
	res, err := run.Wait(context.Background())
	checkEndedCancelled(t, f, run, res, err)
	if n := len(f.model.Requests()); n != 0 {
		t.Errorf("the model received %d requests from a run cancelled before its call", n)
	}
	recs := payloads(t, run.Audit().Path)
	var fin journal.InferenceFinished
	if len(recs) != 4 || recs[2].Type != journal.TypeInferenceFinished || json.Unmarshal(recs[2].Data, &fin) != nil || fin.Outcome != "cancelled" {
		t.Errorf("records %d, third %s %s; want started, inference_requested, inference_finished (cancelled), terminated", len(recs), recs[2].Type, recs[2].Data)
	}
	verifyComplete(t, run.Audit())
}

// TestCancelBeforeGateInvokeAgent: an invoke_agent run (its caller awaiting it) is
// cancelled by cancel_run after its inference returned and before the policy gate, whose
// decision would hold the answer at a human gate. The run is not held: no
// approval_requested is journaled, and the caller is told it was cancelled — not
// approval_required, "the run waits for approve_run", of a run that does not wait.
func TestCancelBeforeGateInvokeAgent(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper {}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n@gate(\"human\") @id(\"review\")\nforbid (principal, action == Action::\"respond\", resource);\n",
	}, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	withLedger(t, f)
	inferred, proceed := make(chan struct{}), make(chan struct{})
	atGate, leaveGate := make(chan struct{}), make(chan struct{})
	f.runner.hook = func(point string) {
		switch point {
		case "inferred":
			close(inferred)
			<-proceed
		case "awaiting approval":
			close(atGate)
			<-leaveGate
		}
	}
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res *Result
		err error
	}
	out := make(chan outcome, 1)
	go func() { res, err := run.Await(context.Background()); out <- outcome{res, err} }()
	<-inferred
	run.Cancel(ErrCancelRequested) // cancel_run, acknowledged before the gate decides
	close(proceed)
	o := <-out // the run is held at "awaiting approval" if it got there, or has ended
	close(leaveGate)
	<-run.Done()
	if run.Reason() != reasonCancelled {
		t.Fatalf("the run ended %s; want cancelled", run.Reason())
	}
	if errcode.Of(o.err) != errcode.Cancelled {
		t.Errorf("invoke_agent's caller was told %v; the run, cancelled by cancel_run before its gate, ended %s", o.err, run.Reason())
	}
	for _, r := range payloads(t, run.Audit().Path) {
		if r.Type == journal.TypeApprovalRequested {
			t.Errorf("the journal records approval_requested (a wait for a person) after the run was cancelled: %s", r.Data)
		}
	}
}

// TestCancelWhileWritingRelease: cancel_run reaches a run that has committed
// to releasing (the "releasing" hook: past the ctx check and the outcome CAS, before its
// ledger entry and terminated line). The cancel comes too late: every view agrees the run
// completed and released its text — the caller's answer, Run.Reason, journal and ledger.
func TestCancelWhileWritingRelease(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	withLedger(t, f)
	run, res, err := cancelAt(t, f, "releasing")
	if err != nil || res == nil || res.Text != "the answer" || run.Reason() != reasonCompleted {
		t.Fatalf("res %+v err %v reason %s; want the released text, completed", res, err, run.Reason())
	}
	recs := payloads(t, run.Audit().Path)
	var term journal.Terminated
	json.Unmarshal(recs[len(recs)-1].Data, &term)
	entries := ledgerRunEntries(t, f.dir, run.Audit().RunID)
	if term.Reason != reasonCompleted || !term.Released || len(entries) != 1 || entries[0].Reason != reasonCompleted || !entries[0].Released {
		t.Fatalf("journal %s/%v, ledger %+v; want completed, released, in both", term.Reason, term.Released, entries)
	}
	verifyComplete(t, run.Audit())
}

// TestCancelBeforeDenyEndsCancelled: cancel_run reaches a run after its inference
// returned and before the policy gate, which then denies the answer (an ungated forbid).
// The run had committed to no outcome when the cancel came, so it ends cancelled, as an
// allowed answer does there and a denied one whose caller stopped waiting does; the
// decision is in its policy_evaluated record.
func TestCancelBeforeDenyEndsCancelled(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper { capabilities = [\"answer\"] }\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n@id(\"no\") forbid (principal, action == Action::\"respond\", resource) when { context.response == \"FORBIDDEN\" };\n",
	}, nil, loopback.WithReply(loopback.Reply{Text: "FORBIDDEN"}))
	withLedger(t, f)
	run, res, err := cancelAt(t, f, "inferred")
	checkEndedCancelled(t, f, run, res, err)
}

// cancelAt starts a start_run run of f's helper, cancels it as cancel_run does when it
// reaches the runner's test hook point, and waits for its end.
func cancelAt(t *testing.T, f *fixture, point string) (*Run, *Result, error) {
	t.Helper()
	held, proceed := make(chan struct{}), make(chan struct{})
	f.runner.hook = func(p string) {
		if p == point {
			close(held)
			<-proceed
		}
	}
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	run.Cancel(ErrCancelRequested)
	close(proceed)
	<-run.Done()
	res, err := run.Wait(context.Background())
	return run, res, err
}
