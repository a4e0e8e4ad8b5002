package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"symbi/internal/digest"
	"symbi/internal/journal"
)

// Problem is one reason a ledger is invalid. Line is 1-based; 0 means the whole file.
type Problem struct {
	Line    int    `json:"line"`
	Message string `json:"message"`
}

// Line is one verified ledger line.
type Line struct {
	Seq  int64
	Type string
	Data json.RawMessage
	Time time.Time
	Hash string // lowercase hex SHA-256 of the line including "\n"
	Leaf []byte // the line without its "\n": the Merkle tree leaf
}

// Report is what Verify found: the lines that verified, in order, up to the first
// problem, and every problem.
type Report struct {
	Entries   []Line
	TailBytes int // bytes after the last "\n": a torn line, never trusted
	Problems  []Problem
}

// members are the payload members, the only ones version 1 allows.
var members = []string{"v", "seq", "prev", "time", "type", "data"}

// RunID is the run a run, recovered or pruned entry is about ("" for other types).
func (l Line) RunID() string {
	switch l.Type {
	case TypeRun, TypeRecovered, TypePruned:
		var d struct {
			RunID string `json:"run_id"`
		}
		if json.Unmarshal(l.Data, &d) == nil {
			return d.RunID
		}
	}
	return ""
}

// Verify checks ledger bytes with the project's public key: each line's signature over
// the exact payload before anything of it is read, then the payload's strict form, seq,
// the chain of prev hashes and the time. Entries holds the lines up to the first problem.
// The signatures are checked together (journal.OpenAll); the outcome is the Reader's,
// line by line.
func Verify(data []byte, pub ed25519.PublicKey) *Report {
	r := &Report{Problems: []Problem{}}
	lines, rest := SplitLines(data)
	entries, err := NewReader(pub).NextAll(lines)
	if len(entries) > 0 {
		r.Entries = entries
	}
	if err != nil {
		r.Problems = append(r.Problems, Problem{Line: len(entries) + 1, Message: err.Error()})
		return r // a broken chain: what follows cannot be placed
	}
	r.TailBytes = len(rest)
	return r
}

// Reader verifies a ledger line by line, as Verify does, for a reader that follows the
// file as it grows: each line must continue the chain of those before it.
type Reader struct {
	pub  ed25519.PublicKey
	seq  int64
	prev string
	msg  []byte
}

// NewReader returns a Reader expecting the ledger's first line.
func NewReader(pub ed25519.PublicKey) *Reader { return &Reader{pub: pub, prev: ZeroHash} }

// Next verifies raw, one whole line including its "\n", as the next line. After an error
// the Reader is unchanged: the line cannot be placed in the chain.
func (r *Reader) Next(raw []byte) (*Line, error) {
	l, err := checkLine(raw, r.pub, &r.msg, r.seq, r.prev)
	if err != nil {
		return nil, err
	}
	r.seq++
	r.prev = l.Hash
	return l, nil
}

// NextAll verifies lines (each a whole line including its "\n") as the next lines, their
// signatures checked together in batches (journal.OpenAll), and returns those that
// verified, in order, up to the first that does not, with its error. The Reader then
// expects the line after the last one returned.
func (r *Reader) NextAll(lines [][]byte) ([]Line, error) {
	payloads, errs := journal.OpenAll(lines, r.pub, Context)
	out := make([]Line, 0, len(lines))
	for n, raw := range lines {
		err := errs[n]
		var l *Line
		if err == nil {
			l, err = checkPayload(raw, payloads[n], r.seq, r.prev)
		}
		if err != nil {
			return out, err
		}
		out = append(out, *l)
		r.seq++
		r.prev = l.Hash
	}
	return out, nil
}

// SplitLines returns the whole lines of data, each with its "\n", and the bytes after the
// last one (a line still being written, or torn).
func SplitLines(data []byte) (lines [][]byte, rest []byte) {
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return lines, data
		}
		lines = append(lines, data[:i+1])
		data = data[i+1:]
	}
}

// checkLine checks raw, one whole line, as the line seq whose previous line's hash is
// prev: its signature, then its payload.
func checkLine(raw []byte, pub ed25519.PublicKey, msg *[]byte, seq int64, prev string) (*Line, error) {
	p, err := journal.Open(raw, pub, Context, msg)
	if err != nil {
		return nil, err
	}
	return checkPayload(raw, p, seq, prev)
}

// checkPayload reads p, the authentic payload of the line raw, as the line seq after the
// line whose hash is prev.
func checkPayload(raw, p []byte, seq int64, prev string) (*Line, error) {
	m, err := journal.PayloadMembers(p, members)
	if err != nil {
		return nil, err
	}
	var pv, pprev, ptime, ptype string
	for k, dst := range map[string]*string{"prev": &pprev, "time": &ptime, "type": &ptype} {
		if raw := m[k]; len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, dst) != nil {
			return nil, fmt.Errorf("payload member %q is not a string", k)
		}
	}
	pv = string(m["v"])
	switch {
	case pv != "1":
		return nil, fmt.Errorf("unknown version v=%s (this verifier knows v=1)", pv)
	case string(m["seq"]) != fmt.Sprint(seq):
		return nil, fmt.Errorf("seq is %s, want %d", m["seq"], seq)
	case pprev != prev:
		return nil, fmt.Errorf("prev is %s, want %s (the hash of the previous line): the chain is broken", pprev, prev)
	case ptype == "":
		return nil, errors.New("empty type")
	case len(m["data"]) == 0 || m["data"][0] != '{':
		return nil, errors.New(`payload member "data" is not an object`)
	}
	t, err := journal.ParseTime(ptime)
	if err != nil {
		return nil, err
	}
	return &Line{Seq: seq, Type: ptype, Data: m["data"], Time: t, Hash: digest.SHA256Hex(raw), Leaf: raw[:len(raw)-1]}, nil
}
