package dsl

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2/lexer"
)

// Token types produced by the lexer.
const (
	tokIdent lexer.TokenType = iota + 1
	tokString
	tokNumber
	tokDuration
	tokVault
	tokPunct
	tokBinOp // binary operators: || && == != <= >= < > + - * / %
	// tokError stands where the lexer found an error (scanner.lexErr), just before EOF:
	// no rule accepts it, so the parser stops there at the latest, and a syntax error it
	// finds earlier is reported instead, being nearer the first mistake.
	tokError
)

// Nesting limits enforced while lexing, so that the recursive parser never recurses
// deeper than a bounded number of levels whatever the input.
const (
	// MaxBracketDepth is the deepest nesting of (, [ and { brackets.
	MaxBracketDepth = 256
	// MaxChainDepth bounds brackets plus the right-nested constructs "=>" and "<"
	// counted since the last "," or ";" of each bracket level.
	MaxChainDepth = 1024
)

// definition is the participle lexer definition of the language.
type definition struct{}

var symbols = map[string]lexer.TokenType{
	"EOF":      lexer.EOF,
	"Ident":    tokIdent,
	"String":   tokString,
	"Number":   tokNumber,
	"Duration": tokDuration,
	"VaultURL": tokVault,
	"Punct":    tokPunct,
	"BinOp":    tokBinOp,
}

// Symbols returns the token types of the lexer.
func (definition) Symbols() map[string]lexer.TokenType { return symbols }

// Lex reads all of r and returns a lexer over it.
func (definition) Lex(filename string, r io.Reader) (lexer.Lexer, error) {
	src, err := io.ReadAll(io.LimitReader(r, MaxSourceBytes+1))
	if err != nil {
		return nil, err
	}
	return newScanner(filename, src), nil
}

// scanner is the hand-written lexer; it hands out one token per call to Next.
type scanner struct {
	src       []byte
	text      string // src as a string; token values are substrings of it
	file      string
	off       int
	line, col int
	tok       lexer.Token // the token emitted by the current call to Next
	emitted   bool
	n         int // tokens emitted so far
	// nesting bookkeeping
	open   []byte           // open brackets
	openAt []lexer.Position // where each was opened
	// unclosed, set at the end of input while brackets are still open, is reported only
	// if the parser finds nothing earlier: the parser's error is nearer the mistake.
	unclosed *Error
	// lexErr is the lexer's error, in place of which tokError was emitted: reported
	// only if the parser finds nothing earlier, likewise.
	lexErr *Error
	// spans are the strings that run over more than one line, for the hint that a
	// closing quote may be missing.
	spans  []stringSpan
	chains []int // saved chain counts of enclosing levels
	chain  int   // chain count of the current level
	total  int   // brackets + all chain counts
	// The first levels of open, openAt and chains, allocated with the scanner.
	openBuf   [8]byte
	openAtBuf [8]lexer.Position
	chainsBuf [8]int
}

// stringSpan is a string literal that runs over lines: where it opens and its last line.
type stringSpan struct {
	open    lexer.Position
	endLine int
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isVaultChar(c byte) bool {
	return isIdentChar(c) || c == '-' || c == '/' || c == '.'
}

func newScanner(file string, src []byte) *scanner {
	s := &scanner{src: src, text: string(src), file: file, line: 1, col: 1}
	s.open, s.openAt, s.chains = s.openBuf[:0], s.openAtBuf[:0], s.chainsBuf[:0]
	return s
}

// lex turns src into a token stream ending with an EOF token and returns it with the
// scanner (its token count, an unclosed bracket, its multi-line strings). src must be
// valid UTF-8.
func lex(file string, src []byte) (*lexer.PeekingLexer, *scanner, error) {
	s := newScanner(file, src)
	peek, err := lexer.Upgrade(s)
	if err != nil {
		return nil, s, err
	}
	return peek, s, nil
}

// hint adds to e where a string that runs over lines opened before it, if one did: a
// missing closing quote there swallows the lines that follow, and the error surfaces far
// from the mistake.
func (s *scanner) hint(e *Error) *Error {
	for _, sp := range s.spans {
		if sp.open.Offset >= e.Offset {
			break
		}
		e.Msg += fmt.Sprintf(" (the string opened at %d:%d runs to line %d: if its closing quote is missing, the mistake is there)", sp.open.Line, sp.open.Column, sp.endLine)
		break
	}
	return e
}

// Next returns the next token. At a syntax error it returns a tokError token there (the
// error is kept in s.lexErr), then EOF; a nesting bound exceeded is its error, an *Error.
func (s *scanner) Next() (lexer.Token, error) {
	s.emitted = false
	if s.lexErr != nil {
		return lexer.Token{Type: lexer.EOF, Pos: s.tok.Pos}, nil
	}
	if err := s.run(); err != nil {
		if e := err.(*Error); e.Err == ErrNesting {
			return lexer.Token{}, e // a bound on the parser's recursion: at once
		}
		s.lexErr = err.(*Error)
		p := lexer.Position{Filename: s.file, Offset: s.lexErr.Offset, Line: s.lexErr.Line, Column: s.lexErr.Column}
		s.tok = lexer.Token{Type: tokError, Pos: p}
		return s.tok, nil
	}
	return s.tok, nil
}

func (s *scanner) pos() lexer.Position {
	return lexer.Position{Filename: s.file, Offset: s.off, Line: s.line, Column: s.col}
}

func (s *scanner) errorf(p lexer.Position, err error, format string, args ...any) *Error {
	return &Error{Line: p.Line, Column: p.Column, Offset: p.Offset, Msg: fmt.Sprintf(format, args...), Err: err}
}

// advance moves over n bytes that contain no newline.
func (s *scanner) advance(n int) {
	s.off += n
	s.col += n
}

func (s *scanner) emit(typ lexer.TokenType, p lexer.Position) {
	s.tok = lexer.Token{Type: typ, Value: s.text[p.Offset:s.off], Pos: p}
	s.emitted = true
	s.n++
}

var twoCharOps = [...]string{"=>", "->", "==", "!=", "<=", ">=", "&&", "||", "+=", "-=", "*=", "/=", "%="}

// run scans up to the next token and emits it; at the end of the source it checks that
// every bracket is closed and emits EOF.
func (s *scanner) run() error {
	src := s.src
	for s.off < len(src) && !s.emitted {
		c := src[s.off]
		switch {
		case c == '\n':
			s.off++
			s.line++
			s.col = 1
		case c == '\r' && (s.off+1 == len(src) || src[s.off+1] != '\n'):
			return s.errorf(s.pos(), ErrSyntax, "a carriage return not followed by a line feed: lines end with \\n or \\r\\n")
		case c == ' ' || c == '\t' || c == '\r':
			s.advance(1)
		case c == '#' || (c == '/' && s.off+1 < len(src) && src[s.off+1] == '/'):
			if err := s.skipComment(); err != nil {
				return err
			}
		case isIdentStart(c):
			p := s.pos()
			e := s.off + 1
			for e < len(src) && isIdentChar(src[e]) {
				e++
			}
			s.advance(e - s.off)
			if s.off-p.Offset == 5 && string(src[p.Offset:s.off]) == "vault" && bytes.HasPrefix(src[s.off:], []byte("://")) {
				s.advance(3)
				e = s.off
				for e < len(src) && isVaultChar(src[e]) {
					e++
				}
				if e == s.off {
					return s.errorf(p, ErrSyntax, "vault URL has an empty path")
				}
				s.advance(e - s.off)
				s.emit(tokVault, p)
				continue
			}
			// An if in an expression (its condition may be another if) nests the
			// recursive parse as => and < do; one that begins a statement or continues an
			// else does not.
			word := s.text[p.Offset:s.off]
			if word == "if" && s.n > 0 {
				switch s.tok.Value {
				case "{", "}", ";", "else":
				default:
					if err := s.deepen(p); err != nil {
						return err
					}
				}
			}
			// A statement keyword after "}" begins a statement: no expression continues
			// with one, so the expressions before it at this bracket level — an if's
			// condition, say — are parsed and returned from, or the parse stops there with a
			// syntax error. Their constructs nest nothing of what follows (statements are
			// siblings, like policy rules). Not after "else": an if expression's
			// "else if" continues inside the expression that holds it.
			if stmtKeywords[word] && s.n > 0 && s.tok.Value == "}" {
				s.total -= s.chain
				s.chain = 0
			}
			s.emit(tokIdent, p)
		case isDigit(c):
			s.number()
		case c == '"':
			if err := s.str(); err != nil {
				return err
			}
		default:
			if err := s.punct(c); err != nil {
				return err
			}
		}
	}
	if s.emitted {
		return nil
	}
	if len(s.open) > 0 && s.unclosed == nil {
		n := len(s.open)
		s.unclosed = s.errorf(s.openAt[n-1], ErrSyntax, "%q opened here is never closed (the input ends with %d bracket(s) open)", string(s.open[n-1]), n)
	}
	s.emit(lexer.EOF, s.pos())
	return nil
}

var otherBreaks = [][]byte{[]byte("\u0085"), []byte("\u2028"), []byte("\u2029")}

// otherBreak returns the index in b of the first character some reader takes for a line
// break but "\n" — CR, VT, FF, U+0085, U+2028, U+2029 — or -1. ASCII first, fast; the
// others only where a byte that begins one is.
func otherBreak(b []byte) int {
	j := bytes.IndexAny(b, "\r\v\f")
	if bytes.IndexByte(b, 0xc2) < 0 && bytes.IndexByte(b, 0xe2) < 0 {
		return j
	}
	for _, seq := range otherBreaks {
		if k := bytes.Index(b, seq); k >= 0 && (j < 0 || k < j) {
			j = k
		}
	}
	return j
}

// isBidiControl reports whether r is a bidirectional embedding, override or isolate
// control (U+202A–U+202E, U+2066–U+2069): shown, it reorders the text around it, so
// that what a reader sees of a comment or a string is not what is parsed ("Trojan
// Source", CVE-2021-42574).
func isBidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069
}

// bidiControl returns the index in b of the first bidirectional control, or -1.
func bidiControl(b []byte) int {
	for i := 0; i < len(b); {
		k := bytes.IndexByte(b[i:], 0xe2)
		if k < 0 {
			return -1
		}
		i += k
		r, n := utf8.DecodeRune(b[i:])
		if isBidiControl(r) {
			return i
		}
		i += n
	}
	return -1
}

// skipComment moves over a comment, to the \n that ends it. A comment holding what
// another reader takes for a line break — a carriage return not followed by a line feed,
// a vertical tab, a form feed, U+0085, U+2028, U+2029 — is refused: an editor or the
// model, which is sent the declaration's bytes, would see what follows it as code that
// the parse and admission skip as comment.
func (s *scanner) skipComment() error {
	i := bytes.IndexByte(s.src[s.off:], '\n')
	end := len(s.src)
	if i >= 0 {
		end = s.off + i
	}
	text := s.src[s.off:end]
	if j := otherBreak(text); j >= 0 && !(text[j] == '\r' && s.off+j+1 == end && end < len(s.src)) {
		r, _ := utf8.DecodeRune(text[j:])
		p := s.pos()
		p.Offset += j
		p.Column += utf8.RuneCount(text[:j])
		return s.errorf(p, ErrSyntax, "a comment holds %U, which some readers take for a line break: lines end with \\n or \\r\\n", r)
	}
	if j := bidiControl(text); j >= 0 {
		r, _ := utf8.DecodeRune(text[j:])
		p := s.pos()
		p.Offset += j
		p.Column += utf8.RuneCount(text[:j])
		return s.errorf(p, ErrSyntax, "a comment holds %U, a bidirectional control: shown, it reorders the text around it, and a reader sees other than what is parsed", r)
	}
	s.col += utf8.RuneCount(text)
	s.off = end
	return nil
}

var durationSuffixes = [...]string{".seconds", ".minutes", ".hours", "months", "s", "m", "h", "d", "w", "y"}

// number lexes a number or a duration.
func (s *scanner) number() {
	src := s.src
	p := s.pos()
	e := s.off
	for e < len(src) && isDigit(src[e]) {
		e++
	}
	for _, suf := range durationSuffixes {
		if bytes.HasPrefix(src[e:], []byte(suf)) {
			end := e + len(suf)
			if end >= len(src) || !isIdentChar(src[end]) {
				s.advance(end - s.off)
				s.emit(tokDuration, p)
				return
			}
		}
	}
	for e+1 < len(src) && src[e] == '_' && isDigit(src[e+1]) {
		e++
		for e < len(src) && isDigit(src[e]) {
			e++
		}
	}
	if e+1 < len(src) && src[e] == '.' && isDigit(src[e+1]) {
		e++
		for e < len(src) && isDigit(src[e]) {
			e++
		}
	}
	s.advance(e - s.off)
	s.emit(tokNumber, p)
}

// str lexes a string literal, which may span lines; escapes are checked here and
// decoded by unquote.
func (s *scanner) str() error {
	src := s.src
	p := s.pos()
	s.advance(1)
	for {
		if s.off >= len(src) {
			return s.errorf(p, ErrSyntax, "unterminated string")
		}
		c := src[s.off]
		switch {
		case c == '"':
			s.advance(1)
			s.emit(tokString, p)
			if s.line != p.Line {
				s.spans = append(s.spans, stringSpan{open: p, endLine: s.line})
			}
			return nil
		case c == '\\':
			ep := s.pos()
			n, ok := escapeLen(src[s.off:])
			if !ok {
				return s.errorf(ep, ErrSyntax, "invalid escape sequence in string")
			}
			s.advance(n)
		case c == '\n':
			s.off++
			s.line++
			s.col = 1
		case c == '\r' && (s.off+1 == len(src) || src[s.off+1] != '\n'):
			// As outside a string: a reader would show what follows on a line of its own.
			return s.errorf(s.pos(), ErrSyntax, "a carriage return not followed by a line feed (in a string: write \\r): lines end with \\n or \\r\\n")
		case c < utf8.RuneSelf:
			s.advance(1)
		default:
			r, n := utf8.DecodeRune(src[s.off:])
			if isBidiControl(r) {
				return s.errorf(s.pos(), ErrSyntax, "a string holds %U, a bidirectional control: shown, it reorders the text around it, and a reader sees other than what is parsed (write it as \\u{%X})", r, r)
			}
			s.off += n
			s.col++
		}
	}
}

// escapeLen returns the length of the escape sequence at the start of b (which begins
// with a backslash): \" \\ \/ \' \n \r \t \0 \uXXXX \u{X…}.
func escapeLen(b []byte) (int, bool) {
	if len(b) < 2 {
		return 0, false
	}
	switch b[1] {
	case '"', '\\', '/', '\'', 'n', 'r', 't', '0':
		return 2, true
	case 'u':
		if len(b) > 2 && b[2] == '{' {
			i := 3
			for i < len(b) && i < 10 && isHex(b[i]) {
				i++
			}
			if i == 3 || i >= len(b) || b[i] != '}' {
				return 0, false
			}
			r := hexValue(b[3:i])
			if r > utf8.MaxRune || (r >= 0xD800 && r <= 0xDFFF) {
				return 0, false
			}
			return i + 1, true
		}
		if len(b) < 6 {
			return 0, false
		}
		for _, c := range b[2:6] {
			if !isHex(c) {
				return 0, false
			}
		}
		r := hexValue(b[2:6])
		if r >= 0xD800 && r <= 0xDFFF {
			return 0, false
		}
		return 6, true
	}
	return 0, false
}

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexValue(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case isDigit(c):
			r |= rune(c - '0')
		case c >= 'a':
			r |= rune(c-'a') + 10
		default:
			r |= rune(c-'A') + 10
		}
	}
	return r
}

func (s *scanner) punct(c byte) error {
	src := s.src
	p := s.pos()
	if s.off+1 < len(src) {
		two := src[s.off : s.off+2]
		for _, op := range twoCharOps {
			if two[0] == op[0] && two[1] == op[1] {
				s.advance(2)
				typ := tokPunct
				switch op {
				case "||", "&&", "==", "!=", "<=", ">=":
					typ = tokBinOp
				}
				s.emit(typ, p)
				if op == "=>" {
					return s.deepen(p)
				}
				return nil
			}
		}
	}
	switch c {
	case '(', '[', '{':
		if len(s.open) >= MaxBracketDepth {
			return s.errorf(p, ErrNesting, "brackets nested deeper than %d levels", MaxBracketDepth)
		}
		s.open = append(s.open, c)
		s.openAt = append(s.openAt, p)
		s.chains = append(s.chains, s.chain)
		s.chain = 0
		s.advance(1)
		s.emit(tokPunct, p)
		s.total++
		if s.total > MaxChainDepth {
			return s.errorf(p, ErrNesting, "expression nested deeper than %d levels", MaxChainDepth)
		}
		return nil
	case ')', ']', '}':
		want := byte('(')
		if c == ']' {
			want = '['
		} else if c == '}' {
			want = '{'
		}
		if len(s.open) == 0 {
			return s.errorf(p, ErrSyntax, "unexpected %q: no bracket is open", c)
		}
		if top := s.open[len(s.open)-1]; top != want {
			return s.errorf(p, ErrSyntax, "unexpected %q: %q is open", c, top)
		}
		s.open = s.open[:len(s.open)-1]
		s.openAt = s.openAt[:len(s.openAt)-1]
		s.total -= 1 + s.chain
		s.chain = s.chains[len(s.chains)-1]
		s.chains = s.chains[:len(s.chains)-1]
		s.advance(1)
		s.emit(tokPunct, p)
		return nil
	case ',', ';':
		s.total -= s.chain
		s.chain = 0
		s.advance(1)
		s.emit(tokPunct, p)
		return nil
	case '<':
		s.advance(1)
		s.emit(tokBinOp, p)
		return s.deepen(p)
	case '>', '+', '-', '*', '/', '%':
		s.advance(1)
		s.emit(tokBinOp, p)
		return nil
	case ':', '=', '.', '!':
		if c == ':' && s.tok.Type == tokIdent && ruleKinds[s.tok.Value] {
			// "allow:" and the like begin a policy rule: the rule before it has ended,
			// and its constructs nest nothing of this one (rules are siblings, not
			// separated by "," or ";"). Within an expression, a rule keyword and ":" is a
			// syntax error, where the parser stops: the count still bounds its descent.
			s.total -= s.chain
			s.chain = 0
		}
		s.advance(1)
		s.emit(tokPunct, p)
		return nil
	}
	r, _ := utf8.DecodeRune(src[s.off:])
	return s.errorf(p, ErrSyntax, "unexpected character %q", r)
}

// stmtKeywords are the words that begin a statement.
var stmtKeywords = map[string]bool{"if": true, "for": true, "match": true, "let": true, "return": true, "try": true}

// ruleKinds are the words that begin a policy rule, before its ":".
var ruleKinds = map[string]bool{"allow": true, "deny": true, "require": true, "audit": true}

// deepen counts one right-nested construct at the current bracket level.
func (s *scanner) deepen(p lexer.Position) error {
	s.chain++
	s.total++
	if s.total > MaxChainDepth {
		return s.errorf(p, ErrNesting, "expression nested deeper than %d levels", MaxChainDepth)
	}
	return nil
}
