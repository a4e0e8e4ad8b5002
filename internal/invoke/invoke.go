// Package invoke is the governed run of invoke_agent: preflight, the ordering of journal
// writes around the model call and the policy decision, and ownership of the run.
//
// A run's order is its contract (see docs/security-model.md):
//
//	preflight   limits, registry resolution, admission, provider, request size — no journal, no model call
//	open        the project's governed store and a fresh per-run journal (failure: audit_unavailable)
//	durable     started + inference_requested, one fsync          — only then is the request sent
//	infer       exactly one provider call, deadline min(120 s, the agent's timeout)
//	durable     inference_finished, fsync                          — only then is the policy evaluated
//	decide      Cedar respond on the exact text
//	durable     policy_evaluated + terminated, one fsync           — only then is anything returned
//
// Any failed journal write withholds the text. A run belongs to the Runner, not to the
// request that started it: when the caller cancels or goes away the provider call is
// cancelled, and the run still writes its terminated record before it ends.
package invoke

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/inference"
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
	Log     *slog.Logger
}

// DefaultMaxRuns is the default bound on runs in flight (symbi mcp --max-runs).
const DefaultMaxRuns = 64

// Runner executes governed runs. Its zero value is not usable; call New.
type Runner struct {
	cfg     Config
	base    context.Context // the server's lifetime: cancelled by Shutdown
	stop    context.CancelFunc
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
	base, stop := context.WithCancel(context.Background())
	return &Runner{cfg: cfg, base: base, stop: stop, terminateBudget: terminateBudget}
}

// Shutdown cancels every run in flight and waits until each has written its terminated
// record, or until ctx is done.
func (r *Runner) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.stop()
	done := make(chan struct{})
	go func() { r.runs.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Request is one invoke_agent call.
type Request struct {
	Agent        string
	Prompt       string
	SystemPrompt string
}

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

// Invoke runs req. progress, if not nil, is called at each stage the run reaches. When ctx
// is cancelled Invoke returns promptly with a cancelled error while the run, owned by r,
// cancels its provider call and finishes its journal in the background.
func (r *Runner) Invoke(ctx context.Context, req Request, progress func(Stage)) (*Result, error) {
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
	p, err := r.preflight(req)
	if err != nil {
		release()
		return nil, &Error{Err: err}
	}
	progress(StageAdmitted)
	runCtx, cancel := context.WithCancelCause(r.base)
	stopAfter := context.AfterFunc(ctx, func() { cancel(errCallerGone) })
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		defer release()
		defer cancel(nil)
		defer stopAfter()
		res, err := r.run(runCtx, p, progress)
		r.logRun(p, res, err)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
		// The run goes on: it sees runCtx cancelled and writes terminated itself. Wait a
		// little for it, so the answer can carry the audit reference of what it recorded.
		t := time.NewTimer(r.terminateBudget)
		defer t.Stop()
		select {
		case o := <-done:
			return o.res, o.err
		case <-t.C:
			// Stop waiting only if the run has not committed to releasing: then it can no
			// longer release, and its journal will say cancelled, as the caller is told.
			if p.outcome.CompareAndSwap(outcomeOpen, outcomeAbandoned) {
				// The journal exists but has not ended yet: the reference has no receipt.
				return nil, &Error{Audit: p.opened.Load(), Err: errcode.Errorf(errcode.Cancelled, "the caller cancelled the request; the run records it as cancelled")}
			}
			// It is writing its release: report what its journal will record.
			o := <-done
			return o.res, o.err
		}
	}
}

// The outcomes a run and the call waiting for it agree on (prepared.outcome): whichever
// moves it from outcomeOpen first decides, so the caller is never told cancelled for a run
// whose journal records a release, nor handed text the journal says was not released.
const (
	outcomeOpen      int32 = iota
	outcomeReleasing       // the run is writing its release
	outcomeAbandoned       // the call stopped waiting and told its caller cancelled
)

var errCallerGone = errors.New("the caller cancelled the request")

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

// prepared is the outcome of preflight: everything a run needs before its journal exists.
type prepared struct {
	opened    atomic.Pointer[Audit] // set once the run's journal exists: run_id, path, public_key
	outcome   atomic.Int32          // outcomeOpen, outcomeReleasing or outcomeAbandoned
	req       Request
	agent     *project.Agent
	name      string // declared name
	agentID   string
	guidance  string
	call      *inference.Call
	conv      inference.Conversation
	deadline  time.Duration
	maxTokens int
}

func (r *Runner) preflight(req Request) (*prepared, error) {
	if n := len(req.Prompt); n > MaxPromptBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "prompt is %d bytes; the limit is %d (64 KiB)", n, MaxPromptBytes)
	}
	if n := len(req.SystemPrompt); n > MaxPromptBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "system_prompt is %d bytes; the limit is %d (64 KiB)", n, MaxPromptBytes)
	}
	if req.Agent == "" {
		return nil, errcode.Errorf(errcode.InvalidRequest, "agent is required")
	}
	if req.Prompt == "" {
		return nil, errcode.Errorf(errcode.InvalidRequest, "prompt is required")
	}
	agent, err := r.cfg.Registry.Resolve(req.Agent)
	if err != nil {
		return nil, err
	}
	if r.cfg.Provider == nil {
		if r.cfg.ProviderErr != nil {
			return nil, errcode.Wrap(errcode.NoProvider, r.cfg.ProviderErr)
		}
		return nil, errcode.Errorf(errcode.NoProvider, "no inference provider is configured (set OPENAI_BASE_URL/OPENAI_API_KEY, ANTHROPIC_API_KEY or OPENROUTER_API_KEY; see docs/providers.md)")
	}
	adm := agent.Admission
	p := &prepared{
		req:       req,
		agent:     agent,
		name:      adm.Agent,
		agentID:   policy.AgentID(adm.Agent),
		deadline:  MaxDeadline,
		maxTokens: inference.MaxOutputTokens,
	}
	if adm.Timeout > 0 && adm.Timeout < p.deadline {
		p.deadline = adm.Timeout
	}
	if md, err := r.cfg.Project.AgentsMD(); err == nil {
		p.guidance = project.Guidance(md)
	}
	p.conv = conversation(adm.Agent, adm.Definition, p.guidance, req.SystemPrompt, req.Prompt)
	p.call, err = r.cfg.Provider.Prepare(p.conv, p.maxTokens)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// conversation lays out what the model is sent: the definition (dsl.Admission.Definition:
// metadata, top-level policies and the selected declaration — not the file's other
// agents, which were never admitted) as the system message, the
// caller's instructions (AGENTS.md guidance, then system_prompt) as one user message that
// the inference package labels as caller input, then the prompt. system_prompt never
// becomes a system message and cannot replace the definition.
func conversation(name string, definition []byte, guidance, systemPrompt, prompt string) inference.Conversation {
	c := inference.Conversation{
		System: fmt.Sprintf("You are the agent %q. Your definition, in the Symbiont agent DSL, follows. Answer as this agent, with text only.\n\n%s", name, definition),
		Prompt: prompt,
	}
	var parts []string
	if guidance != "" {
		parts = append(parts, "Project guidance (from AGENTS.md):\n"+guidance)
	}
	if systemPrompt != "" {
		parts = append(parts, "Caller system_prompt:\n"+systemPrompt)
	}
	c.Instructions = strings.Join(parts, "\n\n")
	return c
}
