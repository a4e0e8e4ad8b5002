package invoke

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/policy"
)

// Executor is what a run hands its work to: it produces the text to be judged, journaling
// each of its steps through the run's writer before it acts on it ("journal, then act"),
// and it never releases anything — the run decides, after the policy gate. The model
// executor makes one provider call; the delegated executor (delegated.go) hands the work
// to a registered coding agent over ACP.
type Executor interface {
	// Describe fills the executor's fields of the started record: the mode of the answer
	// and what produces it, with the limits in force.
	Describe(s *journal.Started)
	// Opening returns the records the executor's work begins with, written after started
	// when the journal is created (and signed while its file is made durable); none for an
	// executor that begins by acting.
	Opening() []journal.Record
	// Execute does the work after started and the opening records have been appended (not
	// yet synced): it appends its own records, makes them durable before it acts and
	// after, and reports each stage. A failure comes with the terminated reason it stands
	// for.
	Execute(ctx context.Context, w *journal.Writer, progress func(Stage)) (Output, error)
}

// Output is an executor's product: the text, and the digest its journal recorded of it.
type Output struct {
	Text       string
	TextSHA256 string
	TextBytes  int64
}

// ExecError is an executor's failure and the terminated reason it stands for.
type ExecError struct {
	Reason string // reasonInferenceFailed, reasonTimeout, reasonCancelled or reasonAuditFailed
	Err    error
}

func (e *ExecError) Error() string { return e.Err.Error() }
func (e *ExecError) Unwrap() error { return e.Err }

// modelExecutor answers with one call to an inference provider, prepared in preflight
// (so the request's size was checked before any journal existed): the exact request
// bytes are journaled, then sent once; the exact response bytes are journaled before the
// text is handed to the run.
type modelExecutor struct {
	provider   inference.Provider
	call       *inference.Call
	deadline   time.Duration
	maxTokens  int
	hashesOnly bool
	at         func(point string) // the Runner's test hook
	callID     string             // of the one call, set by Opening
}

func (m *modelExecutor) Describe(s *journal.Started) {
	s.Mode = policy.ResponseMode
	s.Provider, s.Model = m.provider.Name(), m.provider.Model()
	s.MaxOutputTokens, s.DeadlineMS = int64(m.maxTokens), ms(m.deadline)
}

// Opening is inference_requested: the exact request is journaled with started.
func (m *modelExecutor) Opening() []journal.Record {
	m.callID = uuid.NewString()
	return []journal.Record{journal.InferenceRequested{
		CallID:        m.callID,
		RequestSHA256: digest.SHA256Hex(m.call.Body),
		RequestBytes:  int64(len(m.call.Body)),
		MaxTokens:     int64(m.maxTokens),
		DeadlineMS:    ms(m.deadline),
	}}
}

func (m *modelExecutor) Execute(ctx context.Context, w *journal.Writer, progress func(Stage)) (Output, error) {
	callID := m.callID
	if callID == "" {
		return Output{}, &ExecError{reasonAuditFailed, errcode.Errorf(errcode.Internal, "the model run began without its inference_requested record")}
	}
	// started and inference_requested, appended when the journal was created, are
	// durable before the call.
	if err := w.Sync(); err != nil {
		return Output{}, &ExecError{reasonAuditFailed, err}
	}

	// One journaled request, one call.
	progress(StageRequestSent)
	callCtx, cancelCall := context.WithTimeout(ctx, m.deadline)
	resp, callErr := m.call.Do(callCtx)
	cancelCall()
	finished := journal.InferenceFinished{CallID: callID, Outcome: "completed"}
	if resp != nil {
		finished.HTTPStatus = int64(resp.Status)
		finished.ResponseSHA256 = digest.SHA256Hex(resp.Body)
		finished.ResponseBytes = int64(len(resp.Body))
	} else {
		finished.ResponseSHA256 = digest.SHA256Hex(nil)
	}
	reason := ""
	if callErr != nil {
		finished.Outcome, reason = outcomeOf(callErr)
		finished.Error = clampText(callErr.Error())
		finished.TextSHA256 = digest.SHA256Hex(nil)
	} else {
		finished.TextSHA256 = digest.SHA256Hex([]byte(resp.Text))
		finished.TextBytes = int64(len(resp.Text))
		finished.FinishReason = resp.FinishReason
		finished.Usage = journal.Usage{InputTokens: int64(resp.Usage.InputTokens), OutputTokens: int64(resp.Usage.OutputTokens)}
		if !m.hashesOnly {
			finished.Text = resp.Text
		}
	}
	err := w.Append(finished)
	if errors.Is(err, journal.ErrRecordTooLarge) && finished.Text != "" {
		// The clear text would take the record past 1 MiB: keep its hash and length only.
		finished.Text = ""
		err = w.Append(finished)
	}
	if err == nil {
		err = w.Sync()
	}
	if err != nil {
		return Output{}, &ExecError{reasonAuditFailed, err}
	}
	m.at("inferred")
	if callErr != nil {
		if reason == reasonCancelled {
			callErr = cancelledError(ctx, "during inference")
		}
		return Output{}, &ExecError{reason, callErr} // no response: the stage is not reached
	}
	progress(StageResponseReceived)
	return Output{Text: resp.Text, TextSHA256: finished.TextSHA256, TextBytes: finished.TextBytes}, nil
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
