package policy

import "symbi/internal/project"

// NewRequest builds the respond request for an answer of a resolved agent: the
// principal is the selected declaration's name, the hashes are of the whole file
// and of the declaration's exact bytes.
func NewRequest(a *project.Agent, runID, response string) Request {
	adm := a.Admission
	return Request{
		Action:            ActionRespond,
		Agent:             adm.Agent,
		AgentID:           AgentID(adm.Agent),
		File:              a.Entry.File,
		Capabilities:      adm.Capabilities,
		SourceSHA256:      SHA256Hex(a.Source),
		DeclarationSHA256: SHA256Hex(adm.Declaration),
		RunID:             runID,
		Response:          response,
	}
}
