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
	if len(pub) != ed25519.PublicKeySize {
		r.problem(0, "public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	prev := ZeroHash
	terminated := false
	var machine Machine
	machineOK := true // after the first impossible step, the rest is not read
	msg := make([]byte, 0, 4096)
	for n := 1; len(data) > 0; n++ {
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
		e, err := checkLine(line, pub, &msg)
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

// Open checks an envelope line (ending in "\n", at most MaxRecordBytes) made by Seal: its
// shape, then the signature over context and the exact payload bytes, and returns the
// payload — nothing of which has been read before the signature verified. msg is scratch
// space for the signed message.
func Open(line []byte, pub ed25519.PublicKey, context string, msg *[]byte) ([]byte, error) {
	p, sigText, err := splitLine(line)
	if err != nil {
		return nil, err
	}
	if err := checkSignature(p, sigText, pub, context, msg); err != nil {
		return nil, err
	}
	return p, nil
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

// checkSignature verifies S over the signature context and the exact payload bytes.
func checkSignature(p, sigText []byte, pub ed25519.PublicKey, context string, msg *[]byte) error {
	sig, err := decodeSig(sigText)
	if err != nil {
		return err
	}
	if len(pub) != ed25519.PublicKeySize {
		return errors.New("signature not checked: bad public key")
	}
	*msg = append(append((*msg)[:0], context...), p...)
	if !ed25519.Verify(pub, *msg, sig) {
		return errors.New("signature does not verify with the public key")
	}
	return nil
}

// PayloadMembers reads an authentic payload P as the format requires of every signed log
// sharing the envelope: strict UTF-8 JSON (an object; no float, no member name twice,
// nothing after it) with exactly the members names, returned raw.
func PayloadMembers(p []byte, names []string) (map[string]json.RawMessage, error) {
	if len(p) == 0 || p[0] != '{' || !utf8.Valid(p) || !json.Valid(p) {
		return nil, errors.New("payload is not a UTF-8 JSON object")
	}
	if err := strictjson.Check(p, strictjson.Options{IntegersOnly: true, Single: true}); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	for k := range m {
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
		raw := m[k]
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, dst) != nil {
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
	var d map[string]json.RawMessage
	if err := json.Unmarshal(data, &d); err != nil {
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
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
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
	if t, err := time.Parse(time.RFC3339Nano, e.time); err != nil || !strings.HasSuffix(e.time, "Z") || t.IsZero() {
		r.problem(n, "time %q is not an RFC 3339 UTC time", e.time)
	}
	if seq == 0 {
		r.RunID, r.AgentID = e.runID, e.agentID
		if e.typ != TypeStarted {
			r.problem(n, "first record is %q, want started", e.typ)
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

// VerifyDir verifies every *.jsonl file directly in dir with the same key, using one worker
// per CPU. Reports are sorted by path. Only a failure to list dir is an error.
func VerifyDir(dir string, pub ed25519.PublicKey) ([]*Report, error) {
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
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(len(paths), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				reports[i] = Verify(paths[i], pub, VerifyOptions{})
			}
		}()
	}
	for i := range paths {
		jobs <- i
	}
	close(jobs)
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
