package mcpserver

import (
	"context"
	"path"
	"symbi/internal/runs"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/project"
	"symbi/internal/schemapin"
)

type handlers struct {
	cfg Config
	// subs holds the subscriptions to each run resource, with the caller that made each,
	// so that runs nobody follows send no notifications and a notification goes only to a
	// caller that may read the run when it is sent (notifyReaders); a session's
	// subscriptions go when it ends (watched tells which sessions are watched for that).
	subsMu  sync.Mutex
	subs    map[string]map[*mcp.ServerSession]runs.Caller
	watched map[*mcp.ServerSession]bool
}

type invokeInput struct {
	Agent        string `json:"agent" jsonschema:"the agent's registry name: its file name without .symbi/.dsl"`
	Prompt       string `json:"prompt" jsonschema:"the question or task for the agent (at most 64 KiB)"`
	SystemPrompt string `json:"system_prompt,omitempty" jsonschema:"optional caller instructions, passed as labelled caller input (at most 64 KiB)"`
}

type invokeOutput struct {
	Agent   string        `json:"agent" jsonschema:"the declared agent name"`
	AgentID string        `json:"agent_id" jsonschema:"UUIDv5 (URL namespace) of symbi://response/<declared name>"`
	Audit   *invoke.Audit `json:"audit" jsonschema:"the run's journal: run_id, absolute path, Ed25519 public key (hex), and the receipt (records, head)"`
}

func (h *handlers) invokeAgent(ctx context.Context, req *mcp.CallToolRequest, in invokeInput) (*string, invokeOutput, error) {
	by := h.cfg.caller(req.Extra)
	if err := h.cfg.Runs.AuthorizeStart(by, in.Agent); err != nil {
		return nil, invokeOutput{}, err
	}
	report, stop := progressReporter(ctx, req)
	defer stop()
	res, err := h.cfg.Runs.Invoke(ctx, invoke.Request{Agent: in.Agent, Prompt: in.Prompt, SystemPrompt: in.SystemPrompt,
		Surface: Surface, Caller: by.ID, CallerAuth: by.Auth}, report)
	if err != nil {
		return nil, invokeOutput{}, err
	}
	return &res.Text, invokeOutput{Agent: res.Agent, AgentID: res.AgentID, Audit: res.Audit}, nil
}

type listInput struct{}

type listOutput struct {
	Agents []project.Entry `json:"agents" jsonschema:"registered agent files, sorted by name"`
}

func (h *handlers) listAgents(ctx context.Context, req *mcp.CallToolRequest, _ listInput) (*string, listOutput, error) {
	entries := h.cfg.Registry.Entries()
	if entries == nil {
		entries = []project.Entry{}
	}
	return nil, listOutput{Agents: entries}, nil
}

type parseInput struct {
	File    string `json:"file,omitempty" args:"nonempty" jsonschema:"a project file, relative path, .symbi or .dsl"`
	Content string `json:"content,omitempty" args:"nonempty" jsonschema:"inline definition source (at most 1 MiB)"`
}

func (h *handlers) parseDSL(ctx context.Context, req *mcp.CallToolRequest, in parseInput) (*string, *dsl.Result, error) {
	switch {
	case in.File != "" && in.Content != "":
		return nil, nil, errcode.Errorf(errcode.InvalidRequest, "give file or content, not both")
	case in.File != "":
		if ext := path.Ext(in.File); ext != ".symbi" && ext != ".dsl" {
			return nil, nil, errcode.Errorf(errcode.InvalidRequest, "file %s: only .symbi and .dsl files can be parsed", errcode.Quote(in.File))
		}
		src, err := h.cfg.Project.Read(in.File, dsl.MaxSourceBytes)
		if err != nil {
			return nil, nil, err
		}
		return nil, dsl.Analyze(in.File, src, h.admitOptions()), nil
	case in.Content != "":
		if len(in.Content) > dsl.MaxSourceBytes {
			return nil, nil, errcode.Errorf(errcode.LimitExceeded, "content is %d bytes; the limit is %d (1 MiB)", len(in.Content), dsl.MaxSourceBytes)
		}
		return nil, dsl.Analyze("inline", []byte(in.Content), h.admitOptions()), nil
	}
	return nil, nil, errcode.Errorf(errcode.InvalidRequest, "give file or content")
}

// admitOptions are those the server's agents were admitted with (its executors).
func (h *handlers) admitOptions() dsl.Options {
	if h.cfg.Registry == nil {
		return dsl.Options{}
	}
	return h.cfg.Registry.AdmitOptions()
}

type agentInput struct {
	Agent string `json:"agent" jsonschema:"the agent's registry name: its file name without .symbi/.dsl"`
}

type agentDSLOutput struct {
	Agent  string `json:"agent" jsonschema:"the registry name"`
	File   string `json:"file" jsonschema:"the definition file, relative to the project"`
	Source string `json:"source" jsonschema:"the raw source"`
}

func (h *handlers) getAgentDSL(ctx context.Context, req *mcp.CallToolRequest, in agentInput) (*string, agentDSLOutput, error) {
	if in.Agent == "" {
		return nil, agentDSLOutput{}, errcode.Errorf(errcode.InvalidRequest, "agent is required")
	}
	a, err := h.cfg.Registry.Resolve(in.Agent)
	if a == nil {
		return nil, agentDSLOutput{}, err
	}
	src := string(a.Source)
	return &src, agentDSLOutput{Agent: a.Entry.Name, File: a.Entry.File, Source: src}, nil
}

type noInput struct{}

type agentsMDOutput struct {
	Path    string `json:"path" jsonschema:"AGENTS.md"`
	Content string `json:"content" jsonschema:"the whole file"`
}

func (h *handlers) getAgentsMD(ctx context.Context, req *mcp.CallToolRequest, _ noInput) (*string, agentsMDOutput, error) {
	md, err := h.cfg.Project.AgentsMD()
	if err != nil {
		return nil, agentsMDOutput{}, err
	}
	text := string(md)
	return &text, agentsMDOutput{Path: "AGENTS.md", Content: text}, nil
}

func (h *handlers) verifySchema(ctx context.Context, req *mcp.CallToolRequest, in schemapin.Request) (*string, *schemapin.Result, error) {
	res, err := h.cfg.Schemas.Verify(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	return nil, res, nil
}

func (h *handlers) readAgentsMD(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	if req.Params.URI != AgentsMDURI {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	md, err := h.cfg.Project.AgentsMD()
	if err != nil {
		// A missing file is not found; any other refusal (too large, a link) names its rule.
		return nil, resourceError(req.Params.URI, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: AgentsMDURI, MIMEType: "text/markdown", Text: string(md)}}}, nil
}
