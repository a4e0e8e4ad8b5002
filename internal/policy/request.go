package policy

import "symbi/internal/project"

// NewRequest builds the respond request for an answer of a resolved agent: the
// principal is the selected declaration's name, the hashes are of the whole file
// and of the declaration's exact bytes. surface and caller name the transport and who
// asked for the run.
func NewRequest(a *project.Agent, runID, response, surface, caller string) Request {
	adm := a.Admission
	return Request{
		Action:            ActionRespond,
		Agent:             adm.Agent,
		AgentID:           AgentID(adm.Agent),
		File:              a.Entry.File,
		Capabilities:      adm.Capabilities,
		SourceSHA256:      a.SourceSHA256,
		DeclarationSHA256: a.DeclarationSHA256,
		RunID:             runID,
		Response:          response,
		Surface:           surface,
		Caller:            caller,
	}
}

// NewToolRequest builds the use_tool request for one tool call or file access of a
// delegated agent's run.
func NewToolRequest(a *project.Agent, runID, surface, caller string, t ToolUse) Request {
	r := NewRequest(a, runID, "", surface, caller)
	r.Action = ActionUseTool
	r.Tool = &t
	return r
}
