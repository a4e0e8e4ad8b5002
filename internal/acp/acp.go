// Package acp runs one delegated session: a coding agent started as a subprocess in a
// workspace, driven over the Agent Client Protocol (client side of
// github.com/coder/acp-go-sdk), every permission it asks for and every file it reads or
// writes through symbi decided by the caller's use_tool gate and journaled (and fsynced)
// before the agent hears the answer.
//
// Run is independent of the server: the caller has written the run's started record,
// builds the prompt, binds the policy gate, and afterwards writes policy_evaluated and
// terminated. Run writes session_started (or not, when the session cannot be opened),
// what the agent does, and session_finished.
//
// Process discipline: the agent runs argv (no shell) in the workspace, in its own process
// group. Cancelling ctx sends session/cancel, answers pending permission requests
// cancelled, waits Config.Grace for the turn to end, then SIGTERMs the group, waits Grace
// again and SIGKILLs it; closing Config.Hurry cuts those waits short. No wait depends on a
// write to the agent (one that stops reading its stdin would hold it): the kill closes its
// stdin, ending any write still under way. Whatever happens, when Run returns the whole
// group has been SIGKILLed and the agent reaped.
//
// The agent's requests are served at most maxRequests at once (more is malformed ACP). A
// file is read or written and the access journaled before session_finished, or not at
// all; session_finished waits, within the grace period, for the requests still served.
package acp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"
	"golang.org/x/sys/unix"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/workspace"
)

// Journal is where the session's records go; *journal.Writer satisfies it.
type Journal interface {
	Append(journal.Record) error
	Sync() error
}

// Decider is the use_tool gate; the caller binds the agent, the run and the caller.
type Decider func(t policy.ToolUse) policy.Decision

// Hold is a permission request — a session/request_permission or an fs request — that a
// gated use_tool denial (policy.Decision.Gate) holds for a person's decision.
type Hold struct {
	RequestID, Gate, Kind, Title string
	// Deadline is the session's own (the agent's with timeout), zero when it has none: a
	// held request waits no longer than the session it belongs to.
	Deadline time.Time
}

// HoldResult is how a wait at a gate ended: Approved, or not with Note saying why
// (rejected, no decision in time); Err when the session must not go on as if decided
// (cancelled, or the journal or ledger failed: wraps ErrJournal).
type HoldResult struct {
	Approved bool
	Note     string
	Err      error
}

// Holder waits for a person's decision on a held permission request. record makes a
// record durable in the session's journal, in order with the agent's own records
// (approval_requested before the wait, approval_decided after it).
type Holder func(ctx context.Context, h Hold, record func(journal.Record) error) HoldResult

// Defaults of Config's bounds.
const (
	DefaultGrace        = 5 * time.Second
	DefaultMaxFileBytes = 1 << 20
	// DefaultMaxTextBytes bounds the final answer so that session_finished, with the
	// text in clear and JSON escaping at its worst, still fits one journal record.
	DefaultMaxTextBytes = 128 << 10
	// updateQueue is the bound of the updates waiting to be journaled.
	updateQueue = 1024
	// maxLineBytes is the longest line accepted from the agent (the SDK's own bound).
	maxLineBytes = 10 << 20
	// maxLocationBytes bounds the paths of one tool call, permission or fs request
	// together, so that its record fits one journal record even with JSON escaping at its
	// worst (6 bytes a byte); each path is at most workspace.MaxPathBytes.
	maxLocationBytes = 128 << 10
	// maxPlanWordBytes cuts a plan entry's priority and status (ACP names a few short
	// words for each) so that a plan's record fits one journal record with JSON escaping
	// at its worst: 64 entries of 1 KiB of content and twice 64 bytes, 6 bytes a byte,
	// are under 450 KiB.
	maxPlanWordBytes = 64
	stderrBytes      = 8 << 10
	// maxRequests bounds the agent's requests served at once (the SDK serves each on its
	// own goroutine, its parameters decoded): past it the agent floods requests, which is
	// malformed ACP.
	maxRequests = 16
	// maxUnanswered bounds the agent's requests read and not yet answered — the SDK
	// answers those that reach no handler (an unknown method, parameters it cannot
	// decode) itself, each on its own goroutine until its answer is written, which takes
	// as long as the agent does not read: past it the agent floods requests. It leaves
	// room over maxRequests for an answer being written while the next request is read.
	maxUnanswered = 2 * maxRequests
	// maxToolCalls bounds the tool calls a session announces, each remembered (kind,
	// title, paths) for the permission requests that name it: past it the agent floods
	// tool calls, which is malformed ACP.
	maxToolCalls = 1 << 16
)

// Config is one delegated session.
type Config struct {
	Executor  *executors.Executor
	Workspace *workspace.Workspace
	Journal   Journal
	Decide    Decider
	// Hold, when set, turns a gated denial into a wait for a person (approve_run); nil
	// answers it as the denial it is.
	Hold         Holder
	Prompt       string        // the full prompt text sent
	HashesOnly   bool          // journal digests only, no clear text
	Grace        time.Duration // cancel → TERM → KILL grace (default DefaultGrace)
	MaxFileBytes int64         // fs read/write limit (default DefaultMaxFileBytes)
	MaxTextBytes int64         // final answer limit (default DefaultMaxTextBytes); past it the run ends with an error
	Env          []string      // the agent's environment (nil: this process's)
	// Hurry, when closed, ends a cancelled session without the rest of its grace: the
	// agent's process group is killed at once (a server told a second time to stop,
	// whose client will soon kill it). nil never hurries.
	Hurry <-chan struct{}
	// Log takes the session's log lines and the ACP SDK's (nil: slog.Default()).
	Log *slog.Logger
}

// hurriedNote is why a hurried session's agent was killed before its grace ran out.
const hurriedNote = "the server was told again to stop: its process group was killed without the rest of the grace period"

// hurriedWaitDelay bounds how long a hurried session waits, after the group kill, for the
// agent's stderr to close.
const hurriedWaitDelay = 100 * time.Millisecond

// Outcomes of a session.
const (
	OutcomeCompleted = "completed"
	OutcomeError     = "error"
	OutcomeTimeout   = "timeout"
	OutcomeCancelled = "cancelled"
)

// Result is how the session ended.
type Result struct {
	Outcome    string // completed, error, timeout or cancelled
	StopReason string // ACP's stop reason ("" without one)
	Text       string // the agent's message text of the last turn
	Err        error  // why, when not completed; wraps a journal error as is
	Stderr     string // the tail of the agent's stderr
}

// ErrJournal wraps every failure to append to or sync the journal (with the journal's
// own error): the caller ends the run audit_failed.
var ErrJournal = errors.New("journal failed")

// ErrMalformed wraps every way the agent breaks the protocol — a line that is not a
// JSON-RPC message or is too long, a path over workspace.MaxPathBytes, more than
// maxRequests requests in flight — which ends the session with an error (outcome error;
// the caller's inference_failed), nothing of the offending message journaled.
var ErrMalformed = errors.New("malformed ACP")

// ErrAgentCancelled is the error of a session whose agent ended its turn cancelled
// without symbi asking it to (no session/cancel was sent).
var ErrAgentCancelled = errors.New("the agent ended its turn cancelled without being asked")

// ErrPanicked ends a session in which symbi's own code panicked (a bug, on input the agent
// chose): the session ends with an error, and the server and its other runs go on.
var ErrPanicked = errors.New("symbi's ACP client failed on an internal error")

// survive, deferred first in each of the ACP client's callbacks and in the session's
// goroutines, turns a panic there into the session's end (ErrPanicked, outcome error) and,
// for a callback (err not nil), an internal error answered to the agent; the stack goes to
// the log.
func (r *runner) survive(where string, err *error) {
	v := recover()
	if v == nil {
		return
	}
	r.log().Error("symbi's ACP client panicked: the session ends", "in", where, "panic", v, "stack", string(debug.Stack()))
	r.abort(fmt.Errorf("%w (in %s)", ErrPanicked, where))
	if err != nil {
		*err = sdk.NewInternalError(map[string]any{"error": "symbi failed on an internal error"})
	}
}

// log is the session's logger.
func (r *runner) log() *slog.Logger {
	if r.cfg.Log != nil {
		return r.cfg.Log
	}
	return slog.Default()
}

// locked runs f with r.mu held, released however f ends.
func (r *runner) locked(f func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f()
}

// ErrSessionOver is the error of a record made after the session closed (its turn over,
// session_finished to come). It is no journal failure: what asked for the record — a held
// permission request, say — is answered as cancelled.
var ErrSessionOver = errors.New("the session is over")

// Run runs one session of cfg.Executor in cfg.Workspace with cfg.Prompt.
func Run(ctx context.Context, cfg Config) Result {
	return newRunner(cfg).run(ctx)
}

// newRunner is the runner of one session of cfg, its bounds defaulted.
func newRunner(cfg Config) *runner {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.MaxTextBytes <= 0 {
		cfg.MaxTextBytes = DefaultMaxTextBytes
	}
	r := &runner{cfg: cfg, aborted: make(chan struct{}), cancelled: make(chan struct{}), ended: make(chan struct{}),
		updates: make(chan update, updateQueue), prompted: &promptWatch{written: make(chan struct{})}, notesPoke: make(chan struct{}, 1)}
	r.prompted.sending = func(b []byte) {
		if m, err := probe(b); err == nil {
			if id, err := strconv.ParseInt(string(m.ID), 10, 64); err == nil && id > 0 {
				r.promptID.Store(id)
			}
		}
	}
	return r
}

// outOfTurnKind is the coalescing kind of message text read outside the prompt turn: an
// agent_message record with out_of_turn set.
const outOfTurnKind = "agent_message out_of_turn"

// turnOf notes, in the order of the agent's output — m is a line not yet handed to the
// SDK, as notMessage read it — where the prompt turn is: an agent_message_chunk is of the
// turn when read after the session/prompt request began to be written and before its
// answer was read. (A chunk the agent sent before it read the prompt but read here after
// the write began counts as of the turn: it cannot be told apart.) SessionUpdate takes the notes in the same order,
// as the SDK hands it the notifications: a line is decoded here as the SDK decodes it (its
// envelope, then the notification's params, validated), so that each chunk the SDK hands
// over has its note. A session/update sent as a request — which the SDK would hand over
// on a goroutine of its own, out of order — is malformed ACP; so is a request sent as a
// notification, which cannot be answered: a permission decided for it would be journaled
// as answered to an agent that heard nothing.
func (r *runner) turnOf(m envelope, n *sdk.SessionNotification) error {
	pid := r.promptID.Load()
	switch {
	case m.Method == "" && pid != 0 && !r.turnOver && sameID(m.ID, pid):
		r.turnOver = true
	case m.Method == sdk.ClientMethodSessionUpdate && m.hasID():
		return fmt.Errorf("%w: a session/update sent as a request (it is a notification)", ErrMalformed)
	case !m.hasID() && isRequestMethod(m.Method):
		return fmt.Errorf("%w: a %s sent as a notification (it is a request, and a notification cannot be answered)", ErrMalformed, cut(m.Method, 64))
	case n != nil:
		if n.Update.AgentMessageChunk != nil {
			r.turnMu.Lock()
			r.chunkTurns = append(r.chunkTurns, pid == 0 || r.turnOver)
			r.turnMu.Unlock()
		}
	}
	return nil
}

// isRequestMethod reports whether method is one the agent sends the client as a request
// (one with an id, answered): a permission request, an fs or a terminal request.
func isRequestMethod(method string) bool {
	return method == sdk.ClientMethodSessionRequestPermission || strings.HasPrefix(method, "fs/") || strings.HasPrefix(method, "terminal/")
}

// sameID reports whether the JSON-RPC id raw is the number id as the SDK matches ids: by
// their canonical digits and exponent (3, 3.0 and 30e-1 are one id; "3" and
// 3.0000000000000001 are others), within the SDK's bounds — past them (maxIDDigits) the
// SDK keys an id by its text, which is then no number's.
func sameID(raw json.RawMessage, id int64) bool {
	raw = bytes.TrimSpace(raw)
	var n json.Number
	if len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &n) != nil || id <= 0 {
		return false
	}
	digits, exp, ok := canonicalNumber(n.String())
	want, wexp, _ := canonicalNumber(strconv.FormatInt(id, 10))
	return ok && digits == want && exp == wexp
}

// canonicalNumber is the JSON number s, not negative, as its significant digits and the
// power of ten they are scaled by.
func canonicalNumber(s string) (digits string, exp int, ok bool) {
	if strings.HasPrefix(s, "-") {
		return "", 0, false
	}
	mant := s
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > maxIDDigits || e < -maxIDDigits {
			return "", 0, false
		}
		mant, exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits, exp = strings.TrimLeft(whole+frac, "0"), exp-len(frac)
	if len(digits) > maxIDDigits {
		return "", 0, false
	}
	for strings.HasSuffix(digits, "0") {
		digits, exp = digits[:len(digits)-1], exp+1
	}
	if digits == "" {
		exp = 0
	}
	return digits, exp, true
}

// maxIDDigits is the SDK's bound on a numeric JSON-RPC id it canonicalises: its
// significant digits, and its exponent's magnitude (acp-go-sdk's
// maxCanonicalJSONRPCIDKeyLen and maxCanonicalJSONRPCIDAbsExp10).
const maxIDDigits = 4096

type update struct {
	n         sdk.SessionNotification
	outOfTurn bool          // an agent_message_chunk read before the prompt was sent or after its answer
	done      chan struct{} // a drain marker: flush, then close done
}

type runner struct {
	cfg      Config
	conn     *sdk.ClientSideConnection
	cmd      *exec.Cmd
	sid      sdk.SessionId
	deadline time.Time // the session's (run's ctx), zero without one: set before the agent starts

	stderr   tailBuffer
	mark     string        // MarkVariable=<random>: in the environment of the agent and its descendants
	exited   chan struct{} // closed when the agent process has exited (not reaped)
	stdinW   *os.File      // the agent's stdin: closed by kill, which ends any write to it
	stdoutR  *os.File
	killOnce sync.Once
	eof      atomic.Bool // the agent's stdout ended (set before the SDK is told)
	died     bool        // the agent had exited before the final kill (set by kill)

	abortOnce sync.Once
	// notesRead counts the session/update notifications the line check passed to the SDK;
	// notesHanded those the SDK has handed over (SessionUpdate) or dropped saying so
	// (sdkLog). The SDK hands over what it read also after the agent's output ended or
	// the line check ended the run: the session waits for them (handedOver) before it
	// closes. notesLost: the SDK dropped some without a word (its queue overflowed).
	notesRead, notesHanded atomic.Int64
	notesPoke              chan struct{} // cap 1: notesHanded grew, or notesLost was set
	notesLost              atomic.Bool
	abortErr               error
	aborted                chan struct{}

	cancelOnce sync.Once
	cancelled  chan struct{} // closed once session/cancel is under way

	prompted *promptWatch // closed once session/prompt has been written to the agent

	// The prompt turn, in the order of the agent's output (turnOf): promptID is the
	// session/prompt request's id once it is about to be written (0 before); turnOver is
	// set by the reader of the agent's output when it reads the answer to it; chunkTurns
	// holds, for each agent_message_chunk read and not yet handed to SessionUpdate,
	// whether it was read outside the turn.
	promptID   atomic.Int64
	turnOver   bool
	turnMu     sync.Mutex
	chunkTurns []bool

	updates chan update
	open    atomic.Bool   // session_started is durable (and sid set): requests are served
	closed  atomic.Bool   // no more in-session records
	ended   chan struct{} // closed when the session closes (closed set)

	// fsMu is held (read) by an fs handler from its last check that the session is live
	// to its fs_read or fs_write record, and (write) by close: a file is accessed and the
	// access journaled before the session closes, or not accessed at all.
	fsMu sync.RWMutex

	unanswered atomic.Int64 // the agent's requests read minus the answers written to it

	reqMu   sync.Mutex    // reqN and reqIdle
	reqN    int           // the agent's requests being served, at most maxRequests
	reqIdle chan struct{} // set by idle: closed when reqN drops to 0

	permN, fsN atomic.Int64
	// calls is what the session announced of each tool call (tool_call, tool_call_update),
	// by id, as read from the agent's output in order (checkLines): a permission request
	// naming one is decided on it as well as on what the request repeats.
	callsMu sync.Mutex
	calls   map[string]*announced

	mu       sync.Mutex // journal appends and the coalescing buffer
	bufKind  string     // journal.TypeAgentMessage, outOfTurnKind or TypeAgentThought, "" when empty
	buf      strings.Builder
	bufN     int64
	bufOther int64           // the chunks coalesced whose content was not text
	text     strings.Builder // the final answer
	tooLarge bool
	unsynced atomic.Bool // records appended since the last sync
}

func (r *runner) abort(err error) {
	r.abortOnce.Do(func() {
		r.abortErr = err
		close(r.aborted)
	})
}

// handedOne counts a session/update the SDK handed over or dropped saying so.
func (r *runner) handedOne() {
	r.notesHanded.Add(1)
	r.pokeNotes()
}

func (r *runner) pokeNotes() {
	select {
	case r.notesPoke <- struct{}{}:
	default:
	}
}

// handedOver waits, within d, until the SDK has handed over every session/update the line
// check had passed it when the wait began (or still has: one whose write to the SDK failed
// was never passed), and reports whether it did. A hurry ends the wait.
func (r *runner) handedOver(d time.Duration, hurry <-chan struct{}) bool {
	target := r.notesRead.Load()
	t := time.NewTimer(d)
	defer t.Stop()
	for r.notesHanded.Load() < min(target, r.notesRead.Load()) && !r.notesLost.Load() {
		select {
		case <-r.notesPoke:
		case <-t.C:
			return false
		case <-hurry:
			return false
		}
	}
	return true
}

func (r *runner) abortedErr() error {
	select {
	case <-r.aborted:
		return r.abortErr
	default:
		return nil
	}
}

// appendLocked appends rec; r.mu is held.
func (r *runner) appendLocked(rec journal.Record) error {
	if err := r.cfg.Journal.Append(rec); err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrJournal, rec.Type(), err)
		r.abort(err)
		return err
	}
	r.unsynced.Store(true)
	return nil
}

func (r *runner) sync() error {
	r.unsynced.Store(false)
	if err := r.cfg.Journal.Sync(); err != nil {
		err = fmt.Errorf("%w: sync: %w", ErrJournal, err)
		r.abort(err)
		return err
	}
	return nil
}

// record appends an in-session record (after flushing coalesced text, so the journal
// keeps the wire's order) and, when durable is set, syncs.
func (r *runner) record(rec journal.Record, durable bool) error {
	err := r.locked(func() error {
		if r.closed.Load() {
			return ErrSessionOver
		}
		if err := r.flushLocked(); err != nil {
			return err
		}
		return r.appendLocked(rec)
	})
	if err == nil && durable {
		err = r.sync()
	}
	return err
}

func (r *runner) flushLocked() error {
	if r.bufKind == "" {
		return nil
	}
	t := r.buf.String()
	msg := journal.AgentMessage{TextSHA256: sha(t), Bytes: int64(len(t)), Chunks: r.bufN, OtherBlocks: r.bufOther, OutOfTurn: r.bufKind == outOfTurnKind}
	if !r.cfg.HashesOnly {
		msg.Text = t
	}
	var rec journal.Record = msg
	if r.bufKind == journal.TypeAgentThought {
		rec = journal.AgentThought(msg)
	}
	r.bufKind, r.bufN, r.bufOther = "", 0, 0
	r.buf.Reset()
	return r.appendLocked(rec)
}

// addTextLocked coalesces one chunk, its content b; r.mu is held. A block that is not
// text (an image, audio, a resource, a resource link) is counted, not journaled: symbi
// journals and releases text.
func (r *runner) addTextLocked(kind string, b sdk.ContentBlock) error {
	if r.bufKind != kind {
		if err := r.flushLocked(); err != nil {
			return err
		}
	}
	t := textOf(b)
	if b.Text == nil {
		r.bufOther++
	}
	for {
		r.bufKind = kind
		room := journal.MaxChunkBytes - r.buf.Len()
		if len(t) <= room {
			r.buf.WriteString(t)
			r.bufN++
			break
		}
		cut := room
		for cut > 0 && !utf8.RuneStart(t[cut]) {
			cut--
		}
		r.buf.WriteString(t[:cut])
		t = t[cut:]
		if err := r.flushLocked(); err != nil {
			return err
		}
	}
	if r.buf.Len() >= journal.MaxChunkBytes {
		return r.flushLocked()
	}
	return nil
}

// journaler journals the queued updates, flushing coalesced text at least once a second.
func (r *runner) journaler(stop <-chan struct{}) {
	defer r.survive("the journaler", nil)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			err := r.locked(func() error {
				if r.closed.Load() {
					return nil
				}
				return r.flushLocked()
			})
			// What was appended is made durable at least once a second: a run's observers
			// (run_events, subscriptions) see only durable records.
			if err == nil && r.unsynced.Load() {
				err = r.sync()
			}
			if err != nil {
				return
			}
		case u := <-r.updates:
			if u.done != nil {
				_ = r.locked(r.flushLocked)
				close(u.done)
				continue
			}
			if u.n.SessionId != r.sid {
				// The journaler starts once the session is open: r.sid is set. An update
				// of a session never opened is not this run's: its text would join the
				// answer, its tool calls the journal.
				r.abort(fmt.Errorf("%w: a session/update for a session this run did not open", ErrMalformed))
				return
			}
			if err := r.handle(u.n.Update, u.outOfTurn); err != nil && !errors.Is(err, ErrSessionOver) {
				// (An update whose record the session refused, closing meanwhile, is
				// dropped like those that come after the close.)
				r.abort(err)
				return
			}
		}
	}
}

// handle journals one update of the session. A message chunk read outside the prompt
// turn (outOfTurn) is journaled as such and is no part of the answer: the answer is the
// agent's message text of the turn.
func (r *runner) handle(u sdk.SessionUpdate, outOfTurn bool) error {
	if r.closed.Load() {
		return nil
	}
	switch {
	case u.AgentMessageChunk != nil && outOfTurn:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed.Load() {
			return nil
		}
		return r.addTextLocked(outOfTurnKind, u.AgentMessageChunk.Content)
	case u.AgentMessageChunk != nil:
		t := textOf(u.AgentMessageChunk.Content)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed.Load() {
			return nil
		}
		if int64(r.text.Len()+len(t)) > r.cfg.MaxTextBytes {
			return fmt.Errorf("the agent's answer exceeds %d bytes", r.cfg.MaxTextBytes)
		}
		r.text.WriteString(t)
		return r.addTextLocked(journal.TypeAgentMessage, u.AgentMessageChunk.Content)
	case u.AgentThoughtChunk != nil:
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed.Load() {
			return nil
		}
		return r.addTextLocked(journal.TypeAgentThought, u.AgentThoughtChunk.Content)
	case u.ToolCall != nil:
		tc := u.ToolCall
		in, inN := rawDigest(tc.RawInput)
		l, err := r.paths(tc.Locations)
		if err != nil {
			return err
		}
		rec := journal.ToolCall{ToolCallID: cut(string(tc.ToolCallId), journal.MaxTitleBytes), Kind: kindOf(&tc.Kind),
			Title: cut(tc.Title, journal.MaxTitleBytes), Status: cut(string(tc.Status), journal.MaxTitleBytes),
			Paths: capPaths(slices.Concat(l.Paths, l.Outside, l.Bad)), RawInputSHA256: in, RawInputBytes: inN}
		if tc.RawOutput != nil {
			rec.RawOutputSHA256, rec.RawOutputBytes, rec.Excerpt = r.rawOutput(tc.RawOutput)
		}
		return r.record(rec, false)
	case u.ToolCallUpdate != nil:
		tu := u.ToolCallUpdate
		rec := journal.ToolCallUpdate{ToolCallID: cut(string(tu.ToolCallId), journal.MaxTitleBytes)}
		if tu.Kind != nil {
			rec.Kind = kindOf(tu.Kind)
		}
		if tu.Title != nil {
			rec.Title = cut(*tu.Title, journal.MaxTitleBytes)
		}
		if tu.Status != nil {
			rec.Status = cut(string(*tu.Status), journal.MaxTitleBytes)
		}
		if tu.Locations != nil {
			l, err := r.paths(tu.Locations)
			if err != nil {
				return err
			}
			rec.Paths = nonNil(capPaths(slices.Concat(l.Paths, l.Outside, l.Bad)))
		}
		if tu.RawInput != nil {
			rec.RawInputSHA256, rec.RawInputBytes = rawDigest(tu.RawInput)
		}
		if tu.RawOutput != nil {
			rec.RawOutputSHA256, rec.RawOutputBytes, rec.Excerpt = r.rawOutput(tu.RawOutput)
		}
		return r.record(rec, false)
	case u.Plan != nil:
		entries := []journal.PlanEntry{}
		for i, e := range u.Plan.Entries {
			if i == journal.MaxPlanEntries {
				break
			}
			entries = append(entries, journal.PlanEntry{Content: cut(e.Content, journal.MaxTitleBytes),
				Priority: cut(string(e.Priority), maxPlanWordBytes), Status: cut(string(e.Status), maxPlanWordBytes)})
		}
		return r.record(journal.Plan{Entries: entries}, false)
	case u.CurrentModeUpdate != nil:
		if pin := r.cfg.Executor.PinMode; pin != "" && string(u.CurrentModeUpdate.CurrentModeId) != pin {
			r.logWords("the mode it switched to", string(u.CurrentModeUpdate.CurrentModeId))
			return fmt.Errorf("the agent left the pinned mode %q for another (its name is %s)", pin, inLog)
		}
	case u.ConfigOptionUpdate != nil:
		// The session's config options carry the mode too: a select of category "mode"
		// whose value is not the pin has left it, as a current_mode_update would.
		pin := r.cfg.Executor.PinMode
		for _, o := range u.ConfigOptionUpdate.ConfigOptions {
			if sel := o.Select; pin != "" && sel != nil && sel.Category != nil &&
				*sel.Category == sdk.SessionConfigOptionCategoryMode && string(sel.CurrentValue) != pin {
				r.logWords("the mode it switched to", string(sel.CurrentValue))
				return fmt.Errorf("the agent left the pinned mode %q for another by its mode option (its name is %s)", pin, inLog)
			}
		}
	}
	return nil
}

// rawOutput is what the journal keeps of a tool call's raw output: the digest and length
// of its JSON, and an excerpt of it (of the string itself when it is one; none when only
// digests are kept).
func (r *runner) rawOutput(v any) (sum string, n int64, excerpt string) {
	b, _ := json.Marshal(v)
	ex := string(b)
	if s, ok := v.(string); ok {
		ex = s
	}
	if !r.cfg.HashesOnly {
		excerpt = cut(ex, journal.MaxExcerptBytes)
	}
	return sha(string(b)), int64(len(b)), excerpt
}

func (r *runner) run(ctx context.Context) Result {
	cfg := r.cfg
	switch {
	case cfg.Journal == nil:
		return Result{Outcome: OutcomeError, Err: errors.New("acp: no journal")}
	case cfg.Executor == nil || len(cfg.Executor.Command) == 0 || cfg.Workspace == nil || cfg.Decide == nil:
		return r.noSession(errors.New("acp: incomplete configuration (executor, command, workspace, decider)"))
	}
	// The session's deadline, for a held permission request's wait: the requests are
	// handled on the SDK's goroutines, under contexts of its own without it. Set before
	// the agent starts, so before any request is read.
	r.deadline, _ = ctx.Deadline()
	if err := r.start(); err != nil {
		return r.noSession(err)
	}
	defer r.stdoutR.Close()

	// The handshake, bounded by ctx and by any abort. It runs on its own goroutine: its
	// requests are written by the goroutine that sends them, and a write to an agent that
	// has stopped reading its stdin never ends by itself. When the run ends first, the
	// agent is killed, which ends the write (its stdin is closed).
	hctx, hcancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-r.aborted:
		case <-r.exited:
		case <-hctx.Done():
		}
		hcancel()
	}()
	type hresult struct {
		started journal.SessionStarted
		err     error
	}
	hch := make(chan hresult, 1)
	var step atomic.Value // the handshake's request under way
	step.Store("")
	go func() {
		res := hresult{err: ErrPanicked} // what a panic in the handshake leaves
		defer func() { hch <- res }()
		defer r.survive("the handshake", nil)
		res.started, res.err = r.handshake(hctx, func(method string) { step.Store(method) })
	}()
	var h hresult
	select {
	case h = <-hch:
	case <-hctx.Done():
		select {
		case h = <-hch: // it ended too
		default:
			r.kill()
			if h = <-hch; h.err == nil {
				h.err = errors.New("the handshake was cut short")
			}
		}
	}
	hcancel()
	started, err := h.started, h.err
	if err != nil {
		outcome := OutcomeError
		if a := r.abortedErr(); a != nil {
			err = a
		} else if ctx.Err() != nil {
			err = fmt.Errorf("%w before the session opened (no answer to %s)", ctx.Err(), step.Load())
			if errors.Is(ctx.Err(), context.Canceled) {
				outcome = OutcomeCancelled
			}
		} else if isClosed(r.exited) {
			err = fmt.Errorf("the agent exited during the handshake: %w", err)
		}
		r.kill()
		return r.noSessionOutcome(outcome, r.withStderr(err))
	}
	err = r.locked(func() error { return r.appendLocked(started) })
	if err == nil {
		err = r.sync()
	}
	if err != nil {
		r.kill()
		return Result{Outcome: OutcomeError, Err: err, Stderr: r.stderr.String()}
	}
	r.open.Store(true)

	stop := make(chan struct{})
	jdone := make(chan struct{})
	go func() { defer close(jdone); r.journaler(stop) }()
	// The journaler may be held by what the agent can hold (a tool_call location looked up
	// on a file system it serves): it is waited for the grace period, no longer. Records
	// it tries after the session closed are refused (ErrSessionOver).
	stopJournaler := sync.OnceFunc(func() { close(stop); waitWithin(jdone, cfg.Grace, cfg.Hurry) })
	defer stopJournaler()

	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	type presult struct {
		resp sdk.PromptResponse
		err  error
	}
	pch := make(chan presult, 1)
	go func() {
		resp, err := r.conn.Prompt(pctx, sdk.PromptRequest{SessionId: r.sid, Prompt: []sdk.ContentBlock{sdk.TextBlock(cfg.Prompt)}})
		pch <- presult{resp, err}
	}()

	var (
		pr       presult
		gotResp  bool
		outcome  string
		whyNot   error
		termNote string
	)
	select {
	case pr = <-pch:
		gotResp = true
		if pr.err != nil && isClosed(r.conn.Done()) && !r.eof.Load() && r.abortedErr() == nil {
			// The SDK closed the connection while the agent was still writing: its
			// notification queue overflowed.
			r.abort(fmt.Errorf("the agent floods updates: the ACP connection overflowed and closed (%w)", r.quiet(pr.err)))
		}
	case <-r.aborted:
	case <-r.exited:
		// The agent exited without answering. Its output ends with it — unless a process
		// it started holds it open, and then no end would come: what it wrote is read
		// within the grace period, and the run ends.
		grace := time.NewTimer(cfg.Grace)
		select {
		case pr = <-pch:
			gotResp = true
		case <-r.aborted:
		case <-grace.C:
			r.abort(errors.New("the agent exited before answering its prompt, and a process it started still holds its output open"))
		case <-ctx.Done():
			// Cancelled meanwhile: nothing to tell an agent that is gone.
			outcome, whyNot = OutcomeCancelled, ctx.Err()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				outcome = OutcomeTimeout
			}
			r.cancelOnce.Do(func() { close(r.cancelled) })
		case <-cfg.Hurry:
			outcome, whyNot, termNote = OutcomeCancelled, errors.New("the agent exited before answering its prompt"), hurriedNote
			r.cancelOnce.Do(func() { close(r.cancelled) })
		}
		grace.Stop()
	case <-ctx.Done():
		outcome = OutcomeCancelled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			outcome = OutcomeTimeout
		}
		whyNot = ctx.Err()
		r.cancelOnce.Do(func() { close(r.cancelled) })
		// session/cancel must reach the agent after the prompt it cancels: one sent first
		// would be ignored (no turn in progress), and the turn would then run on. The
		// prompt is written at once after the session opens; its write is awaited within
		// the grace period.
		// A hurried session (cfg.Hurry closed, now or during a wait) gives up the rest of
		// its grace: its process group is killed below, at once.
		grace := time.NewTimer(cfg.Grace)
		select {
		case <-r.prompted.written:
		case pr = <-pch:
			gotResp = true
		case <-r.aborted:
		case <-grace.C:
		case <-cfg.Hurry:
			termNote = hurriedNote
		}
		grace.Stop()
		if !gotResp && isClosed(cfg.Hurry) {
			termNote = hurriedNote // no session/cancel: the group is killed at once
		}
		if !gotResp && r.abortedErr() == nil && termNote == "" {
			// session/cancel is written on its own goroutine: an agent that has stopped
			// reading its stdin holds the write — and every other write to it, the SDK's
			// writes being serialised — until its group is killed below, and the grace
			// period, SIGTERM and SIGKILL must come regardless.
			go func() { _ = r.conn.Cancel(context.Background(), sdk.CancelNotification{SessionId: r.sid}) }()
			grace = time.NewTimer(cfg.Grace)
			select {
			case pr = <-pch:
				gotResp = true
			case <-r.aborted:
			case <-cfg.Hurry:
				termNote = hurriedNote
			case <-grace.C:
				termNote = "the agent did not end its turn within the grace period: its process group was terminated"
				_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGTERM)
				grace.Reset(cfg.Grace)
				select {
				case <-r.exited:
				case <-cfg.Hurry:
					termNote = "the agent did not end its turn within the grace period and " + hurriedNote
				case <-grace.C:
					termNote = "the agent did not end its turn within the grace period nor exit on SIGTERM: its process group was killed"
				}
			}
			grace.Stop()
		}
	}

	// The turn is over (or abandoned): wait for the SDK to hand over what it read of the
	// agent's output — it does so also after that output ended (an agent that exited
	// mid-turn) or the line check ended the run (a malformed line: only what follows it is
	// never read) — and drain it into the journal, then close the session to further
	// records. No wait here is without bound, since the agent can hold what is waited
	// for — a path looked up, or a file read, on a file system its own daemon serves and
	// never answers: the drain waits the grace period (an answer whose updates could not
	// all be journaled is not released, and the error of a run that fails anyway says what
	// its journal lacks); then the agent's processes are killed, which ends such an access
	// when its daemon was one of them; then the close waits the grace period for an access
	// still under way, and abandons it. A journal that failed takes no more records.
	lackNote := ""
	if !errors.Is(r.abortedErr(), ErrJournal) {
		ok := r.handedOver(cfg.Grace, cfg.Hurry) && r.drain(cfg.Grace, cfg.Hurry, jdone)
		if !ok && isClosed(cfg.Hurry) {
			// A hurried session does not wait on the agent: its processes are killed
			// first (ending a hold by its own daemon), and the drain — of our own
			// journaler, a matter of microseconds unless held — has the grace period.
			r.kill()
			ok = r.handedOver(cfg.Grace, nil) && r.drain(cfg.Grace, nil, jdone)
		}
		// (A journaler that ended has ended the run, on an update it refused: what follows
		// that update is not journaled, as what follows a malformed line is not read.)
		if !ok && !isClosed(jdone) {
			lackNote = fmt.Sprintf("the agent's updates could not all be journaled within the grace period (%v): the ACP SDK had not handed them all over, or one was held by a file system operation the agent can hold (a tool_call's location looked up)", cfg.Grace)
			if gotResp && pr.err == nil && r.abortedErr() == nil {
				r.abort(errors.New(lackNote))
				lackNote = ""
			}
		}
	}
	r.kill()
	text, abandoned := r.close(cfg.Grace, cfg.Hurry)
	abandonedNote := ""
	if abandoned {
		note := fmt.Sprintf("a file access of the agent did not end within the grace period (%v) after its processes were killed: it was abandoned, unrecorded and unanswered", cfg.Grace)
		if isClosed(cfg.Hurry) {
			note = "a file access of the agent had not ended when its processes were killed, and the server was told again to stop: it was abandoned, unrecorded and unanswered"
		}
		abandonedNote = note
		r.log().Warn("acp: "+note, "executor", cfg.Executor.Name)
	}
	stopJournaler()
	pcancel()
	// The handlers still serving the agent's requests end promptly now (the session is
	// closed, the agent dead); session_finished waits for them, within the grace period
	// (a hurried session does not).
	grace := time.NewTimer(cfg.Grace)
	select {
	case <-r.idle():
	case <-grace.C:
	case <-cfg.Hurry:
	}
	grace.Stop()

	res := Result{Text: text}
	switch a := r.abortedErr(); {
	case a != nil:
		res.Outcome, res.Err = OutcomeError, a
	case outcome != "":
		res.Outcome = outcome
		if gotResp && pr.err == nil {
			res.StopReason = stopReasonOf(pr.resp.StopReason)
		}
		res.Err = whyNot
		if termNote != "" {
			res.Err = fmt.Errorf("%w; %s", whyNot, termNote)
		}
	case pr.err != nil:
		why := r.quiet(pr.err)
		err := fmt.Errorf("session/prompt failed: %w", why)
		if r.exitedByItself() {
			err = fmt.Errorf("session/prompt failed (the agent exited: %s): %w", r.cmd.ProcessState, why)
		}
		res.Outcome, res.Err = OutcomeError, r.withStderr(err)
	default:
		res.StopReason = stopReasonOf(pr.resp.StopReason)
		res.Outcome = OutcomeCompleted
		if pr.resp.StopReason == sdk.StopReasonCancelled {
			// symbi sent no session/cancel (that is the branch above): the agent's own.
			res.Outcome, res.Err = OutcomeCancelled, ErrAgentCancelled
		}
	}
	if lackNote != "" {
		// The turn failed anyway; its error says what its journal lacks.
		if res.Err == nil {
			res.Outcome, res.Err = OutcomeError, errors.New(lackNote)
		} else {
			res.Err = fmt.Errorf("%w; %s", res.Err, lackNote)
		}
	}
	if abandonedNote != "" && res.Err != nil {
		// However the turn ended, its error says what its journal lacks.
		res.Err = fmt.Errorf("%w; %s", res.Err, abandonedNote)
	}
	res.Stderr = r.stderr.String()
	if errors.Is(res.Err, ErrJournal) && !errors.Is(res.Err, journal.ErrFileTooLarge) {
		return res // the writer is stopped: nothing more can be written
	}
	// A record refused for the journal's size stops nothing: session_finished has room
	// (journal.ClosingReserve).
	fin := journal.SessionFinished{Outcome: res.Outcome, StopReason: res.StopReason, TextSHA256: sha(text), TextBytes: int64(len(text))}
	if res.Err != nil {
		fin.Error = cut(res.Err.Error(), journal.MaxTitleBytes)
	} else if abandonedNote != "" {
		// A turn that ended regardless: the record still says what its journal lacks.
		fin.Error = cut(abandonedNote, journal.MaxTitleBytes)
	}
	if !cfg.HashesOnly {
		fin.Text = text
	}
	if err := r.finish(fin); err != nil {
		res.Outcome, res.Err = OutcomeError, err
	}
	return res
}

// close closes the session to further records and returns the final answer. It waits
// for the fs handlers between their last check and their record (fsMu); the others find
// the session over. It waits at most grace (none once hurry is closed): an access still
// under way then is abandoned (abandoned true), and its record, should it come, is
// refused — the session is over.
func (r *runner) close(grace time.Duration, hurry <-chan struct{}) (text string, abandoned bool) {
	locked := make(chan struct{})
	if r.fsMu.TryLock() {
		close(locked) // no access under way: nothing to wait for, hurried or not
	} else {
		go func() {
			r.fsMu.Lock()
			close(locked)
		}()
	}
	if waitWithin(locked, grace, hurry) {
		defer r.fsMu.Unlock()
	} else {
		abandoned = true
		go func() {
			<-locked
			r.fsMu.Unlock()
		}()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !errors.Is(r.abortedErr(), ErrJournal) {
		_ = r.flushLocked()
	}
	if !r.closed.Swap(true) {
		close(r.ended)
	}
	return r.text.String(), abandoned
}

// namesDir reports whether p, a path as an agent sent it, names a directory by its form:
// it ends in "/", or its last name is "." or "..".
func namesDir(p string) bool {
	last := p[strings.LastIndexByte(p, '/')+1:]
	return last == "" || last == "." || last == ".."
}

// waitWithin waits until ch is closed, for at most d, or not at all once hurry is
// closed. It reports whether ch was closed.
// drain waits, within d, until every update queued before it has been journaled (the
// journaler flushed past a marker), and reports whether it was; it fails at once when the
// journaler has ended (jdone: its journal failed) or the session closed. A hurry ends the
// wait.
func (r *runner) drain(d time.Duration, hurry <-chan struct{}, jdone <-chan struct{}) bool {
	done := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		select {
		case r.updates <- update{done: done}:
			select {
			case <-done:
			case <-jdone:
			case <-r.ended:
			}
		case <-jdone:
		case <-r.ended:
		}
	}()
	return waitWithin(drained, d, hurry) && isClosed(done)
}

func waitWithin(ch <-chan struct{}, d time.Duration, hurry <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-hurry:
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// serve counts one of the agent's requests in flight, for its handler to call done when
// it returns. Past maxRequests the agent floods requests: the run ends (ErrMalformed) and
// the request is answered with the error.
func (r *runner) serve() (done func(), err error) {
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	if r.reqN >= maxRequests {
		return nil, r.malformed(fmt.Errorf("%w: the agent floods requests: more than %d in flight", ErrMalformed, maxRequests))
	}
	r.reqN++
	return r.served, nil
}

func (r *runner) served() {
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	if r.reqN--; r.reqN == 0 && r.reqIdle != nil {
		close(r.reqIdle)
		r.reqIdle = nil
	}
}

// idle returns a channel closed once no request of the agent is being served.
func (r *runner) idle() <-chan struct{} {
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	ch := make(chan struct{})
	if r.reqN == 0 {
		close(ch)
	} else {
		r.reqIdle = ch
	}
	return ch
}

// finish writes session_finished and syncs.
func (r *runner) finish(fin journal.SessionFinished) error {
	if err := r.cfg.Journal.Append(fin); err != nil {
		return fmt.Errorf("%w: session_finished: %w", ErrJournal, err)
	}
	if err := r.cfg.Journal.Sync(); err != nil {
		return fmt.Errorf("%w: sync: %w", ErrJournal, err)
	}
	return nil
}

// noSession ends a run whose session could not be opened: session_finished, outcome
// error, right after the caller's started.
func (r *runner) noSession(err error) Result {
	return r.noSessionOutcome(OutcomeError, err)
}

func (r *runner) noSessionOutcome(outcome string, err error) Result {
	res := Result{Outcome: outcome, Err: err, Stderr: r.stderr.String()}
	if ferr := r.finish(journal.SessionFinished{Outcome: outcome, TextSHA256: sha(""),
		Error: cut(err.Error(), journal.MaxTitleBytes)}); ferr != nil {
		res.Outcome, res.Err = OutcomeError, fmt.Errorf("%w (and %w)", ferr, err)
	}
	return res
}

// start starts the agent in its own process group with the stdout checker.
func (r *runner) start() error {
	argv := r.cfg.Executor.Command
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	var mark [16]byte
	rand.Read(mark[:])
	r.mark = MarkVariable + hex.EncodeToString(mark[:]) + "=1"
	env := r.cfg.Env
	if env == nil {
		env = os.Environ() // exec.Cmd's meaning of a nil Env
	}
	env = append(slices.Clone(env), r.mark)
	r.cmd = &exec.Cmd{Path: argv[0], Args: slices.Clone(argv), Env: env, Dir: r.cfg.Workspace.Path(),
		Stdin: inR, Stdout: outW, Stderr: &r.stderr, SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		WaitDelay: r.cfg.Grace}
	err = r.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return fmt.Errorf("starting the agent %q: %w", argv[0], err)
	}
	r.stdinW, r.stdoutR = inW, outR
	r.exited = make(chan struct{})
	pid := r.cmd.Process.Pid
	go func() {
		defer close(r.exited)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				return
			}
		}
	}()
	pr, pw := io.Pipe()
	go func() {
		// After a panic the SDK's reader is told the stream ended (a close done first
		// stays), so that its goroutines end with the session.
		defer pw.CloseWithError(ErrPanicked)
		defer r.survive("reading the agent's output", nil)
		r.checkLines(outR, pw)
	}()
	// The SDK's logger is set once its reader has started, which reads it unguarded: the
	// reader waits for the logger, behind a gate.
	logged := make(chan struct{})
	gated := readerFunc(func(b []byte) (int, error) {
		<-logged
		return pr.Read(b)
	})
	r.conn = sdk.NewClientSideConnection(&client{r}, r.prompted.watch(r.countAnswers(inW)), gated)
	r.conn.SetLogger(slog.New(sdkLog{r: r, next: r.log().Handler()}))
	close(logged)
	go func() {
		<-r.conn.Done()
		inW.Close()
		// The SDK reads no more (the agent's output ended, or the SDK gave up on it — its
		// notification queue overflowed): the line check, which may be writing the next
		// line to it, ends too.
		pr.CloseWithError(errors.New("the ACP connection closed"))
	}()
	return nil
}

// checkLines passes the agent's stdout to the SDK line by line; a line that is not a
// JSON-RPC message (which the SDK would skip silently) or is too long ends the run.
func (r *runner) checkLines(src io.Reader, dst *io.PipeWriter) {
	br := bufio.NewReaderSize(src, 64<<10)
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		// Every piece is measured, the last (with the "\n") too: the line, "\n" included,
		// is what the SDK's bound applies to.
		if len(line) > maxLineBytes {
			r.abort(fmt.Errorf("%w: a line of more than %d bytes", ErrMalformed, maxLineBytes))
			dst.CloseWithError(errors.New("line too long"))
			return
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(line) > 0 {
			note := false // a session/update notification
			if t := bytes.TrimSpace(line); len(t) > 0 {
				why, request, m := notMessage(t)
				if why != "" {
					r.logWords("a line that is "+why, cut(string(t), 4096))
					r.abort(fmt.Errorf("%w: the agent wrote a line that is %s (%d bytes; the line is %s)", ErrMalformed, why, len(t), inLog))
					dst.CloseWithError(errors.New("malformed ACP"))
					return
				}
				n := notification(m)
				if err := r.announce(n); err != nil {
					r.abort(err)
					dst.CloseWithError(errors.New("malformed ACP"))
					return
				}
				if err := r.turnOf(m, n); err != nil {
					r.abort(err)
					dst.CloseWithError(errors.New("malformed ACP"))
					return
				}
				if request && r.unanswered.Add(1) > maxUnanswered {
					r.abort(fmt.Errorf("%w: the agent floods requests: more than %d read and not yet answered (it does not read its answers?)", ErrMalformed, maxUnanswered))
					dst.CloseWithError(errors.New("malformed ACP"))
					return
				}
				if note = m.Method == sdk.ClientMethodSessionUpdate && !m.hasID(); note {
					r.notesRead.Add(1)
				}
			}
			if _, werr := dst.Write(line); werr != nil {
				if note {
					r.notesRead.Add(-1) // not passed: the SDK reads no more
					r.pokeNotes()
				}
				return
			}
			line = line[:0]
		}
		if err != nil {
			r.eof.Store(true)
			dst.Close()
			return
		}
	}
}

// checkPathLen refuses a path the agent sends of more than workspace.MaxPathBytes.
func checkPathLen(p string) error {
	if len(p) > workspace.MaxPathBytes {
		return fmt.Errorf("%w: a path of %d bytes, more than the limit of %d (PATH_MAX)", ErrMalformed, len(p), workspace.MaxPathBytes)
	}
	return nil
}

// announced is what a session said of one tool call: its kind and title as last
// announced, and every location it was ever announced with (at most maxLocationBytes of
// paths: a request naming more could only be refused).
type announced struct {
	kind      *sdk.ToolKind
	title     *string
	locations []sdk.ToolCallLocation
	paths     map[string]bool // the locations' paths
	pathBytes int
}

// notification is the session/update notification m, decoded as the SDK decodes it — its
// params as a SessionNotification, validated, the update's kind told by the exact member
// sessionUpdate after the JSON escapes are read — or nil when m is none, or one the SDK
// cannot decode (which it drops, saying so: sdkLog).
func notification(m envelope) *sdk.SessionNotification {
	if m.Method != sdk.ClientMethodSessionUpdate || m.hasID() {
		return nil
	}
	var n sdk.SessionNotification
	if json.Unmarshal(m.Params, &n) != nil || n.Validate() != nil {
		return nil
	}
	return &n
}

// announce remembers what the notification n (nil: none), a line of the agent's output
// not yet handed to the SDK, says of a tool call: a tool_call or tool_call_update, read
// as the SDK reads it. It runs in the order of the agent's output, before the SDK reads
// the line — a permission request the SDK then serves on its own goroutine, ahead of the
// notifications it queues, finds every tool call announced before it.
func (r *runner) announce(n *sdk.SessionNotification) error {
	if n == nil {
		return nil
	}
	var (
		what      string
		id        sdk.ToolCallId
		kind      *sdk.ToolKind
		title     *string
		locations []sdk.ToolCallLocation
	)
	switch u := n.Update; {
	case u.ToolCall != nil:
		what, id, locations = "tool_call", u.ToolCall.ToolCallId, u.ToolCall.Locations
		if u.ToolCall.Kind != "" {
			kind = &u.ToolCall.Kind
		}
		if u.ToolCall.Title != "" {
			title = &u.ToolCall.Title
		}
	case u.ToolCallUpdate != nil:
		what = "tool_call_update"
		id, kind, title, locations = u.ToolCallUpdate.ToolCallId, u.ToolCallUpdate.Kind, u.ToolCallUpdate.Title, u.ToolCallUpdate.Locations
	default:
		return nil
	}
	if id == "" {
		// A call no request could name apart from any other: the journal would hold a
		// tool call no permission is decided on.
		return fmt.Errorf("%w: a %s with an empty toolCallId", ErrMalformed, what)
	}
	r.callsMu.Lock()
	defer r.callsMu.Unlock()
	key := callKey(string(n.SessionId), string(id)) // another session's calls are not this one's
	a := r.calls[key]
	if a == nil {
		if len(r.calls) >= maxToolCalls {
			return fmt.Errorf("%w: the agent announces more than %d tool calls", ErrMalformed, maxToolCalls)
		}
		if r.calls == nil {
			r.calls = map[string]*announced{}
		}
		a = &announced{}
		r.calls[key] = a
	}
	if kind != nil {
		k := *kind
		a.kind = &k
	}
	if title != nil {
		t := *title
		a.title = &t
	}
	for _, l := range locations {
		if a.paths[l.Path] {
			continue
		}
		if err := checkPathLen(l.Path); err != nil {
			return err
		}
		if a.pathBytes += len(l.Path); a.pathBytes > maxLocationBytes {
			return fmt.Errorf("%w: tool call %s announced with locations whose paths make more than %d bytes together", ErrMalformed, errcode.Quote(cut(string(id), 64)), maxLocationBytes)
		}
		if a.paths == nil {
			a.paths = map[string]bool{}
		}
		a.paths[l.Path] = true
		a.locations = append(a.locations, sdk.ToolCallLocation{Path: l.Path})
	}
	return nil
}

// toolCall is what the permission request req says of its tool call, merged with what the
// session announced of it: the kind the request names, or else the announced one; the
// title likewise; every path either names (a path the tool call was announced with stays
// one it may touch). changed is why the request cannot be decided on: it names another
// kind than the one announced.
func (r *runner) toolCall(tc sdk.ToolCallUpdate) (kind *sdk.ToolKind, title *string, locations []sdk.ToolCallLocation, changed string) {
	kind, title, locations = tc.Kind, tc.Title, slices.Clone(tc.Locations)
	r.callsMu.Lock()
	a := r.calls[callKey(string(r.sid), string(tc.ToolCallId))]
	var ak *sdk.ToolKind
	var at *string
	var al []sdk.ToolCallLocation
	if a != nil {
		ak, at, al = a.kind, a.title, slices.Clone(a.locations)
	}
	r.callsMu.Unlock()
	switch {
	case kind == nil:
		kind = ak
	case ak != nil && *ak != *kind:
		changed = fmt.Sprintf("the request names kind %s, its tool call was announced as %s", errcode.Quote(string(*kind)), errcode.Quote(string(*ak)))
	}
	if title == nil {
		title = at
	}
	for _, l := range al {
		if !slices.ContainsFunc(locations, func(o sdk.ToolCallLocation) bool { return o.Path == l.Path }) {
			locations = append(locations, l)
		}
	}
	return kind, title, locations, changed
}

// callKey is the key of a tool call in runner.calls: its session's id and its own.
func callKey(session, toolCall string) string { return session + "\x00" + toolCall }

// notMessage says why the non-blank line t is not a message the SDK's reader takes — not
// JSON, or JSON that is not an object with a method (a request or notification) or an id
// (a response) — or "" when it is one, and then whether it is a request (a method and an
// id), which the SDK answers. The SDK logs a line that is no message and skips it.
func notMessage(t []byte) (why string, request bool, m envelope) {
	err := json.Unmarshal(t, &m)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return "not JSON", false, m
	case err != nil, t[0] != '{', m.Method == "" && !m.hasID():
		return "not a JSON-RPC message", false, m
	}
	return "", m.Method != "" && m.hasID(), m
}

// sdkLog takes the SDK's diagnostics. The SDK drops, with a log line and no answer, a
// session/update notification it cannot decode: a tool call, a message or a plan would
// be missing from the journal without a word. Such a drop of an update of a kind the SDK
// knows ends the run as malformed ACP; one of a kind it does not know (a newer
// protocol's: "no matching variant") carries nothing symbi journals or decides on, and
// is passed over. Every record also goes on to next (the process's default logger).
type sdkLog struct {
	r    *runner
	next slog.Handler
}

func (h sdkLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.next.Enabled(ctx, l)
}

func (h sdkLog) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "failed to parse incoming message" {
		// The line check reads a line as the SDK does, so this does not happen; were it
		// to, the line is dropped without a word.
		h.r.abort(fmt.Errorf("%w: the agent wrote a line the ACP SDK cannot read", ErrMalformed))
	}
	if strings.HasPrefix(rec.Message, "failed to queue notification") {
		// Its queue overflowed: the SDK drops the notification and closes the connection.
		h.r.notesLost.Store(true)
		h.r.pokeNotes()
	}
	if rec.Message == "failed to handle notification" {
		var method, why string
		rec.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "method":
				method = a.Value.String()
			case "err":
				why = a.Value.String()
			}
			return true
		})
		if method == sdk.ClientMethodSessionUpdate {
			if !strings.Contains(why, "no matching variant") {
				h.r.abort(fmt.Errorf("%w: the agent sent a session/update symbi cannot read: %s", ErrMalformed, cut(why, 200)))
			}
			h.r.handedOne() // dropped, saying so
		}
	}
	if h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h sdkLog) WithAttrs(as []slog.Attr) slog.Handler {
	return sdkLog{r: h.r, next: h.next.WithAttrs(as)}
}

func (h sdkLog) WithGroup(name string) slog.Handler {
	return sdkLog{r: h.r, next: h.next.WithGroup(name)}
}

// message is the part of a JSON-RPC message that says what it is.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func (m message) hasID() bool { return len(m.ID) > 0 && string(m.ID) != "null" }

// envelope is a message read as the SDK reads one (its anyMessage): a line that does not
// decode so — "jsonrpc" a number, "error" not an object — the SDK logs and skips, and the
// check refuses it first. (anyMessage's params and result are raw JSON, which any value
// is: params are kept for turnOf, result is not read.)
type envelope struct {
	message
	JSONRPC string            `json:"jsonrpc"`
	Error   *sdk.RequestError `json:"error"`
	Params  json.RawMessage   `json:"params"`
}

func probe(b []byte) (message, error) {
	var m message
	err := json.Unmarshal(b, &m)
	return m, err
}

// countAnswers counts, on the agent's stdin, each answer to one of its requests (a
// message with an id and no method) once it is written whole: the SDK writes one message
// per Write.
func (r *runner) countAnswers(w io.Writer) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		n, err := w.Write(b)
		if n == len(b) {
			if m, perr := probe(b); perr == nil && m.Method == "" && m.hasID() {
				r.unanswered.Add(-1)
			}
		}
		return n, err
	})
}

// exitedByItself reports, after kill, whether the agent ended by itself rather than by
// the final SIGKILL: it had been seen exiting before, or its wait status says so (it may
// have exited just before the kill, its stdout closed, before the exit was seen).
func (r *runner) exitedByItself() bool {
	ps := r.cmd.ProcessState
	if ps == nil {
		return false
	}
	if r.died {
		return true
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && (ws.Exited() || (ws.Signaled() && ws.Signal() != syscall.SIGKILL))
}

// kill SIGKILLs the whole process group, then reaps the agent: the leader is reaped only
// after the group kill, so its pid (the group id) cannot have been reused. It closes the
// agent's stdin, which ends any write to it still under way (a process outside the group
// may hold the pipe open). Only the first call acts.
func (r *runner) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	r.killOnce.Do(r.killGroup)
}

func (r *runner) killGroup() {
	r.died = isClosed(r.exited)
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	if !sweepMarked(r.mark, markedSweepWait) {
		r.log().Warn("acp: the sweep for the run's processes that left its process group did not finish in time; it goes on in the background", "executor", r.cfg.Executor.Name, "waited", markedSweepWait)
	}
	r.stdinW.Close()
	if isClosed(r.cfg.Hurry) {
		// A process that left the group may hold the agent's stderr open: a hurried
		// session does not wait the grace period for the rest of it.
		r.cmd.WaitDelay = hurriedWaitDelay
	}
	_ = r.cmd.Wait()
	r.stdoutR.Close()
}

// handshake initializes the agent and opens its session (in the pinned mode), telling
// sending the method of each request before it is sent.
func (r *runner) handshake(ctx context.Context, sending func(method string)) (journal.SessionStarted, error) {
	cfg := r.cfg
	sending("initialize")
	ini, err := r.conn.Initialize(ctx, sdk.InitializeRequest{
		ProtocolVersion:    sdk.ProtocolVersionNumber,
		ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}},
		ClientInfo:         &sdk.Implementation{Name: "symbi", Version: "1"},
	})
	if err != nil {
		return journal.SessionStarted{}, fmt.Errorf("initialize: %w", r.quiet(err))
	}
	if ini.ProtocolVersion != sdk.ProtocolVersionNumber {
		return journal.SessionStarted{}, fmt.Errorf("initialize: the agent speaks protocol version %d, not %d", ini.ProtocolVersion, sdk.ProtocolVersionNumber)
	}
	sending("session/new")
	sess, err := r.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: cfg.Workspace.Path(), McpServers: []sdk.McpServer{}})
	if err != nil {
		return journal.SessionStarted{}, fmt.Errorf("session/new: %w", r.quiet(err))
	}
	r.sid = sess.SessionId
	if pin := cfg.Executor.PinMode; pin != "" {
		var offered []string
		if sess.Modes != nil {
			for _, m := range sess.Modes.AvailableModes {
				offered = append(offered, string(m.Id))
			}
		}
		if !slices.Contains(offered, pin) {
			r.logWords("the modes it offers", strings.Join(offered, ", "))
			return journal.SessionStarted{}, fmt.Errorf("the agent does not offer the pinned mode %q (modes offered: %d; their names are %s)", pin, len(offered), inLog)
		}
		sending("session/set_mode")
		if _, err := r.conn.SetSessionMode(ctx, sdk.SetSessionModeRequest{SessionId: r.sid, ModeId: sdk.SessionModeId(pin)}); err != nil {
			return journal.SessionStarted{}, fmt.Errorf("session/set_mode %q: %w", pin, r.quiet(err))
		}
	}
	st := journal.SessionStarted{Executor: cfg.Executor.Name, Command: slices.Clone(cfg.Executor.Command),
		Workspace: cfg.Workspace.Path(), ProtocolVersion: int64(ini.ProtocolVersion), SessionID: cut(string(r.sid), journal.MaxTitleBytes),
		Mode: cfg.Executor.PinMode, PromptSHA256: sha(cfg.Prompt), PromptBytes: int64(len(cfg.Prompt))}
	if ini.AgentInfo != nil {
		st.AgentName, st.AgentVersion = cut(ini.AgentInfo.Name, journal.MaxTitleBytes), cut(ini.AgentInfo.Version, journal.MaxTitleBytes)
	}
	return st, nil
}

// Located is what a request's locations name, as a decision sees them.
type Located struct {
	N       int      // the locations
	Paths   []string // workspace-relative: each location inside, and where its links lead when that differs
	Outside []string // the locations outside the workspace, or whose links lead outside, as sent (cut)
	Bad     []string // the locations that are no well-formed path (a NUL byte, a name too long), as sent (cut)
	BadErr  error    // why the first of Bad is refused
}

// Locate maps ACP locations (paths as an agent sends them) to what a decision is taken
// on: workspace-relative paths; the ones Rel refuses as outside are outside, and so are
// the ones whose symbolic links lead outside (workspace.Follow). A path whose links lead
// elsewhere inside the workspace is decided on both: its name, then where it leads. All
// of them: what is decided on is never cut short (capPaths is for display only). A path
// that is not well-formed (workspace.ErrBadPath) is neither inside nor outside: Bad. A
// path of more than workspace.MaxPathBytes bytes, or paths of more than maxLocationBytes
// together (where they lead included), are malformed ACP (ErrMalformed): the caller ends
// the run, before anything of the request is journaled. symbi policy eval locates its
// --path flags the same way.
func Locate(ws *workspace.Workspace, locs []string) (Located, error) {
	l := Located{N: len(locs), Paths: []string{}, Outside: []string{}}
	total := 0
	add := func(p string) error {
		if total += len(p); total > maxLocationBytes {
			return fmt.Errorf("%w: %d locations whose paths make more than %d bytes together (where their symbolic links lead included)", ErrMalformed, len(locs), maxLocationBytes)
		}
		return nil
	}
	for _, p := range locs {
		if err := checkPathLen(p); err != nil {
			return Located{}, err
		}
		if err := add(p); err != nil {
			return Located{}, err
		}
		rel, err := ws.Rel(p)
		if err == nil {
			var real string
			if real, err = ws.Follow(p); err == nil && len(real) > workspace.MaxPathBytes {
				err = workspace.ErrOutside
			}
			if err == nil {
				l.Paths = append(l.Paths, rel)
				if real != rel {
					if err := add(real); err != nil {
						return Located{}, err
					}
					l.Paths = append(l.Paths, real)
				}
				continue
			}
		}
		if errors.Is(err, workspace.ErrBadPath) {
			if l.BadErr == nil {
				l.BadErr = err
			}
			l.Bad = append(l.Bad, cut(p, journal.MaxTitleBytes))
			continue
		}
		l.Outside = append(l.Outside, cut(p, journal.MaxTitleBytes))
	}
	return l, nil
}

// paths locates the paths of ACP locations in the run's workspace (Locate).
func (r *runner) paths(locs []sdk.ToolCallLocation) (Located, error) {
	ps := make([]string, len(locs))
	for i, l := range locs {
		ps[i] = l.Path
	}
	return Locate(r.cfg.Workspace, ps)
}

// Predecide is the decision on a permission request taken before any policy, or nil when
// the policies decide it: a request naming more than journal.MaxPaths locations is denied,
// and so is one whose locations lead to more than journal.MaxPaths paths (where their
// symbolic links lead included) — the record holds that many, and a decision is only ever
// taken on what is recorded —, one with a path that is not well-formed (Bad), and one
// with a path (workspace-relative, as Rel returns) reaching the project's governance
// (workspace.CheckGoverned: the audit store, the policies), or, for a delete or a move, a
// directory holding them (workspace.HoldsGoverned: the workspace itself, or one above the
// policies or the audit store) — whatever a policy permits, and never held at a gate.
// symbi policy eval dry-runs the same.
func Predecide(ws *workspace.Workspace, kind string, l Located) *policy.Decision {
	if l.N > journal.MaxPaths {
		return &policy.Decision{Errors: []string{fmt.Sprintf("symbi: the request names %d locations, more than the limit of %d: denied without a policy decision (the record lists the first %d)",
			l.N, journal.MaxPaths, journal.MaxPaths)}}
	}
	if len(l.Paths) > journal.MaxPaths {
		return &policy.Decision{Errors: []string{fmt.Sprintf("symbi: the request's locations lead to %d paths (where their symbolic links lead included), more than the limit of %d a record holds: denied without a policy decision (the record lists the first %d)",
			len(l.Paths), journal.MaxPaths, journal.MaxPaths)}}
	}
	if l.BadErr != nil {
		return &policy.Decision{Reason: l.BadErr.Error(), Errors: []string{"symbi: " + l.BadErr.Error()}}
	}
	for _, p := range l.Paths {
		if err := ws.CheckGoverned(p); err != nil {
			return &policy.Decision{Reason: err.Error(), Errors: []string{"symbi: " + err.Error()}}
		}
		if (kind == "delete" || kind == "move") && ws.HoldsGoverned(p) {
			err := fmt.Sprintf(`refused by rule "the governance is protected": a %s of %s would take the project's policies or audit store with it`, kind, errcode.Quote(p))
			return &policy.Decision{Reason: err, Errors: []string{"symbi: " + err}}
		}
	}
	return nil
}

// malformed ends the run for err (ErrMalformed) and returns the JSON-RPC error that
// answers the request.
func (r *runner) malformed(err error) error {
	r.abort(err)
	return sdk.NewInvalidParams(map[string]any{"error": err.Error()})
}

// decide runs the gate, unless the session is being cancelled or is over first (nil).
func (r *runner) decide(ctx context.Context, t policy.ToolUse) *policy.Decision {
	ch := make(chan policy.Decision, 1)
	go func() {
		defer r.survive("the policy decision", nil)
		ch <- r.cfg.Decide(t)
	}()
	select {
	case d := <-ch:
		if len(t.Outside) > 0 {
			// Denied whatever the decider says, and never held at a gate: no approval
			// can open a path outside the workspace.
			if d.Allow || d.Gate != "" {
				d.Reason = "a path is outside the workspace"
			}
			d.Allow, d.Gate = false, ""
		}
		return &d
	case <-r.cancelled:
	case <-r.aborted:
	case <-r.ended:
	case <-ctx.Done():
	}
	return nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (r *runner) live() bool {
	select {
	case <-r.cancelled:
		return false
	case <-r.aborted:
		return false
	default:
		return r.open.Load() && !r.closed.Load()
	}
}

// client is the acp.Client symbi offers the agent.
type client struct{ r *runner }

var _ sdk.Client = (*client)(nil)

func (c *client) SessionUpdate(_ context.Context, n sdk.SessionNotification) (err error) {
	r := c.r
	defer r.handedOne() // once queued for the journaler, or dropped (the session closed)
	defer r.survive("session/update", &err)
	if r.closed.Load() {
		return nil
	}
	out := false
	if n.Update.AgentMessageChunk != nil {
		r.turnMu.Lock()
		if len(r.chunkTurns) == 0 {
			r.turnMu.Unlock()
			// Every chunk the SDK hands over was read, and noted, first.
			r.abort(fmt.Errorf("%w: an agent_message_chunk symbi did not read", ErrMalformed))
			return nil
		}
		out, r.chunkTurns = r.chunkTurns[0], r.chunkTurns[1:]
		r.turnMu.Unlock()
	}
	select {
	case r.updates <- update{n: n, outOfTurn: out}:
	default:
		r.abort(fmt.Errorf("the agent floods updates: more than %d wait to be journaled", updateQueue))
	}
	return nil
}

func (c *client) RequestPermission(ctx context.Context, req sdk.RequestPermissionRequest) (_ sdk.RequestPermissionResponse, err error) {
	r := c.r
	defer r.survive("session/request_permission", &err)
	done, err := r.serve()
	if err != nil {
		return sdk.RequestPermissionResponse{}, err
	}
	defer done()
	cancelled := sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}
	if !r.live() {
		return cancelled, nil
	}
	if req.SessionId != r.sid {
		return sdk.RequestPermissionResponse{}, sdk.NewInvalidParams(map[string]any{"error": "unknown session"})
	}
	tc := req.ToolCall
	if tc.ToolCallId == "" {
		// It names no tool call apart from any other (an announcement with an empty id is
		// malformed too).
		return sdk.RequestPermissionResponse{}, r.malformed(fmt.Errorf("%w: a permission request with an empty toolCallId", ErrMalformed))
	}
	// The request names a tool call announced before: what it leaves out is what was
	// announced (ACP's ToolCallUpdate), and a path announced stays one the call may touch.
	kind, ttl, locations, changed := r.toolCall(tc)
	title := ""
	if ttl != nil {
		title = cut(*ttl, journal.MaxTitleBytes)
	}
	in, _ := rawDigest(tc.RawInput)
	l, err := r.paths(locations)
	if err != nil {
		return sdk.RequestPermissionResponse{}, r.malformed(err)
	}
	t := policy.ToolUse{Kind: kindOf(kind), Title: title, Paths: l.Paths, Outside: l.Outside,
		Workspace: r.cfg.Workspace.Path(), RawInputSHA256: in}
	d := Predecide(r.cfg.Workspace, t.Kind, l)
	if d == nil && changed != "" {
		why := fmt.Sprintf(`refused by rule "a tool call keeps its kind": %s`, changed)
		d = &policy.Decision{Reason: why, Errors: []string{"symbi: " + why}}
	}
	if pin := r.cfg.Executor.PinMode; d == nil && pin != "" && kind != nil && *kind == sdk.ToolKindSwitchMode {
		// Leaving the pinned mode is never the policy's to allow (a switch_mode request is
		// kind "other" to the policies, which may permit that broadly).
		why := fmt.Sprintf(`refused by rule "the pinned mode is kept": a switch_mode request, and the executor pins mode %s`, errcode.Quote(pin))
		d = &policy.Decision{Reason: why, Errors: []string{"symbi: " + why}}
	}
	if d == nil {
		if d = r.decide(ctx, t); d == nil {
			return cancelled, nil
		}
	}
	requestID := "perm-" + strconv.FormatInt(r.permN.Add(1), 10)
	if err := r.hold(ctx, d, requestID, t.Kind, title); err != nil {
		if errors.Is(err, ErrJournal) {
			return sdk.RequestPermissionResponse{}, sdk.NewInternalError(map[string]any{"error": "symbi could not record the approval"})
		}
		return cancelled, nil
	}
	rec := journal.PermissionDecided{RequestID: requestID,
		ToolCallID: cut(string(tc.ToolCallId), journal.MaxTitleBytes), Kind: t.Kind, Title: title, Paths: capPaths(l.Paths), Outside: capPaths(l.Outside),
		PolicyIDs: nonNil(d.Policies), Errors: nonNil(d.Errors)}
	want := sdk.PermissionOptionKindRejectOnce
	if d.Allow {
		rec.Decision, want = "allow", sdk.PermissionOptionKindAllowOnce
	} else {
		rec.Decision = "deny"
	}
	shared := sharedIDs(req.Options)
	for _, o := range req.Options {
		if o.Kind == want && len(o.OptionId) <= journal.MaxTitleBytes && !shared[o.OptionId] {
			rec.OptionID = string(o.OptionId)
			break
		}
	}
	if rec.OptionID == "" {
		// What the journal says is what the agent heard: not an allow.
		rec.Decision = "deny"
		rec.Errors = append(rec.Errors, fmt.Sprintf("symbi: the agent offered no %s option whose id names no other kind of option; answered cancelled", want))
	}
	if err := r.record(rec, true); errors.Is(err, ErrSessionOver) {
		return cancelled, nil
	} else if err != nil {
		return sdk.RequestPermissionResponse{}, sdk.NewInternalError(map[string]any{"error": "symbi could not record the decision"})
	}
	// A run cancelled while its decision was being recorded answers the request
	// cancelled, as every request pending at session/cancel is: the journal keeps the
	// decision, and the agent never hears an allow after the cancel.
	if rec.OptionID == "" || !r.live() {
		return cancelled, nil
	}
	return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(sdk.PermissionOptionId(rec.OptionID))}, nil
}

// sharedIDs are the ids of options that share their id with an option of another kind:
// the agent could take such an id for, say, allow_always, which symbi never answers. (One
// pass: a request of many options costs no more than reading it.)
func sharedIDs(options []sdk.PermissionOption) map[sdk.PermissionOptionId]bool {
	kind := make(map[sdk.PermissionOptionId]sdk.PermissionOptionKind, len(options))
	shared := map[sdk.PermissionOptionId]bool{}
	for _, o := range options {
		if k, ok := kind[o.OptionId]; !ok {
			kind[o.OptionId] = o.Kind
		} else if k != o.Kind {
			shared[o.OptionId] = true
		}
	}
	return shared
}

// ending is the JSON-RPC error of an fs request the session no longer serves.
func ending() error {
	return sdk.NewRequestCancelled(map[string]any{"error": "the session is ending"})
}

// gateFS decides and journals an fs request; it returns the request id and the relative
// path when allowed, or the JSON-RPC error to answer.
func (r *runner) gateFS(ctx context.Context, sid sdk.SessionId, kind, method, path string) (string, string, error) {
	if !r.live() {
		return "", "", ending()
	}
	if sid != r.sid {
		return "", "", sdk.NewInvalidParams(map[string]any{"error": "unknown session"})
	}
	l, err := r.paths([]sdk.ToolCallLocation{{Path: path}})
	if err != nil {
		return "", "", r.malformed(err)
	}
	paths, outside := l.Paths, l.Outside
	title := cut(method+" "+path, journal.MaxTitleBytes)
	t := policy.ToolUse{Kind: kind, Title: title, Paths: paths, Outside: outside, Workspace: r.cfg.Workspace.Path()}
	// A protected name (hidden, policies), a symbolic link on the way (paths then holds
	// where it leads too) or a hard-linked file is refused by its rule before any policy,
	// like a path outside the workspace, and never held at a gate: symbi's own file access
	// would refuse it when it opens the file.
	var d *policy.Decision
	var refusal error
	switch {
	case l.BadErr != nil:
		refusal = l.BadErr
	case len(outside) == 0 && namesDir(path):
		// A path ending in "/" or "/." names a directory: what Rel cleaned it to may be a
		// file, which a write would replace.
		refusal = errcode.Errorf(errcode.ProtectedPath, "%s ends in \"/\" or a \".\" or \"..\" name, naming a directory: %w", errcode.Quote(path), workspace.ErrNotRegular)
	case len(outside) > 0:
	case len(paths) > 1:
		if refusal = r.cfg.Workspace.CheckNames(paths[0]); refusal == nil {
			refusal = errcode.Errorf(errcode.ProtectedPath, "%q: %w (it leads to %q)", paths[0], workspace.ErrSymlink, paths[1])
		}
	case len(paths) == 1:
		refusal = r.cfg.Workspace.CheckFile(paths[0])
	}
	if refusal != nil {
		d = &policy.Decision{Reason: refusal.Error(), Errors: []string{"symbi: " + refusal.Error()}}
	}
	if d == nil {
		if d = r.decide(ctx, t); d == nil {
			return "", "", ending()
		}
	}
	requestID := "fs-" + strconv.FormatInt(r.fsN.Add(1), 10)
	if err := r.hold(ctx, d, requestID, kind, title); err != nil {
		if errors.Is(err, ErrJournal) {
			return "", "", sdk.NewInternalError(map[string]any{"error": "symbi could not record the approval"})
		}
		return "", "", ending()
	}
	rec := journal.PermissionDecided{RequestID: requestID, Kind: kind,
		Title: title, Paths: paths, Outside: outside, Decision: "deny", PolicyIDs: nonNil(d.Policies), Errors: nonNil(d.Errors)}
	if d.Allow {
		rec.Decision = "allow"
	}
	if err := r.record(rec, true); errors.Is(err, ErrSessionOver) {
		return "", "", ending()
	} else if err != nil {
		return "", "", sdk.NewInternalError(map[string]any{"error": "symbi could not record the decision"})
	}
	if !d.Allow {
		why := d.Reason
		if len(outside) > 0 {
			why = "the path is outside the workspace"
		}
		return "", "", &sdk.RequestError{Code: -32001, Message: "denied by policy", Data: map[string]any{"path": path, "reason": why}}
	}
	return rec.RequestID, paths[0], nil
}

func fsError(err error) error {
	return sdk.NewInvalidParams(map[string]any{"error": err.Error()})
}

// access holds off the session's close for an allowed fs request, from its last check
// that the session is live to its record: the file is accessed and the access journaled
// before session_finished, or the file is not accessed (ok false: the session is ending,
// or over). The caller calls done after its record.
func (r *runner) access() (done func(), ok bool) {
	r.fsMu.RLock()
	if !r.live() {
		r.fsMu.RUnlock()
		return nil, false
	}
	return r.fsMu.RUnlock, true
}

func (c *client) ReadTextFile(ctx context.Context, req sdk.ReadTextFileRequest) (_ sdk.ReadTextFileResponse, err error) {
	r := c.r
	defer r.survive("fs/read_text_file", &err)
	served, err := r.serve()
	if err != nil {
		return sdk.ReadTextFileResponse{}, err
	}
	defer served()
	id, rel, err := r.gateFS(ctx, req.SessionId, "read", "fs/read_text_file", req.Path)
	if err != nil {
		return sdk.ReadTextFileResponse{}, err
	}
	done, ok := r.access()
	if !ok {
		return sdk.ReadTextFileResponse{}, ending()
	}
	defer done()
	content, size, sum, err := r.cfg.Workspace.ReadText(rel, req.Line, req.Limit, r.cfg.MaxFileBytes)
	if err != nil {
		return sdk.ReadTextFileResponse{}, fsError(err)
	}
	if err := r.record(journal.FSRead{RequestID: id, Path: rel, Bytes: size, SHA256: sum}, true); err != nil {
		return sdk.ReadTextFileResponse{}, sdk.NewInternalError(map[string]any{"error": "symbi could not record the read"})
	}
	return sdk.ReadTextFileResponse{Content: content}, nil
}

func (c *client) WriteTextFile(ctx context.Context, req sdk.WriteTextFileRequest) (_ sdk.WriteTextFileResponse, err error) {
	r := c.r
	defer r.survive("fs/write_text_file", &err)
	served, err := r.serve()
	if err != nil {
		return sdk.WriteTextFileResponse{}, err
	}
	defer served()
	id, rel, err := r.gateFS(ctx, req.SessionId, "edit", "fs/write_text_file", req.Path)
	if err != nil {
		return sdk.WriteTextFileResponse{}, err
	}
	done, ok := r.access()
	if !ok {
		return sdk.WriteTextFileResponse{}, ending()
	}
	defer done()
	// fs_write is durable before the file changes: a write that cannot be recorded is not
	// made.
	errRecord := errors.New("symbi could not record the write")
	_, _, err = r.cfg.Workspace.WriteTextRecorded(rel, req.Content, r.cfg.MaxFileBytes, func(size int64, sum string) error {
		if err := r.record(journal.FSWrite{RequestID: id, Path: rel, Bytes: size, SHA256: sum}, true); err != nil {
			return errRecord
		}
		return nil
	})
	switch {
	case errors.Is(err, errRecord):
		return sdk.WriteTextFileResponse{}, sdk.NewInternalError(map[string]any{"error": errRecord.Error()})
	case err != nil:
		return sdk.WriteTextFileResponse{}, fsError(err)
	}
	return sdk.WriteTextFileResponse{}, nil
}

// notOffered answers a request for a capability symbi does not offer (terminals); it
// counts among the requests in flight like any other.
func (c *client) notOffered(method string) error {
	done, err := c.r.serve()
	if err != nil {
		return err
	}
	done()
	return sdk.NewMethodNotFound(method)
}

func (c *client) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, c.notOffered(sdk.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, c.notOffered(sdk.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, c.notOffered(sdk.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, c.notOffered(sdk.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, c.notOffered(sdk.ClientMethodTerminalWaitForExit)
}

// ---------------------------------------------------------------------------------------

// sha returns the hex SHA-256 of s.
func sha(s string) string { return digest.SHA256Hex([]byte(s)) }

// rawDigest is the SHA-256 and size of json.Marshal(v); "" and 0 when v is nil.
func rawDigest(v any) (string, int64) {
	if v == nil {
		return "", 0
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", 0
	}
	return sha(string(b)), int64(len(b))
}

// stopReasonOf is the stop reason a journal records: one of ACP's, or "other" for any
// other string the agent sent — text it chose, which session_finished would otherwise
// carry in clear beside an empty answer, whatever the gate decides of that answer.
func stopReasonOf(r sdk.StopReason) string {
	switch r {
	case sdk.StopReasonEndTurn, sdk.StopReasonMaxTokens, sdk.StopReasonMaxTurnRequests, sdk.StopReasonRefusal, sdk.StopReasonCancelled:
		return string(r)
	}
	return "other"
}

func kindOf(k *sdk.ToolKind) string {
	if k != nil && slices.Contains(policy.ToolKinds, string(*k)) {
		return string(*k)
	}
	return "other"
}

func textOf(b sdk.ContentBlock) string {
	if b.Text != nil {
		return b.Text.Text
	}
	return ""
}

// cut bounds s to n bytes at a rune boundary, making it valid UTF-8.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func capPaths(p []string) []string {
	if len(p) > journal.MaxPaths {
		return p[:journal.MaxPaths]
	}
	return p
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

// tailBuffer keeps the last stderrBytes written.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > stderrBytes {
		t.b = append(t.b[:0], t.b[len(t.b)-stderrBytes:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// hold waits at a gate when d is a gated denial and a Holder is configured: an approval
// turns d into an allow; a rejection or a wait without a decision leaves it a denial, with
// the reason among its errors. It returns an error when the request must not be answered
// as decided: the session is ending (cancelled) or over (ErrSessionOver), or the journal
// failed (ErrJournal).
func (r *runner) hold(ctx context.Context, d *policy.Decision, requestID, kind, title string) error {
	if d.Allow || d.Gate == "" || r.cfg.Hold == nil || !r.live() {
		return nil
	}
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-r.cancelled:
		case <-r.aborted:
		case <-r.ended:
		case <-hctx.Done():
		}
		stop()
	}()
	res := r.cfg.Hold(hctx, Hold{RequestID: requestID, Gate: d.Gate, Kind: kind, Title: title, Deadline: r.deadline}, func(rec journal.Record) error { return r.record(rec, true) })
	switch {
	case errors.Is(res.Err, ErrSessionOver):
		// A record refused because the session closed meanwhile (a Holder may have
		// taken it for a journal failure): the request is answered cancelled.
		return ErrSessionOver
	case res.Err != nil && r.abortedErr() != nil:
		return fmt.Errorf("%w: %w", ErrJournal, res.Err)
	case errors.Is(res.Err, ErrJournal):
		r.abort(res.Err)
		return res.Err
	case res.Err != nil:
		return res.Err
	case res.Approved:
		d.Allow, d.Errors = true, nil
		d.Reason = "approved at gate " + d.Gate + ": " + res.Note
	default:
		d.Errors = append(d.Errors, "held at gate "+d.Gate+": "+res.Note)
	}
	return nil
}

// promptWatch watches what symbi writes to the agent for the session/prompt request.
type promptWatch struct {
	once    sync.Once
	written chan struct{}
	sending func(prompt []byte) // called with the session/prompt request before it is written
}

// promptMarker is how the SDK's encoder writes the prompt request's method.
var promptMarker = []byte(`"method":"session/prompt"`)

func (p *promptWatch) watch(w io.Writer) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		// The session/prompt request itself: not an answer that quotes the method (the
		// SDK's "Method not found" to an agent's request of that name carries it).
		prompt := false
		if bytes.Contains(b, promptMarker) {
			m, err := probe(b)
			prompt = err == nil && m.Method == sdk.AgentMethodSessionPrompt && m.hasID()
		}
		if prompt && p.sending != nil {
			p.sending(b)
		}
		n, err := w.Write(b)
		if n == len(b) && prompt {
			p.once.Do(func() { close(p.written) })
		}
		return n, err
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// MarkVariable begins the name of the environment variable a delegated agent is started
// with, the rest of the name random for each run (its value "1"): the run's processes
// carry it, and a process that left the agent's process group (setsid: a daemon, a build
// server) is found by it when the run ends. A name of its own for each run lets the marks
// of nested runs (an agent running symbi) accumulate rather than replace each other.
const MarkVariable = "SYMBI_RUN_MARK_"

// markedSweepWait bounds how long a session's end waits for killMarked: reading a
// process's environment can block (its memory map locked, in uninterruptible sleep), and
// the run's end — its journal's last records — must not wait on another process.
const markedSweepWait = 10 * time.Second

// sweep is killMarked; a test replaces it.
var sweep = killMarked

// sweepMarked runs killMarked(mark) and waits for it at most wait; it reports whether it
// finished. One that did not goes on in the background.
func sweepMarked(mark string, wait time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweep(mark)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// killMarked kills, with SIGKILL, every process of this user whose environment holds
// mark, until none is left (a process may start another as it is killed) — a bounded
// number of sweeps of /proc. A process that cleared its environment is not found: the
// supervisor's control group is the remedy for that (docs/executors.md).
func killMarked(mark string) {
	if mark == "" {
		return
	}
	want := []byte(mark + "\x00")
	self, uid := os.Getpid(), uint32(os.Getuid())
	for range 8 {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := false
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			// Only this user's processes (any, for root): another's environment is not
			// readable, nor the process killable.
			if info, err := e.Info(); err != nil {
				continue
			} else if st, ok := info.Sys().(*syscall.Stat_t); !ok || uid != 0 && st.Uid != uid {
				continue
			}
			// The process is held by a pidfd before its environment is read: the signal
			// reaches the process read, never another given its pid since.
			pidfd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err == nil && bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
				found = true
				_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			}
			unix.Close(pidfd)
		}
		if !found {
			return
		}
	}
}
