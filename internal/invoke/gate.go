package invoke

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"symbi/internal/acp"
	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
)

// A human gate (docs/runs.md): when the respond decision is a deny that only forbids
// annotated @gate("human") made, the run records approval_requested, made durable, and
// waits — its text withheld, its slot held — for Run.Approve, its cancellation, or the
// end of its wait. The decision is written to the journal (approval_decided) and to the
// ledger (an approval entry), both durable before the text is released or the run ends
// withheld (policy_denied, naming the gate). A wait that runs out ends the run with
// timeout.

// Approval is a person's decision at a run's gate.
type Approval struct {
	// RequestID names the wait decided: a held permission request's id (Pending's), or
	// AnswerRequestID for the held answer. A decision meant for one wait never decides
	// another; it may go unnamed only for the held answer of a run that waits no other
	// way (Pending.named).
	RequestID    string
	Decision     string // ApprovalApprove or ApprovalReject
	Reason       string // at most journal.MaxApprovalReasonBytes
	Approver     string // the deciding caller's id
	ApproverAuth string // how it was authenticated
	Via          string // "approve_run" (default) or "elicitation"
}

// AnswerRequestID is the RequestID that names a run's held answer (a held permission
// request's id is "perm-" and a number).
const AnswerRequestID = "answer"

// The decisions of an Approval.
const (
	ApprovalApprove = "approve"
	ApprovalReject  = "reject"
)

// Pending describes a run waiting at a gate.
type Pending struct {
	Gate      string    // the gating policies, comma-separated
	Since     time.Time // when approval_requested became durable
	Deadline  time.Time // when the wait ends with timeout
	TextBytes int64     // the held text's length
	RequestID string    // a delegated agent's held permission request ("" for the answer)
	Title     string    // its title

	// text is the held answer (HeldText): read back from the journal when it keeps clear
	// text, it is only here in hashes-only mode.
	text string

	// delegated is set for a delegated run's wait: the run waits once per held permission
	// request and then, perhaps, for its answer, so a decision must name the wait it is
	// for (named).
	delegated bool

	// This wait's own way in: a decision sent for it reaches no other wait of the run (a
	// delegated run waits once per held request). ended is closed when the wait is over.
	// Both are nil for a wait resumed after a restart (resume.go: the run's only wait),
	// which takes its decision from the run's gateState.decisions.
	decisions chan gateDecision
	ended     chan struct{}
}

// wait makes p the run's wait, with its own decision channel, and returns the function
// that ends it.
func (g *gateState) wait(p Pending) (end func()) {
	p.decisions, p.ended = make(chan gateDecision), make(chan struct{})
	g.pending.Store(&p)
	return func() {
		g.pending.Store(nil)
		close(p.ended)
	}
}

// named reports whether a decision of this wait must name it (Approval.RequestID): a held
// permission request, and any wait of a delegated run, which may wait more than once. Only
// the held answer of a model run, its only wait, may be decided unnamed.
func (p *Pending) named() bool { return p.RequestID != "" || p.delegated }

// ErrNotAwaiting is wrapped by Approve's error for a run that is not waiting at a gate,
// or not for the wait the decision names.
var ErrNotAwaiting = errors.New("not awaiting approval")

// ErrUnnamedWait is wrapped by Approve's error for a decision that does not name the wait
// it decides where the run may wait more than once (Pending.named): it could otherwise
// reach a wait its approver never saw.
var ErrUnnamedWait = errors.New("the decision does not name the wait it decides")

// gateState is a run's side of the gate: what it waits for and how a decision reaches it.
type gateState struct {
	pending   atomic.Pointer[Pending]
	once      sync.Once
	awaiting  chan struct{}     // closed when the run starts waiting for its answer
	decisions chan gateDecision // the waiting run receives one
	// permTurn holds one token: a held permission request takes it to wait at the gate,
	// one at a time, and gives up its place in line when its context is done.
	permTurn chan struct{}
}

type gateDecision struct {
	a    Approval
	done chan error // the decision is durable (nil), or why it could not be recorded
}

func (g *gateState) init() {
	g.once.Do(func() {
		g.awaiting = make(chan struct{})
		g.decisions = make(chan gateDecision)
		g.permTurn = make(chan struct{}, 1)
	})
}

// verdict is how a wait at a gate ended: approved (all nil but by), or the run's end.
type verdict struct {
	by         string // the approver
	reason     string // the terminated reason when not approved
	err        error  // the caller's error when not approved
	journalErr error  // the journal failed: the run ends audit_failed
}

// hold waits at the gate: see the comment at the top of this file.
func (r *Runner) hold(ctx context.Context, w *journal.Writer, p *prepared, gate string, out Output, wait time.Duration) verdict {
	p.gate.init()
	// Pending is set before approval_requested is durable, so that whoever sees that
	// record (run_events wakes on it) also sees the run waiting; a decision sent meanwhile
	// is taken once the record is durable.
	now := time.Now()
	defer p.gate.wait(Pending{Gate: gate, Since: now, Deadline: now.Add(wait), TextBytes: out.TextBytes, delegated: p.delegated(), text: out.Text})()
	r.at("holding")
	record := durably(w)
	if err := record(journal.ApprovalRequested{Gate: gate, TextSHA256: out.TextSHA256, TextBytes: out.TextBytes, TimeoutMS: ms(wait)}); err != nil {
		return verdict{journalErr: err}
	}
	close(p.gate.awaiting)
	return r.await(ctx, p, gate, "", wait, record)
}

// durably appends a record to w and makes it durable.
func durably(w *journal.Writer) func(journal.Record) error {
	return func(rec journal.Record) error {
		if err := w.Append(rec); err != nil {
			return err
		}
		return w.Sync()
	}
}

// await is the wait at a gate whose approval_requested is durable (p's pending set): for
// a decision, the run's cancellation, or the end of wait. record makes a record durable
// in the run's journal; requestID is the held permission request ("" for the answer).
func (r *Runner) await(ctx context.Context, p *prepared, gate, requestID string, wait time.Duration, record func(journal.Record) error) verdict {
	r.at("awaiting approval")
	held := "the answer held"
	if requestID != "" {
		held = "the agent's permission request " + requestID + " held"
	}
	decisions := p.gate.decisions
	if pend := p.gate.pending.Load(); pend != nil && pend.decisions != nil {
		decisions = pend.decisions
	}
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return verdict{reason: reasonCancelled, err: cancelledError(ctx, "while it awaited approval")}
	case <-timer.C:
		return verdict{reason: reasonTimeout, err: errcode.Errorf(errcode.Timeout, "no one approved or rejected %s by gate %s within %s", held, gate, wait)}
	case d := <-decisions:
		a := d.a
		if err := record(journal.ApprovalDecided{RequestID: requestID, Decision: a.Decision, Approver: a.Approver, ApproverAuth: a.ApproverAuth, Reason: a.Reason, Via: a.Via}); errors.Is(err, acp.ErrSessionOver) {
			// The delegated session closed meanwhile: the request it held is over,
			// undecided, and nothing failed.
			d.done <- errcode.Errorf(errcode.InvalidTransition, "%w: the agent's session ended before the decision could be recorded", ErrNotAwaiting)
			return verdict{reason: reasonCancelled, err: err}
		} else if err != nil {
			d.done <- errcode.Wrap(errcode.AuditUnavailable, err)
			return verdict{journalErr: err}
		}
		if r.cfg.Ledger != nil {
			if _, err := r.cfg.Ledger.Append(ledger.Approval{RunID: p.opened.Load().RunID, Gate: gate, Decision: a.Decision, Reason: a.Reason,
				Approver: a.Approver, ApproverAuth: a.ApproverAuth, Via: a.Via}); err != nil {
				err = errcode.Errorf(errcode.AuditUnavailable, "the project ledger could not record the approval: %w", err)
				d.done <- err
				return verdict{reason: reasonAuditFailed, err: err}
			}
		}
		d.done <- nil
		if a.Decision == ApprovalApprove {
			return verdict{by: a.Approver}
		}
		if a.Decision == ApprovalReject {
			msg := fmt.Sprintf("%s by gate %s was rejected by %s", held, gate, a.Approver)
			if a.Reason != "" {
				msg += ": " + a.Reason
			}
			return verdict{reason: reasonPolicyDenied, err: errcode.Errorf(errcode.PolicyDenied, "%s", msg)}
		}
		return verdict{}
	}
}

// Pending returns what the run waits for at a gate, or nil when it is not waiting.
func (run *Run) Pending() *Pending { return run.p.gate.pending.Load() }

// HeldText returns the answer the run holds at a gate while it waits for it (ok false when
// it does not): what its approver decides on, also when the journal keeps only digests.
func (run *Run) HeldText() (text string, ok bool) {
	if pend := run.Pending(); pend != nil && pend.RequestID == "" && pend.TextBytes == int64(len(pend.text)) {
		return pend.text, true
	}
	return "", false
}

// Approve decides the run's gate and returns once the decision is durable in the journal
// and the ledger (the run then releases its text or ends withheld). A run not waiting at
// a gate — never held, already decided, ended — or not for the wait a.RequestID names is
// invalid_transition; a decision that does not name the wait of a run that may wait more
// than once is invalid_request (Pending.named).
func (run *Run) Approve(ctx context.Context, a Approval) error {
	switch {
	case a.Decision != ApprovalApprove && a.Decision != ApprovalReject:
		return errcode.Errorf(errcode.InvalidRequest, "decision %q: want approve or reject", a.Decision)
	case len(a.Reason) > journal.MaxApprovalReasonBytes:
		return errcode.Errorf(errcode.LimitExceeded, "reason is %d bytes; the limit is %d (4 KiB)", len(a.Reason), journal.MaxApprovalReasonBytes)
	case a.Approver == "":
		return errcode.Errorf(errcode.InvalidRequest, "an approval names its approver")
	}
	if a.Via == "" {
		a.Via = "approve_run"
	}
	pend := run.Pending()
	if pend == nil {
		return errcode.Errorf(errcode.InvalidTransition, "%w: the run is not waiting at a human gate", ErrNotAwaiting)
	}
	if err := pend.decides(a.RequestID); err != nil {
		return err
	}
	// The decision goes to the wait seen waiting, never to a later one: a delegated run
	// that moved on to its next held request does not take a decision sent for the last.
	decisions := run.p.gate.decisions
	if pend.decisions != nil {
		decisions = pend.decisions
	}
	d := gateDecision{a: a, done: make(chan error, 1)}
	select {
	case decisions <- d:
	case <-pend.ended: // nil (never ready) for a resumed wait, the run's only one
		return errcode.Errorf(errcode.InvalidTransition, "%w: the wait ended before the decision reached it", ErrNotAwaiting)
	case <-run.done:
		return errcode.Errorf(errcode.InvalidTransition, "%w: the run ended before the decision reached it", ErrNotAwaiting)
	case <-ctx.Done():
		return errcode.Errorf(errcode.Cancelled, "the approval was cancelled before the run took it")
	}
	return <-d.done
}

// decides checks that a decision naming requestID ("" for none) is for this wait: a
// decision reaches only the wait its approver saw and named.
func (p *Pending) decides(requestID string) error {
	switch {
	case requestID == "" && p.RequestID != "":
		return errcode.Errorf(errcode.InvalidRequest, "%w: the run waits for its agent's permission request %s; a decision names the request it decides (request_id %q), so that it cannot reach another",
			ErrUnnamedWait, p.RequestID, p.RequestID)
	case requestID == "" && p.named():
		return errcode.Errorf(errcode.InvalidRequest, "%w: a delegated run waits once per held permission request and then for its answer; a decision names the wait it decides (request_id %q for the held answer)",
			ErrUnnamedWait, AnswerRequestID)
	case requestID == "", requestID == p.RequestID, requestID == AnswerRequestID && p.RequestID == "":
		return nil
	}
	held := "its answer"
	if p.RequestID != "" {
		held = "request " + errcode.Quote(p.RequestID)
	}
	return errcode.Errorf(errcode.InvalidTransition, "%w: request %s is not the one waiting (the run waits for %s)", ErrNotAwaiting, errcode.Quote(requestID), held)
}

// delegated reports whether the run is a delegated agent's.
func (p *prepared) delegated() bool {
	_, ok := p.exec.(*delegatedExecutor)
	return ok
}

// awaiting returns a channel closed when the run starts waiting at a gate (nil, which
// blocks forever, before the run's gate state exists).
func (run *Run) awaiting() <-chan struct{} {
	run.p.gate.init()
	return run.p.gate.awaiting
}

// holdPermission waits at a gate for a delegated agent's permission request (acp.Holder):
// approval_requested with the request's id, durable, the same wait as an answer's (one
// held request at a time), approval_decided and the ledger's approval entry, durable
// before the agent hears the answer. A request still waiting its turn when ctx is done
// (the session cancelled or over) ends cancelled, unrecorded; a record refused because
// the session is over (acp.ErrSessionOver) is no journal failure.
func (r *Runner) holdPermission(ctx context.Context, p *prepared, h acp.Hold, record func(journal.Record) error) acp.HoldResult {
	p.gate.init()
	select {
	case p.gate.permTurn <- struct{}{}:
	case <-ctx.Done():
		return acp.HoldResult{Err: cancelledError(ctx, "while its agent's permission request waited its turn at the gate")}
	}
	defer func() { <-p.gate.permTurn }()
	if ctx.Err() != nil {
		return acp.HoldResult{Err: cancelledError(ctx, "while its agent's permission request waited its turn at the gate")}
	}
	wait := r.cfg.ApprovalTimeout
	if dl := h.Deadline; !dl.IsZero() && time.Until(dl) < wait {
		// The session's own deadline (the agent's with timeout) bounds the whole session,
		// a held request included: the record says the wait it really has.
		wait = max(time.Until(dl), 0)
	}
	now := time.Now()
	defer p.gate.wait(Pending{Gate: h.Gate, Since: now, Deadline: now.Add(wait), RequestID: h.RequestID, Title: h.Title})()
	if err := record(journal.ApprovalRequested{Gate: h.Gate, RequestID: h.RequestID, TimeoutMS: ms(wait), Kind: h.Kind, Title: h.Title}); errors.Is(err, acp.ErrSessionOver) {
		return acp.HoldResult{Err: err}
	} else if err != nil {
		return acp.HoldResult{Err: fmt.Errorf("%w: %w", acp.ErrJournal, err)}
	}
	v := r.await(ctx, p, h.Gate, h.RequestID, wait, record)
	switch {
	case v.journalErr != nil:
		return acp.HoldResult{Err: fmt.Errorf("%w: %w", acp.ErrJournal, v.journalErr)}
	case v.reason == reasonAuditFailed:
		return acp.HoldResult{Err: fmt.Errorf("%w: %w", acp.ErrJournal, v.err)}
	case v.reason == reasonCancelled:
		return acp.HoldResult{Err: v.err}
	case v.err != nil:
		return acp.HoldResult{Note: v.err.Error()}
	}
	return acp.HoldResult{Approved: true, Note: "approved by " + v.by}
}
