// Package strictjson checks JSON text for what encoding/json accepts silently but a
// security boundary must not: a member name given twice in one object (Go's decoder keeps
// the last, another reader may keep the first, so the two would read different values),
// member names that match an expected name only under case folding, floating-point numbers
// where only integers are meant, and data after the value.
//
// Check reads the text once, left to right, and reports the first problem in document
// order. It is also a validator: under Options.Single, text that is not JSON by RFC 8259,
// as json.Valid decides it, is refused (with an error wrapping ErrSyntax, or ErrTrailing
// for data after the value); without it, data is a stream of values one after the other,
// as json.Decoder reads it ("-01" is the two values -0 and 1). Member names are compared as
// encoding/json decodes them: escapes resolved, and each invalid UTF-8 byte or lone
// surrogate escape read as U+FFFD.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Options select the checks beyond duplicate member names, which are always refused.
type Options struct {
	IntegersOnly bool // refuse a number with a fraction or an exponent
	Single       bool // refuse anything after the first value
	// NoLoneSurrogates refuses a \u escape of a UTF-16 surrogate that is not half of a
	// pair (RFC 7493 §2.1): encoding/json reads it as U+FFFD, another reader keeps it, so
	// the two would read different text (error wrapping ErrSurrogate).
	NoLoneSurrogates bool
	// MaxDepth, when positive and below the default, lowers the deepest nesting of arrays
	// and objects read (error wrapping ErrDepth); the default is json.Valid's, MaxDepth.
	MaxDepth int
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

// ErrSurrogate is wrapped by the error for a lone surrogate under NoLoneSurrogates.
var ErrSurrogate = errors.New("escaped lone surrogate")

// ErrDepth is wrapped by the error for arrays and objects nested deeper than the limit.
var ErrDepth = errors.New("arrays and objects nested too deep")

// ErrSyntax is wrapped by the error for text that is not JSON.
var ErrSyntax = errors.New("invalid JSON")

// MaxDepth is the deepest nesting of arrays and objects Check reads, as json.Valid.
const MaxDepth = 10000

// linearNames is how many member names of one object are compared one by one before
// they are kept in a map.
const linearNames = 16

// Check reads the JSON text data and returns the first problem: a *DuplicateError, a
// *CaseError, an error wrapping ErrFloat or ErrSyntax, or ErrTrailing. Without
// Options.Single, data may hold several values one after the other.
func Check(data []byte, opts Options) error {
	c := checkers.Get().(*checker)
	c.data, c.pos, c.opts = data, 0, opts
	c.depth = MaxDepth
	if opts.MaxDepth > 0 && opts.MaxDepth < MaxDepth {
		c.depth = opts.MaxDepth
	}
	for _, n := range opts.ExactNames {
		c.exact = append(c.exact, []byte(n))
	}
	err := c.run()
	// Keep nothing of data, and nothing large, for the next Check.
	clear(c.stack[:cap(c.stack)])
	clear(c.names[:cap(c.names)])
	clear(c.exact[:cap(c.exact)])
	c.data, c.opts, c.stack, c.names, c.exact = nil, Options{}, c.stack[:0], c.names[:0], c.exact[:0]
	if cap(c.stack) <= 64 && cap(c.names) <= 1024 && cap(c.exact) <= 64 {
		checkers.Put(c)
	}
	return err
}

// checkers keeps a checker's stacks from one Check to the next.
var checkers = sync.Pool{New: func() any { return new(checker) }}

// frame is one open array or object.
type frame struct {
	object bool
	key    []byte              // in an object: the name of the member being read
	index  int                 // in an array: the index of the element being read
	first  int                 // in an object: where its names start in checker.names
	set    map[string]struct{} // in an object with many members: its names
}

type checker struct {
	data  []byte
	pos   int
	depth int // the deepest nesting read
	opts  Options
	exact [][]byte
	stack []frame
	names [][]byte // the member names of the open objects, outermost first
}

func (c *checker) syntax(what string) error {
	if c.pos >= len(c.data) {
		return fmt.Errorf("%w: unexpected end of input (%s)", ErrSyntax, what)
	}
	return fmt.Errorf("%w: %s at offset %d, found %q", ErrSyntax, what, c.pos, c.data[c.pos])
}

func (c *checker) tooDeep() error {
	return fmt.Errorf("%w: more than %d levels, at offset %d", ErrDepth, c.depth, c.pos-1)
}

func (c *checker) space() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// run reads values and what joins them until the end of the text.
func (c *checker) run() error {
	for first := true; ; first = false {
		c.space()
		if c.pos == len(c.data) {
			if first {
				return c.syntax("a value") // no value at all: not JSON text
			}
			return nil
		}
		if err := c.value(); err != nil {
			return err
		}
		c.space()
		if c.pos == len(c.data) {
			return nil
		}
		if c.opts.Single {
			return ErrTrailing
		}
	}
}

// value reads one complete value, nesting without recursion.
func (c *checker) value() error {
	for {
		// A value starts here.
		c.space()
		if c.pos == len(c.data) {
			return c.syntax("a value")
		}
		switch b := c.data[c.pos]; {
		case b == '{':
			c.pos++
			if len(c.stack) == c.depth {
				return c.tooDeep()
			}
			c.stack = append(c.stack, frame{object: true, first: len(c.names)})
			c.space()
			if c.pos < len(c.data) && c.data[c.pos] == '}' {
				c.pos++
				c.pop()
				break
			}
			if err := c.member(); err != nil {
				return err
			}
			continue
		case b == '[':
			c.pos++
			if len(c.stack) == c.depth {
				return c.tooDeep()
			}
			c.stack = append(c.stack, frame{})
			c.space()
			if c.pos < len(c.data) && c.data[c.pos] == ']' {
				c.pos++
				c.pop()
				break
			}
			continue
		case b == '"':
			if _, _, err := c.str(); err != nil {
				return err
			}
		case b == '-' || (b >= '0' && b <= '9'):
			if err := c.number(); err != nil {
				return err
			}
		case b == 't':
			if err := c.literal("true"); err != nil {
				return err
			}
		case b == 'f':
			if err := c.literal("false"); err != nil {
				return err
			}
		case b == 'n':
			if err := c.literal("null"); err != nil {
				return err
			}
		default:
			return c.syntax("a value")
		}
		// A value ended: close what it ends, until another value is due.
		for {
			if len(c.stack) == 0 {
				return nil
			}
			c.space()
			if c.pos == len(c.data) {
				return c.syntax("',' or the end of an array or object")
			}
			top := &c.stack[len(c.stack)-1]
			b := c.data[c.pos]
			if b == ',' {
				c.pos++
				if top.object {
					c.space()
					if err := c.member(); err != nil {
						return err
					}
				} else {
					top.index++
				}
				break
			}
			if (top.object && b == '}') || (!top.object && b == ']') {
				c.pos++
				c.pop()
				continue
			}
			if top.object {
				return c.syntax("',' or '}' after a member")
			}
			return c.syntax("',' or ']' after an element")
		}
	}
}

func (c *checker) pop() {
	top := c.stack[len(c.stack)-1]
	if top.object {
		c.names = c.names[:top.first]
	}
	c.stack = c.stack[:len(c.stack)-1]
}

// member reads a member's name and the colon after it, in the object on top of the stack.
func (c *checker) member() error {
	if c.pos == len(c.data) || c.data[c.pos] != '"' {
		return c.syntax("a member name")
	}
	raw, plain, err := c.str()
	if err != nil {
		return err
	}
	name := raw[1 : len(raw)-1]
	if !plain {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%w: member name: %v", ErrSyntax, err)
		}
		name = []byte(s)
	}
	top := &c.stack[len(c.stack)-1]
	if c.seen(top, name) {
		return &DuplicateError{Name: string(name), Path: c.path()}
	}
	for i, n := range c.exact {
		if !bytes.Equal(name, n) && bytes.EqualFold(name, n) {
			return &CaseError{Name: string(name), Want: c.opts.ExactNames[i], Path: c.path()}
		}
	}
	top.key = name
	c.space()
	if c.pos == len(c.data) || c.data[c.pos] != ':' {
		return c.syntax("':' after a member name")
	}
	c.pos++
	return nil
}

// seen reports whether the object f already has a member name, and records it.
func (c *checker) seen(f *frame, name []byte) bool {
	if f.set != nil {
		if _, ok := f.set[string(name)]; ok {
			return true
		}
		f.set[string(name)] = struct{}{}
		return false
	}
	mine := c.names[f.first:]
	for _, n := range mine {
		if bytes.Equal(n, name) {
			return true
		}
	}
	if len(mine) < linearNames {
		c.names = append(c.names, name)
		return false
	}
	f.set = make(map[string]struct{}, 2*linearNames)
	for _, n := range mine {
		f.set[string(n)] = struct{}{}
	}
	f.set[string(name)] = struct{}{}
	return false
}

// path names the object on top of the stack: "$", then a step per enclosing level.
func (c *checker) path() string {
	var b strings.Builder
	b.WriteString("$")
	for _, f := range c.stack[:len(c.stack)-1] {
		if f.object {
			b.WriteString(".")
			b.Write(f.key)
		} else {
			b.WriteString("[")
			b.WriteString(strconv.Itoa(f.index))
			b.WriteString("]")
		}
	}
	return b.String()
}

// str reads a string and returns its text with the quotes; plain reports that the text
// between them is the string's value (no escape, valid UTF-8).
func (c *checker) str() (raw []byte, plain bool, err error) {
	start := c.pos
	c.pos++ // the opening quote
	plain = true
	ascii := true
	for c.pos < len(c.data) {
		b := c.data[c.pos]
		switch {
		case b == '"':
			c.pos++
			raw = c.data[start:c.pos]
			if !ascii && !utf8.Valid(raw) {
				plain = false
			}
			return raw, plain, nil
		case b == '\\':
			plain = false
			c.pos++
			if c.pos == len(c.data) {
				return nil, false, c.syntax("an escape")
			}
			switch c.data[c.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.pos++
			case 'u':
				c.pos++
				r, err := c.hex4()
				if err != nil {
					return nil, false, err
				}
				if c.opts.NoLoneSurrogates && r >= 0xD800 && r <= 0xDFFF {
					if err := c.lowSurrogate(r); err != nil {
						return nil, false, err
					}
				}
			default:
				return nil, false, c.syntax("an escape")
			}
		case b < 0x20:
			return nil, false, c.syntax("a string character (a control character must be escaped)")
		default:
			if b >= 0x80 {
				ascii = false
			}
			c.pos++
		}
	}
	return nil, false, c.syntax("the end of a string")
}

// hex4 reads the four hexadecimal digits of a \u escape.
func (c *checker) hex4() (rune, error) {
	var r rune
	for range 4 {
		if c.pos == len(c.data) {
			return 0, c.syntax("a hexadecimal digit in a \\u escape")
		}
		switch b := c.data[c.pos]; {
		case b >= '0' && b <= '9':
			r = r<<4 | rune(b-'0')
		case b >= 'a' && b <= 'f':
			r = r<<4 | rune(b-'a'+10)
		case b >= 'A' && b <= 'F':
			r = r<<4 | rune(b-'A'+10)
		default:
			return 0, c.syntax("a hexadecimal digit in a \\u escape")
		}
		c.pos++
	}
	return r, nil
}

// lowSurrogate reads, after the escape of the surrogate r, the escape of the low
// surrogate that makes r the first half of a pair, or refuses r as lone.
func (c *checker) lowSurrogate(r rune) error {
	at := c.pos - 6
	if r >= 0xDC00 || c.pos+1 >= len(c.data) || c.data[c.pos] != '\\' || c.data[c.pos+1] != 'u' {
		return loneSurrogate(r, at)
	}
	c.pos += 2
	lo, err := c.hex4()
	if err != nil {
		return err
	}
	if lo < 0xDC00 || lo > 0xDFFF {
		return loneSurrogate(r, at)
	}
	return nil
}

func loneSurrogate(r rune, at int) error {
	return fmt.Errorf("%w \\u%04x at offset %d", ErrSurrogate, r, at)
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// number reads a number: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
func (c *checker) number() error {
	start := c.pos
	float := false
	if c.data[c.pos] == '-' {
		c.pos++
	}
	switch {
	case c.pos < len(c.data) && c.data[c.pos] == '0':
		c.pos++
	case c.pos < len(c.data) && isDigit(c.data[c.pos]):
		for c.pos < len(c.data) && isDigit(c.data[c.pos]) {
			c.pos++
		}
	default:
		return c.syntax("a digit")
	}
	if c.pos < len(c.data) && c.data[c.pos] == '.' {
		float = true
		c.pos++
		if c.pos == len(c.data) || !isDigit(c.data[c.pos]) {
			return c.syntax("a digit after the decimal point")
		}
		for c.pos < len(c.data) && isDigit(c.data[c.pos]) {
			c.pos++
		}
	}
	if c.pos < len(c.data) && (c.data[c.pos] == 'e' || c.data[c.pos] == 'E') {
		float = true
		c.pos++
		if c.pos < len(c.data) && (c.data[c.pos] == '+' || c.data[c.pos] == '-') {
			c.pos++
		}
		if c.pos == len(c.data) || !isDigit(c.data[c.pos]) {
			return c.syntax("a digit in the exponent")
		}
		for c.pos < len(c.data) && isDigit(c.data[c.pos]) {
			c.pos++
		}
	}
	if float && c.opts.IntegersOnly {
		return fmt.Errorf("%w %s", ErrFloat, c.data[start:c.pos])
	}
	return nil
}

func (c *checker) literal(word string) error {
	if !bytes.HasPrefix(c.data[c.pos:], []byte(word)) {
		return c.syntax("true, false or null")
	}
	c.pos += len(word)
	return nil
}
