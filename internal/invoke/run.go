package invoke

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"symbi/internal/buildinfo"
	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
)

// Terminal reasons written in the terminated record.
const (
	reasonCompleted       = "completed"
	reasonPolicyDenied    = "policy_denied"
	reasonInferenceFailed = "inference_failed"
	reasonCancelled       = "cancelled"
	reasonTimeout         = "timeout"
	reasonAuditFailed     = "audit_failed"
)

// Run is one governed run. Runner.Start returns it once it holds a slot and has passed
// preflight; it then goes on in its own goroutine, owned by the Runner — not by whoever
// started it — and ends by writing its terminated record whatever becomes of its callers.
type Run struct {
	r      *Runner
	p      *prepared
	cancel context.CancelCauseFunc
	opened chan struct{} // closed when the journal is created or the run has ended
	done   chan struct{} // closed when the run has ended; res and err are then set
	res    *Result
	err    error
}

// Start begins a governed run of req and returns at once. progress, if not nil, is called
// at each stage the run reaches; it must not block (the MCP layer queues it).
func (r *Runner) Start(req Request, progress func(Stage)) (*Run, error) {
	if progress == nil {
		progress = func(Stage) {}
	}
	// A slot first, before anything of the request is kept: a call beyond the limit costs
	// nothing but its answer.
	r.mu.Lock()
	switch {
	case r.closing:
		r.mu.Unlock()
		return nil, &Error{Err: errcode.Errorf(errcode.Cancelled, "the server is shutting down")}
	case r.active >= r.cfg.MaxRuns:
		r.mu.Unlock()
		return nil, &Error{Err: errcode.Errorf(errcode.Busy, "%d runs are in flight, the server's limit (--max-runs %d); retry when one has ended", r.cfg.MaxRuns, r.cfg.MaxRuns)}
	}
	r.active++
	r.runs.Add(1)
	r.mu.Unlock()
	release := func() {
		r.mu.Lock()
		r.active--
		r.mu.Unlock()
		r.runs.Done()
	}
	if req.Surface == "" {
		req.Surface = policy.Surface
	}
	if req.Caller == "" {
		req.Caller, req.CallerAuth = CallerStdio, CallerStdio
	}
	p, err := r.safePreflight(req)
	if err != nil {
		release()
		return nil, &Error{Err: err}
	}
	progress(StageAdmitted)
	ctx, cancel := context.WithCancelCause(r.base)
	run := &Run{r: r, p: p, cancel: cancel, opened: make(chan struct{}), done: make(chan struct{})}
	var openOnce sync.Once
	signalOpen := func() { openOnce.Do(func() { close(run.opened) }) }
	go func() {
		run.res, run.err = guard(r.cfg.Log, p, func() (*Result, error) {
			return r.execute(ctx, p, func(s Stage) {
				if s == StageJournalOpened {
					signalOpen()
				}
				progress(s)
			})
		})
		signalOpen()
		r.logRun(p, run.res, run.err)
		// The slot is free before anyone hears the run ended: a caller that starts its next
		// run at once must not find it still taken — nor the caller's own (Ended).
		cancel(nil)
		release()
		if req.Ended != nil {
			req.Ended()
		}
		close(run.done)
	}()
	return run, nil
}

// Invoke runs req and waits for its outcome (Start, then Await).
func (r *Runner) Invoke(ctx context.Context, req Request, progress func(Stage)) (*Result, error) {
	run, err := r.Start(req, progress)
	if err != nil {
		return nil, err
	}
	return run.Await(ctx)
}

// Await waits for the run's outcome on behalf of a caller whose request is ctx: when ctx
// ends first, the run is cancelled (its caller is gone) and Await returns promptly with a
// cancelled error while the run finishes its journal in the background — unless the run
// is already writing its end, which Await then waits for, so that the caller is told what
// the journal says. A run held at a
// human gate is no longer the caller's: Await returns approval_required at once, with the
// run's audit reference, and the run waits for approve_run, owned by the server.
func (run *Run) Await(ctx context.Context) (*Result, error) {
	stop := context.AfterFunc(ctx, func() { run.Cancel(ErrCallerGone) })
	defer stop()
	select {
	case <-run.done:
		return run.res, run.err
	case <-run.awaiting():
		if stop() { // detached before the caller left: the run is the server's now
			var audit *Audit
			runID := ""
			if a := run.Audit(); a != nil {
				c := *a
				rc := run.Durable()
				c.Records, c.Head = rc.Records, rc.Head
				audit, runID = &c, c.RunID
			}
			gate := "(decided already)"
			if pend := run.Pending(); pend != nil {
				gate = pend.Gate
			}
			return nil, &Error{Audit: audit, Err: errcode.Errorf(errcode.ApprovalRequired,
				"the answer is held by gate %s for a person's decision: run %s waits for approve_run (follow it with run_status)", gate, runID)}
		}
	case <-ctx.Done():
	}
	return run.Wait(ctx)
}

// Cancel cancels the run with cause. Unless it has already committed to its outcome, the
// run stops its work (the provider call) and ends with terminated, reason cancelled.
func (run *Run) Cancel(cause error) { run.cancel(cause) }

// Done is closed when the run has ended, its journal finished.
func (run *Run) Done() <-chan struct{} { return run.done }

// Audit returns the reference to the run's journal, or nil while it has none (before the
// journal is created, or for a run that ended without one).
func (run *Run) Audit() *Audit { return run.p.opened.Load() }

// Agent returns the declared name and agent_id of the run's agent, its caller and how
// the caller was authenticated.
func (run *Run) Agent() (name, agentID, caller, callerAuth string) {
	return run.p.name, run.p.agentID, run.p.req.Caller, run.p.req.CallerAuth
}

// Durable returns the receipt of the run's journal records made durable so far (zero
// before the journal exists); once its journal's writer has stopped, of the records the
// file keeps (journal.Writer.Kept).
func (run *Run) Durable() journal.Receipt {
	if w := run.p.journal.Load(); w != nil {
		return w.Kept()
	}
	return journal.Receipt{}
}

// Awaiting returns the receipt of the run's durable records and whether the run waits at
// a gate as those records say: it is waiting (Pending), and its approval_requested is among
// them. Pending is set just before that record is written, so that whoever sees the record
// sees the wait; a status built from Awaiting, with the records up to the receipt, never
// says awaiting_approval before the record it rests on can be read.
func (run *Run) Awaiting() (journal.Receipt, bool) {
	w := run.p.journal.Load()
	if w == nil {
		return journal.Receipt{}, false
	}
	rc, wait := w.DurableWait()
	return rc, wait && run.Pending() != nil
}

// Changed returns a channel closed when Durable may have changed: at the journal's next
// fsync, or — before the journal exists — when it is created. A run that has ended
// changes no more: wait on Done as well.
func (run *Run) Changed() <-chan struct{} {
	if w := run.p.journal.Load(); w != nil {
		return w.Changed()
	}
	select {
	case <-run.opened:
		// Opened, yet no journal: it was discarded, or the run ended without one. Nothing
		// changes any more but the run's end.
		if w := run.p.journal.Load(); w != nil {
			return w.Changed()
		}
		return run.done
	default:
		return run.opened
	}
}

// Reason returns the terminated reason the run ended with (completed, policy_denied, …),
// once Done is closed; "" for a run that ended without a journal record.
func (run *Run) Reason() string {
	select {
	case <-run.done:
		return run.p.reason
	default:
		return ""
	}
}

// ErrCancelRequested is the cause a caller's explicit cancellation (cancel_run) gives
// Cancel.
var ErrCancelRequested = errors.New("cancel_run")

// Wait returns the run's outcome. If ctx ends first, Wait gives the run a moment to end
// its journal (so the answer can carry the receipt), then stops waiting — but only if the
// run has not committed to releasing: what the caller is told and what the journal says
// always agree.
func (run *Run) Wait(ctx context.Context) (*Result, error) {
	select {
	case <-run.done:
		return run.res, run.err
	case <-ctx.Done():
	}
	t := time.NewTimer(run.r.terminateBudget)
	defer t.Stop()
	select {
	case <-run.done:
		return run.res, run.err
	case <-t.C:
	}
	// Stop waiting only if the run has not committed to its end: then it can no longer
	// release, and its journal will say cancelled, as the caller is told (endRun).
	if run.p.outcome.CompareAndSwap(outcomeOpen, outcomeAbandoned) {
		// The journal exists but has not ended yet: the reference has no receipt.
		return nil, &Error{Audit: run.p.opened.Load(), Err: errcode.Errorf(errcode.Cancelled, "the caller cancelled the request; the run records it as cancelled")}
	}
	// It is writing its end: report what its journal will record.
	<-run.done
	return run.res, run.err
}

// The outcomes a run and the call waiting for it agree on (prepared.outcome): whichever
// moves it from outcomeOpen first decides, so the caller is never told cancelled for a run
// whose journal records a release, nor handed text the journal says was not released.
const (
	outcomeOpen      int32 = iota
	outcomeReleasing       // the run is writing its release
	outcomeEnding          // the run is writing another end (endRun)
	outcomeAbandoned       // the call stopped waiting and told its caller cancelled
)

// ErrCallerGone is the cause given Cancel when the request waiting for the run has ended.
var ErrCallerGone = errors.New("the caller cancelled the request")

// ErrNotRecorded is wrapped by the error of a run whose end the project ledger could not
// record: its journal ended with audit_failed, and nothing was released.
var ErrNotRecorded = errors.New("the project ledger could not record the run")

// ErrKeyChanged refuses a run when the signing key read before it is not the key the
// project ledger was opened with (the key file was replaced while the server ran).
var ErrKeyChanged = errors.New("the signing key changed while the server was running")

// logRun reports a finished run on the server's log.
func (r *Runner) logRun(p *prepared, res *Result, err error) {
	if err == nil {
		if res.Audit != nil { // nil only on the benchmark-only ungoverned path
			r.cfg.Log.Info("run released", "agent", p.name, "run_id", res.Audit.RunID, "records", res.Audit.Records)
		}
		return
	}
	attrs := []any{"agent", p.name, "code", errcode.Of(err), "err", err}
	var ie *Error
	if errors.As(err, &ie) && ie.Audit != nil {
		attrs = append(attrs, "run_id", ie.Audit.RunID, "journal", ie.Audit.Path)
	}
	r.cfg.Log.Warn("run withheld", attrs...)
}

// execute is the governed ordering of one run after preflight (the package comment): it
// owns the journal writer until it returns.
func (r *Runner) execute(ctx context.Context, p *prepared, progress func(Stage)) (res *Result, err error) {
	start := time.Now()
	if r.ungov {
		return r.runUngoverned(ctx, p)
	}
	if r.cfg.LedgerErr != nil {
		return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable, "the project ledger is unavailable, so no run is recorded or released: %v", r.cfg.LedgerErr)}
	}
	if r.cfg.Ledger != nil {
		// A full or stopped ledger could record no end of the run: it is refused before
		// it starts.
		if err := r.cfg.Ledger.Room(ledger.RunRoom); err != nil {
			return nil, &Error{Err: err}
		}
	}
	// With a project ledger, the server created the store and its key when it opened the
	// ledger: a key missing now is refused, not made afresh, and the key read must be the
	// one the ledger signs with — a run signed with another key could not be verified with
	// the project's, and its ledger entry would name a journal no single key verifies.
	store, err := journal.OpenStore(r.cfg.Project.Root(), journal.StoreOptions{KeyFile: r.cfg.KeyFile, Create: r.cfg.Ledger == nil})
	if err != nil {
		return nil, &Error{Err: errcode.Wrap(errcode.AuditUnavailable, err)}
	}
	defer store.Close()
	if r.cfg.Ledger != nil && !store.PublicKey().Equal(r.cfg.Ledger.PublicKey()) {
		return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable,
			"%w: the signing key file holds the key %x, the project ledger was opened with %x; no run is recorded or released until the key file the server started with is restored",
			ErrKeyChanged, store.PublicKey(), r.cfg.Ledger.PublicKey())}
	}
	if floor := r.cfg.MinFreeBytes; floor > 0 {
		free, err := store.FreeBytes()
		if err != nil {
			return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable, "cannot check the free space for journals (%v); no journal was created", err)}
		}
		if free < floor {
			return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable,
				"%d bytes free on the file system of %s, below the floor of %d bytes (--min-free-space); no journal was created: free space, or lower the floor", free, store.Dir(), floor)}
		}
	}
	// A UUIDv7: run ids sort by the time the run began (list_runs pages by them).
	id, err := uuid.NewV7()
	if err != nil {
		return nil, &Error{Err: errcode.Errorf(errcode.Internal, "run id: %v", err)}
	}
	runID := id.String()
	adm := p.agent.Admission
	instr := []byte(p.conv.Instructions)
	started := journal.Started{
		Agent:                p.name,
		File:                 p.agent.Entry.File,
		SourceSHA256:         p.agent.SourceSHA256,
		DeclarationSHA256:    p.agent.DeclarationSHA256,
		Surface:              p.req.Surface,
		Caller:               p.req.Caller,
		CallerAuth:           p.req.CallerAuth,
		ServerVersion:        buildinfo.Version,
		InlinePolicies:       adm.Policies,
		InlinePoliciesSHA256: adm.PolicyDigest,
		PolicyMode:           string(r.cfg.Policies.Mode),
		PolicyDigest:         r.cfg.Policies.Digest,
		PolicyReason:         r.cfg.Policies.Reason,
		PromptSHA256:         digest.SHA256Hex([]byte(p.req.Prompt)),
		PromptBytes:          int64(len(p.req.Prompt)),
		InstructionsSHA256:   digest.SHA256Hex(instr),
		InstructionsBytes:    int64(len(instr)),
	}
	p.exec.Describe(&started)
	if !r.cfg.HashesOnly {
		started.Prompt = p.req.Prompt
		started.Instructions = p.conv.Instructions
	}
	// started and the executor's opening records are signed while the file is created.
	w, err := store.Create(p.agentID, runID, append([]journal.Record{started}, p.exec.Opening()...)...)
	if errors.Is(err, journal.ErrOpening) {
		return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable,
			"journal write failed before the run's first record was durable; nothing was sent or released, and the empty journal was removed: %v", err)}
	}
	if errors.Is(err, journal.ErrOpeningKept) {
		r.cfg.Log.Warn("journal kept after its first write failed", "run_id", runID, "err", err)
		return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable,
			"journal write failed before the run's first record was durable; nothing was sent or released: %v", err)}
	}
	if err != nil {
		return nil, &Error{Err: errcode.Wrap(errcode.AuditUnavailable, err)}
	}
	defer w.Close()
	p.journal.Store(w)
	pub := hex.EncodeToString(store.PublicKey())
	p.opened.Store(&Audit{RunID: runID, Path: w.Path(), PublicKey: pub})
	audit := func() *Audit {
		rc := w.Kept()
		return &Audit{RunID: runID, Path: w.Path(), PublicKey: pub, Records: rc.Records, Head: rc.Head}
	}
	// A step that panics (a bug, on input the model chose) ends this run, not the server.
	// This runs before the writer is closed, so the journal can still record the end.
	defer func() {
		if v := recover(); v != nil {
			res, err = nil, r.panicked(w, p, v, start, audit)
		}
	}()
	// fail ends the run with err after the journal was opened: it writes terminated when
	// the writer still can, and withholds any text.
	fail := func(reason string, err error) (*Result, error) {
		werr := r.endRun(w, p, journal.Terminated{Reason: reason, Released: false, DurationMS: ms(time.Since(start)), Error: err.Error()})
		if werr != nil && reason != reasonAuditFailed {
			err = errcode.Errorf(errcode.AuditUnavailable, "%v; and the run could not be recorded as such: %v", err, werr)
		}
		return nil, &Error{Err: err, Audit: audit()}
	}
	// journalFailed ends a run whose journal failed. If nothing of it was durable yet (a
	// full disk, a file size limit at its first records) nothing was sent either, and the
	// file, debris, is removed.
	journalFailed := func(err error) (*Result, error) {
		if derr := w.Discard(); derr == nil {
			p.opened.Store(nil)
			p.journal.Store(nil)
			return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable,
				"journal write failed before the run's first record was durable; nothing was sent or released, and the empty journal was removed: %v", err)}
		} else if !errors.Is(derr, journal.ErrDurable) {
			r.cfg.Log.Warn("journal kept after its first write failed", "journal", w.Path(), "err", derr)
		}
		return fail(reasonAuditFailed, errcode.Errorf(errcode.AuditUnavailable, "journal write failed, nothing released: %v", err))
	}
	progress(StageJournalOpened)

	out, err := p.exec.Execute(ctx, w, progress)
	if err != nil {
		var ee *ExecError
		if !errors.As(err, &ee) {
			ee = &ExecError{reasonInferenceFailed, err}
		}
		if ee.Reason == reasonAuditFailed && !errors.Is(ee.Err, errPanicked) {
			return journalFailed(ee.Err)
		}
		return fail(ee.Reason, ee.Err)
	}

	req := policy.NewRequest(p.agent, runID, out.Text, p.req.Surface, p.req.Caller)
	req.CallerAuth = p.req.CallerAuth
	decision := r.cfg.Policies.Decide(req)
	if err := w.Append(journal.PolicyEvaluated{
		Action:     req.Action,
		Decision:   decision.Verdict(),
		PolicyIDs:  decision.Policies,
		Errors:     decision.Errors,
		TextSHA256: out.TextSHA256,
		TextBytes:  out.TextBytes,
		Gate:       decision.Gate,
	}); err != nil {
		return journalFailed(err)
	}
	progress(StagePolicyDecided)
	// A run cancelled before its decision is acted on ends cancelled, whatever the
	// decision (journaled above): it is neither held for a person nor denied.
	if ctx.Err() != nil {
		return fail(reasonCancelled, cancelledError(ctx, "before the answer was released or held"))
	}
	if !decision.Allow && decision.Gate != "" {
		// The wait is the agent's with timeout or, when longer, --approval-timeout — not the
		// provider call's deadline (at most MaxDeadline), which bounds only the model call.
		wait := max(r.cfg.ApprovalTimeout, adm.Timeout)
		v := r.hold(ctx, w, p, decision.Gate, out, wait)
		switch {
		case v.journalErr != nil:
			return journalFailed(v.journalErr)
		case v.err != nil:
			t := journal.Terminated{Reason: v.reason, DurationMS: ms(time.Since(start)), Error: v.err.Error(), Gate: decision.Gate}
			werr := r.endRun(w, p, t)
			if werr != nil && v.reason != reasonAuditFailed {
				v.err = errcode.Errorf(errcode.AuditUnavailable, "%v; and the run could not be recorded as such: %v", v.err, werr)
			}
			return nil, &Error{Err: v.err, Audit: audit()}
		}
		decision.Allow = true // a person approved the held text: it is released as if allowed
	}
	if !decision.Allow {
		return fail(reasonPolicyDenied, errcode.Errorf(errcode.PolicyDenied, "%s", denial(decision)))
	}
	// Release only to a caller still waiting: a cancelled run, or one whose caller has
	// stopped waiting, records cancelled and releases nothing.
	if ctx.Err() != nil {
		return fail(reasonCancelled, cancelledError(ctx, "before the answer was released"))
	}
	if !p.outcome.CompareAndSwap(outcomeOpen, outcomeReleasing) {
		return fail(reasonCancelled, errcode.Errorf(errcode.Cancelled, "the caller stopped waiting before the answer was released"))
	}
	r.at("releasing")
	if err := r.endRun(w, p, journal.Terminated{Reason: reasonCompleted, Released: true, DurationMS: ms(time.Since(start))}); err != nil {
		if errors.Is(err, ErrNotRecorded) {
			// The journal ended, saying audit_failed: the ledger failed, not the journal.
			return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable, "nothing released: %w", err), Audit: audit()}
		}
		return journalFailed(err)
	}
	return &Result{Agent: p.name, AgentID: p.agentID, Text: out.Text, Audit: audit()}, nil
}

// maxRecordError bounds the error text a terminated or inference_finished record carries,
// so that the record always fits (a record is at most 1 MiB).
const maxRecordError = 4 << 10

// endRun ends the run's journal with t. With a project ledger, the journal's lines so far
// are made durable, the terminated line prepared, and the run's ledger entry — naming the
// receipt the journal will have — made durable before the line is written: a journal never says how a run ended without
// the ledger knowing of it. If the ledger cannot record the run, the journal ends with
// audit_failed instead (saying how the run had ended), and the ledger error is returned:
// nothing is released. It returns the first failure: a run whose end could not be
// recorded must say so, whichever step failed (a refused append does not always stop the
// writer).
func (r *Runner) endRun(w *journal.Writer, p *prepared, t journal.Terminated) error {
	// The end claims the outcome, as a release does; a run whose call stopped waiting
	// first — its caller was told cancelled — ends cancelled, saying how it would have
	// ended (a failed journal is still said as such: audit_failed).
	if !p.outcome.CompareAndSwap(outcomeOpen, outcomeEnding) && p.outcome.Load() == outcomeAbandoned &&
		t.Reason != reasonCancelled && t.Reason != reasonAuditFailed {
		t = journal.Terminated{Reason: reasonCancelled, DurationMS: t.DurationMS, Gate: t.Gate,
			Error: fmt.Sprintf("the caller stopped waiting and was told cancelled; the run would have ended %s: %s", t.Reason, t.Error)}
	}
	p.reason = reasonAuditFailed
	if r.cfg.Ledger != nil && w.Durable() != w.Receipt() {
		// The lines before terminated, which the entry names (prev_head), are made durable
		// before the entry is: a stop between the entry and the journal's end, a power
		// loss included, leaves the journal one line short of its entry, never more.
		if err := w.Sync(); err != nil {
			return r.recordAsFound(w, err)
		}
	}
	prep, err := w.Prepare(clampError(t))
	if err != nil {
		return r.recordAsFound(w, err)
	}
	var ledgerErr error
	if r.cfg.Ledger != nil {
		_, ledgerErr = r.cfg.Ledger.Append(ledger.Run{
			RunID: p.opened.Load().RunID, AgentID: p.agentID, Agent: p.name, File: filepath.Base(w.Path()),
			Reason: t.Reason, Released: t.Released, Records: int64(prep.Receipt.Records), Head: prep.Receipt.Head,
			PrevHead: w.Receipt().Head, Caller: p.req.Caller, CallerAuth: p.req.CallerAuth,
		})
	}
	if ledgerErr != nil {
		ledgerErr = errcode.Errorf(errcode.AuditUnavailable, "%w: %w", ErrNotRecorded, ledgerErr)
		failed := journal.Terminated{Reason: reasonAuditFailed, DurationMS: t.DurationMS,
			Error: fmt.Sprintf("%v; the run had ended as %s: %s", ledgerErr, t.Reason, t.Error)}
		if prep, err = w.Prepare(clampError(failed)); err != nil {
			return err
		}
	}
	// The run's reason is what its journal's terminated record says — or audit_failed when
	// that record could not be made durable.
	p.reason = reasonAuditFailed
	if err := w.AppendPrepared(prep); err != nil {
		return err
	}
	if err := w.Sync(); err != nil {
		return err
	}
	if ledgerErr == nil {
		p.reason = t.Reason
	}
	return ledgerErr
}

// recordAsFound records, for a run whose journal can no longer be ended (its writer
// stopped: err), the journal as found in the project ledger — a recovered entry, as
// start-up would write — before the run's withheld result is returned: the ledger knows of
// the run while this server still serves, not only after a restart. The writer is closed
// first, so that the file as found is final. It returns err, joined with the ledger's
// failure if there is one.
func (r *Runner) recordAsFound(w *journal.Writer, err error) error {
	if r.cfg.Ledger == nil {
		return err
	}
	w.Close()
	if _, lerr := ledger.RecordAsFound(r.cfg.Ledger, w.Path(), w.AgentID(), w.RunID()); lerr != nil {
		r.cfg.Log.Error("the project ledger could not record a run whose journal failed; it is recorded at the next start", "run_id", w.RunID(), "journal", w.Path(), "err", lerr)
		return errors.Join(err, errcode.Errorf(errcode.AuditUnavailable, "and the project ledger could not record the journal as found: %w", lerr))
	}
	return err
}

// errPanicked is the caller's error for a run a panic ended.
var errPanicked = errcode.Errorf(errcode.Internal, "the run stopped on an internal error (the server's log has its stack); nothing was released")

// panicked ends, as audit_failed, the run whose step panicked with v while its journal w
// was open, and returns the caller's error: terminated is written (and the ledger entry
// before it) when the writer still can; otherwise the journal is recorded as found. A
// panic while ending it is recovered too.
func (r *Runner) panicked(w *journal.Writer, p *prepared, v any, start time.Time, audit func() *Audit) (err error) {
	r.cfg.Log.Error("a step of a run panicked: the run ends audit_failed, nothing is released",
		"run_id", w.RunID(), "agent", p.name, "panic", v, "stack", string(debug.Stack()))
	err = errPanicked
	defer func() {
		if v := recover(); v != nil {
			r.cfg.Log.Error("ending a run that panicked panicked too", "run_id", w.RunID(), "panic", v)
			p.reason = reasonAuditFailed
			err = &Error{Err: r.recordAsFound(w, errPanicked), Audit: audit()}
		}
	}()
	t := journal.Terminated{Reason: reasonAuditFailed, DurationMS: ms(time.Since(start)), Error: "internal error: a step of the run panicked (the server's log has its stack)"}
	if werr := r.endRun(w, p, t); werr != nil {
		err = errcode.Errorf(errcode.AuditUnavailable, "%v; and the run could not be recorded as such: %v", err, werr)
	}
	return &Error{Err: err, Audit: audit()}
}

// safePreflight is preflight, whose panic (a bug, on the caller's input) refuses the run
// with errPanicked: the caller's request is answered and the slot it took is freed.
func (r *Runner) safePreflight(req Request) (p *prepared, err error) {
	defer func() {
		if v := recover(); v != nil {
			r.cfg.Log.Error("a run's preflight panicked: the run is refused", "agent", req.Agent, "panic", v, "stack", string(debug.Stack()))
			p, err = nil, errPanicked
		}
	}()
	return r.preflight(req)
}

// guard runs a run's body, f, and turns a panic that f did not recover — one before the
// run's journal was opened, or after it was closed — into the run's error: a run's bug is
// the run's end, not the server's.
func guard(log *slog.Logger, p *prepared, f func() (*Result, error)) (res *Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("a run panicked outside its journal: nothing is released", "agent", p.name, "panic", v, "stack", string(debug.Stack()))
			res, err = nil, &Error{Err: errPanicked, Audit: p.opened.Load()}
		}
	}()
	return f()
}

// clampError bounds the error text of a terminated record (maxRecordError).
func clampError(t journal.Terminated) journal.Terminated {
	t.Error = clampText(t.Error)
	return t
}

// clampText cuts an error text for a record at maxRecordError bytes.
func clampText(s string) string {
	if len(s) > maxRecordError {
		s = strings.ToValidUTF8(s[:maxRecordError], "") + " …(truncated)"
	}
	return s
}

// cancelledError says who cancelled the run (ctx's cause) and when.
func cancelledError(ctx context.Context, when string) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrCallerGone):
		return errcode.Errorf(errcode.Cancelled, "the caller cancelled the request %s", when)
	case errors.Is(cause, ErrCancelRequested):
		return errcode.Errorf(errcode.Cancelled, "the run was cancelled by cancel_run %s", when)
	case errors.Is(cause, ErrShuttingDown):
		return errcode.Errorf(errcode.Cancelled, "the run was cancelled (server shutting down) %s", when)
	}
	return errcode.Errorf(errcode.Cancelled, "the run was cancelled %s", when)
}

// at calls the test hook at a named point of a run.
func (r *Runner) at(point string) {
	if r.hook != nil {
		r.hook(point)
	}
}

// denial words a deny decision: the deciding policy ids and any evaluation errors.
func denial(d policy.Decision) string {
	msg := d.Reason
	if msg == "" {
		msg = "the respond policy denied the response"
	}
	if len(d.Policies) > 0 {
		msg += fmt.Sprintf(" (deciding policies: %v)", d.Policies)
	}
	if len(d.Errors) > 0 {
		msg += fmt.Sprintf(" (evaluation errors: %v)", d.Errors)
	}
	return msg
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// runUngoverned is the benchmark-only path: the same preflight and provider call, with no
// journal and no policy. It is reachable only from this package's tests.
func (r *Runner) runUngoverned(ctx context.Context, p *prepared) (*Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, p.model.deadline)
	defer cancel()
	resp, err := p.model.call.Do(callCtx)
	if err != nil {
		return nil, &Error{Err: err}
	}
	return &Result{Agent: p.name, AgentID: p.agentID, Text: resp.Text}, nil
}
