package invoke

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"symbi/internal/acp"
	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/workspace"
)

// prepared is the outcome of preflight: everything a run needs before its journal exists.
type prepared struct {
	opened  atomic.Pointer[Audit] // set once the run's journal exists: run_id, path, public_key
	journal atomic.Pointer[journal.Writer]
	reason  string       // the terminated reason the run ended with; set before done is closed
	outcome atomic.Int32 // outcomeOpen, outcomeReleasing or outcomeAbandoned
	req     Request
	agent   *project.Agent
	name    string // declared name
	agentID string
	conv    inference.Conversation
	exec    Executor       // the executor the definition's route names
	model   *modelExecutor // exec, when it is the model executor (the benchmark's ungoverned path)

	gate gateState // a human gate's wait (gate.go)
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
	if agent.Admission.Delegated() {
		return r.preflightDelegated(req, agent)
	}
	if req.Workspace != "" {
		return nil, errcode.Errorf(errcode.InvalidRequest, "workspace is for delegated agents; %q answers with one model call", req.Agent)
	}
	if r.cfg.Provider == nil {
		if r.cfg.ProviderErr != nil {
			return nil, errcode.Wrap(errcode.NoProvider, r.cfg.ProviderErr)
		}
		return nil, errcode.Errorf(errcode.NoProvider, "%s", inference.NoProviderHint)
	}
	adm := agent.Admission
	p := &prepared{req: req, agent: agent, name: adm.Agent, agentID: policy.AgentID(adm.Agent)}
	deadline := MaxDeadline
	if adm.Timeout > 0 && adm.Timeout < deadline {
		deadline = adm.Timeout
	}
	guidance, err := r.guidance()
	if err != nil {
		return nil, err
	}
	p.conv = conversation(adm.Agent, adm.Definition, guidance, req.SystemPrompt, req.Prompt)
	// The request is built now, so that its size is checked before any journal exists.
	call, err := r.cfg.Provider.Prepare(p.conv, inference.MaxOutputTokens)
	if err != nil {
		return nil, err
	}
	p.model = &modelExecutor{provider: r.cfg.Provider, call: call, deadline: deadline, maxTokens: inference.MaxOutputTokens, hashesOnly: r.cfg.HashesOnly, at: r.at}
	p.exec = p.model
	return p, nil
}

// preflightDelegated prepares a delegated agent's run: start_run only, a registered
// executor, and a workspace inside the granted roots.
func (r *Runner) preflightDelegated(req Request, agent *project.Agent) (*prepared, error) {
	adm := agent.Admission
	if !req.Async {
		return nil, errcode.Errorf(errcode.RefusedDefinition, "agent %q is delegated (executor %s): its work is long, so it runs only through start_run", req.Agent, adm.Executor)
	}
	ex, ok := r.cfg.Executors.Get(adm.Executor)
	if !ok {
		return nil, errcode.Errorf(errcode.RefusedDefinition, "executor %q is not registered with this server (symbi mcp --executors FILE)", adm.Executor)
	}
	roots := r.cfg.WorkspaceRoots
	if len(roots) == 0 {
		roots = []string{r.cfg.Project.Path()}
	}
	path := req.Workspace
	if path == "" {
		path = r.cfg.Project.Path()
	}
	ws, err := workspace.Resolve(path, roots)
	if err != nil {
		return nil, err
	}
	if err := workspace.CheckPlace(ws, r.cfg.Project.Path(), r.cfg.KeyFile); err != nil {
		return nil, err
	}
	deadline := DefaultDelegatedDeadline
	if adm.Timeout > 0 {
		deadline = adm.Timeout
	}
	guidance, err := r.guidance()
	if err != nil {
		return nil, err
	}
	p := &prepared{req: req, agent: agent, name: adm.Agent, agentID: policy.AgentID(adm.Agent)}
	// Nothing goes to a model; the caller's instructions go into the agent's prompt, and
	// into started (their digest, and their text unless the journal keeps only digests),
	// as a model run's do.
	instructions := callerInstructions(guidance, req.SystemPrompt)
	p.conv = inference.Conversation{Instructions: instructions, Prompt: req.Prompt}
	p.exec = &delegatedExecutor{
		executor: ex, workspace: ws, project: r.cfg.Project.Path(), deadline: deadline, hashes: r.cfg.HashesOnly, hurry: r.hurry, log: r.cfg.Log,
		prompt: delegatedPrompt(adm.Agent, adm.Definition, instructions, req.Prompt),
		decide: func(runID string, t policy.ToolUse) policy.Decision {
			tr := policy.NewToolRequest(agent, runID, req.Surface, req.Caller, t)
			tr.CallerAuth = req.CallerAuth
			return r.cfg.Policies.Decide(tr)
		},
		runID: func() string {
			if a := p.opened.Load(); a != nil {
				return a.RunID
			}
			return ""
		},
		hold: func(ctx context.Context, h acp.Hold, record func(journal.Record) error) acp.HoldResult {
			return r.holdPermission(ctx, p, h, record)
		},
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
	c.Instructions = callerInstructions(guidance, systemPrompt)
	return c
}

// callerInstructions lays out the caller's instructions: the AGENTS.md guidance, then
// system_prompt, each under its own heading ("" when there are none).
func callerInstructions(guidance, systemPrompt string) string {
	var parts []string
	if guidance != "" {
		parts = append(parts, "Project guidance (from AGENTS.md):\n"+guidance)
	}
	if systemPrompt != "" {
		parts = append(parts, "Caller system_prompt:\n"+systemPrompt)
	}
	return strings.Join(parts, "\n\n")
}

// guidance returns the project's guidance for its agents (AGENTS.md's generated section;
// "" without AGENTS.md, or without the section). An AGENTS.md that exists but cannot be
// read by the project's rules (over its limit, a link, not UTF-8), or whose markers are
// malformed, refuses the run with its coded error: the agent would otherwise run without
// the project's rules, unsaid.
func (r *Runner) guidance() (string, error) {
	md, err := r.cfg.Project.AgentsMD()
	switch {
	case errcode.Of(err) == errcode.NotFound:
		return "", nil
	case err != nil:
		return "", errcode.Errorf(errcode.Of(err), "AGENTS.md cannot be read, so the project's guidance cannot reach the agent: %w", err)
	}
	g, err := project.Guidance(md)
	if err != nil {
		return "", errcode.Errorf(errcode.Of(err), "AGENTS.md's generated section cannot be found, so the project's guidance cannot reach the agent: %w; fix the markers, or run `symbi agents-md generate` after removing them", err)
	}
	return g, nil
}
