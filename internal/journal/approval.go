package journal

// The records of a human gate (docs/runs.md). When the respond decision is a deny that
// only forbids annotated @gate("human") made, the run does not end: it records
// approval_requested and waits, its text withheld, for a person's approve_run. The
// decision is approval_decided; an approval then releases the text (terminated, reason
// completed), a rejection ends the run withheld (reason policy_denied, with the gate).

// ApprovalRequested is written, and made durable, when a gated deny holds the answer —
// or, in a delegated run, a gated use_tool deny holds one of the agent's permission
// requests (RequestID, that of the permission_decided that will follow; no text).
type ApprovalRequested struct {
	Gate       string `json:"gate"`        // the gating policies' ids, comma-separated
	RequestID  string `json:"request_id"`  // "" for the answer; else the held permission request
	TextSHA256 string `json:"text_sha256"` // the text held, as policy_evaluated judged it ("" for a permission)
	TextBytes  int64  `json:"text_bytes"`
	TimeoutMS  int64  `json:"timeout_ms"`      // how long the run waits for a decision
	Kind       string `json:"kind,omitempty"`  // a permission's ACP tool kind
	Title      string `json:"title,omitempty"` // a permission's title (at most MaxTitleBytes)
}

// ApprovalDecided is a person's decision at the gate, durable (and in the ledger) before
// the text is released or the run ends withheld — or, for a permission, before the
// agent hears the answer (permission_decided follows).
type ApprovalDecided struct {
	RequestID    string `json:"request_id"` // as in the ApprovalRequested decided
	Decision     string `json:"decision"`   // "approve" or "reject"
	Approver     string `json:"approver"`   // the deciding caller's id
	ApproverAuth string `json:"approver_auth"`
	Reason       string `json:"reason"`
	Via          string `json:"via"` // "approve_run", or "elicitation" (the requester's own client)
}

// PolicyReevaluated is the held answer judged again, when a server resumes its run after
// a restart under a policy set other than the one that last judged it (started's policy
// mode and digest, or the last policy_reevaluated's): that set's mode and digest, its
// decision on the same text, the deciding policies and evaluation errors, and the gate
// that still holds the answer when one does (the gate approval_requested named; "" for
// none). It is durable before the run waits on — a deny at the same gate, or an allow: a
// person was asked, and still decides — or ends policy_denied: after a deny at no gate or
// another, nothing but terminated may follow, and no release.
type PolicyReevaluated struct {
	PolicyMode   string   `json:"policy_mode"`
	PolicyDigest string   `json:"policy_digest"`
	Decision     string   `json:"decision"` // "allow" or "deny"
	PolicyIDs    []string `json:"policy_ids"`
	Errors       []string `json:"errors"`
	Gate         string   `json:"gate"` // the gate holding the answer still; "" for none
	TextSHA256   string   `json:"text_sha256"`
}

// MaxApprovalReasonBytes bounds an approval's reason.
const MaxApprovalReasonBytes = 4 << 10

// Human gate record type names.
const (
	TypeApprovalRequested = "approval_requested"
	TypeApprovalDecided   = "approval_decided"
	TypePolicyReevaluated = "policy_reevaluated"
)

// Type implements Record.
func (ApprovalRequested) Type() string { return TypeApprovalRequested }

// Type implements Record.
func (ApprovalDecided) Type() string { return TypeApprovalDecided }

// Type implements Record.
func (PolicyReevaluated) Type() string { return TypePolicyReevaluated }
