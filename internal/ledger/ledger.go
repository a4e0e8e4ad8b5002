// Package ledger is the project ledger: one signed, hash-chained index of every run of a
// project, .symbiont/ledger.jsonl, and the transparency-log checkpoints and proofs over it.
//
// A run's journal proves what happened in that run; it cannot prove that the run happened
// at all. The ledger does: each ended run is an entry, so a deleted or replaced journal
// leaves a gap an auditor sees, and a ledger rolled back or rewritten — even with the
// project key — is caught by any checkpoint saved before.
//
// # Format
//
// Each line is the journal's envelope (journal.Seal) under its own signature context:
//
//	{"payload":P,"signature":"S"}\n
//
// S is the padded base64 Ed25519 signature by the project key over
// "symbi-ledger-v1\n" followed by the exact bytes of P, so a journal line is never a valid
// ledger line nor the reverse. P is a JSON object with exactly these members, in this
// order when written:
//
//	v     1
//	seq   0, 1, 2, … — the line's index
//	prev  lowercase hex SHA-256 of the whole previous line including "\n"; 64 zeros on seq 0
//	time  RFC 3339 UTC with milliseconds and "Z"
//	type  run, resolution, approval, recovered or pruned
//	data  the type's members (Run, Resolution, Approval, Recovered, Pruned)
//
// P holds no floating-point number, no member name twice and no \u escape of a lone
// UTF-16 surrogate. A verifier reads nothing of
// a line before its signature verifies, and accepts a type it does not know (a later
// version's) while checking everything else about its line.
//
// # Checkpoints
//
// The lines, without their "\n", are the leaves of an RFC 6962 Merkle tree (hashed with
// golang.org/x/mod/sumdb/tlog). A checkpoint is a signed note (golang.org/x/mod/sumdb/note)
// in the C2SP tlog-checkpoint form, body "<origin>\n<size>\n<base64 root hash>\n", origin
// and key name "symbi.ledger/<first 16 hex digits of SHA-256 of the public key>".
package ledger

import (
	"errors"
	"time"
)

// Format constants.
const (
	// Context prefixes every signed ledger payload.
	Context = "symbi-ledger-v1\n"
	// FileName is the ledger's name in the project's .symbiont directory.
	FileName = "ledger.jsonl"
	// Version is the payload version this package writes and reads.
	Version = 1
	// MaxNoteBytes bounds a resolution's note.
	MaxNoteBytes = 4 << 10
	// MaxLedgerBytes bounds the ledger file a verifier reads (about 2 million runs).
	MaxLedgerBytes = 1 << 30
	// RunRoom is the room a run needs left in the ledger to start (Writer.Room): its
	// entry, or a recovered entry for it, with room to spare for every run in flight
	// beside it (an entry is well under 2 KiB).
	RunRoom = 1 << 20
)

// ZeroHash is prev of the first line.
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// timeLayout is RFC 3339 in UTC with milliseconds, as the journal writes it.
const timeLayout = "2006-01-02T15:04:05.000Z"

// Record is the data of one ledger entry.
type Record interface{ Type() string }

// Run is appended when a run ends, before its outcome reaches anyone: the run's journal
// file and receipt, and how it ended.
type Run struct {
	RunID    string `json:"run_id"`
	AgentID  string `json:"agent_id"`
	Agent    string `json:"agent"`
	File     string `json:"file"`   // the journal's file name
	Reason   string `json:"reason"` // the terminated reason
	Released bool   `json:"released"`
	Records  int64  `json:"records"` // the journal's receipt
	Head     string `json:"head"`
	PrevHead string `json:"prev_head"` // the journal's head before its last line (terminated)
	Caller   string `json:"caller"`
	// CallerAuth is how the caller was authenticated ("stdio", "token", "jwt", "none");
	// absent in entries written before it was recorded.
	CallerAuth string `json:"caller_auth,omitempty"`
}

// Resolution is a caller's judgement of a finished run; the latest for a run wins.
type Resolution struct {
	RunID      string `json:"run_id"`
	Resolution string `json:"resolution"` // accepted, rejected, needs_followup, superseded
	Note       string `json:"note"`
	Caller     string `json:"caller"`
	CallerAuth string `json:"caller_auth,omitempty"` // as in Run
}

// Approval is a person's decision at a run's human gate.
type Approval struct {
	RunID    string `json:"run_id"`
	Gate     string `json:"gate"`     // the gating policy's id
	Decision string `json:"decision"` // approve or reject
	Reason   string `json:"reason"`
	Approver string `json:"approver"`
	// ApproverAuth is how the approver was authenticated; Via how the decision came:
	// "approve_run", or "elicitation" (asked of the requester's own client: not four-eyes).
	ApproverAuth string `json:"approver_auth,omitempty"`
	Via          string `json:"via,omitempty"`
}

// Recovered is appended at start-up for a journal the ledger has no entry for (a crash
// between the journal's end and the ledger append, or a run abandoned mid-way): the file
// as found.
type Recovered struct {
	RunID   string `json:"run_id"`
	AgentID string `json:"agent_id"`
	File    string `json:"file"`
	State   string `json:"state"` // complete, incomplete or invalid
	Records int64  `json:"records"`
	Head    string `json:"head"`
	// Caller and CallerAuth are the run's caller as its started record names it, when
	// that line verified ("" otherwise: no caller is guessed).
	Caller     string `json:"caller,omitempty"`
	CallerAuth string `json:"caller_auth,omitempty"`
}

// Pruned is appended before a journal is deliberately removed (symbi audit prune): the
// journal as it was removed, verified. Its receipt is the one the run was recorded with,
// or — for a run whose server stopped after its run entry and before the journal's
// terminated line — that entry's prev_head, one record fewer. Reason and Released are
// what the journal's terminated record said (absent when it had none): once the file is
// gone, how a run the ledger recorded only as found ended is known from them.
type Pruned struct {
	RunID    string `json:"run_id"`
	File     string `json:"file"`
	Records  int64  `json:"records"`
	Head     string `json:"head"`
	Reason   string `json:"reason,omitempty"`
	Released bool   `json:"released,omitempty"`
}

// Type names.
const (
	TypeRun        = "run"
	TypeResolution = "resolution"
	TypeApproval   = "approval"
	TypeRecovered  = "recovered"
	TypePruned     = "pruned"
)

// Type implements Record.
func (Run) Type() string { return TypeRun }

// Type implements Record.
func (Resolution) Type() string { return TypeResolution }

// Type implements Record.
func (Approval) Type() string { return TypeApproval }

// Type implements Record.
func (Recovered) Type() string { return TypeRecovered }

// Type implements Record.
func (Pruned) Type() string { return TypePruned }

// Errors, checked with errors.Is.
var (
	// ErrStopped: an earlier write or fsync failed, so the writer refuses everything.
	ErrStopped = errors.New("ledger writer stopped after a failure")
	// ErrEvidence: Prune left a journal in place that does not verify or no longer
	// matches what the ledger recorded of it.
	ErrEvidence = errors.New("it is evidence, not pruned")
	// ErrKnown: a recovered entry was refused because the ledger already has an entry
	// for the run (another server recorded it since this writer last read the ledger).
	ErrKnown = errors.New("the ledger already has an entry for the run")
	// ErrPruned: a pruned entry was refused because the ledger already records the run
	// as pruned (another prune, at the same time).
	ErrPruned = errors.New("the ledger already records the run as pruned")
	// ErrNotRecorded: a pruned entry was refused because the ledger has no run or
	// recovered entry for the run (verification would call it pruned but never recorded).
	ErrNotRecorded = errors.New("the ledger has no entry for the run")
	// ErrFull: a ledger at MaxLedgerBytes, which no verifier reads past, takes no more
	// lines (every run is then refused, audit_unavailable), and a larger one is not opened.
	ErrFull = errors.New("the ledger is full")
)

// payload is P, members in their documented order.
type payload struct {
	V    int    `json:"v"`
	Seq  int64  `json:"seq"`
	Prev string `json:"prev"`
	Time string `json:"time"`
	Type string `json:"type"`
	Data Record `json:"data"`
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
