// Package runs is the lifecycle of a project's runs, live and past, seen through the two
// records symbi already keeps: each run's signed journal and the project ledger. There is
// no second store. A Manager answers for every run — the ones this process is running
// and every one the ledger records — and starts new ones through the single governed
// code path (invoke.Runner): start_run is Start, invoke_agent is Start then Await.
//
// # Two axes
//
// A run's status says what happened to it: running, awaiting_approval, completed (its
// text was released), policy_denied, inference_failed, cancelled, timeout, audit_failed,
// or abandoned (its journal has no terminated record and no server is writing it: the
// server stopped abruptly). Its resolution says what a caller concluded about it
// (accepted, rejected, needs_followup, superseded); the latest resolution ledger entry
// wins. Neither ever changes the other.
//
// # Where each fact comes from
//
//   - A run this process is running: its journal writer's durable receipt. Only records
//     made durable are ever shown.
//   - A run that has ended: its ledger entry (run: how it ended, the receipt, the
//     caller; recovered: the file as found at start-up), and its journal, read and
//     verified line by line, for the times, the error text and the released text.
//   - A journal the ledger does not know, found at Open: another process's run in flight
//     (its writer holds the journal's lock), or a crash not yet reconciled.
//
// # Events and cursors
//
// A run's events are its journal lines, in order, each served as the exact signed line
// (without its "\n") after its signature, seq, run_id, agent_id and place in the hash
// chain have been checked, and every line before it verified: nothing beyond a line that
// does not verify is served. A run that has ended is done only when its journal is what
// its ledger entry recorded (records and head). A cursor is the number of events already
// read: reading after cursor N returns events with seq ≥ N, and next_cursor is N plus the
// number returned, so pages never overlap and never skip.
//
// # Order of runs
//
// Run ids are UUIDv7, so their order is the order the runs began; list_runs is newest
// first by run id, and its cursor is the last run id of a page (opaque to callers).
package runs

import (
	"errors"
	"time"
)

// Statuses.
const (
	StatusRunning          = "running"
	StatusAwaitingApproval = "awaiting_approval"
	StatusCompleted        = "completed"
	StatusPolicyDenied     = "policy_denied"
	StatusInferenceFailed  = "inference_failed"
	StatusCancelled        = "cancelled"
	StatusTimeout          = "timeout"
	StatusAuditFailed      = "audit_failed"
	StatusAbandoned        = "abandoned"
)

// Statuses lists every status.
var Statuses = []string{StatusRunning, StatusAwaitingApproval, StatusCompleted, StatusPolicyDenied,
	StatusInferenceFailed, StatusCancelled, StatusTimeout, StatusAuditFailed, StatusAbandoned}

// Resolutions lists the values a caller may resolve a run with.
var Resolutions = []string{"accepted", "rejected", "needs_followup", "superseded"}

// Unresolved filters list_runs to runs without a resolution.
const Unresolved = "unresolved"

// Limits.
const (
	DefaultLimit = 100              // events per run_events page, runs per list_runs page
	MaxLimit     = 1000             // the largest page
	MaxWait      = 30 * time.Second // the longest run_events long poll
	// MaxWaiters bounds the run_events calls waiting at once: beyond it, a call answers at
	// once with what there is, as with wait_ms 0 (each waiter reads the journal again at
	// every durable change of its run).
	MaxWaiters = 256
	// MaxRunIDBytes bounds a run id argument (run ids are ASCII letters, digits, '-', '_').
	MaxRunIDBytes = 128
)

// Errors, checked with errors.Is; each is wrapped with its errcode.
var (
	ErrNotFound   = errors.New("no such run")
	ErrTransition = errors.New("invalid transition")
)

// Resolution is the latest resolution of a run.
type Resolution struct {
	Value      string `json:"value" jsonschema:"accepted, rejected, needs_followup or superseded"`
	Note       string `json:"note,omitempty" jsonschema:"the caller's note (at most 4 KiB)"`
	Caller     string `json:"caller" jsonschema:"who resolved it"`
	CallerAuth string `json:"caller_auth,omitempty" jsonschema:"how that caller was authenticated: stdio, token, jwt or none"`
	Time       string `json:"time" jsonschema:"when (RFC 3339 UTC, the ledger entry's time)"`
	Revisions  int    `json:"revisions" jsonschema:"how many resolution entries the run has, this one included"`
}

// Approval is a human gate's request and, once made, its decision, as the run's journal
// records them.
type Approval struct {
	Gate         string `json:"gate" jsonschema:"the gating policies (@gate(\"human\") forbids), comma-separated"`
	RequestID    string `json:"request_id,omitempty" jsonschema:"a delegated agent's held permission request (absent when the answer is held)"`
	Title        string `json:"title,omitempty" jsonschema:"the held permission request's title (text the agent chose): shown to a caller who may approve it while it waits, and once the run released its text"`
	RequestedAt  string `json:"requested_at" jsonschema:"when the answer or the request was held (RFC 3339 UTC)"`
	Deadline     string `json:"deadline,omitempty" jsonschema:"when the wait ends with timeout"`
	Decision     string `json:"decision,omitempty" jsonschema:"approve or reject, once decided"`
	Approver     string `json:"approver,omitempty" jsonschema:"who decided"`
	ApproverAuth string `json:"approver_auth,omitempty" jsonschema:"how the approver was authenticated"`
	Reason       string `json:"reason,omitempty" jsonschema:"the approver's reason"`
	Via          string `json:"via,omitempty" jsonschema:"how it was decided: approve_run (elicitation, asked of the requester's own client and not four-eyes, is reserved: this version does not make it)"`
	// Text is the held answer, in run_status for a caller who may approve it while it
	// waits (never for one who may not: under four eyes, not for the requester).
	Text      *string `json:"text,omitempty" jsonschema:"the held answer, shown to a caller who may approve it while it waits"`
	DecidedAt string  `json:"decided_at,omitempty"`
}

// Status is what is known of one run.
type Status struct {
	RunID    string `json:"run_id"`
	Agent    string `json:"agent" jsonschema:"the declared agent name"`
	AgentID  string `json:"agent_id"`
	Status   string `json:"status" jsonschema:"running, awaiting_approval, completed, policy_denied, inference_failed, cancelled, timeout, audit_failed or abandoned"`
	Reason   string `json:"reason,omitempty" jsonschema:"why the run did not complete: its terminated record's error, or why it is abandoned"`
	Released bool   `json:"released" jsonschema:"whether the run's text was released"`
	// Text is the released text, read back from the journal (clear-text journals only);
	// list_runs never carries it.
	Text *string `json:"text,omitempty" jsonschema:"the released text (run_status only; absent when not retained)"`
	// TextRetained is set for a released run: false when the journal keeps only digests
	// (hashes-only mode), so the text cannot be served again.
	TextRetained *bool       `json:"text_retained,omitempty" jsonschema:"for a released run: whether its journal retains the text"`
	Records      int64       `json:"records" jsonschema:"durable journal records"`
	Head         string      `json:"head" jsonschema:"hex SHA-256 of the last durable journal line"`
	StartedAt    string      `json:"started_at" jsonschema:"the started record's time"`
	EndedAt      string      `json:"ended_at,omitempty" jsonschema:"the terminated record's time"`
	Caller       string      `json:"caller" jsonschema:"who started the run: stdio, or the authenticated caller's id over HTTP"`
	CallerAuth   string      `json:"caller_auth,omitempty" jsonschema:"how the caller was authenticated: stdio, token, jwt or none (absent in runs recorded before it was)"`
	Resolution   *Resolution `json:"resolution,omitempty" jsonschema:"the latest resolution, if any"`
	Approval     *Approval   `json:"approval,omitempty" jsonschema:"the human gate's request and decision, when an answer was held"`
	Journal      string      `json:"journal" jsonschema:"the journal's absolute path"`
	// JournalPruned is set when the journal was removed by symbi audit prune: the ledger
	// still knows the run, its events are gone.
	JournalPruned bool `json:"journal_pruned,omitempty"`
	// JournalProblem says why the journal could not be read, or which line does not
	// verify: what it says beyond that point is not served.
	JournalProblem string `json:"journal_problem,omitempty" jsonschema:"why the journal could not be read or does not verify, if so"`

	unended bool // the ledger recorded an end the journal, whole and verified, lacks
	// resumable: no server holds the run, but the next to start on the project resumes it
	// (held at a gate, its text in clear, unknown to the ledger), and its journal goes on.
	resumable bool
	// heldTitle is the title of a delegated agent's held permission request, kept out of
	// Approval until the run released its text: StatusFor shows it to an approver while
	// the request waits.
	heldTitle string
}

// Event is one journal record of a run.
type Event struct {
	Seq  int64  `json:"seq"`
	Type string `json:"type"`
	Time string `json:"time"`
	Line string `json:"line,omitempty" jsonschema:"the exact signed journal line, without its trailing newline (absent when withheld)"`
	// LineSHA256 and Withheld stand for a line that carries the run's output in clear
	// (the answer, the agent's messages, thoughts, plan, tool output) while the run has
	// not released it: the text is not served before the policy gate lets it go. The
	// hash is the one the next line's prev names, so the chain can still be followed.
	LineSHA256 string `json:"line_sha256,omitempty" jsonschema:"a withheld line's SHA-256 (with its newline): the next line's prev"`
	Withheld   string `json:"withheld,omitempty" jsonschema:"why the line is withheld"`
}

// Events is one page of a run's events.
type Events struct {
	Events     []Event `json:"events"`
	NextCursor int64   `json:"next_cursor" jsonschema:"pass as after to read on"`
	Status     string  `json:"status"`
	Done       bool    `json:"done" jsonschema:"true when the run has ended and every event has been read: no more will come"`
}

// Page is one page of list_runs.
type Page struct {
	Runs       []Status `json:"runs" jsonschema:"newest first"`
	NextCursor string   `json:"next_cursor,omitempty" jsonschema:"pass as after for the next page; absent on the last page"`
}

// Filter selects runs for List.
type Filter struct {
	Agent      string // the declared name, the agent_id, or a registry name
	Status     string
	Resolution string // a resolution value, or Unresolved
	After      string // a cursor from an earlier page
	Limit      int    // 1..MaxLimit; 0 means DefaultLimit
	// Reader, when set, keeps only the runs it may read (the read_run access decision).
	Reader *Caller
}
