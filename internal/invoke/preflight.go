package invoke

import (
	"fmt"
	"strings"
	"sync/atomic"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/project"
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
	exec    *modelExecutor // the executor the definition's route names
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
		return nil, errcode.Errorf(errcode.NoProvider, "%s", inference.NoProviderHint)
	}
	adm := agent.Admission
	p := &prepared{req: req, agent: agent, name: adm.Agent, agentID: policy.AgentID(adm.Agent)}
	deadline := MaxDeadline
	if adm.Timeout > 0 && adm.Timeout < deadline {
		deadline = adm.Timeout
	}
	var guidance string
	if md, err := r.cfg.Project.AgentsMD(); err == nil {
		guidance = project.Guidance(md)
	}
	p.conv = conversation(adm.Agent, adm.Definition, guidance, req.SystemPrompt, req.Prompt)
	// The request is built now, so that its size is checked before any journal exists.
	call, err := r.cfg.Provider.Prepare(p.conv, inference.MaxOutputTokens)
	if err != nil {
		return nil, err
	}
	p.exec = &modelExecutor{provider: r.cfg.Provider, call: call, deadline: deadline, maxTokens: inference.MaxOutputTokens, hashesOnly: r.cfg.HashesOnly, at: r.at}
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
