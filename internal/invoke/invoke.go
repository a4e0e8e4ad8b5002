// Package invoke is the governed run: preflight, the ordering of journal writes around the
// executor's work and the policy decision, and ownership of the run.
//
// A run's order is its contract (see docs/security-model.md):
//
//	slot        at most Config.MaxRuns runs in flight; beyond: busy, nothing kept
//	preflight   limits, registry resolution, admission, provider, request size — no journal, no model call
//	open        the governed store, the free-space floor, a fresh per-run journal (failure: audit_unavailable)
//	durable     started + the executor's request record, one fsync — only then does the executor act
//	execute     the model executor: exactly one provider call, deadline min(120 s, the agent's timeout)
//	durable     the executor's result record, fsync                  — only then is the policy evaluated
//	decide      Cedar respond on the exact text
//	durable     policy_evaluated + terminated, one fsync             — only then is anything returned
//
// Any failed journal write withholds the text. The types:
//
//   - Runner starts runs (Start) and owns them: a run belongs to the Runner, not to the
//     request that started it. Shutdown cancels the runs in flight and waits for each to
//     write its terminated record.
//   - Run is one run: Wait for its outcome, Cancel it with a cause, Done when it has ended.
//     Invoke is Start then Wait, cancelling the run when its caller goes away. The caller's
//     outcome and the journal's terminated always agree (Run.Wait).
//   - Executor is the boundary between the run and what produces its text: it journals its
//     own steps, each before it acts, and never releases anything. The model executor calls
//     an inference provider once; the delegated executor runs a registered coding agent
//     over ACP in a workspace (start_run only), each of its permissions a use_tool
//     decision journaled before the agent hears it.
//   - Request carries the caller and the surface, which reach the started record and the
//     policy context.
package invoke

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"symbi/internal/executors"
	"symbi/internal/inference"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/project"
)

// Limits of a run.
const (
	MaxPromptBytes  = 64 << 10          // prompt and system_prompt, each
	MaxDeadline     = 120 * time.Second // tightened by the agent's `with timeout`
	terminateBudget = 2 * time.Second   // how long a cancelled call waits for its run's journal to end
)

// Stage names a point of a run reported to Progress.
type Stage string

// The stages, in order.
const (
	StageAdmitted         Stage = "admitted"
	StageJournalOpened    Stage = "journal opened"
	StageRequestSent      Stage = "request sent"
	StageResponseReceived Stage = "response received"
	StagePolicyDecided    Stage = "policy decided"
)

// Stages lists the stages in the order a completed run passes them.
var Stages = []Stage{StageAdmitted, StageJournalOpened, StageRequestSent, StageResponseReceived, StagePolicyDecided}

// Config is what a Runner needs. Project, Registry and Policies are required.
type Config struct {
	Project  *project.Project
	Registry *project.Registry
	Policies *policy.Set
	Provider inference.Provider // nil: invocations fail with no_provider
	// ProviderErr says why Provider is nil (from inference.FromEnv); it is the no_provider
	// error clients see.
	ProviderErr error
	KeyFile     string // SYMBI_AUDIT_KEY_FILE; "" for the project's key
	// HashesOnly leaves the clear text of prompt, instructions and response out of the
	// journal (only their SHA-256 and lengths are kept).
	HashesOnly bool
	// MinFreeBytes is the free-space floor of the journal file system: below it a run is
	// refused (audit_unavailable) before its journal is created. 0 disables the check.
	MinFreeBytes uint64
	// MaxRuns bounds the runs in flight; a call beyond it fails at once with busy.
	// 0 means DefaultMaxRuns.
	MaxRuns int
	// ApprovalTimeout bounds how long a run held at a human gate waits for approve_run
	// (the agent's own deadline when that is longer); 0 means DefaultApprovalTimeout.
	ApprovalTimeout time.Duration
	// Ledger, when set, is the project ledger: each run's entry is made durable before its
	// journal ends and before its outcome reaches anyone. symbi mcp always sets it.
	Ledger *ledger.Writer
	// LedgerErr, when set, is why the project ledger could not be opened: every run is
	// then refused (audit_unavailable) before its journal is created.
	LedgerErr error
	// Executors are the coding agents the operator registered (--executors); nil: none.
	Executors *executors.Registry
	// WorkspaceRoots are the directories a delegated run's workspace must be inside
	// (--workspace-root); none: the project directory.
	WorkspaceRoots []string
	Log            *slog.Logger
}

// DefaultMaxRuns is the default bound on runs in flight (symbi mcp --max-runs).
const DefaultMaxRuns = 64

// DefaultApprovalTimeout is how long a run held at a human gate waits by default (symbi
// mcp --approval-timeout).
const DefaultApprovalTimeout = 24 * time.Hour

// Runner executes governed runs. Its zero value is not usable; call New.
type Runner struct {
	cfg     Config
	base    context.Context // the server's lifetime: cancelled by Shutdown (cause ErrShuttingDown)
	stop    context.CancelCauseFunc
	hurry   chan struct{} // closed by Hurry
	hurried sync.Once
	runs    sync.WaitGroup
	ungov   bool       // benchmark-only (bench_test.go): no journal, no policy
	mu      sync.Mutex // guards closing, active and runs.Add against Shutdown's Wait
	closing bool
	active  int // runs in flight, at most cfg.MaxRuns
	// terminateBudget is how long a cancelled call waits for its run's journal to end
	// (terminateBudget by default; tests shorten it).
	terminateBudget time.Duration
	// hook, in tests only, is called at named points of a run ("inferred", "releasing").
	hook func(point string)
}

// New returns a Runner for cfg.
func New(cfg Config) *Runner {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRuns <= 0 {
		cfg.MaxRuns = DefaultMaxRuns
	}
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = DefaultApprovalTimeout
	}
	base, stop := context.WithCancelCause(context.Background())
	return &Runner{cfg: cfg, base: base, stop: stop, hurry: make(chan struct{}), terminateBudget: terminateBudget}
}

// Stop cancels every run in flight and refuses new ones, without waiting: each run then
// writes its terminated record (Shutdown waits for them).
func (r *Runner) Stop() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.stop(ErrShuttingDown)
}

// ErrShuttingDown is the cause the runs in flight are cancelled with when the server
// stops (Stop, Hurry, Shutdown).
var ErrShuttingDown = errors.New("the server is shutting down")

// Hurry is Stop, and the runs end without the rest of their grace periods: a delegated
// agent that has not ended its turn has its process group killed at once instead of
// being given time to wind down. Each run still writes its terminated record (Shutdown
// waits for them). A server calls it when told again to stop during its shutdown: its
// client will kill it soon, and a record written in time is worth more than an agent's
// clean exit.
func (r *Runner) Hurry() {
	r.hurried.Do(func() { close(r.hurry) })
	r.Stop()
}

// Shutdown cancels every run in flight and waits until each has written its terminated
// record, or until ctx is done.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.Stop()
	done := make(chan struct{})
	go func() { r.runs.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Request is one run to make: an invoke_agent call.
type Request struct {
	Agent        string
	Prompt       string
	SystemPrompt string
	// Surface names the transport the run was asked for on (default "mcp-server");
	// Caller names who asked (default CallerStdio) and CallerAuth how it was
	// authenticated (default CallerStdio when Caller is empty). They go into the started
	// record, the run's ledger entry and the policy context.
	Surface    string
	Caller     string
	CallerAuth string
	// Workspace is a delegated run's workspace (absolute; default the project directory).
	Workspace string
	// Async says the run was started to be observed (start_run), not awaited: only such
	// runs may be delegated.
	Async bool
	// Ended, when set, is called once the run has ended, before anyone hears that it did
	// (Done closes after it), as the server's own slot is freed: what the caller holds
	// for the run — its per-caller slot — is free by the time its answer arrives. Not
	// called when Start fails.
	Ended func()
}

// CallerStdio names the one caller of a stdio server: the client that started it.
const CallerStdio = "stdio"

// Audit is the reference to a run's journal: where it is, the key that signed it, and the
// caller's receipt (records and head) taken after the last write of the run.
type Audit struct {
	RunID     string `json:"run_id"`
	Path      string `json:"path"`
	PublicKey string `json:"public_key"`
	Records   int    `json:"records,omitempty"` // absent only when a cancelled call returned before its run's journal ended
	Head      string `json:"head,omitempty"`
}

// Result is a released answer.
type Result struct {
	Agent   string // declared name
	AgentID string
	Text    string
	Audit   *Audit
}

// Error is a failed invocation. Audit is set when the failure was recorded in a journal.
type Error struct {
	Err   error
	Audit *Audit
}

// Error returns the coded error's message.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the coded error.
func (e *Error) Unwrap() error { return e.Err }
