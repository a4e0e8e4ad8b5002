package dsl

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"symbi/internal/errcode"
)

// MaxSourceBytes is the largest source Parse accepts.
const MaxSourceBytes = 1 << 20

// Sentinel errors: every *Error wraps one of them.
var (
	ErrTooLarge = errors.New("source too large")
	ErrEncoding = errors.New("source is not valid UTF-8")
	ErrNesting  = errors.New("nesting too deep")
	ErrSyntax   = errors.New("syntax error")
)

// Error is a positioned error in a source. Line and Column are 1-based; Column counts
// characters.
type Error struct {
	Line, Column int
	Offset       int // byte offset
	Msg          string
	Err          error // ErrTooLarge, ErrEncoding, ErrNesting or ErrSyntax
}

// Error formats the error as "line:column: message".
func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Msg) }

// Unwrap returns the sentinel the error wraps.
func (e *Error) Unwrap() error { return e.Err }

// ErrorList is the list of errors of one source, in source order.
type ErrorList []*Error

// Error formats the errors one per line.
func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the errors of the list.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// Errors returns the positioned errors carried by err (nil if there are none).
func Errors(err error) []*Error {
	var l ErrorList
	if errors.As(err, &l) {
		return l
	}
	var e *Error
	if errors.As(err, &e) {
		return []*Error{e}
	}
	return nil
}

var parser = participle.MustBuild[File](
	participle.Lexer(definition{}),
	participle.UseLookahead(0),
)

// Parse parses a whole source. The error, if any, is an ErrorList wrapped with an
// errcode: errcode.LimitExceeded for a source over MaxSourceBytes, errcode.InvalidRequest
// otherwise. name is used only in positions.
func Parse(name string, src []byte) (*File, error) {
	if len(src) > MaxSourceBytes {
		line, col := position(src, MaxSourceBytes)
		return nil, errcode.Wrap(errcode.LimitExceeded, ErrorList{{Line: line, Column: col, Offset: MaxSourceBytes,
			// "more than": a reader stops at the first byte past the limit.
			Msg: fmt.Sprintf("source is more than %d bytes (1 MiB), the limit", MaxSourceBytes), Err: ErrTooLarge}})
	}
	if !utf8.Valid(src) {
		off := invalidUTF8(src)
		line, col := position(src, off)
		return nil, invalid(&Error{Line: line, Column: col, Offset: off,
			Msg: fmt.Sprintf("invalid UTF-8 byte 0x%02x", src[off]), Err: ErrEncoding})
	}
	peek, sc, err := lex(name, src)
	if err != nil {
		return nil, invalid(sc.hint(err.(*Error)))
	}
	parsed, err := parser.ParseFromLexer(peek)
	if err != nil {
		e := syntaxError(src, err)
		switch {
		case sc.lexErr != nil && e.Offset >= sc.lexErr.Offset:
			// The parser ran to where the lexer failed: the lexer's error says why.
			e = sc.lexErr
		case sc.unclosed != nil && e.Offset >= len(src):
			// The parser ran to the end: the unclosed bracket says where to look.
			e = sc.unclosed
		}
		return nil, invalid(sc.hint(e))
	}
	if sc.lexErr != nil { // no rule accepts tokError; kept for safety
		return nil, invalid(sc.hint(sc.lexErr))
	}
	if sc.unclosed != nil { // the grammar cannot end inside a bracket; kept for safety
		return nil, invalid(sc.unclosed)
	}
	parsed.src, parsed.toks = src, peek.Range(0, lexer.RawCursor(sc.n))
	if errs := check(parsed); len(errs) > 0 {
		return nil, errcode.Wrap(errcode.InvalidRequest, errs)
	}
	return parsed, nil
}

func invalid(e *Error) error { return errcode.Wrap(errcode.InvalidRequest, ErrorList{e}) }

// syntaxError converts a participle error into an *Error with a clear message.
func syntaxError(src []byte, err error) *Error {
	var own *Error
	if errors.As(err, &own) {
		return own
	}
	var perr participle.Error
	if !errors.As(err, &perr) {
		return &Error{Line: 1, Column: 1, Msg: err.Error(), Err: ErrSyntax}
	}
	p := perr.Position()
	msg := perr.Message()
	var uerr *participle.UnexpectedTokenError
	if errors.As(err, &uerr) {
		if uerr.Unexpected.EOF() {
			msg = "unexpected end of input"
		} else {
			msg = fmt.Sprintf("unexpected %s", describe(uerr.Unexpected))
		}
		expect := uerr.Message()
		if i := strings.Index(expect, "(expected "); i >= 0 && strings.HasSuffix(expect, ")") {
			expect = expect[i+len("(expected ") : len(expect)-1]
		} else {
			expect = ""
		}
		if x := firstExpected(expect); x != "" {
			msg += ", expected " + x
		}
	}
	// Columns count characters, positions from the lexer already do.
	if p.Line == 0 {
		p.Line, p.Column = position(src, p.Offset)
	}
	return &Error{Line: p.Line, Column: p.Column, Offset: p.Offset, Msg: msg, Err: ErrSyntax}
}

// firstExpected names the first term of participle's expectation, e.g. `"=" (Array |
// Value)` gives `"="` and `<ident> ...` gives "an identifier".
func firstExpected(expect string) string {
	if alts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(expect, "("), ")"), " | "); len(alts) > 1 {
		names := make([]string, 0, len(alts))
		for _, a := range alts {
			if strings.ContainsAny(a, " ()") {
				names = nil
				break
			}
			names = append(names, firstExpected(a))
		}
		if len(names) > 1 {
			return strings.Join(names, " or ")
		}
	}
	expect = strings.TrimLeft(expect, "(")
	if expect == "" {
		return ""
	}
	if expect[0] == '"' {
		if end := strings.IndexByte(expect[1:], '"'); end >= 0 {
			return expect[:end+2]
		}
		return ""
	}
	term := expect
	if i := strings.IndexAny(term, " )|*?+"); i >= 0 {
		term = term[:i]
	}
	switch term {
	case "<ident>":
		return "an identifier"
	case "<string>":
		return "a string"
	case "Expr", "Unary", "Primary":
		return "an expression"
	case "Array":
		return "an array"
	case "Literal":
		return "a value, array or record"
	case "Value":
		return "a value"
	case "Block":
		return "a block"
	case "Type":
		return "a type"
	case "":
		return ""
	}
	return strings.ToLower(term[:1]) + term[1:]
}

// describe names a token for an error message, at most 40 bytes of it.
func describe(t lexer.Token) string {
	v := clipBytes(t.Value, 40)
	switch t.Type {
	case tokString:
		return "string " + v
	case tokIdent:
		return fmt.Sprintf("%q", v)
	case tokNumber:
		return "number " + v
	case tokDuration:
		return "duration " + v
	case tokVault:
		return "vault URL " + v
	}
	return fmt.Sprintf("%q", v)
}

// position returns the 1-based line and character column of byte offset off in src.
func position(src []byte, off int) (line, col int) {
	line, col = 1, 1
	for i := 0; i < off && i < len(src); {
		if src[i] == '\n' {
			line++
			col = 1
			i++
			continue
		}
		_, n := utf8.DecodeRune(src[i:])
		i += n
		col++
	}
	return line, col
}

func invalidUTF8(src []byte) int {
	for i := 0; i < len(src); {
		r, n := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(src)
}

// text returns the exact source of a node that starts at start and ends before the token
// at end (a node's Pos and EndPos).
func (f *File) text(start, end lexer.Position) string {
	return string(f.bytes(start, end))
}

func (f *File) bytes(start, end lexer.Position) []byte {
	i := f.tokenIndex(end.Offset)
	if i == 0 || i > len(f.toks) {
		return nil
	}
	last := &f.toks[i-1]
	stop := last.Pos.Offset + len(last.Value)
	if stop < start.Offset {
		return nil
	}
	return f.src[start.Offset:stop]
}

// tokenIndex returns the index of the first token starting at or after byte offset off
// (len(f.toks) if there is none).
func (f *File) tokenIndex(off int) int {
	return sort.Search(len(f.toks), func(i int) bool { return f.toks[i].Pos.Offset >= off })
}

// Source returns the source the file was parsed from.
func (f *File) Source() []byte { return f.src }

// AgentNames returns the declared agent names in source order.
func (f *File) AgentNames() []string {
	var names []string
	for _, it := range f.Items {
		if it.Agent != nil {
			names = append(names, it.Agent.Name)
		}
	}
	return names
}

// check enforces what the hand-written statement parser leaves wide: only a bare
// expression ending a block may omit its ";" (the grammar's block is "{" statement* expr?
// "}", and an assignment is a statement), and an assignment's target must be a postfix,
// with no operator at its top level (assignable).
func check(f *File) ErrorList {
	var errs ErrorList
	visitBlocks(f, func(b *Block) {
		for i, st := range b.Stmts {
			s := st.Expr
			if s == nil {
				continue
			}
			switch {
			case !s.Semi && s.Op != "":
				p := s.EndPos
				errs = append(errs, &Error{Line: p.Line, Column: p.Column, Offset: p.Offset,
					Msg: `expected ";" after the assignment (only a bare expression may end a block without one)`, Err: ErrSyntax})
			case !s.Semi && i < len(b.Stmts)-1:
				p := s.EndPos
				errs = append(errs, &Error{Line: p.Line, Column: p.Column, Offset: p.Offset,
					Msg: `expected ";" after the expression statement`, Err: ErrSyntax})
			}
			if s.Op != "" && !assignable(s.Target) {
				p := s.Target.Pos
				errs = append(errs, &Error{Line: p.Line, Column: p.Column, Offset: p.Offset,
					Msg: fmt.Sprintf("cannot assign to %s", errcode.Clip(f.text(p, s.Target.EndPos))), Err: ErrSyntax})
			}
		}
	})
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Offset < errs[j].Offset })
	if n := len(errs) - MaxErrors; n > 0 {
		// A hostile file could hold an error every few bytes: the list is bounded, and
		// says how many it leaves out.
		p := errs[MaxErrors]
		errs = append(errs[:MaxErrors], &Error{Line: p.Line, Column: p.Column, Offset: p.Offset,
			Msg: fmt.Sprintf("and %d more errors from here, not listed", n), Err: ErrSyntax})
	}
	return errs
}

// MaxErrors bounds the errors one parse reports; past it, one more says how many were
// left out.
const MaxErrors = 100

// assignable reports whether e is what the grammar assigns to: a postfix — a primary
// followed by field accesses, calls and indexes (`a.b`, `items.get(0).name`, `g().x`) —
// with no unary or binary operator.
func assignable(e *Expr) bool {
	return len(e.Ops) == 0 && len(e.Left.Ops) == 0
}
