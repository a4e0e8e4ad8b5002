package runs

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"golang.org/x/sys/unix"
	"strconv"
	"time"

	"symbi/internal/digest"
	"symbi/internal/journal"
)

// line is one journal line as served, its signature verified.
type line struct {
	seq  int64
	typ  string
	time string
	raw  []byte          // without "\n"
	hash string          // SHA-256 of raw + "\n"
	data json.RawMessage // the payload's data member
}

// payloadMembers are the members of a journal payload (journal package comment).
var payloadMembers = []string{"v", "run_id", "seq", "prev", "time", "agent_id", "type", "data"}

// verified is a prefix of a journal every line of which verified as agentID's: its first
// n complete lines, off bytes whose SHA-256 is sum, the last of them hashing to head.
type verified struct {
	n, off  int64
	sum     [sha256.Size]byte
	head    string
	agentID string
}

// read returns the journal's lines from index from up to (not including) index to (to < 0:
// every complete line), each verified before anything of it is read: its signature, v,
// seq = its index, run_id = runID, agent_id = agentID, and prev = the hash of the line
// before it. The lines before from are verified too, though not returned: a line is
// served only when every line before it verifies, so nothing a journal says beyond a line
// that does not verify is served, whatever the cursor. known, when not nil, is a prefix
// verified before: when the journal still begins with exactly those bytes (same SHA-256)
// its lines are not verified again. A final fragment without "\n" is never taken. On a
// problem, the lines before it are returned with it. done is the prefix verified now.
func read(data []byte, runID, agentID string, from, to int64, pub ed25519.PublicKey, known *verified) (lines []line, done *verified, err error) {
	prev := journal.ZeroHash
	var msg []byte
	var n, off int64
	if known != nil && known.agentID == agentID && known.n <= from && known.off <= int64(len(data)) && sha256.Sum256(data[:known.off]) == known.sum {
		n, off, prev = known.n, known.off, known.head
	}
	defer func() {
		if n > 0 {
			done = &verified{n: n, off: off, sum: sha256.Sum256(data[:off]), head: prev, agentID: agentID}
		}
	}()
	for ; off < int64(len(data)) && (to < 0 || n < to); n++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			break
		}
		raw := data[off : off+int64(i)+1]
		l, err := verifyLine(raw, n, prev, runID, agentID, pub, &msg)
		if err != nil {
			return lines, nil, fmt.Errorf("journal line %d: %w", n+1, err)
		}
		hash := digest.SHA256Hex(raw)
		if n >= from {
			l.hash = hash
			lines = append(lines, l)
		}
		prev, off = hash, off+int64(len(raw))
	}
	return lines, nil, nil
}

// verifyLine checks raw's signature, then its place in the run's chain.
func verifyLine(raw []byte, seq int64, prev, runID, agentID string, pub ed25519.PublicKey, msg *[]byte) (line, error) {
	p, err := journal.Open(raw, pub, journal.SignatureContext, msg)
	if err != nil {
		return line{}, err
	}
	m, err := journal.PayloadMembers(p, payloadMembers)
	if err != nil {
		return line{}, err
	}
	var f struct{ RunID, AgentID, Prev, Time, Type string }
	for k, dst := range map[string]*string{"run_id": &f.RunID, "agent_id": &f.AgentID, "prev": &f.Prev, "time": &f.Time, "type": &f.Type} {
		if err := json.Unmarshal(m[k], dst); err != nil {
			return line{}, fmt.Errorf("payload member %q is not a string", k)
		}
	}
	switch {
	case string(m["v"]) != "1":
		return line{}, fmt.Errorf("unknown version v=%s", m["v"])
	case string(m["seq"]) != strconv.FormatInt(seq, 10):
		return line{}, fmt.Errorf("seq is %s, want %d", m["seq"], seq)
	case f.Prev != prev:
		return line{}, fmt.Errorf("prev is not the hash of the line before: the chain is broken")
	case f.RunID != runID:
		return line{}, fmt.Errorf("run_id is %q, want %q", f.RunID, runID)
	case f.AgentID != agentID:
		return line{}, fmt.Errorf("agent_id is %q, want %q (the run's, from the ledger or the journal's name)", f.AgentID, agentID)
	}
	return line{seq: seq, typ: f.Type, time: f.Time, raw: raw[:len(raw)-1], data: m["data"]}, nil
}

// facts are what a run's journal says of it, every line read verified.
type facts struct {
	agent, caller      string
	callerAuth         string
	startedAt, endedAt string
	terminated         bool
	reason             string // the terminated reason
	released           bool
	errText            string
	records            int64
	head               string
	textRetained       bool      // the response text is in the journal
	approval           *Approval // the gate's request and decision, when the run was held
	waiting            bool      // approval's wait is open: no decision, and not ended otherwise
	// heldAtEnd: the journal ends with a held answer's approval_requested, or with
	// policy_reevaluated records after it — what a server starting resumes (invoke's
	// ReopenHeld), to wait again or to end as the last judgement says.
	heldAtEnd bool
	problem   error
	size, ino int64 // of the file the facts were read from (fileID)
}

// current reports whether the journal at path is still the file, of the same size, the
// facts were read from.
func (f *facts) current(path string) bool {
	size, ino := fileID(path)
	return f.ino != 0 && size == f.size && ino == f.ino
}

// fileID returns the size and inode of the file at path (0, 0 if it cannot be had).
func fileID(path string) (size, ino int64) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return 0, 0
	}
	return st.Size, int64(st.Ino)
}

// readFacts verifies every complete line of a journal's bytes (up to max lines; max < 0:
// all) and gathers its facts. A line that does not verify ends the reading: problem says
// which and why.
func readFacts(data []byte, runID, agentID string, max int64, pub ed25519.PublicKey) *facts {
	lines, _, err := read(data, runID, agentID, 0, max, pub, nil)
	f := &facts{problem: err}
	for _, l := range lines {
		d := l.data
		f.records, f.head = l.seq+1, l.hash
		if l.typ != journal.TypePolicyReevaluated {
			f.heldAtEnd = false
		}
		switch l.typ {
		case journal.TypeStarted:
			var s struct {
				Agent      string `json:"agent"`
				Caller     string `json:"caller"`
				CallerAuth string `json:"caller_auth"`
			}
			json.Unmarshal(d, &s)
			f.agent, f.caller, f.callerAuth, f.startedAt = s.Agent, s.Caller, s.CallerAuth, l.time
		case journal.TypeInferenceFinished, journal.TypeSessionFinished: // a model's answer, a delegated agent's
			var s struct {
				Text *string `json:"text"`
			}
			json.Unmarshal(d, &s)
			f.textRetained = s.Text != nil
		case journal.TypeApprovalRequested:
			var a struct {
				Gate      string `json:"gate"`
				RequestID string `json:"request_id"`
				Title     string `json:"title"`
				TimeoutMS int64  `json:"timeout_ms"`
			}
			json.Unmarshal(d, &a)
			f.approval = &Approval{Gate: a.Gate, RequestID: a.RequestID, Title: a.Title, RequestedAt: l.time}
			f.waiting = true
			f.heldAtEnd = a.RequestID == ""
			if t, err := time.Parse(journal.TimeLayout, l.time); err == nil && a.TimeoutMS > 0 {
				f.approval.Deadline = formatTime(t.Add(time.Duration(a.TimeoutMS) * time.Millisecond))
			}
		case journal.TypeApprovalDecided:
			var a struct {
				Decision     string `json:"decision"`
				Approver     string `json:"approver"`
				ApproverAuth string `json:"approver_auth"`
				Reason       string `json:"reason"`
				Via          string `json:"via"`
			}
			json.Unmarshal(d, &a)
			if f.approval != nil {
				c := *f.approval
				c.Decision, c.Approver, c.ApproverAuth, c.Reason, c.Via, c.DecidedAt = a.Decision, a.Approver, a.ApproverAuth, a.Reason, a.Via, l.time
				f.approval = &c
			}
			f.waiting = false
		case journal.TypePolicyReevaluated:
			// A deny naming no gate, or another than the wait's, ends the wait (the run's
			// terminated follows): the run is no longer awaiting approval.
			var p struct {
				Decision string `json:"decision"`
				Gate     string `json:"gate"`
			}
			json.Unmarshal(d, &p)
			if p.Decision == "deny" && (f.approval == nil || p.Gate == "" || p.Gate != f.approval.Gate) {
				f.waiting = false
			}
		case journal.TypePermissionDecided:
			// A held permission request no one decided in time is answered (denied) with
			// no approval_decided: its wait is over all the same, as the journal's writer
			// counts it.
			var p struct {
				RequestID string `json:"request_id"`
			}
			json.Unmarshal(d, &p)
			if f.approval != nil && f.approval.RequestID != "" && f.approval.RequestID == p.RequestID {
				f.waiting = false
			}
		case journal.TypeTerminated:
			var t struct {
				Reason   string `json:"reason"`
				Released bool   `json:"released"`
				Error    string `json:"error"`
			}
			json.Unmarshal(d, &t)
			f.terminated, f.reason, f.released, f.errText, f.endedAt = true, t.Reason, t.Released, t.Error, l.time
		}
	}
	return f
}

// releasedText returns the released text of a run from its journal's bytes: the text of
// its inference_finished (or, delegated, session_finished) record, every line verified. ok is false when the journal holds
// only the text's digest.
func releasedText(data []byte, runID, agentID string, pub ed25519.PublicKey) (text string, ok bool, err error) {
	lines, _, err := read(data, runID, agentID, 0, -1, pub, nil)
	if err != nil {
		return "", false, err
	}
	for _, l := range lines {
		d := l.data
		if l.typ != journal.TypeInferenceFinished && l.typ != journal.TypeSessionFinished {
			continue
		}
		var s struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(d, &s); err != nil {
			return "", false, fmt.Errorf("journal line %d: %w", l.seq+1, err)
		}
		if s.Text == nil {
			return "", false, nil
		}
		text, ok = *s.Text, true
	}
	return text, ok, nil
}

// formatTime is the ledger's and the journal's time form.
func formatTime(t time.Time) string { return t.UTC().Format(journal.TimeLayout) }

// outputMembers are, by record type, the data members that carry a run's output in
// clear: the answer, the agent's messages, thoughts, plan and tool output.
var outputMembers = map[string][]string{
	journal.TypeInferenceFinished: {"text"},
	journal.TypeSessionFinished:   {"text"},
	journal.TypeAgentMessage:      {"text"},
	journal.TypeAgentThought:      {"text"},
	journal.TypeToolCallUpdate:    {"excerpt"},
	journal.TypePlan:              {"entries"},
}

// agentWritten are the record types of a delegated session that hold text its agent
// chose — a tool call's title, status and paths, a permission's title, its name and
// version — in clear even in a hashes-only journal: an agent whose answer the gate
// withholds could hand the same text on through them.
var agentWritten = map[string]bool{
	journal.TypeSessionStarted:    true,
	journal.TypeAgentMessage:      true,
	journal.TypeAgentThought:      true,
	journal.TypeToolCall:          true,
	journal.TypeToolCallUpdate:    true,
	journal.TypePlan:              true,
	journal.TypePermissionDecided: true,
	journal.TypeFSRead:            true,
	journal.TypeFSWrite:           true,
}

// carriesOutput reports whether l holds output in clear, text a delegated agent chose, or
// the digest of a text that is not empty — inference_finished, session_finished,
// policy_evaluated, approval_requested, policy_reevaluated, in hashes-only journals too. A
// digest gives a short or guessable answer away (a PIN, yes or no) to whoever hashes the
// guesses: it is withheld with the text it digests.
func carriesOutput(l line) bool {
	if agentWritten[l.typ] {
		return true
	}
	names := outputMembers[l.typ]
	if l.typ == journal.TypeApprovalRequested {
		names = []string{"title"} // a held permission request's, the agent's words
	}
	var d map[string]json.RawMessage
	if json.Unmarshal(l.data, &d) != nil {
		return true // unreadable: withhold rather than guess
	}
	if v, ok := d["text_sha256"]; ok && string(v) != `""` && string(v) != emptyTextDigest {
		return true
	}
	if v, ok := d["stop_reason"]; ok && !acpStopReasons[string(v)] {
		return true // a stop reason that is not ACP's is the agent's words (acp journals "other")
	}
	for _, n := range names {
		if v, ok := d[n]; ok && string(v) != `""` && string(v) != "[]" && string(v) != "null" {
			return true
		}
	}
	return false
}

// acpStopReasons are session_finished's stop reasons, as JSON: ACP's, "other" and none.
var acpStopReasons = map[string]bool{`""`: true, `"end_turn"`: true, `"max_tokens"`: true, `"max_turn_requests"`: true,
	`"refusal"`: true, `"cancelled"`: true, `"other"`: true}

// emptyTextDigest is the text_sha256 of no text, as JSON: it tells nothing.
var emptyTextDigest = `"` + digest.SHA256Hex(nil) + `"`
