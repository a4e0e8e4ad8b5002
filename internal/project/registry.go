package project

// Entry describes one agent file of the registry snapshot.
type Entry struct {
	Name         string   `json:"name"`         // the file's stem
	File         string   `json:"file"`         // path relative to the project, e.g. agents/x.symbi
	Agents       []string `json:"agents"`       // declared agent names
	Description  string   `json:"description"`  // metadata description
	Capabilities []string `json:"capabilities"` // the selected agent's capabilities
	Invocable    bool     `json:"invocable"`    // whether invoke_agent may run it
	Reason       string   `json:"reason"`       // why not invocable, with line:column; empty when invocable
}
