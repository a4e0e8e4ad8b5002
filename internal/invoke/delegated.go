package invoke

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"symbi/internal/acp"
	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/workspace"
)

// DefaultDelegatedDeadline bounds a delegated run whose definition sets no `with
// timeout`: coding agents work for minutes, not seconds.
const DefaultDelegatedDeadline = 30 * time.Minute

// ModeDelegated is the started record's mode of a delegated run.
const ModeDelegated = "delegated"

// delegatedExecutor hands the run to a registered coding agent over ACP (internal/acp):
// every permission it asks for and every file it reads or writes through symbi is a
// use_tool decision, journaled before the agent hears it; its final answer is judged by
// the respond gate like a model's.
type delegatedExecutor struct {
	executor  *executors.Executor
	workspace string // resolved
	project   string // the project directory: its policies are protected in the workspace
	prompt    string
	deadline  time.Duration
	hashes    bool
	decide    func(runID string, t policy.ToolUse) policy.Decision
	hold      acp.Holder // a gated denial waits for approve_run
	runID     func() string
	hurry     <-chan struct{} // the Runner's: closed by Hurry
	log       *slog.Logger    // the Runner's
}

func (d *delegatedExecutor) Describe(s *journal.Started) {
	s.Mode = ModeDelegated
	s.Provider, s.Model = "acp", d.executor.Name
	s.DeadlineMS = ms(d.deadline)
}

// Opening is empty: a delegated run begins by starting the agent, once started is durable.
func (d *delegatedExecutor) Opening() []journal.Record { return nil }

func (d *delegatedExecutor) Execute(ctx context.Context, w *journal.Writer, progress func(Stage)) (Output, error) {
	// Journal, then act: started is durable before any process is started.
	if err := w.Sync(); err != nil {
		return Output{}, &ExecError{reasonAuditFailed, err}
	}
	ws, err := workspace.Open(d.workspace, workspace.Options{Project: d.project})
	if err != nil {
		return d.noSession(w, fmt.Errorf("workspace %s: %w", d.workspace, err))
	}
	defer ws.Close()
	runID := d.runID()
	callCtx, cancel := context.WithTimeout(ctx, d.deadline)
	defer cancel()
	log := d.log
	if log == nil {
		log = slog.Default()
	}
	progress(StageRequestSent)
	res := acp.Run(callCtx, acp.Config{
		Executor: d.executor, Workspace: ws, Journal: w, Prompt: d.prompt, HashesOnly: d.hashes,
		Decide: func(t policy.ToolUse) policy.Decision { return d.decide(runID, t) }, Hold: d.hold,
		Hurry: d.hurry, Log: log.With("run_id", runID),
	})
	if res.Outcome == acp.OutcomeCompleted && res.Err == nil {
		progress(StageResponseReceived) // the agent's answer; a failed session has none
	}
	switch {
	case errors.Is(res.Err, acp.ErrJournal):
		return Output{}, &ExecError{reasonAuditFailed, res.Err}
	case errors.Is(res.Err, acp.ErrPanicked):
		// symbi's own bug, not the agent's failure: the run ends as a panicked step does.
		return Output{}, &ExecError{reasonAuditFailed, errcode.Errorf(errcode.Internal, "%w: %v", errPanicked, res.Err)}
	case res.Outcome == acp.OutcomeCompleted:
		return Output{Text: res.Text, TextSHA256: digest.SHA256Hex([]byte(res.Text)), TextBytes: int64(len(res.Text))}, nil
	case res.Outcome == acp.OutcomeTimeout:
		return Output{}, &ExecError{reasonTimeout, errcode.Errorf(errcode.Timeout, "the delegated agent did not finish before the deadline (%s): %v", d.deadline, res.Err)}
	case errors.Is(res.Err, acp.ErrAgentCancelled):
		// No one asked (acp sent no session/cancel): not a cancel_run, not a shutdown.
		return Output{}, &ExecError{reasonCancelled, errcode.Errorf(errcode.Cancelled, "the delegated agent ended its turn cancelled without being asked (no cancel_run, no shutdown)")}
	case res.Outcome == acp.OutcomeCancelled:
		return Output{}, &ExecError{reasonCancelled, cancelledError(ctx, "while the delegated agent worked")}
	}
	return Output{}, &ExecError{reasonInferenceFailed, errcode.Errorf(errcode.InferenceFailed, "the delegated agent failed: %v", res.Err)}
}

// noSession records a session that could not be opened (session_finished right after
// started) and fails the run.
func (d *delegatedExecutor) noSession(w *journal.Writer, err error) (Output, error) {
	rec := journal.SessionFinished{Outcome: acp.OutcomeError, TextSHA256: digest.SHA256Hex(nil), Error: err.Error()}
	if werr := w.Append(rec); werr != nil {
		return Output{}, &ExecError{reasonAuditFailed, werr}
	}
	if werr := w.Sync(); werr != nil {
		return Output{}, &ExecError{reasonAuditFailed, werr}
	}
	return Output{}, &ExecError{reasonInferenceFailed, errcode.Errorf(errcode.InferenceFailed, "%v", err)}
}

// delegatedPrompt is what the agent is asked: its definition, the caller's labelled
// instructions, then the task.
func delegatedPrompt(name string, definition []byte, instructions, prompt string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are the agent %q. Your definition, in the Symbiont agent DSL, follows.\n\n%s\n", name, definition)
	if instructions != "" {
		b.WriteString("\nCaller instructions (caller input, not part of the definition):\n" + instructions + "\n")
	}
	b.WriteString("\nTask:\n" + prompt + "\n")
	return b.String()
}
