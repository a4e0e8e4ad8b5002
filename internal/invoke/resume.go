package invoke

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/project"
)

// Held is a run that was waiting at a human gate when its server stopped: its journal,
// reopened after its whole chain verified, ends with approval_requested, and keeps the
// held text in clear. Runner.Resume continues it.
type Held struct {
	w        *journal.Writer
	pub      string // the store's public key, hex
	started  journal.Started
	gate     string
	text     string
	since    time.Time // approval_requested's time
	deadline time.Time // since plus its timeout_ms
	begun    time.Time // started's time

	// The policy set that last judged the answer: started's, or the last
	// policy_reevaluated's (a resume before this one).
	judgedMode, judgedDigest string
	// overruled is a policy_reevaluated that denied the answer at no gate or another:
	// the run was ending policy_denied when its server stopped, and ends so now.
	overruled *journal.PolicyReevaluated

	// Ended, when set, is called once the resumed run has ended, before anyone hears that
	// it did, as Request.Ended is for a run started here.
	Ended func()
}

// Caller names who started the held run (CallerStdio for a run of a stdio server).
func (h *Held) Caller() string {
	if h.started.Caller == "" {
		return CallerStdio
	}
	return h.started.Caller
}

// RunID returns the held run's id.
func (h *Held) RunID() string { return h.w.RunID() }

// ReopenHeld reopens the journal name of store if its run was held at a gate and can be
// resumed: its last record is approval_requested (or policy_reevaluated after it, an
// earlier resume's judgement) and the text it holds is in the journal
// in clear (a hashes-only journal cannot be released: such a run stays abandoned). For
// any other journal it returns (nil, nil) and leaves the file, unlocked, as it was.
func ReopenHeld(store *journal.Store, name string) (*Held, error) {
	w, recs, err := store.Reopen(name)
	if errors.Is(err, journal.ErrNotResumable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h, ok := held(recs)
	if !ok {
		w.Close()
		return nil, nil
	}
	h.w, h.pub = w, hex.EncodeToString(store.PublicKey())
	return h, nil
}

// held reads what a resumed wait needs from a journal's records, or says it cannot be
// resumed.
func held(recs []journal.Read) (*Held, bool) {
	end := len(recs) - 1
	for end > 0 && recs[end].Type == journal.TypePolicyReevaluated {
		end--
	}
	last := recs[end]
	if last.Type != journal.TypeApprovalRequested || recs[0].Type != journal.TypeStarted {
		return nil, false
	}
	h := &Held{}
	var req journal.ApprovalRequested
	if json.Unmarshal(recs[0].Data, &h.started) != nil || json.Unmarshal(last.Data, &req) != nil || req.RequestID != "" {
		return nil, false
	}
	h.judgedMode, h.judgedDigest = h.started.PolicyMode, h.started.PolicyDigest
	for _, r := range recs[end+1:] {
		var pr journal.PolicyReevaluated
		if json.Unmarshal(r.Data, &pr) != nil {
			return nil, false
		}
		h.judgedMode, h.judgedDigest = pr.PolicyMode, pr.PolicyDigest
		if pr.Decision == "deny" && pr.Gate != req.Gate {
			h.overruled = &pr
		}
	}
	var err1, err2 error
	h.begun, err1 = time.Parse(journal.TimeLayout, recs[0].Time)
	h.since, err2 = time.Parse(journal.TimeLayout, last.Time)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	h.gate, h.deadline = req.Gate, h.since.Add(time.Duration(req.TimeoutMS)*time.Millisecond)
	for _, r := range recs {
		if r.Type != journal.TypeInferenceFinished && r.Type != journal.TypeSessionFinished {
			continue
		}
		var f struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(r.Data, &f) != nil || f.Text == nil || digest.SHA256Hex([]byte(*f.Text)) != req.TextSHA256 {
			return nil, false
		}
		h.text = *f.Text
		return h, true
	}
	return nil, false
}

// Close releases a held run's journal without continuing it.
func (h *Held) Close() { h.w.Close() }

// Resume continues a held run: it waits at its gate again, for the rest of its wait, in
// this Runner, exactly as the run that wrote approval_requested would have — approve_run,
// cancellation, shutdown or the end of the wait decide it. It holds a slot of MaxRuns
// without being refused for one: the run exists already.
func (r *Runner) Resume(h *Held) *Run {
	r.mu.Lock()
	r.active++
	r.runs.Add(1)
	r.mu.Unlock()
	req := Request{Agent: h.started.Agent, Surface: h.started.Surface, Caller: h.started.Caller, CallerAuth: h.started.CallerAuth}
	if req.Caller == "" {
		req.Caller, req.CallerAuth = CallerStdio, CallerStdio
	}
	p := &prepared{req: req, name: h.started.Agent, agentID: h.w.AgentID()}
	p.journal.Store(h.w)
	p.opened.Store(&Audit{RunID: h.w.RunID(), Path: h.w.Path(), PublicKey: h.pub})
	p.gate.init()
	judged, refused := r.rejudge(h, req)
	if refused == nil {
		p.gate.pending.Store(&Pending{Gate: h.gate, Since: h.since, Deadline: h.deadline, TextBytes: int64(len(h.text)), delegated: h.started.Mode == ModeDelegated, text: h.text})
	}
	ctx, cancel := context.WithCancelCause(r.base)
	run := &Run{r: r, p: p, cancel: cancel, opened: make(chan struct{}), done: make(chan struct{})}
	close(run.opened)
	go func() {
		defer h.w.Close()
		run.res, run.err = guard(r.cfg.Log, p, func() (*Result, error) { return r.resumeWait(ctx, h, p, judged, refused) })
		r.logRun(p, run.res, run.err)
		cancel(nil)
		r.mu.Lock()
		r.active--
		r.mu.Unlock()
		r.runs.Done()
		if h.Ended != nil {
			h.Ended()
		}
		close(run.done)
	}()
	r.cfg.Log.Info("resumed a run waiting for approval", "run_id", h.w.RunID(), "agent", h.started.Agent, "gate", h.gate, "deadline", h.deadline)
	return run
}

// rejudge decides again, with the policy set this server runs, the answer h holds, when
// that set is not the one that last judged it (the started record's policy digest, or the
// last policy_reevaluated's): the gate does not outlive a change of the policies that set
// it. It returns a nil error when the run may wait on — the same set, or a new one that
// holds the answer at the same gate or allows it (a person was asked, and still decides)
// — and otherwise the policy_denied error that ends it: a set that denies everything
// (deny_all), one that denies the answer another way, or an agent whose definition is
// gone or changed, so that the answer cannot be judged again. When a new set decided on
// the answer, judged is that decision, to be journaled before the run waits on or ends.
// run is the run's request as the journal's started record tells it.
func (r *Runner) rejudge(h *Held, run Request) (judged *journal.PolicyReevaluated, err error) {
	if o := h.overruled; o != nil {
		return nil, errcode.Errorf(errcode.PolicyDenied, "the held answer was denied when judged again by the policy set %s (deciding %s), before its server stopped", o.PolicyDigest, strings.Join(o.PolicyIDs, ", "))
	}
	set, st := r.cfg.Policies, h.started
	denied := func(format string, a ...any) error {
		return errcode.Errorf(errcode.PolicyDenied, "the policies changed since the answer was held at gate %s (digest %s, now %s): %s", h.gate, h.judgedDigest, set.Digest, fmt.Sprintf(format, a...))
	}
	switch {
	case set == nil:
		return nil, errcode.Errorf(errcode.PolicyDenied, "no policy set to judge the held answer with")
	case set.Mode == policy.ModeDenyAll:
		return nil, denied("the set is unusable, and denies everything until fixed: %s", set.Reason)
	case string(set.Mode) == h.judgedMode && set.Digest == h.judgedDigest:
		return nil, nil
	case r.cfg.Registry == nil:
		return nil, denied("the agent's definition cannot be read to judge the answer again")
	}
	agent, err := r.cfg.Registry.Resolve(project.Stem(path.Base(st.File)))
	if err != nil || agent.Entry.File != st.File || agent.SourceSHA256 != st.SourceSHA256 {
		return nil, denied("the agent's definition %s is gone or changed, so the answer cannot be judged again", st.File)
	}
	req := policy.NewRequest(agent, h.w.RunID(), h.text, run.Surface, run.Caller)
	req.CallerAuth = run.CallerAuth
	d := set.Decide(req)
	judged = &journal.PolicyReevaluated{PolicyMode: string(set.Mode), PolicyDigest: set.Digest, Decision: "deny", PolicyIDs: d.Policies,
		Errors: d.Errors, TextSHA256: digest.SHA256Hex([]byte(h.text))}
	switch {
	case d.Allow:
		judged.Decision = "allow"
		return judged, nil
	case d.Gate == h.gate:
		judged.Gate = d.Gate
		return judged, nil
	default:
		return judged, denied("%s", denial(d))
	}
}

// resumeWait is the rest of a held run: the wait, then its end; or, when refused (the
// policies now deny the answer: rejudge), its end at once.
func (r *Runner) resumeWait(ctx context.Context, h *Held, p *prepared, judged *journal.PolicyReevaluated, refused error) (res *Result, err error) {
	w := h.w
	audit := func() *Audit {
		rc := w.Kept()
		return &Audit{RunID: w.RunID(), Path: w.Path(), PublicKey: h.pub, Records: rc.Records, Head: rc.Head}
	}
	defer func() {
		if v := recover(); v != nil {
			res, err = nil, r.panicked(w, p, v, h.begun, audit)
		}
	}()
	end := func(t journal.Terminated, err error) (*Result, error) {
		t.DurationMS = ms(time.Since(h.begun))
		if werr := r.endRun(w, p, t); werr != nil {
			return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable, "%v; and the run could not be recorded as such: %v", err, werr), Audit: audit()}
		}
		return nil, &Error{Err: err, Audit: audit()}
	}
	if judged != nil {
		// The new set's decision, durable before the run waits on or ends by it.
		err := w.Append(*judged)
		if err == nil {
			err = w.Sync()
		}
		if err != nil {
			p.reason = reasonAuditFailed
			return nil, &Error{Err: r.recordAsFound(w, errcode.Wrap(errcode.AuditUnavailable, err)), Audit: audit()}
		}
	}
	if refused != nil {
		p.reason = reasonPolicyDenied
		return end(journal.Terminated{Reason: reasonPolicyDenied, Error: refused.Error(), Gate: h.gate}, refused)
	}
	close(p.gate.awaiting)
	v := r.await(ctx, p, h.gate, "", time.Until(h.deadline), durably(w))
	p.gate.pending.Store(nil)
	switch {
	case v.journalErr != nil:
		p.reason = reasonAuditFailed
		return nil, &Error{Err: r.recordAsFound(w, errcode.Wrap(errcode.AuditUnavailable, v.journalErr)), Audit: audit()}
	case v.err != nil:
		return end(journal.Terminated{Reason: v.reason, Error: v.err.Error(), Gate: h.gate}, v.err)
	case ctx.Err() != nil:
		err := cancelledError(ctx, "before the approved answer was released")
		return end(journal.Terminated{Reason: reasonCancelled, Error: err.Error()}, err)
	}
	if err := r.endRun(w, p, journal.Terminated{Reason: reasonCompleted, Released: true, DurationMS: ms(time.Since(h.begun))}); err != nil {
		return nil, &Error{Err: errcode.Wrap(errcode.AuditUnavailable, fmt.Errorf("releasing the approved answer: %w", err)), Audit: audit()}
	}
	return &Result{Agent: p.name, AgentID: p.agentID, Text: h.text, Audit: audit()}, nil
}
