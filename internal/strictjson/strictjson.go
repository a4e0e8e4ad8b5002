// Package strictjson checks JSON text for what encoding/json accepts silently but a
// security boundary must not: a member name given twice in one object (Go's decoder keeps
// the last, another reader may keep the first, so the two would read different values),
// floating-point numbers where only integers are meant, and data after the value.
//
// Check takes text that json.Valid already accepted; it reports the first problem in
// document order.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Options select the checks beyond duplicate member names, which are always refused.
type Options struct {
	IntegersOnly bool // refuse a number with a fraction or an exponent
	Single       bool // refuse anything after the first value
	// ExactNames are member names that must be spelled exactly: a member name equal to
	// one of them under Unicode case folding (as encoding/json matches struct fields) but
	// spelled otherwise is refused (*CaseError), so that a reader that does not fold case
	// finds the same members.
	ExactNames []string
}

// CaseError is a member name that matches a name of Options.ExactNames only by case.
type CaseError struct {
	Name, Want string
	Path       string // the object, as DuplicateError's
}

func (e *CaseError) Error() string {
	return fmt.Sprintf("member %q in the object at %s is %q spelled otherwise", e.Name, e.Path, e.Want)
}

// DuplicateError is a member name given twice in one object.
type DuplicateError struct {
	Name string // the repeated name (unescaped)
	Path string // the object: "$", then a ".name" or "[index]" step per level
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("duplicate member %q in the object at %s", e.Name, e.Path)
}

// ErrFloat is wrapped by the error for a floating-point number under IntegersOnly.
var ErrFloat = errors.New("floating-point number")

// ErrTrailing is the error for data after the first value under Single.
var ErrTrailing = errors.New("data after the JSON value")

// Check walks the JSON text data (already valid JSON) and returns the first problem: a
// *DuplicateError, a *CaseError, an error wrapping ErrFloat, ErrTrailing, or a decoding
// error.
func Check(data []byte, opts Options) error {
	type frame struct {
		members map[string]bool // nil for an array
		wantKey bool            // in an object: the next token is a member name
		key     string          // in an object: the member whose value is being read
		index   int             // in an array: the index of the next element
		step    string          // how the enclosing value reaches this one
	}
	var stack []*frame
	path := func() string {
		var b strings.Builder
		b.WriteString("$")
		for _, f := range stack {
			b.WriteString(f.step)
		}
		return b.String()
	}
	done := false
	// closed marks the value just read as complete.
	closed := func() {
		if n := len(stack); n == 0 {
			done = true
		} else if stack[n-1].members != nil {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if done && opts.Single {
			return ErrTrailing
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if tok == json.Delim('}') || tok == json.Delim(']') {
			stack = stack[:len(stack)-1]
			closed()
			continue
		}
		if top != nil && top.wantKey {
			k := tok.(string)
			if top.members[k] {
				return &DuplicateError{Name: k, Path: path()}
			}
			for _, n := range opts.ExactNames {
				if k != n && strings.EqualFold(k, n) {
					return &CaseError{Name: k, Want: n, Path: path()}
				}
			}
			top.members[k], top.wantKey, top.key = true, false, k
			continue
		}
		step := ""
		switch {
		case top != nil && top.members != nil:
			step = "." + top.key
		case top != nil:
			step = fmt.Sprintf("[%d]", top.index)
			top.index++
		}
		switch t := tok.(type) {
		case json.Delim: // '{' or '['
			f := &frame{step: step}
			if t == '{' {
				f.members, f.wantKey = map[string]bool{}, true
			}
			stack = append(stack, f)
		case json.Number:
			if opts.IntegersOnly && strings.ContainsAny(string(t), ".eE") {
				return fmt.Errorf("%w %s", ErrFloat, t)
			}
			closed()
		default:
			closed()
		}
	}
}
