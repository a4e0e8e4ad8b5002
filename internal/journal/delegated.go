package journal

// The records of a delegated run: a coding agent working in a workspace over the Agent
// Client Protocol (ACP) instead of one model call. After started, such a run records
// session_started, then what the agent does — its messages and thoughts (streamed chunks
// coalesced), its tool calls and their updates, its plan, each permission decided, each
// file read or written through symbi — then session_finished with the final answer's
// digest, which policy_evaluated judges exactly as it judges a model's text. The state
// machine (machine.go) holds the order; docs/journal-format.md documents every member.

// Bounds of the delegated records' free text, so a record always fits.
const (
	MaxChunkBytes   = 64 << 10 // agent_message and agent_thought text per record
	MaxExcerptBytes = 1 << 10  // tool_call_update's excerpt of the raw output
	MaxTitleBytes   = 1 << 10  // a tool call's or permission's title
	MaxPaths        = 64       // locations per tool call or permission
	MaxPlanEntries  = 64       // entries per plan
)

// SessionStarted is written once the agent's ACP session is open (initialize,
// session/new, and the permission mode pinned when the executor names one), before the
// prompt is sent.
type SessionStarted struct {
	Executor        string   `json:"executor"`  // the registered executor's name
	Command         []string `json:"command"`   // argv as run, command[0] an absolute path
	Workspace       string   `json:"workspace"` // absolute, symbolic links resolved
	ProtocolVersion int64    `json:"protocol_version"`
	AgentName       string   `json:"agent_name"`    // from initialize's agentInfo ("" when not given)
	AgentVersion    string   `json:"agent_version"` // likewise
	SessionID       string   `json:"session_id"`
	Mode            string   `json:"mode,omitempty"` // the pinned permission mode
	PromptSHA256    string   `json:"prompt_sha256"`  // of the exact prompt content sent
	PromptBytes     int64    `json:"prompt_bytes"`
}

// AgentMessage is a run of the agent's message text, chunks coalesced: at least one record
// a second while text flows, at most MaxChunkBytes of text each.
type AgentMessage struct {
	TextSHA256  string `json:"text_sha256"`
	Bytes       int64  `json:"bytes"`
	Chunks      int64  `json:"chunks"`                 // the ACP chunks coalesced
	Text        string `json:"text,omitempty"`         // clear text, if journaled
	OtherBlocks int64  `json:"other_blocks,omitempty"` // chunks whose content was not text (image, audio, resource, resource link): counted, not journaled, no part of the answer
	OutOfTurn   bool   `json:"out_of_turn,omitempty"`  // message text read before the prompt was sent or after its answer: no part of the answer
}

// AgentThought is a run of the agent's thought text, as AgentMessage.
type AgentThought AgentMessage

// ToolCall is a tool call the agent reports (its content blocks are not journaled; the
// raw input only by digest). A call announced with its raw output already (one that ran)
// has the output's digest and excerpt, as a tool_call_update's.
type ToolCall struct {
	ToolCallID      string   `json:"tool_call_id"`
	Kind            string   `json:"kind"`
	Title           string   `json:"title"`
	Status          string   `json:"status"`
	Paths           []string `json:"paths"` // its locations, relative to the workspace
	RawInputSHA256  string   `json:"raw_input_sha256"`
	RawInputBytes   int64    `json:"raw_input_bytes"`
	RawOutputSHA256 string   `json:"raw_output_sha256,omitempty"`
	RawOutputBytes  int64    `json:"raw_output_bytes,omitempty"`
	Excerpt         string   `json:"excerpt,omitempty"` // at most MaxExcerptBytes of the raw output
}

// ToolCallUpdate is a change the agent reports to a tool call. What the update leaves
// out is absent: a kind, title, locations or raw input it sends is journaled as a
// tool_call's is, so that a call changed after its permission was decided shows it.
type ToolCallUpdate struct {
	ToolCallID      string   `json:"tool_call_id"`
	Kind            string   `json:"kind,omitempty"`
	Title           string   `json:"title,omitempty"`
	Status          string   `json:"status,omitempty"`
	Paths           []string `json:"paths,omitzero"` // its locations, as a tool_call's ([] when it clears them)
	RawInputSHA256  string   `json:"raw_input_sha256,omitempty"`
	RawInputBytes   int64    `json:"raw_input_bytes,omitempty"`
	RawOutputSHA256 string   `json:"raw_output_sha256,omitempty"`
	RawOutputBytes  int64    `json:"raw_output_bytes"`
	Excerpt         string   `json:"excerpt,omitempty"` // at most MaxExcerptBytes of the raw output
}

// PlanEntry is one entry of the agent's plan.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
}

// Plan is the agent's plan as it last reported it.
type Plan struct {
	Entries []PlanEntry `json:"entries"`
}

// PermissionDecided is one use_tool decision — on a session/request_permission, or on a
// file read or write the agent asked symbi for — durable before the agent hears it.
type PermissionDecided struct {
	RequestID  string   `json:"request_id"` // unique in the run; fs_read/fs_write name it
	ToolCallID string   `json:"tool_call_id,omitempty"`
	Kind       string   `json:"kind"`
	Title      string   `json:"title"`
	Paths      []string `json:"paths"`
	Outside    []string `json:"outside"`  // paths outside the workspace (any one denies)
	Decision   string   `json:"decision"` // allow or deny
	PolicyIDs  []string `json:"policy_ids"`
	Errors     []string `json:"errors"`
	OptionID   string   `json:"option_id,omitempty"` // the ACP option answered: allow-once or reject-once only
}

// FSAccess is a file read or written through symbi on the agent's behalf, after an allow.
type FSAccess struct {
	RequestID string `json:"request_id"` // the permission_decided that allowed it
	Path      string `json:"path"`       // relative to the workspace
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
}

// FSRead is a file read (fs/read_text_file).
type FSRead FSAccess

// FSWrite is a file written (fs/write_text_file).
type FSWrite FSAccess

// SessionFinished ends the agent's work: how its prompt turn ended and the final answer —
// the agent's message text of the last turn — by digest (and in clear when journaled).
// It follows session_started, or started directly when no session could be opened.
type SessionFinished struct {
	Outcome    string `json:"outcome"`     // completed, error, timeout or cancelled
	StopReason string `json:"stop_reason"` // ACP's (end_turn, max_tokens, ...); "" without one
	TextSHA256 string `json:"text_sha256"`
	TextBytes  int64  `json:"text_bytes"`
	Error      string `json:"error,omitempty"`
	Text       string `json:"text,omitempty"` // clear text, if journaled
}

// Delegated record type names.
const (
	TypeSessionStarted    = "session_started"
	TypeAgentMessage      = "agent_message"
	TypeAgentThought      = "agent_thought"
	TypeToolCall          = "tool_call"
	TypeToolCallUpdate    = "tool_call_update"
	TypePlan              = "plan"
	TypePermissionDecided = "permission_decided"
	TypeFSRead            = "fs_read"
	TypeFSWrite           = "fs_write"
	TypeSessionFinished   = "session_finished"
)

// Type implements Record.
func (SessionStarted) Type() string { return TypeSessionStarted }

// Type implements Record.
func (AgentMessage) Type() string { return TypeAgentMessage }

// Type implements Record.
func (AgentThought) Type() string { return TypeAgentThought }

// Type implements Record.
func (ToolCall) Type() string { return TypeToolCall }

// Type implements Record.
func (ToolCallUpdate) Type() string { return TypeToolCallUpdate }

// Type implements Record.
func (Plan) Type() string { return TypePlan }

// Type implements Record.
func (PermissionDecided) Type() string { return TypePermissionDecided }

// Type implements Record.
func (FSRead) Type() string { return TypeFSRead }

// Type implements Record.
func (FSWrite) Type() string { return TypeFSWrite }

// Type implements Record.
func (SessionFinished) Type() string { return TypeSessionFinished }

// inSession lists the records that stand between session_started and session_finished.
var inSession = map[string]bool{
	TypeAgentMessage: true, TypeAgentThought: true, TypeToolCall: true, TypeToolCallUpdate: true,
	TypePlan: true, TypePermissionDecided: true, TypeFSRead: true, TypeFSWrite: true,
}
