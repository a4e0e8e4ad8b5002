package journal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"symbi/internal/strictjson"
)

// VerifyOptions are the caller's expectations. Zero values expect nothing.
type VerifyOptions struct {
	RunID   string // the run id every line must carry
	Head    string // receipt: hex SHA-256 of the last line
	Records int    // receipt: number of lines
}

// Verification outcomes.
const (
	StatusComplete   = "complete"   // exit code 0
	StatusIncomplete = "incomplete" // exit code 2
	StatusInvalid    = "invalid"    // exit code 1
)

// Problem is one reason a journal is invalid. Line is 1-based; 0 means the whole file.
type Problem struct {
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// Report is the outcome of Verify.
type Report struct {
	Path           string    `json:"path"`
	Status         string    `json:"status"`
	Complete       bool      `json:"complete"`
	Records        int       `json:"records"`    // complete lines
	Head           string    `json:"head"`       // hex SHA-256 of the last complete line ("" when none)
	TailBytes      int       `json:"tail_bytes"` // bytes after the last "\n": an unverified tail
	RunID          string    `json:"run_id,omitempty"`
	AgentID        string    `json:"agent_id,omitempty"`
	Caller         string    `json:"caller,omitempty"`      // the started record's caller, once its line verified
	CallerAuth     string    `json:"caller_auth,omitempty"` // and how it was authenticated
	TerminalReason string    `json:"terminal_reason,omitempty"`
	Released       bool      `json:"released"`
	Problems       []Problem `json:"problems"`
}

// ExitCode maps the status to symbi audit verify's exit code: 0 complete, 2 incomplete,
// 1 invalid.
func (r *Report) ExitCode() int {
	switch r.Status {
	case StatusComplete:
		return 0
	case StatusIncomplete:
		return 2
	}
	return 1
}

// maxProblems bounds the problems one report lists.
const maxProblems = 100

func (r *Report) problem(line int, format string, args ...any) {
	if len(r.Problems) == maxProblems {
		r.Problems = append(r.Problems, Problem{Line: line, Message: "too many problems; stopped listing"})
	}
	if len(r.Problems) > maxProblems {
		return
	}
	r.Problems = append(r.Problems, Problem{Line: line, Message: fmt.Sprintf(format, args...)})
}

// Verify checks the journal at path against pub and opts, as described in the package
// comment. It never re-serializes a payload and never trusts a torn tail.
func Verify(path string, pub ed25519.PublicKey, opts VerifyOptions) *Report {
	r := &Report{Path: path, Problems: []Problem{}}
	data, err := readJournal(path)
	if err != nil {
		r.problem(0, "%v", err)
		r.Status = StatusInvalid
		return r
	}
	verifyData(r, data, pub, opts)
	checkName(r, filepath.Base(path))
	return r
}

// invalidate records a problem found after the line-by-line checks: the report becomes
// invalid whatever the lines said.
func (r *Report) invalidate(format string, args ...any) {
	r.problem(0, format, args...)
	r.Status, r.Complete = StatusInvalid, false
}

// FileName is the name the writer gives a run's journal.
func FileName(agentID, runID string) string { return agentID + "." + runID + ".jsonl" }

// checkName ties a journal file to its run: a name of the writer's form
// <agent_id>.<run_id>.jsonl must name the agent and run of its own records, so a run's
// file cannot be overwritten with another run's journal unnoticed. Other names (a copy
// an auditor renamed) are not checked.
func checkName(r *Report, base string) {
	ids, ok := strings.CutSuffix(base, ".jsonl")
	agent, run, two := strings.Cut(ids, ".")
	if !ok || !two || !ValidID(agent) || !ValidID(run) || r.RunID == "" {
		return
	}
	if agent != r.AgentID || run != r.RunID {
		r.invalidate("the file name %s names agent %s and run %s, but its records are of agent %s and run %s: a journal must keep the name its writer gave it",
			base, agent, run, r.AgentID, r.RunID)
	}
}

// readJournal reads a regular file of at most MaxFileBytes without following a symlink.
func readJournal(path string) ([]byte, error) { return ReadLog(path, MaxFileBytes) }

// ReadLog reads a signed log file (a journal, the ledger) of at most limit bytes: a regular
// file, opened without following a symlink and without blocking on a FIFO.
func ReadLog(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symlink; signed logs are opened without following symlinks", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	return ReadLogFile(f, limit)
}

// ReadLogFile reads the open signed log f as ReadLog does: a regular file of at most
// limit bytes.
func ReadLogFile(f *os.File, limit int64) ([]byte, error) {
	path := f.Name()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d-byte limit", path, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s grew past the %d-byte limit", path, limit)
	}
	return data, nil
}

// verifyData fills r from the journal bytes.
func verifyData(r *Report, data []byte, pub ed25519.PublicKey, opts VerifyOptions) {
	verifyDataWith(r, data, pub, opts, checkBatched)
}

// verifyDataWith is verifyData with the signatures checked by check: every line's
// envelope is opened first, the signatures all checked together, and only then is each
// line read, in order, as verifyLines describes.
func verifyDataWith(r *Report, data []byte, pub ed25519.PublicKey, opts VerifyOptions, check sigCheck) {
	env := newEnvelopes(pub, SignatureContext, check)
	env.failLimit = maxProblems + 1
	first, added := env.addLines(data)
	env.check()
	verifyLines(r, data, env, first, added, opts)
}

// verifyLines fills r from the journal bytes whose complete lines were added to env from
// its line first on (added of them) and their signatures checked: line by line, the
// envelope's outcome (shape, signature), then the payload, the chain and the run's state
// machine. Once the report lists no more problems (it is invalid), the rest of the lines
// are counted, not read.
func verifyLines(r *Report, data []byte, env *envelopes, first, added int, opts VerifyOptions) {
	if len(env.pub) != ed25519.PublicKeySize {
		r.problem(0, "public key is %d bytes, want %d", len(env.pub), ed25519.PublicKeySize)
	}
	prev := ZeroHash
	terminated := false
	var machine Machine
	machineOK := true // after the first impossible step, the rest is not read
	for n := 1; len(data) > 0; n++ {
		if len(r.Problems) > maxProblems || n > added {
			countRest(r, data)
			break
		}
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			r.TailBytes = len(data)
			break
		}
		line := data[:i+1]
		data = data[i+1:]
		seq := n - 1
		r.Records = n
		if terminated {
			r.problem(n, "line after the terminated record")
		}
		e, err := readLine(env, first+seq)
		if err != nil {
			r.problem(n, "%v", err)
		} else {
			checkEnvelope(r, n, seq, e, prev, opts)
			if machineOK && !terminated {
				if err := machine.Next(e.step); err != nil {
					machineOK = false
					if seq > 0 { // line 1 not being started is already reported
						r.problem(n, "%v", err)
					}
				}
			}
			if e.typ == TypeTerminated {
				terminated = true
				r.TerminalReason, r.Released = e.step.Reason, e.step.Released
			}
		}
		prev = lineHash(line)
		r.Head = prev
	}
	if opts.Head != "" || opts.Records != 0 {
		if r.Records != opts.Records || r.Head != opts.Head {
			r.problem(0, "receipt does not match: journal has %d records with head %s, receipt says %d records with head %s", r.Records, r.Head, opts.Records, opts.Head)
		}
	}
	switch {
	case len(r.Problems) > 0:
		r.Status = StatusInvalid
	case terminated && r.TailBytes == 0:
		r.Status, r.Complete = StatusComplete, true
	default:
		r.Status = StatusIncomplete
	}
}

// ParseTime reads a signed log's time: RFC 3339 in UTC, exactly
// YYYY-MM-DDTHH:MM:SS, then optionally "." and 1 to 9 digits, then "Z" — the form a
// verifier written from the format's document accepts. time.Parse alone also accepts a
// one-digit hour or a "," before the fraction.
func ParseTime(s string) (time.Time, error) {
	bad := fmt.Errorf("time %q is not an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SS[.fraction]Z)", s)
	const fixed = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(fixed)+1 || s[len(s)-1] != 'Z' {
		return time.Time{}, bad
	}
	for i := range len(fixed) {
		if c := s[i]; fixed[i] == 'd' && (c < '0' || c > '9') || fixed[i] != 'd' && c != fixed[i] {
			return time.Time{}, bad
		}
	}
	if frac := s[len(fixed) : len(s)-1]; frac != "" {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' || strings.Trim(frac[1:], "0123456789") != "" {
			return time.Time{}, bad
		}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.IsZero() {
		return time.Time{}, bad
	}
	return t, nil
}

// countRest counts into r the lines of data, the rest of a journal that is not read: its
// records, its torn tail and the hash of its last complete line.
func countRest(r *Report, data []byte) {
	end := bytes.LastIndexByte(data, '\n') + 1
	r.Records += bytes.Count(data[:end], []byte{'\n'})
	r.TailBytes = len(data) - end
	if end > 0 {
		r.Head = lineHash(data[bytes.LastIndexByte(data[:end-1], '\n')+1 : end])
	}
}

// entry is the checked content of one line.
type entry struct {
	payload []byte
	seq     []byte
	v       []byte
	runID   string
	prev    string
	time    string
	agentID string
	typ     string
	data    json.RawMessage
	step    Step // what the run's state machine reads of it
}

// envelopeMembers are the members P must have, and the only ones version 1 allows.
var envelopeMembers = []string{"v", "run_id", "seq", "prev", "time", "agent_id", "type", "data"}

// checkLine checks one line (ending in "\n"): its shape, then its signature over the
// exact payload bytes, and only then what the payload says. msg is scratch space for the
// signed message.
func checkLine(line []byte, pub ed25519.PublicKey, msg *[]byte) (*entry, error) {
	p, err := Open(line, pub, SignatureContext, msg)
	if err != nil {
		return nil, err
	}
	return decodePayload(p)
}

// readLine is checkLine for line i of env, whose signatures were checked: the payload
// is read only when the line's envelope opened.
func readLine(env *envelopes, i int) (*entry, error) {
	p, err := env.open(i)
	if err != nil {
		return nil, err
	}
	return decodePayload(p)
}

// Open checks an envelope line (ending in "\n", at most MaxRecordBytes) made by Seal: its
// shape, then the signature over context and the exact payload bytes, and returns the
// payload — nothing of which has been read before the signature verified. msg is scratch
// space for the signed message. OpenAll opens many lines with their signatures checked
// together.
func Open(line []byte, pub ed25519.PublicKey, context string, msg *[]byte) ([]byte, error) {
	p, sig, err := unseal(line, pub)
	if err != nil {
		return nil, err
	}
	*msg = append(append((*msg)[:0], context...), p...)
	if !ed25519.Verify(pub, *msg, sig) {
		return nil, errSignature
	}
	return p, nil
}

// errSignature is a signature that does not verify.
var errSignature = errors.New("signature does not verify with the public key")

// unseal checks what Open checks before the signature: the line's shape, the
// signature's encoding and the key's size; it returns P and the decoded signature.
func unseal(line []byte, pub ed25519.PublicKey) (p, sig []byte, err error) {
	p, sigText, err := splitLine(line)
	if err != nil {
		return nil, nil, err
	}
	if sig, err = decodeSig(sigText); err != nil {
		return nil, nil, err
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, nil, errors.New("signature not checked: bad public key")
	}
	return p, sig, nil
}

// splitLine checks the line's shape, {"payload":P,"signature":"S"}, and returns P and S.
func splitLine(line []byte) (payload, sigText []byte, err error) {
	if len(line) > MaxRecordBytes {
		return nil, nil, fmt.Errorf("line is %d bytes, more than the %d-byte record limit", len(line), MaxRecordBytes)
	}
	minLen := len(linePrefix) + 2 + len(sigPrefix) + sigB64Len + len(lineSuffix)
	if len(line) < minLen || !bytes.HasPrefix(line, []byte(linePrefix)) || !bytes.HasSuffix(line, []byte(lineSuffix)) {
		return nil, nil, errors.New(`line is not {"payload":<object>,"signature":"<base64>"}`)
	}
	end := len(line) - len(lineSuffix)
	if !bytes.Equal(line[end-sigB64Len-len(sigPrefix):end-sigB64Len], []byte(sigPrefix)) {
		return nil, nil, errors.New(`line is not {"payload":<object>,"signature":"<88 base64 characters>"}`)
	}
	return line[len(linePrefix) : end-sigB64Len-len(sigPrefix)], line[end-sigB64Len : end], nil
}

// PayloadMembers reads an authentic payload P as the format requires of every signed log
// sharing the envelope: strict UTF-8 JSON (an object; no float, no member name twice,
// no lone surrogate escape, nothing after it) with exactly the members names, returned raw. Of several unknown
// members, the first in P is named.
func PayloadMembers(p []byte, names []string) (map[string]json.RawMessage, error) {
	// Check validates too: it refuses whatever json.Valid refuses, with the first problem in
	// document order (ErrSyntax, or a strict rule broken before the syntax error).
	err := strictjson.Check(p, strictjson.Options{IntegersOnly: true, Single: true, NoLoneSurrogates: true})
	if len(p) == 0 || p[0] != '{' || !utf8.Valid(p) || errors.Is(err, strictjson.ErrSyntax) {
		return nil, errors.New("payload is not a UTF-8 JSON object")
	}
	if p[len(p)-1] != '}' {
		// No whitespace after P, as none before it: the line's shape is exact.
		return nil, errors.New("payload is followed by white space inside the envelope")
	}
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	m, order, err := objectMembers(bytes.Clone(p)) // the values are the caller's to keep
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	for _, k := range order {
		if !contains(names, k) {
			return nil, fmt.Errorf("payload has unknown member %q", k)
		}
	}
	for _, k := range names {
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("payload lacks member %q", k)
		}
	}
	return m, nil
}

// decodePayload reads an authentic payload, rejecting what the format forbids: anything
// but strict UTF-8 JSON, members other than exactly the envelope's, members of the wrong
// type, and data the state machine cannot read.
func decodePayload(p []byte) (*entry, error) {
	m, err := PayloadMembers(p, envelopeMembers)
	if err != nil {
		return nil, err
	}
	e := &entry{payload: p, seq: m["seq"], v: m["v"], data: m["data"]}
	for k, dst := range map[string]*string{"run_id": &e.runID, "prev": &e.prev, "time": &e.time, "agent_id": &e.agentID, "type": &e.typ} {
		if !jsonString(m[k], dst) {
			return nil, fmt.Errorf("payload member %q is not a string", k)
		}
	}
	if len(e.data) == 0 || e.data[0] != '{' {
		return nil, errors.New(`payload member "data" is not an object`)
	}
	step, err := decodeStep(e.typ, e.data)
	if err != nil {
		return nil, err
	}
	e.step = step
	return e, nil
}

// stepMembers are the data members the state machine reads, per record type, each a
// string except terminated's released, a boolean.
var stepMembers = map[string][]string{
	TypeInferenceRequested: {"call_id"},
	TypeInferenceFinished:  {"call_id", "outcome", "text_sha256"},
	TypePolicyEvaluated:    {"decision", "text_sha256"},
	TypeTerminated:         {"reason", "released"},
	TypeSessionFinished:    {"outcome", "text_sha256"},
	TypePermissionDecided:  {"request_id", "decision"},
	TypeFSRead:             {"request_id"},
	TypeFSWrite:            {"request_id"},
	TypeApprovalRequested:  {"gate", "request_id", "text_sha256"},
	TypeApprovalDecided:    {"request_id", "decision"},
	TypePolicyReevaluated:  {"decision", "text_sha256", "gate"},
}

// decodeStep reads what the state machine needs of a record's data. The members must be
// there with their exact names (struct decoding would fold case: "Released" must not
// stand in for "released") and types.
func decodeStep(typ string, data json.RawMessage) (Step, error) {
	s := Step{Type: typ}
	names, ok := stepMembers[typ]
	if !ok {
		return s, nil
	}
	d, _, err := objectMembers(data)
	if err != nil {
		return s, fmt.Errorf("%s data: %w", typ, err)
	}
	for _, name := range names {
		raw := d[name]
		if name == "released" {
			if string(raw) != "true" && string(raw) != "false" {
				return s, fmt.Errorf("%s record lacks a boolean %s", typ, name)
			}
			s.Released = string(raw) == "true"
			continue
		}
		var v string
		if !jsonString(raw, &v) {
			return s, fmt.Errorf("%s record lacks a string %s", typ, name)
		}
		switch name {
		case "call_id":
			s.CallID = v
		case "outcome":
			s.Outcome = v
		case "text_sha256":
			s.TextSHA256 = v
		case "decision":
			s.Decision = v
		case "reason":
			s.Reason = v
		case "request_id":
			s.RequestID = v
		case "gate":
			s.Gate = v
		}
	}
	return s, nil
}

// objectMembers returns the members of obj, a JSON object in a payload that passed
// PayloadMembers' checks (valid UTF-8 JSON, no member name twice), as json.Unmarshal into
// a map[string]json.RawMessage returns them — names unescaped, each value's exact bytes —
// and the names in document order. It splits the text once, where json.Unmarshal would
// check it again and copy every value.
func objectMembers(obj []byte) (map[string]json.RawMessage, []string, error) {
	i := skipSpace(obj, 0)
	if i == len(obj) || obj[i] != '{' {
		return nil, nil, errors.New("not a JSON object")
	}
	m := map[string]json.RawMessage{}
	var order []string
	if i = skipSpace(obj, i+1); i < len(obj) && obj[i] == '}' {
		return m, order, nil
	}
	for i < len(obj) && obj[i] == '"' {
		end := skipString(obj, i)
		var name string
		if !jsonString(obj[i:end], &name) {
			break
		}
		i = skipSpace(obj, end)
		if i == len(obj) || obj[i] != ':' {
			break
		}
		i = skipSpace(obj, i+1)
		end = skipValue(obj, i)
		m[name] = obj[i:end:end]
		order = append(order, name)
		switch i = skipSpace(obj, end); {
		case i < len(obj) && obj[i] == ',':
			i = skipSpace(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return m, order, nil
		default:
			return nil, nil, errors.New("not a JSON object")
		}
	}
	return nil, nil, errors.New("not a JSON object")
}

// skipSpace returns the index of the first byte of text at or after i that is not JSON
// white space.
func skipSpace(text []byte, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the JSON string starting at text[i] ('"').
func skipString(text []byte, i int) int {
	for i++; i < len(text); i++ {
		switch text[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(text)
}

// skipValue returns the index after the valid JSON value starting at text[i].
func skipValue(text []byte, i int) int {
	if i == len(text) {
		return i
	}
	switch text[i] {
	case '"':
		return skipString(text, i)
	case '{', '[':
		depth := 0
		for i < len(text) {
			switch text[i] {
			case '"':
				i = skipString(text, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(text) { // a number, true, false or null
		switch text[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// jsonString decodes raw, a JSON value of a payload that passed PayloadMembers (valid
// UTF-8 JSON), into dst when it is a string. A string without escapes is its bytes
// between the quotes, as json.Unmarshal would decode it; others go to json.Unmarshal.
func jsonString(raw []byte, dst *string) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		*dst = string(raw[1 : len(raw)-1])
		return true
	}
	return json.Unmarshal(raw, dst) == nil
}

// decodeSig decodes a canonical padded base64 signature of 64 bytes.
func decodeSig(text []byte) ([]byte, error) {
	sig := make([]byte, ed25519.SignatureSize+2)
	n, err := base64.StdEncoding.Strict().Decode(sig, text)
	if err != nil || n != ed25519.SignatureSize {
		return nil, errors.New("signature is not canonical padded base64 of 64 bytes")
	}
	return sig[:n], nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkEnvelope checks the members of line n against the run so far.
func checkEnvelope(r *Report, n, seq int, e *entry, prev string, opts VerifyOptions) {
	if string(e.v) != "1" {
		r.problem(n, "unknown version v=%s (this verifier knows v=1)", e.v)
		return
	}
	if string(e.seq) != fmt.Sprint(seq) {
		r.problem(n, "seq is %s, want %d", e.seq, seq)
	}
	if e.prev != prev {
		r.problem(n, "prev is %s, want %s (the hash of the previous line): the chain is broken", e.prev, prev)
	}
	if _, err := ParseTime(e.time); err != nil {
		r.problem(n, "%v", err)
	}
	if seq == 0 {
		r.RunID, r.AgentID = e.runID, e.agentID
		if e.typ != TypeStarted {
			r.problem(n, "first record is %q, want started", e.typ)
		} else {
			r.Caller, r.CallerAuth = startedCaller(e.data)
		}
	} else {
		if e.runID != r.RunID {
			r.problem(n, "run_id %q differs from the first line's %q", e.runID, r.RunID)
		}
		if e.agentID != r.AgentID {
			r.problem(n, "agent_id %q differs from the first line's %q", e.agentID, r.AgentID)
		}
		if e.typ == TypeStarted {
			r.problem(n, "a second started record")
		}
	}
	if opts.RunID != "" && e.runID != opts.RunID {
		r.problem(n, "run_id %q is not the expected %q", e.runID, opts.RunID)
	}
}

// startedCaller reads the optional caller and caller_auth strings of a started record's
// data, by their exact names ("" when absent or not strings).
func startedCaller(data json.RawMessage) (caller, auth string) {
	d, _, err := objectMembers(data)
	if err != nil {
		return "", ""
	}
	jsonString(d["caller"], &caller)
	jsonString(d["caller_auth"], &auth)
	return caller, auth
}

// VerifyDir verifies every *.jsonl file directly in dir with the same key, using one worker
// per CPU. Reports are sorted by path. Only a failure to list dir is an error.
func VerifyDir(dir string, pub ed25519.PublicKey) ([]*Report, error) {
	return verifyDir(dir, pub, checkBatched)
}

// dirBatchMin is the fewest lines VerifyDir checks together while files are left: each
// batch has a fixed cost (torsionTests scalar multiplications, ≈ 2.5 ms), which a batch
// this large spreads to a few µs a line.
const dirBatchMin = 512

// verifyDir is VerifyDir with the signatures checked by check. Each worker takes the next
// files in order — a workers-th of the files left, so batches are large while much is
// left and small at the end, when the workers' shares should come out even, but at least
// dirBatchMin lines, and at most batchMax lines or, past MaxFileBytes, no further file —
// checks their signatures together, then verifies each file line by line; a report goes
// to its file's place.
func verifyDir(dir string, pub ed25519.PublicKey, check sigCheck) ([]*Report, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".jsonl") {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(paths)
	reports := make([]*Report, len(paths))
	var next atomic.Int64
	type file struct {
		r     *Report
		data  []byte
		first int
		added int
	}
	workers := min(runtime.GOMAXPROCS(0), max(len(paths), 1))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				env := newEnvelopes(pub, SignatureContext, check)
				env.failLimit = maxProblems + 1
				var files []file
				share := (len(paths) - int(next.Load())) / workers
				size := 0
				for taken := 0; (taken < share || len(env.lines) < dirBatchMin) && len(env.lines) < batchMax && size < MaxFileBytes; taken++ {
					i := int(next.Add(1)) - 1
					if i >= len(paths) {
						break
					}
					r := &Report{Path: paths[i], Problems: []Problem{}}
					reports[i] = r
					data, err := readJournal(paths[i])
					if err != nil {
						r.problem(0, "%v", err)
						r.Status = StatusInvalid
						continue
					}
					f := file{r: r, data: data}
					f.first, f.added = env.addLines(data)
					files = append(files, f)
					size += len(data)
				}
				if len(files) == 0 && int(next.Load()) >= len(paths) {
					return
				}
				env.check()
				for _, f := range files {
					verifyLines(f.r, f.data, env, f.first, f.added, VerifyOptions{})
					checkName(f.r, filepath.Base(f.r.Path))
				}
			}
		})
	}
	wg.Wait()
	// Each run has exactly one journal: two files of one run mean one is a copy, perhaps
	// put where another run's journal was.
	files := map[string][]string{}
	for _, r := range reports {
		if r.RunID != "" {
			files[r.RunID] = append(files[r.RunID], filepath.Base(r.Path))
		}
	}
	for _, r := range reports {
		if fs := files[r.RunID]; len(fs) > 1 {
			var others []string
			for _, f := range fs {
				if f != filepath.Base(r.Path) {
					others = append(others, f)
				}
			}
			r.invalidate("run %s is also recorded in %s: each run has exactly one journal", r.RunID, strings.Join(others, ", "))
		}
	}
	return reports, nil
}
