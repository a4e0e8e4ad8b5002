package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Entry is one line of a journal as read for display. It is not verified: use Verify to
// decide whether to trust it.
type Entry struct {
	Line    int             `json:"line"`              // 1-based line number
	Seq     string          `json:"seq"`               // the seq member as written
	Time    string          `json:"time"`              // the time member
	Type    string          `json:"type"`              // the type member
	Data    json.RawMessage `json:"data,omitempty"`    // the data member
	Problem string          `json:"problem,omitempty"` // why the line could not be read ("" when it could)
}

// ReadEntries reads the lines of the journal at path (without following a symlink) for
// display, and returns them with the byte count of a torn tail.
func ReadEntries(path string) ([]Entry, int, error) {
	var out []Entry
	tail, err := EachEntry(path, func(e Entry) error { out = append(out, e); return nil })
	if err != nil {
		return nil, 0, err
	}
	return out, tail, nil
}

// EachEntry reads the journal at path (without following a symlink) as ReadEntries does,
// and calls fn with each line's Entry in turn, holding none of them: what it costs beyond
// the file's bytes is one line's. It stops at fn's first error, and returns the byte count
// of a torn tail.
func EachEntry(path string, fn func(Entry) error) (int, error) {
	data, err := readJournal(path)
	if err != nil {
		return 0, err
	}
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return len(data), nil
		}
		line := data[:i]
		data = data[i+1:]
		e := Entry{Line: n}
		var l struct {
			Payload struct {
				Seq  json.RawMessage `json:"seq"`
				Time string          `json:"time"`
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			e.Problem = "unreadable line: " + err.Error()
		} else {
			e.Seq, e.Time, e.Type, e.Data = string(l.Payload.Seq), l.Payload.Time, l.Payload.Type, l.Payload.Data
		}
		if err := fn(e); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// clearText names the data members that hold clear text; Facts shows only their length.
var clearText = map[string]bool{"prompt": true, "instructions": true, "text": true}

// Facts formats the entry's data as "key=value" pairs sorted by key, nested objects
// flattened with dots down to factsDepth levels (deeper ones shown as {…}), each key cut
// at factsKeyBytes. Clear text is shown as its byte count; long strings are cut. The data
// may be anything (symbi audit show does not verify): its cost stays in proportion to it —
// the pairs shown are at most factsGrowth times the data's size (a name repeated down a
// deep path could otherwise multiply it), then "…" says more were left out.
func (e Entry) Facts() string {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(e.Data))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return ""
	}
	f := &facts{left: factsGrowth*len(e.Data) + factsSlack}
	f.flatten("", m, 1)
	sort.Strings(f.parts)
	if f.cut {
		f.parts = append(f.parts, "…")
	}
	return strings.Join(f.parts, " ")
}

// facts collects the pairs of Facts within its budget.
type facts struct {
	parts []string
	left  int  // bytes the pairs may still take
	cut   bool // a pair was left out
}

func (f *facts) add(part string) {
	if f.cut || len(part)+1 > f.left {
		f.cut = true
		return
	}
	f.left -= len(part) + 1
	f.parts = append(f.parts, part)
}

// Bounds of Facts: no record of this version nests more than a few levels, and a real
// record's pairs are well within twice its size.
const (
	factsDepth    = 8
	factsKeyBytes = 64
	factsGrowth   = 3
	factsSlack    = 64
)

// flatten adds m's members, in the order of their names (what is left out past the budget
// is the same at every run).
func (f *facts) flatten(prefix string, m map[string]any, depth int) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		if f.cut {
			return
		}
		k, v := name, m[name]
		if len(k) > factsKeyBytes {
			k = strings.ToValidUTF8(k[:factsKeyBytes], "") + "…"
		}
		key := prefix + k
		switch v := v.(type) {
		case map[string]any:
			if depth >= factsDepth {
				f.add(key + "={…}")
				continue
			}
			f.flatten(key+".", v, depth+1)
		case string:
			if clearText[key] {
				f.add(fmt.Sprintf("%s=<%d bytes>", key, len(v)))
			} else {
				f.add(key + "=" + short(v))
			}
		case []any:
			items := make([]string, len(v))
			for i, x := range v {
				items[i] = fmt.Sprint(x)
			}
			f.add(key + "=" + short("["+strings.Join(items, ",")+"]"))
		default:
			f.add(fmt.Sprintf("%s=%v", key, v))
		}
	}
}

// short abbreviates a SHA-256 hex digest to 12 digits, quotes s when it holds spaces or
// quotes, and cuts it at 80 bytes.
func short(s string) string {
	if len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" {
		return s[:12] + "..."
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	if s == "" || strings.ContainsAny(s, " \"\t\n=") {
		return strconv.Quote(s)
	}
	return s
}
