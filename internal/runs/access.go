package runs

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode"

	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/policy"
)

// Caller is who asks for something of a run, and how it was authenticated: "stdio" for
// the client of a stdio server, else the token's name or the JWT's subject.
type Caller struct {
	ID   string // the caller's id: principal Caller::"<id>"
	Auth string // "stdio", "token", "jwt" or "none"
}

// access returns the project's run-access policies: the configured set, or, when none
// was given, the built-in defaults.
func (m *Manager) access() *policy.Set {
	if m.cfg.Access != nil {
		return m.cfg.Access
	}
	return &policy.Set{Mode: policy.ModeDefault}
}

// AuthorizeStart decides whether by may start a run of the agent named name (its
// registry name; the decision is about its declared name). A name the registry does not
// resolve to an admitted agent is not decided here: starting it fails with its own error.
// A denial is an access_denied error naming the deciding policies.
func (m *Manager) AuthorizeStart(by Caller, name string) error {
	if m.cfg.Registry == nil {
		return errcode.Errorf(errcode.Internal, "no agent registry to decide start_run with")
	}
	a, err := m.cfg.Registry.Resolve(name)
	if err != nil || a.Admission == nil || a.Admission.Agent == "" {
		// No agent to decide about: starting fails anyway, with the precise reason (an
		// invalid or unknown name, a refused definition).
		return nil
	}
	return denied(by, policy.ActionStartRun, "agent "+a.Admission.Agent, m.access().DecideAccess(policy.NewStartRequest(a, by.ID, by.Auth)))
}

// Authorize decides whether by may take action (read_run, cancel_run, resolve_run,
// approve_run) on the run, and returns the run's status (with its text) it decided on. A
// run that does not exist is run_not_found; a denial is access_denied.
func (m *Manager) Authorize(by Caller, action, runID string) (*Status, error) {
	st, err := m.Status(runID)
	if err != nil {
		return nil, err
	}
	d := m.decide(by, action, st)
	if action == policy.ActionReadRun {
		d = m.mayRead(by, st)
	}
	if err := denied(by, action, "run "+runID, d); err != nil {
		return nil, err
	}
	return st, nil
}

// mayRead is the read_run decision, widened for a run waiting at a gate: whoever may
// approve it may read it while it waits (an approver must see what it decides). Only a
// read nothing decided against is widened — the built-in default or no permit — never a
// forbid that matched or an evaluation error: those deny.
func (m *Manager) mayRead(by Caller, st *Status) policy.Decision {
	d := m.decide(by, policy.ActionReadRun, st)
	if !d.Allow && len(d.Policies) == 0 && len(d.Errors) == 0 && st.Status == StatusAwaitingApproval {
		if a := m.decide(by, policy.ActionApproveRun, st); a.Allow {
			return policy.Decision{Allow: true, Policies: a.Policies, Reason: "allowed while the run awaits approval: the caller may approve it (" + a.Reason + ")"}
		}
	}
	return d
}

// StatusFor is run_status for by: the run's status if by may read it, and, while the
// run waits at a gate and by may approve it, what it decides: the held answer
// (approval.text) or the held permission request's title (approval.title).
func (m *Manager) StatusFor(by Caller, runID string) (*Status, error) {
	st, err := m.Authorize(by, policy.ActionReadRun, runID)
	if err != nil || st.Status != StatusAwaitingApproval || st.Approval == nil || st.Approval.Decision != "" {
		return st, err
	}
	if !m.decide(by, policy.ActionApproveRun, st).Allow {
		return st, nil
	}
	if st.Approval.RequestID != "" {
		a := *st.Approval
		a.Title = st.heldTitle
		st.Approval = &a
		return st, nil
	}
	snap, err := m.lookup(runID)
	if err != nil {
		return nil, err
	}
	show := func(text string) {
		a := *st.Approval
		a.Text = &text
		st.Approval = &a
	}
	if snap.live != nil {
		// This process's run holds the text it waits with: also in hashes-only mode,
		// where the journal keeps only its digest.
		if text, ok := snap.live.HeldText(); ok {
			show(text)
		}
		return st, nil
	}
	if fresh := m.build(snap, false); fresh.Status != StatusAwaitingApproval {
		// Authorized while it waited, the run has ended since (this server's, decided or
		// timed out meanwhile): by sees what it may see of it now, no held text.
		return m.Authorize(by, policy.ActionReadRun, runID)
	}
	data, err := m.readJournal(snap)
	if err != nil {
		return st, nil
	}
	if text, ok, err := releasedText(data, snap.id, snap.agentID, m.pub); err == nil && ok {
		show(text)
	}
	return st, nil
}

// decide is the access decision for action on the run whose status is st.
func (m *Manager) decide(by Caller, action string, st *Status) policy.Decision {
	return m.access().DecideAccess(policy.AccessRequest{Action: action, Caller: by.ID, CallerAuth: by.Auth,
		Run: &policy.RunResource{ID: st.RunID, Owner: st.Caller, Agent: st.Agent, Status: st.Status}})
}

// denied turns a denial into an access_denied error, or returns nil for an allow.
func denied(by Caller, action, what string, d policy.Decision) error {
	if d.Allow {
		return nil
	}
	return errcode.Errorf(errcode.AccessDenied, "caller %q may not %s %s: %s", by.ID, action, what, d.Reason)
}

// admit counts a run of caller in flight against MaxRunsPerCaller: a caller already at
// the bound is refused with busy. release uncounts it (once).
func (m *Manager) admit(caller string) (release func(), err error) {
	if m.cfg.MaxRunsPerCaller <= 0 {
		return func() {}, nil
	}
	m.perCallerMu.Lock()
	defer m.perCallerMu.Unlock()
	if m.perCaller[caller] >= m.cfg.MaxRunsPerCaller {
		return nil, errcode.Errorf(errcode.Busy, "caller %q already has %d runs in flight, the most one caller may have (--max-runs-per-caller); retry when one ends", caller, m.cfg.MaxRunsPerCaller)
	}
	return m.countLocked(caller), nil
}

// count counts a run of caller in flight whatever the bound: a run resumed after a restart
// was admitted before it. release uncounts it (once).
func (m *Manager) count(caller string) (release func()) {
	if m.cfg.MaxRunsPerCaller <= 0 {
		return func() {}
	}
	m.perCallerMu.Lock()
	defer m.perCallerMu.Unlock()
	return m.countLocked(caller)
}

// countLocked is count with m.perCallerMu held.
func (m *Manager) countLocked(caller string) (release func()) {
	if m.perCaller == nil {
		m.perCaller = map[string]int{}
	}
	m.perCaller[caller]++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.perCallerMu.Lock()
			defer m.perCallerMu.Unlock()
			if m.perCaller[caller]--; m.perCaller[caller] == 0 {
				delete(m.perCaller, caller)
			}
		})
	}
}

// approveWait bounds how long Approve waits, after the decision is durable, for the run
// to release its text or end withheld.
const approveWait = 10 * time.Second

// Approve decides a run held at a human gate: approve_run. The approver must be allowed
// approve_run on the run (four eyes by default over HTTP); the run must be this server's
// and waiting, for the wait requestID names (invoke.Run.Approve). It returns once the
// decision is durable in the journal and the ledger and the run has ended (or approveWait
// has passed) — for a delegated agent's held permission request, once the decision is
// durable — with the run's status.
func (m *Manager) Approve(ctx context.Context, by Caller, runID, requestID, decision, reason string) (*Status, error) {
	switch {
	case decision != invoke.ApprovalApprove && decision != invoke.ApprovalReject:
		return nil, errcode.Errorf(errcode.InvalidRequest, "decision %s: want approve or reject", errcode.Quote(decision))
	case len(reason) > journal.MaxApprovalReasonBytes:
		return nil, errcode.Errorf(errcode.LimitExceeded, "reason is %d bytes; the limit is %d (4 KiB)", len(reason), journal.MaxApprovalReasonBytes)
	case strings.TrimFunc(reason, blank) == "":
		// A person's decision at a gate is signed into the journal and the ledger with
		// what they checked: an auditor reads why, not only who.
		return nil, errcode.Errorf(errcode.InvalidRequest, "reason is blank: an approval decision says why it was made (what the approver checked)")
	}
	st, err := m.Authorize(by, policy.ActionApproveRun, runID)
	if err != nil {
		return nil, err
	}
	snap, err := m.lookup(runID)
	if err != nil {
		return nil, err
	}
	lr := snap.live
	if lr == nil || isDone(lr) {
		if st.Status == StatusAwaitingApproval {
			// Decided on while the run waited; it may have ended since, here (timed out,
			// cancelled, decided by another): its status now says which.
			st = m.build(snap, false)
		}
		if st.Status == StatusAwaitingApproval {
			return nil, errcode.Errorf(errcode.InvalidTransition, "%w: run %s awaits approval in another server process; approve it there", ErrTransition, runID)
		}
		if !m.mayRead(by, st).Allow {
			// The run's status is for those who may read it.
			return nil, errcode.Errorf(errcode.InvalidTransition, "%w: run %s is not awaiting approval", ErrTransition, runID)
		}
		return nil, errcode.Errorf(errcode.InvalidTransition, "%w: run %s is %s, not awaiting approval", ErrTransition, runID, st.Status)
	}
	if err := lr.Approve(ctx, invoke.Approval{RequestID: requestID, Decision: decision, Reason: reason, Approver: by.ID, ApproverAuth: by.Auth}); err != nil {
		if errors.Is(err, invoke.ErrNotAwaiting) {
			if !m.mayRead(by, st).Allow {
				return nil, errcode.Errorf(errcode.InvalidTransition, "%w: run %s is not awaiting approval", ErrTransition, runID)
			}
			return nil, errcode.Errorf(errcode.InvalidTransition, "%w: run %s is not awaiting approval (%v)", ErrTransition, runID, err)
		}
		if errors.Is(err, invoke.ErrUnnamedWait) {
			return nil, errcode.Errorf(errcode.InvalidRequest, "run %s: %w", runID, err)
		}
		return nil, err
	}
	// A held answer is released or withheld now: wait for the run's end. A delegated
	// agent's held permission request is answered now and the run goes on: there is no
	// end to wait for.
	if st.Approval == nil || st.Approval.RequestID == "" {
		t := time.NewTimer(approveWait)
		defer t.Stop()
		select {
		case <-lr.Done():
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if snap, err = m.lookup(runID); err != nil {
		return nil, err
	}
	// The status carries the text the approver has just approved, released, when it could
	// see it before deciding (StatusFor: read_run on the waiting run, which a read_run
	// forbid denies); never to an approver forbidden to read the run. What it may read of
	// the run later is read_run's.
	return m.build(snap, m.mayRead(by, st).Allow), nil
}

// Resume continues, with the Runner, a run that was waiting at a human gate when the
// server stopped (invoke.Runner.Resume): it is this server's again — at once, before Resume
// returns, so that no request finds it another process's — approve_run reaches it, and it
// counts against its caller's --max-runs-per-caller until it ends, freed before anyone
// hears it ended (Held.Ended).
func (m *Manager) Resume(h *invoke.Held) {
	release := m.count(h.Caller())
	h.Ended = release
	lr := m.runner().Resume(h)
	m.mu.Lock()
	m.adopt(lr)
	m.mu.Unlock()
	m.watch(lr, release)
}

// blank reports whether r shows nothing: white space, a control or a format character (a
// zero-width space, a direction mark).
func blank(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}
