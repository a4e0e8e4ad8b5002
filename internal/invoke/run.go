package invoke

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"symbi/internal/buildinfo"
	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
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

// run is one governed run after preflight. It owns the journal writer until it returns.
func (r *Runner) run(ctx context.Context, p *prepared, progress func(Stage)) (*Result, error) {
	start := time.Now()
	if r.ungov {
		return r.runUngoverned(ctx, p)
	}
	store, err := journal.OpenStore(r.cfg.Project.Root(), journal.StoreOptions{KeyFile: r.cfg.KeyFile, Create: true})
	if err != nil {
		return nil, &Error{Err: errcode.Wrap(errcode.AuditUnavailable, err)}
	}
	defer store.Close()
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
	runID := uuid.NewString()
	w, err := store.Create(p.agentID, runID)
	if err != nil {
		return nil, &Error{Err: errcode.Wrap(errcode.AuditUnavailable, err)}
	}
	defer w.Close()
	pub := hex.EncodeToString(store.PublicKey())
	p.opened.Store(&Audit{RunID: runID, Path: w.Path(), PublicKey: pub})
	audit := func() *Audit {
		rc := w.Receipt()
		return &Audit{RunID: runID, Path: w.Path(), PublicKey: pub, Records: rc.Records, Head: rc.Head}
	}
	// fail ends the run with err after the journal was opened: it writes terminated when
	// the writer still can, and withholds any text.
	fail := func(reason string, err error) (*Result, error) {
		werr := endRun(w, journal.Terminated{Reason: reason, Released: false, DurationMS: ms(time.Since(start)), Error: err.Error()})
		if werr != nil && reason != reasonAuditFailed {
			err = errcode.Errorf(errcode.AuditUnavailable, "%v; and the journal could not record it: %v", err, werr)
		}
		return nil, &Error{Err: err, Audit: audit()}
	}
	journalFailed := func(err error) (*Result, error) {
		return fail(reasonAuditFailed, errcode.Errorf(errcode.AuditUnavailable, "journal write failed, nothing released: %v", err))
	}
	// firstFailed ends a run whose first records could not be made durable (a full disk,
	// a file size limit): nothing was sent, and the file, debris, is removed.
	firstFailed := func(err error) (*Result, error) {
		if derr := w.Discard(); derr != nil {
			r.cfg.Log.Warn("journal kept after its first write failed", "journal", w.Path(), "err", derr)
			return journalFailed(err)
		}
		p.opened.Store(nil)
		return nil, &Error{Err: errcode.Errorf(errcode.AuditUnavailable,
			"journal write failed before the run's first record was durable; nothing was sent or released, and the empty journal was removed: %v", err)}
	}
	progress(StageJournalOpened)

	adm := p.agent.Admission
	instr := []byte(p.conv.Instructions)
	started := journal.Started{
		Agent:                p.name,
		File:                 p.agent.Entry.File,
		SourceSHA256:         policy.SHA256Hex(p.agent.Source),
		DeclarationSHA256:    policy.SHA256Hex(adm.Declaration),
		Mode:                 "text_response",
		Surface:              "mcp-server",
		ServerVersion:        buildinfo.Version,
		MaxOutputTokens:      int64(p.maxTokens),
		DeadlineMS:           ms(p.deadline),
		Provider:             r.cfg.Provider.Name(),
		Model:                r.cfg.Provider.Model(),
		InlinePolicies:       adm.Policies,
		InlinePoliciesSHA256: adm.PolicyDigest,
		PolicyMode:           string(r.cfg.Policies.Mode),
		PolicyDigest:         r.cfg.Policies.Digest,
		PolicyReason:         r.cfg.Policies.Reason,
		PromptSHA256:         policy.SHA256Hex([]byte(p.req.Prompt)),
		PromptBytes:          int64(len(p.req.Prompt)),
		InstructionsSHA256:   policy.SHA256Hex(instr),
		InstructionsBytes:    int64(len(instr)),
	}
	if !r.cfg.HashesOnly {
		started.Prompt = p.req.Prompt
		started.Instructions = p.conv.Instructions
	}
	callID := uuid.NewString()
	if err := w.Append(started); err != nil {
		return firstFailed(err)
	}
	if err := w.Append(journal.InferenceRequested{
		CallID:        callID,
		RequestSHA256: policy.SHA256Hex(p.call.Body),
		RequestBytes:  int64(len(p.call.Body)),
		MaxTokens:     int64(p.maxTokens),
		DeadlineMS:    ms(p.deadline),
	}); err != nil {
		return firstFailed(err)
	}
	if err := w.Sync(); err != nil {
		return firstFailed(err)
	}

	// One journaled request, one call.
	progress(StageRequestSent)
	callCtx, cancelCall := context.WithTimeout(ctx, p.deadline)
	resp, callErr := p.call.Do(callCtx)
	cancelCall()
	finished := journal.InferenceFinished{CallID: callID, Outcome: "completed"}
	if resp != nil {
		finished.HTTPStatus = int64(resp.Status)
		finished.ResponseSHA256 = policy.SHA256Hex(resp.Body)
		finished.ResponseBytes = int64(len(resp.Body))
	} else {
		finished.ResponseSHA256 = policy.SHA256Hex(nil)
	}
	reason := ""
	if callErr != nil {
		finished.Outcome, reason = outcomeOf(callErr)
		finished.Error = callErr.Error()
		finished.TextSHA256 = policy.SHA256Hex(nil)
	} else {
		finished.TextSHA256 = policy.SHA256Hex([]byte(resp.Text))
		finished.TextBytes = int64(len(resp.Text))
		finished.FinishReason = resp.FinishReason
		finished.Usage = journal.Usage{InputTokens: int64(resp.Usage.InputTokens), OutputTokens: int64(resp.Usage.OutputTokens)}
		if !r.cfg.HashesOnly {
			finished.Text = resp.Text
		}
	}
	err = w.Append(finished)
	if errors.Is(err, journal.ErrRecordTooLarge) && finished.Text != "" {
		// The clear text would take the record past 1 MiB: keep its hash and length only.
		finished.Text = ""
		err = w.Append(finished)
	}
	if err != nil {
		return journalFailed(err)
	}
	if err := w.Sync(); err != nil {
		return journalFailed(err)
	}
	r.at("inferred")
	progress(StageResponseReceived)
	if callErr != nil {
		if reason == reasonCancelled {
			callErr = cancelledError(ctx, "during inference")
		}
		return fail(reason, callErr)
	}

	decision := r.cfg.Policies.Decide(policy.NewRequest(p.agent, runID, resp.Text))
	verdict := "deny"
	if decision.Allow {
		verdict = "allow"
	}
	if err := w.Append(journal.PolicyEvaluated{
		Action:     policy.ActionRespond,
		Decision:   verdict,
		PolicyIDs:  decision.Policies,
		Errors:     decision.Errors,
		TextSHA256: finished.TextSHA256,
		TextBytes:  finished.TextBytes,
	}); err != nil {
		return journalFailed(err)
	}
	progress(StagePolicyDecided)
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
	if err := endRun(w, journal.Terminated{Reason: reasonCompleted, Released: true, DurationMS: ms(time.Since(start))}); err != nil {
		return journalFailed(err)
	}
	return &Result{Agent: p.name, AgentID: p.agentID, Text: resp.Text, Audit: audit()}, nil
}

// maxTerminatedError bounds the error text a terminated record carries, so that the
// record always fits (a record is at most 1 MiB).
const maxTerminatedError = 4 << 10

// endRun appends the terminated record and makes the journal durable, returning the
// first failure: a run whose end could not be recorded must say so, whichever step
// failed (a refused append does not always stop the writer).
func endRun(w *journal.Writer, t journal.Terminated) error {
	if len(t.Error) > maxTerminatedError {
		t.Error = strings.ToValidUTF8(t.Error[:maxTerminatedError], "") + " …(truncated)"
	}
	if err := w.Append(t); err != nil {
		return err
	}
	return w.Sync()
}

// cancelledError says who cancelled the run (ctx's cause) and when.
func cancelledError(ctx context.Context, when string) error {
	if errors.Is(context.Cause(ctx), errCallerGone) {
		return errcode.Errorf(errcode.Cancelled, "the caller cancelled the request %s", when)
	}
	return errcode.Errorf(errcode.Cancelled, "the run was cancelled (server shutting down) %s", when)
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

// outcomeOf maps a provider error to the inference_finished outcome and terminated reason.
func outcomeOf(err error) (outcome, reason string) {
	switch {
	case errors.Is(err, inference.KindTimeout):
		return "timeout", reasonTimeout
	case errors.Is(err, inference.KindCancelled):
		return "cancelled", reasonCancelled
	}
	return "error", reasonInferenceFailed
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// runUngoverned is the benchmark-only path: the same preflight and provider call, with no
// journal and no policy. It is reachable only from this package's tests.
func (r *Runner) runUngoverned(ctx context.Context, p *prepared) (*Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, p.deadline)
	defer cancel()
	resp, err := p.call.Do(callCtx)
	if err != nil {
		return nil, &Error{Err: err}
	}
	return &Result{Agent: p.name, AgentID: p.agentID, Text: resp.Text}, nil
}
