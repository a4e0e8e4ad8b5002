package invoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/project"
)

// waitAt makes pend the run's wait and takes at most one decision for it: got yields the
// decision taken, or nothing (closed) once stop is called without one. A decision Approve
// sent has been taken before Approve returns, so reading got after stop is deterministic.
func waitAt(p *prepared, pend Pending) (got <-chan Approval, stop func()) {
	end := p.gate.wait(pend)
	w := p.gate.pending.Load()
	out, stopped := make(chan Approval, 1), make(chan struct{})
	go func() {
		defer close(out)
		defer end()
		select {
		case d := <-w.decisions:
			d.done <- nil
			out <- d.a
		case <-stopped:
		}
	}()
	return out, func() { close(stopped) }
}

// approveAt sends a to the run waiting at pend and returns Approve's error and whether
// the wait took a decision.
func approveAt(t *testing.T, run *Run, pend Pending, a Approval) (error, bool) {
	t.Helper()
	got, stop := waitAt(run.p, pend)
	err := run.Approve(context.Background(), a)
	stop()
	taken, ok := <-got
	if ok && (taken.Approver != a.Approver || taken.RequestID != a.RequestID) {
		t.Fatalf("the wait took %+v, not %+v", taken, a)
	}
	return err, ok
}

func newGateRun() *Run {
	p := &prepared{}
	p.gate.init()
	return &Run{p: p, done: make(chan struct{})}
}

// TestApproveNamesItsWait: a decision reaches only the wait it names. A held permission
// request is decided only by its request_id; any wait of a delegated run (which waits once
// per held request and then, perhaps, for its answer) only when named — its answer as
// "answer"; a model run's held answer, its only wait, also unnamed. Naming another wait is
// invalid_transition; naming none where one is needed is invalid_request.
func TestApproveNamesItsWait(t *testing.T) {
	modelAnswer := Pending{Gate: "g"}
	delegatedAnswer := Pending{Gate: "g", delegated: true}
	permission := Pending{Gate: "g", RequestID: "perm-2", Title: "rm -rf build", delegated: true}
	tests := []struct {
		name      string
		pend      Pending
		requestID string
		want      error // nil: decided
		code      errcode.Code
	}{
		{"model answer, unnamed", modelAnswer, "", nil, ""},
		{"model answer, named", modelAnswer, AnswerRequestID, nil, ""},
		{"model answer, a request named", modelAnswer, "perm-1", ErrNotAwaiting, errcode.InvalidTransition},
		{"delegated answer, unnamed", delegatedAnswer, "", ErrUnnamedWait, errcode.InvalidRequest},
		{"delegated answer, named", delegatedAnswer, AnswerRequestID, nil, ""},
		{"delegated answer, a request named", delegatedAnswer, "perm-1", ErrNotAwaiting, errcode.InvalidTransition},
		{"permission, unnamed", permission, "", ErrUnnamedWait, errcode.InvalidRequest},
		{"permission, named", permission, "perm-2", nil, ""},
		{"permission, an earlier request named", permission, "perm-1", ErrNotAwaiting, errcode.InvalidTransition},
		{"permission, the answer named", permission, AnswerRequestID, ErrNotAwaiting, errcode.InvalidTransition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err, decided := approveAt(t, newGateRun(), tt.pend, Approval{RequestID: tt.requestID, Decision: ApprovalApprove, Approver: "alice"})
			if !errors.Is(err, tt.want) || tt.want != nil && errcode.Of(err) != tt.code || decided != (tt.want == nil) {
				t.Fatalf("Approve: %v (decided %v); want %v (%s)", err, decided, tt.want, tt.code)
			}
		})
	}
}

// TestLateApprovalReachesNoUnseenRequest: approvers A and B both see permission request
// perm-1; A decides it; the agent asks again at once (perm-2). B's late decision — with
// no request_id, or with perm-1's — is refused; perm-2, which no approver has seen, waits
// for a decision naming it.
func TestLateApprovalReachesNoUnseenRequest(t *testing.T) {
	run := newGateRun()
	perm := func(id string) Pending { return Pending{Gate: "commands-review", RequestID: id, delegated: true} }
	if err, ok := approveAt(t, run, perm("perm-1"), Approval{RequestID: "perm-1", Decision: ApprovalApprove, Approver: "alice"}); err != nil || !ok {
		t.Fatalf("alice's decision of perm-1: %v (decided %v)", err, ok)
	}
	for _, late := range []struct {
		requestID string
		want      error
	}{{"", ErrUnnamedWait}, {"perm-1", ErrNotAwaiting}} {
		err, ok := approveAt(t, run, perm("perm-2"), Approval{RequestID: late.requestID, Decision: ApprovalApprove, Approver: "bob"})
		if ok || !errors.Is(err, late.want) {
			t.Fatalf("bob's late decision (request_id %q) while perm-2 waits: %v, decided %v; want %v, undecided", late.requestID, err, ok, late.want)
		}
	}
	if err, ok := approveAt(t, run, perm("perm-2"), Approval{RequestID: "perm-2", Decision: ApprovalReject, Approver: "carol"}); err != nil || !ok {
		t.Fatalf("carol's decision of perm-2: %v (decided %v)", err, ok)
	}
}

// TestDelegatedAnswerIsNamed: a delegated run's held answer — while the run waits, and
// resumed after a restart — is decided only by a decision naming it ("answer").
func TestDelegatedAnswerIsNamed(t *testing.T) {
	const text, gate = "Done.", "answers-review"
	sum := digest.SHA256Hex([]byte(text))
	// heldJournal writes a delegated run's journal up to its gated policy_evaluated.
	heldJournal := func(t *testing.T) (*journal.Store, *journal.Writer) {
		t.Helper()
		store := tempStore(t)
		w, err := store.Create("agent", "run",
			journal.Started{Agent: "coder", Mode: ModeDelegated},
			journal.SessionStarted{Executor: "fake"},
			journal.SessionFinished{Outcome: "completed", TextSHA256: sum, TextBytes: int64(len(text)), Text: text},
			journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{gate}, TextSHA256: sum, TextBytes: int64(len(text)), Gate: gate})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return store, w
	}
	decide := func(t *testing.T, run *Run) {
		t.Helper()
		err := run.Approve(context.Background(), Approval{Decision: ApprovalApprove, Approver: "alice"})
		if !errors.Is(err, ErrUnnamedWait) || errcode.Of(err) != errcode.InvalidRequest {
			t.Fatalf("an unnamed decision of a delegated run's answer: %v; want invalid_request, %v", err, ErrUnnamedWait)
		}
		if err := run.Approve(context.Background(), Approval{RequestID: AnswerRequestID, Decision: ApprovalApprove, Approver: "alice"}); err != nil {
			t.Fatalf("a decision naming the answer: %v", err)
		}
	}

	t.Run("waiting", func(t *testing.T) {
		_, w := heldJournal(t)
		r := New(Config{})
		t.Cleanup(func() { r.Shutdown(context.Background()) })
		p := &prepared{exec: &delegatedExecutor{}}
		p.opened.Store(&Audit{RunID: "run"})
		run := &Run{p: p, done: make(chan struct{})}
		verdicts := make(chan verdict, 1)
		go func() {
			verdicts <- r.hold(context.Background(), w, p, gate, Output{TextSHA256: sum, TextBytes: int64(len(text))}, time.Hour)
		}()
		<-run.awaiting()
		decide(t, run)
		if v := <-verdicts; v.by != "alice" || v.err != nil || v.journalErr != nil {
			t.Fatalf("hold: %+v", v)
		}
	})

	t.Run("resumed", func(t *testing.T) {
		store, w := heldJournal(t)
		if err := w.Append(journal.ApprovalRequested{Gate: gate, TextSHA256: sum, TextBytes: int64(len(text)), TimeoutMS: ms(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		w.Close() // the server stopped while the run waited
		h, err := ReopenHeld(store, filepath.Base(w.Path()))
		if err != nil || h == nil {
			t.Fatalf("ReopenHeld: %v, %v", h, err)
		}
		r := New(Config{Policies: &policy.Set{}}) // the set that held it (its digest and mode, as started recorded them)
		t.Cleanup(func() { r.Shutdown(context.Background()) })
		run := r.Resume(h)
		decide(t, run)
		if res, err := run.Wait(context.Background()); err != nil || res.Text != text {
			t.Fatalf("the resumed run after its approval: %+v, %v", res, err)
		}
	})
}

// TestCancelQueuedHeldRequests: a delegated agent asks for several gated permissions at
// once; they queue at the gate, one held at a time, and the run is cancelled. Every
// queued request is answered cancelled — none waits on in the queue past the cancel, and
// none that comes to record after the session closed is taken for a journal failure — so
// the run ends cancelled, its journal ending session_finished and terminated, never
// audit_failed.
func TestCancelQueuedHeldRequests(t *testing.T) {
	const queued = 12 // under acp's bound on requests in flight
	reg, script := fakeExecutor(t)
	var steps []any
	for i := range queued {
		steps = append(steps, map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "id": 1000 + i, "method": "session/request_permission", "params": map[string]any{
			"sessionId": "fake-session-1",
			"toolCall":  map[string]any{"toolCallId": fmt.Sprintf("t%d", i), "title": "Edit", "kind": "edit", "locations": []any{map[string]any{"path": "src/a.go"}}},
			"options":   []any{map[string]any{"optionId": "allow", "name": "Allow", "kind": "allow_once"}, map[string]any{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}}})
	}
	writeScript(t, script, append(steps, map[string]any{"hang": true})...)
	for i := range 5 { // the race the queue ran was lost about every other time
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			f := delegatedFixture(t, reg, map[string]string{
				"tools.cedar": "@gate(\"human\") @id(\"edits-review\")\nforbid (principal, action == Action::\"use_tool\", resource == Tool::\"edit\");\n",
			})
			held := make(chan struct{})
			var once sync.Once
			f.runner.hook = func(point string) {
				if point == "awaiting approval" {
					once.Do(func() { close(held) })
				}
			}
			run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Edit src/a.go.", Async: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-held:
			case <-time.After(2 * time.Minute):
				t.Fatal("no request held at the gate")
			}
			run.Cancel(ErrCancelRequested)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err = run.Wait(ctx)
			if errcode.Of(err) != errcode.Cancelled || run.Reason() != reasonCancelled {
				t.Fatalf("the run ended %s: %v; want cancelled", run.Reason(), err)
			}
			recs := payloads(t, run.Audit().Path)
			var types []string
			for _, r := range recs {
				types = append(types, r.Type)
			}
			n := len(types)
			if n < 2 || types[n-2] != journal.TypeSessionFinished || types[n-1] != journal.TypeTerminated {
				t.Fatalf("records %v; want session_finished and terminated last", types)
			}
			var fin journal.SessionFinished
			if err := json.Unmarshal(recs[n-2].Data, &fin); err != nil || fin.Outcome != "cancelled" {
				t.Fatalf("session_finished %s (%v)", recs[n-2].Data, err)
			}
			verifyComplete(t, run.Audit())
		})
	}
}

// TestAwaitingOnlyWhenDurable: a run is Awaiting (run_events' awaiting_approval) only once
// its approval_requested record is durable — not in the moment between its wait being
// set and that record's fsync — and no more once the decision is durable.
func TestAwaitingOnlyWhenDurable(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper {}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n@gate(\"human\") @id(\"review\")\nforbid (principal, action == Action::\"respond\", resource);\n",
	}, nil)
	holding, checked := make(chan struct{}), make(chan struct{})
	f.runner.hook = func(point string) {
		if point == "holding" {
			close(holding)
			<-checked
		}
	}
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "hold this", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-holding
	_, early := run.Awaiting()
	pending := run.Pending() != nil
	close(checked)
	if !pending {
		t.Fatal("the wait is not set before approval_requested is written")
	}
	if early {
		t.Fatal("Awaiting before approval_requested was written")
	}
	<-run.awaiting()
	if rc, ok := run.Awaiting(); !ok || rc.Records != 5 {
		t.Fatal("not Awaiting once approval_requested is durable")
	}
	if err := run.Approve(context.Background(), Approval{Decision: ApprovalApprove, Approver: "alice"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := run.Awaiting(); ok {
		t.Fatal("Awaiting after the run ended approved")
	}
}

// TestResumedRunIsAwaiting: a run resumed after a restart waits at its gate, its
// journal's last durable record approval_requested; Awaiting — run_events'
// awaiting_approval — says so, as for a run that reached the gate in this server
// (TestAwaitingOnlyWhenDurable): the reopened writer restores the waits its journal
// leaves open.
func TestResumedRunIsAwaiting(t *testing.T) {
	const text, gate = "held answer", "review"
	sum := digest.SHA256Hex([]byte(text))
	store := tempStore(t)
	w, err := store.Create("agent", "run",
		journal.Started{Agent: "helper", Mode: policy.ResponseMode},
		journal.InferenceRequested{CallID: "c1", RequestSHA256: digest.SHA256Hex(nil)},
		journal.InferenceFinished{CallID: "c1", Outcome: "completed", ResponseSHA256: digest.SHA256Hex(nil), TextSHA256: sum, TextBytes: int64(len(text)), Text: text},
		journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{gate}, TextSHA256: sum, TextBytes: int64(len(text)), Gate: gate},
		journal.ApprovalRequested{Gate: gate, TextSHA256: sum, TextBytes: int64(len(text)), TimeoutMS: ms(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	// Before the restart the run is awaiting by its durable records.
	if _, open := w.DurableWait(); !open {
		t.Fatal("the original writer does not see its wait")
	}
	w.Close() // the server stopped while the run waited
	h, err := ReopenHeld(store, filepath.Base(w.Path()))
	if err != nil || h == nil {
		t.Fatalf("ReopenHeld: %v, %v", h, err)
	}
	r := New(Config{Policies: &policy.Set{}})
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	run := r.Resume(h)
	if run.Pending() == nil {
		t.Fatal("the resumed run is not pending")
	}
	rc, awaiting := run.Awaiting()
	if !awaiting || rc.Records != 5 {
		t.Fatalf("Awaiting() = %+v, %v for a resumed run whose last durable record is approval_requested; want 5 records, awaiting (run_events would report it as running)", rc, awaiting)
	}
}

// tempStore opens the journal store of a new project in a temporary directory, closed
// when the test ends.
func tempStore(t *testing.T) *journal.Store {
	t.Helper()
	p, err := project.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	store, err := journal.OpenStore(p.Root(), journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}
