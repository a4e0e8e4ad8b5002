// Package journal writes and verifies the signed, hash-chained run journal of symbi.
//
// # Storage
//
// Journals live in <project>/.symbiont/governed/, a real directory (not a symlink) owned by
// the effective user with no group or other permission bits, created 0700. The project's
// Ed25519 signing key is the file audit-signing.key in that directory (or the file named by
// SYMBI_AUDIT_KEY_FILE): exactly the 32-byte seed, a regular file with one link, owned by the
// effective user, no group or other permission bits. It is created atomically (a temporary
// file renamed with RENAME_NOREPLACE), so concurrent creators end with one key. Each run has
// its own file <agent_id>.<run_id>.jsonl, created O_CREAT|O_EXCL|O_NOFOLLOW with mode 0600.
//
// # Line format
//
// A journal is a sequence of lines, each terminated by "\n":
//
//	{"payload":<P>,"signature":"<S>"}
//
// P is a JSON object embedded verbatim: verification uses exactly these bytes and never
// re-serializes them. S is the standard, padded base64 encoding of the 64-byte Ed25519
// signature over the bytes "symbi-journal-v1\n" followed by the bytes of P.
//
// P has these members, in this order when written by this package:
//
//	v         integer, 1
//	run_id    string, the run's id, the same on every line
//	seq       integer, the line index (0, 1, 2, ...)
//	prev      lowercase hex SHA-256 of the whole previous line including its "\n"
//	          (64 zeros on seq 0)
//	time      RFC 3339 UTC time of writing, e.g. 2026-01-02T03:04:05.678Z
//	agent_id  string, the same on every line
//	type      string: started, inference_requested, inference_finished,
//	          policy_evaluated, terminated (others may be added later)
//	data      JSON object, the record's own fields (see the record types)
//
// P contains no floating-point numbers (no '.', 'e' or 'E' in any number), no object
// with a duplicated member name, and no \u escape of a lone UTF-16 surrogate. A line is at most MaxRecordBytes bytes and a file at most
// MaxFileBytes bytes. Strings are written without HTML escaping.
//
// The data member of each record type is the JSON form of the Go struct of the same name
// (Started, InferenceRequested, InferenceFinished, PolicyEvaluated, Terminated); durations
// are integer milliseconds. By default the caller journals the clear text of the prompt,
// the caller instructions and the response (the prompt, instructions and text members)
// next to their digests; leaving them empty omits them. docs/journal-format.md documents
// every member.
//
// # Verification
//
// Verify opens the file without following symlinks, requires a regular file of at most
// MaxFileBytes, and checks each complete line: the exact line shape, a canonical padded
// base64 signature that verifies over the context prefix and P, v = 1, run_id and agent_id
// constant (and run_id equal to the expected one if given), seq = line index, prev = the
// hash of the previous line, seq 0 of type started, nothing after terminated. A final
// fragment without "\n" is an unverified tail, reported by its length and never trusted.
// The outcome is complete (exit code 0), incomplete (2: every complete line valid but no
// terminated record or a torn tail) or invalid (1). A receipt (records, head) given to
// Verify must match the journal exactly.
//
// The signatures of a journal (and of the files VerifyDir verifies together) are checked
// first, in batches (batch.go), each verdict exactly crypto/ed25519.Verify's; then the
// lines are read in order, each only if its signature verified.
package journal

import "symbi/internal/digest"

// Format constants.
const (
	// Version is the payload version this package writes and the only one it accepts.
	Version = 1
	// SignatureContext prefixes the payload in every signed message.
	SignatureContext = "symbi-journal-v1\n"
	// MaxRecordBytes bounds one line, including its "\n".
	MaxRecordBytes = 1 << 20
	// MaxFileBytes bounds one journal file.
	MaxFileBytes = 64 << 20
	// ClosingReserve is the room of a journal kept for the records that close a run: a
	// record written while a delegated session runs may not take the file past
	// MaxFileBytes-ClosingReserve; session_finished, terminated and whatever follows
	// session_finished (approval_requested, approval_decided, policy_evaluated) may use
	// it. A run whose session filled its journal still ends with terminated.
	ClosingReserve = 5 * MaxRecordBytes
	// KeyFileName is the name of the signing key in the governed directory.
	KeyFileName = "audit-signing.key"
	// ZeroHash is the prev value of the first line.
	ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"
)

// Record is the data of one journal line; Type names the line's type member.
type Record interface{ Type() string }

// Usage is the token usage a provider reported.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Started is written first, before the model is called. Prompt and Instructions carry the
// clear text when the caller chooses to journal it (the server does by default); their
// hashes and lengths are always present.
type Started struct {
	Agent                string   `json:"agent"`                  // declared agent name
	File                 string   `json:"file"`                   // definition file, relative to the project
	SourceSHA256         string   `json:"source_sha256"`          // hex SHA-256 of the whole file
	DeclarationSHA256    string   `json:"declaration_sha256"`     // hex SHA-256 of the selected declaration
	Mode                 string   `json:"mode"`                   // "text_response"
	Surface              string   `json:"surface"`                // "mcp-server"
	Caller               string   `json:"caller,omitempty"`       // who asked for the run: "stdio"
	CallerAuth           string   `json:"caller_auth,omitempty"`  // how it was authenticated: "stdio", "token", "jwt", "none"
	ServerVersion        string   `json:"server_version"`         // symbi version
	MaxOutputTokens      int64    `json:"max_output_tokens"`      // limit in force
	DeadlineMS           int64    `json:"deadline_ms"`            // deadline in force, milliseconds
	Provider             string   `json:"provider"`               // inference provider name
	Model                string   `json:"model"`                  // model name
	InlinePolicies       []string `json:"inline_policies"`        // policy names declared in the definition
	InlinePoliciesSHA256 string   `json:"inline_policies_sha256"` // digest of them from admission
	PolicyMode           string   `json:"policy_mode"`            // "default", "cedar" or "deny_all"
	PolicyDigest         string   `json:"policy_digest"`          // hex SHA-256 of the loaded policy files
	PolicyReason         string   `json:"policy_reason,omitempty"`
	PromptSHA256         string   `json:"prompt_sha256"`
	PromptBytes          int64    `json:"prompt_bytes"`
	InstructionsSHA256   string   `json:"instructions_sha256"`
	InstructionsBytes    int64    `json:"instructions_bytes"`
	Prompt               string   `json:"prompt,omitempty"`       // clear text, if journaled
	Instructions         string   `json:"instructions,omitempty"` // clear text, if journaled
}

// InferenceRequested is written just before the provider call.
type InferenceRequested struct {
	CallID        string `json:"call_id"`
	RequestSHA256 string `json:"request_sha256"` // of the exact body sent on the wire
	RequestBytes  int64  `json:"request_bytes"`
	MaxTokens     int64  `json:"max_tokens"`
	DeadlineMS    int64  `json:"deadline_ms"`
}

// InferenceFinished is written after the provider call, before the policy is evaluated.
type InferenceFinished struct {
	CallID         string `json:"call_id"`
	Outcome        string `json:"outcome"`     // "completed", "error", "timeout", "cancelled"
	HTTPStatus     int64  `json:"http_status"` // 0 when no response arrived
	ResponseSHA256 string `json:"response_sha256"`
	ResponseBytes  int64  `json:"response_bytes"`
	TextSHA256     string `json:"text_sha256"`
	TextBytes      int64  `json:"text_bytes"`
	FinishReason   string `json:"finish_reason"`
	Usage          Usage  `json:"usage"`
	Error          string `json:"error,omitempty"`
	Text           string `json:"text,omitempty"` // clear text, if journaled
}

// PolicyEvaluated records the respond decision.
type PolicyEvaluated struct {
	Action     string   `json:"action"`   // "respond"
	Decision   string   `json:"decision"` // "allow" or "deny"
	PolicyIDs  []string `json:"policy_ids"`
	Errors     []string `json:"errors"`
	TextSHA256 string   `json:"text_sha256"`
	TextBytes  int64    `json:"text_bytes"`
	// Gate names the gating policies when the deny is held for a person (approval.go).
	Gate string `json:"gate,omitempty"`
}

// Terminated is the last record of a run.
type Terminated struct {
	Reason     string `json:"reason"` // "completed", "policy_denied", "inference_failed", "cancelled", "timeout", "audit_failed", ...
	Released   bool   `json:"released"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
	Gate       string `json:"gate,omitempty"` // a gate's rejection (policy_denied) or expiry (timeout): the gating policies
}

// Record type names.
const (
	TypeStarted            = "started"
	TypeInferenceRequested = "inference_requested"
	TypeInferenceFinished  = "inference_finished"
	TypePolicyEvaluated    = "policy_evaluated"
	TypeTerminated         = "terminated"
)

// Type implements Record.
func (Started) Type() string { return TypeStarted }

// Type implements Record.
func (InferenceRequested) Type() string { return TypeInferenceRequested }

// Type implements Record.
func (InferenceFinished) Type() string { return TypeInferenceFinished }

// Type implements Record.
func (PolicyEvaluated) Type() string { return TypePolicyEvaluated }

// Type implements Record.
func (Terminated) Type() string { return TypeTerminated }

// normalize returns r with nil slices replaced by empty ones, so arrays are never null.
func normalize(r Record) Record {
	switch v := r.(type) {
	case Started:
		if v.InlinePolicies == nil {
			v.InlinePolicies = []string{}
		}
		return v
	case *Started:
		return normalize(*v)
	case PolicyEvaluated:
		nonNil(&v.PolicyIDs, &v.Errors)
		return v
	case *PolicyEvaluated:
		return normalize(*v)
	case PolicyReevaluated:
		nonNil(&v.PolicyIDs, &v.Errors)
		return v
	case SessionStarted:
		if v.Command == nil {
			v.Command = []string{}
		}
		return v
	case ToolCall:
		if v.Paths == nil {
			v.Paths = []string{}
		}
		return v
	case Plan:
		if v.Entries == nil {
			v.Entries = []PlanEntry{}
		}
		return v
	case PermissionDecided:
		for _, l := range []*[]string{&v.Paths, &v.Outside, &v.PolicyIDs, &v.Errors} {
			if *l == nil {
				*l = []string{}
			}
		}
		return v
	}
	return r
}

// Receipt identifies a journal's state when a run returned: with it, later truncation is
// detectable.
type Receipt struct {
	Records int    `json:"records"`
	Head    string `json:"head"` // lowercase hex SHA-256 of the last line, including its "\n"
}

// lineHash returns the hex SHA-256 of a line.
func lineHash(line []byte) string { return digest.SHA256Hex(line) }

// nonNil makes each nil list empty: a record's lists are written [] rather than null.
func nonNil(lists ...*[]string) {
	for _, l := range lists {
		if *l == nil {
			*l = []string{}
		}
	}
}
