package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"symbi/internal/digest"
	"symbi/internal/journal"
	"symbi/internal/strictjson"
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

	runID    string // the run a run, recovered or pruned entry is about
	resolves string // the run a resolution entry is about
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
func (l Line) RunID() string { return l.runID }

// entryTypes are the entry types this verifier reads, each with its data's form.
var entryTypes = map[string]reflect.Type{
	TypeRun:        reflect.TypeFor[Run](),
	TypeResolution: reflect.TypeFor[Resolution](),
	TypeApproval:   reflect.TypeFor[Approval](),
	TypeRecovered:  reflect.TypeFor[Recovered](),
	TypePruned:     reflect.TypeFor[Pruned](),
}

// entryNames are the member names of each entry type's data, spelled exactly.
var entryNames = func() map[string][]string {
	m := map[string][]string{}
	for typ, t := range entryTypes {
		m[typ] = strictjson.NamesOf(t)
	}
	return m
}()

// checkData reads the data of an entry of a type this verifier knows, as every reader of
// the format would: a member whose name is one of the type's only by case ("RUN_ID") is
// refused — encoding/json would take it for run_id, a reader going by the document would
// not — as is a member of the wrong type; run_id must be given. It returns the run_id.
// Data of another type is not read (a later version's entries: not this verifier's).
func checkData(typ string, data []byte) (string, error) {
	t, ok := entryTypes[typ]
	if !ok {
		return "", nil
	}
	if err := strictjson.Check(data, strictjson.Options{ExactNames: entryNames[typ]}); err != nil {
		return "", fmt.Errorf("%s entry: %w", typ, err)
	}
	// encoding/json takes null for any member, leaving its zero value: a member is its
	// declared type or absent, never null.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return "", fmt.Errorf("%s entry: %w", typ, err)
	}
	for _, name := range entryNames[typ] {
		if string(members[name]) == "null" {
			return "", fmt.Errorf("%s entry: member %q is null, want %s", typ, name, jsonKind(fieldOf(t, name)))
		}
	}
	v := reflect.New(t)
	if err := json.Unmarshal(data, v.Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return "", fmt.Errorf("%s entry: member %q is a JSON %s, want %s", typ, te.Field, te.Value, jsonKind(te.Type))
		}
		return "", fmt.Errorf("%s entry: %w", typ, err)
	}
	id := v.Elem().FieldByName("RunID").String()
	if id == "" {
		return "", fmt.Errorf("%s entry without a run_id", typ)
	}
	return id, nil
}

// fieldOf returns the type of the field of struct t whose json name is name.
func fieldOf(t reflect.Type, name string) reflect.Type {
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); n == name {
			return t.Field(i).Type
		}
	}
	return reflect.TypeFor[string]()
}

// jsonKind names the JSON value a Go type of an entry's field takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int64, reflect.Int:
		return "an integer"
	}
	return t.String()
}

// Verify checks ledger bytes with the project's public key: each line's signature over
// the exact payload before anything of it is read, then the payload's strict form, seq,
// the chain of prev hashes and the time. Entries holds the lines up to the first problem.
// The signatures are checked together (journal.OpenAll); the outcome is the Reader's,
// line by line.
func Verify(data []byte, pub ed25519.PublicKey) *Report { return verifyWith(NewReader(pub), data) }

// verifyWith is Verify with the Reader rd, which then expects the line after the last
// entry.
func verifyWith(rd *Reader, data []byte) *Report {
	r := &Report{Problems: []Problem{}}
	rest, err := rd.NextIn(data, func(l []Line) { r.Entries = append(r.Entries, l...) })
	if err != nil {
		r.Problems = append(r.Problems, Problem{Line: len(r.Entries) + 1, Message: err.Error()})
		return r // a broken chain: what follows cannot be placed
	}
	r.TailBytes = len(rest)
	return r
}

// chunkLines is how many lines NextIn verifies together: one batch of signatures.
const chunkLines = 4096

// NextIn verifies the whole lines of data as the next lines, chunkLines at a time, giving
// each chunk's lines to take in order, up to the first line that does not verify (its
// error returned) or the bytes after the last "\n", which it returns. What it holds at
// once is one chunk's bookkeeping, whatever data is: a file of a billion empty lines
// costs what one of a few thousand does.
func (r *Reader) NextIn(data []byte, take func([]Line)) (rest []byte, err error) {
	chunk := make([][]byte, 0, chunkLines)
	for {
		chunk = chunk[:0]
		for len(chunk) < chunkLines {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			chunk = append(chunk, data[:i+1])
			data = data[i+1:]
		}
		if len(chunk) == 0 {
			return data, nil
		}
		lines, err := r.NextAll(chunk)
		if len(lines) > 0 {
			take(lines)
		}
		if err != nil {
			return data, err
		}
	}
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
	if len(ptime) != len(timeLayout) {
		return nil, fmt.Errorf("time %q: want milliseconds (YYYY-MM-DDTHH:MM:SS.mmmZ)", ptime)
	}
	id, err := checkData(ptype, m["data"])
	if err != nil {
		return nil, err
	}
	l := &Line{Seq: seq, Type: ptype, Data: m["data"], Time: t, Hash: digest.SHA256Hex(raw), Leaf: raw[:len(raw)-1]}
	switch ptype {
	case TypeRun, TypeRecovered, TypePruned:
		l.runID = id
	case TypeResolution:
		l.resolves = id
	}
	return l, nil
}
