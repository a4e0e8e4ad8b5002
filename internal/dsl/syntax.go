package dsl

import (
	"fmt"

	"github.com/alecthomas/participle/v2/lexer"
)

// Statements, expressions and values are parsed by hand, like the items (items.go):
// the parsers build every node directly from the token stream. They follow the
// productions documented on each node type, decide every choice on the next token or on
// the same lookahead as the grammar, and report errors in the grammar's words:
// "unexpected X, expected Y" at the first token that does not fit.

// exact returns a copy of list in an allocation of its length, or nil if it is empty.
// The parsers gather each list in a buffer on the stack and keep its exact copy, instead
// of growing it on the heap one element at a time.
func exact[T any](list []T) []T {
	if len(list) == 0 {
		return nil
	}
	return append(make([]T, 0, len(list)), list...)
}

// tokAt returns the token n places after the next one.
func tokAt(lex *lexer.PeekingLexer, n int) *lexer.Token {
	cp := lex.MakeCheckpoint()
	for range n {
		lex.Next()
	}
	t := lex.Peek()
	lex.LoadCheckpoint(cp)
	return t
}

// unexpected reports the next token as unexpected; expect, when not empty, names what
// the grammar wanted there.
func unexpected(lex *lexer.PeekingLexer, expect string) error {
	t := lex.Peek()
	msg := "unexpected end of input"
	if !t.EOF() {
		msg = "unexpected " + describe(*t)
	}
	if expect != "" {
		msg += ", expected " + expect
	}
	return &Error{Line: t.Pos.Line, Column: t.Pos.Column, Offset: t.Pos.Offset, Msg: msg, Err: ErrSyntax}
}

// want consumes the punctuation or keyword v, or reports the next token.
func want(lex *lexer.PeekingLexer, v string) error {
	if lex.Peek().Value != v {
		return unexpected(lex, `"`+v+`"`)
	}
	lex.Next()
	return nil
}

// ident consumes an identifier and returns its text.
func ident(lex *lexer.PeekingLexer, expect string) (string, error) {
	t := lex.Peek()
	if t.Type != tokIdent {
		return "", unexpected(lex, expect)
	}
	lex.Next()
	return t.Value, nil
}

// skip consumes v if it is the next token.
func skip(lex *lexer.PeekingLexer, v string) bool {
	if lex.Peek().Value == v {
		lex.Next()
		return true
	}
	return false
}

// startsExpr reports whether t can begin an expression (and so a statement).
func startsExpr(t *lexer.Token) bool {
	switch t.Type {
	case tokIdent, tokString, tokNumber, tokDuration, tokVault:
		return true
	}
	switch t.Value {
	case "[", "{", "(", "!", "-":
		return true
	}
	return false
}

// isKey reports whether t can be the key of a record field.
func isKey(t *lexer.Token) bool { return t.Type == tokIdent || t.Type == tokString }

// fieldFollows reports whether the next token is "{" followed by a field (a key and
// ":"), which makes it a record rather than a block.
func fieldFollows(lex *lexer.PeekingLexer) bool {
	if lex.Peek().Value != "{" {
		return false
	}
	cp := lex.MakeCheckpoint()
	lex.Next()
	ok := isKey(lex.Next()) && lex.Peek().Value == ":"
	lex.LoadCheckpoint(cp)
	return ok
}

// parse reads "{" Stmt* "}".
func (b *Block) parse(lex *lexer.PeekingLexer) error {
	b.Pos = lex.Next().Pos
	var buf [8]*Stmt
	stmts := buf[:0]
	for t := lex.Peek(); t.Value != "}" && startsExpr(t); t = lex.Peek() {
		s, err := parseStmt(lex)
		if err != nil {
			return err
		}
		stmts = append(stmts, s)
	}
	b.Stmts = exact(stmts)
	if err := want(lex, "}"); err != nil {
		return err
	}
	b.EndPos = lex.Peek().Pos
	return nil
}

// block reads a required block.
func block(lex *lexer.PeekingLexer) (*Block, error) {
	if lex.Peek().Value != "{" {
		return nil, unexpected(lex, "a block")
	}
	b := &Block{}
	return b, b.parse(lex)
}

// parseStmt reads a statement: let, if, for, match, try, return or an expression.
func parseStmt(lex *lexer.PeekingLexer) (*Stmt, error) {
	t := lex.Peek()
	s := &Stmt{Pos: t.Pos}
	var err error
	switch t.Value {
	case "let":
		lex.Next()
		s.Let, err = parseLet(lex)
	case "if":
		lex.Next()
		s.If, err = parseIfStmt(lex)
	case "for":
		lex.Next()
		s.For, err = parseFor(lex)
	case "match":
		lex.Next()
		s.Match, err = parseMatch(lex)
	case "try":
		lex.Next()
		s.Try, err = parseTry(lex)
	case "return":
		lex.Next()
		s.Return, err = parseReturn(lex)
	default:
		s.Expr, err = parseExprStmt(lex)
	}
	if err != nil {
		return nil, err
	}
	s.EndPos = lex.Peek().Pos
	return s, nil
}

// parseLet reads Ident "=" Expr ";" after "let".
func parseLet(lex *lexer.PeekingLexer) (*LetStmt, error) {
	l := &LetStmt{Pos: lex.Peek().Pos}
	var err error
	if l.Name, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if err = want(lex, "="); err != nil {
		return nil, err
	}
	if l.Value, err = parseExpr(lex); err != nil {
		return nil, err
	}
	if err = want(lex, ";"); err != nil {
		return nil, err
	}
	l.EndPos = lex.Peek().Pos
	return l, nil
}

// parseIfStmt reads Cond Block ("else" "if" Cond Block)* ("else" Block)? after "if".
func parseIfStmt(lex *lexer.PeekingLexer) (*IfStmt, error) {
	s := &IfStmt{Pos: lex.Peek().Pos}
	var err error
	if s.Cond, err = parseCond(lex); err != nil {
		return nil, err
	}
	if s.Then, err = block(lex); err != nil {
		return nil, err
	}
	for lex.Peek().Value == "else" && tokAt(lex, 1).Value == "if" {
		e := &ElseIf{Pos: lex.Next().Pos}
		lex.Next()
		if e.Cond, err = parseCond(lex); err != nil {
			return nil, err
		}
		if e.Then, err = block(lex); err != nil {
			return nil, err
		}
		e.EndPos = lex.Peek().Pos
		s.ElseIfs = append(s.ElseIfs, e)
	}
	if skip(lex, "else") {
		if s.Else, err = block(lex); err != nil {
			return nil, err
		}
	}
	s.EndPos = lex.Peek().Pos
	return s, nil
}

// parseCond reads "let" Pattern "=" Expr, or Expr.
func parseCond(lex *lexer.PeekingLexer) (*Cond, error) {
	c := &Cond{Pos: lex.Peek().Pos}
	var err error
	if skip(lex, "let") {
		if c.Pattern, err = parsePattern(lex); err != nil {
			return nil, err
		}
		if err = want(lex, "="); err != nil {
			return nil, err
		}
		if c.Value, err = parseExpr(lex); err != nil {
			return nil, err
		}
	} else if c.Expr, err = parseExpr(lex); err != nil {
		return nil, err
	}
	c.EndPos = lex.Peek().Pos
	return c, nil
}

// parsePattern reads Ident ("(" (Pattern ","?)* ")")?.
func parsePattern(lex *lexer.PeekingLexer) (*Pattern, error) {
	p := &Pattern{Pos: lex.Peek().Pos}
	var err error
	if p.Name, err = ident(lex, "pattern"); err != nil {
		return nil, err
	}
	if skip(lex, "(") {
		p.HasArgs = true
		for lex.Peek().Type == tokIdent {
			a, err := parsePattern(lex)
			if err != nil {
				return nil, err
			}
			p.Args = append(p.Args, a)
			skip(lex, ",")
		}
		if err = want(lex, ")"); err != nil {
			return nil, err
		}
	}
	p.EndPos = lex.Peek().Pos
	return p, nil
}

// parseFor reads Ident "in" Expr Block after "for".
func parseFor(lex *lexer.PeekingLexer) (*ForStmt, error) {
	f := &ForStmt{Pos: lex.Peek().Pos}
	var err error
	if f.Var, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if err = want(lex, "in"); err != nil {
		return nil, err
	}
	if f.Iter, err = parseExpr(lex); err != nil {
		return nil, err
	}
	if f.Body, err = block(lex); err != nil {
		return nil, err
	}
	f.EndPos = lex.Peek().Pos
	return f, nil
}

// parseMatch reads Expr "{" Arm* "}" after "match".
func parseMatch(lex *lexer.PeekingLexer) (*Match, error) {
	m := &Match{Pos: lex.Peek().Pos}
	var err error
	if m.Subject, err = parseExpr(lex); err != nil {
		return nil, err
	}
	if err = want(lex, "{"); err != nil {
		return nil, err
	}
	for isValue(lex.Peek()) {
		a, err := parseArm(lex)
		if err != nil {
			return nil, err
		}
		m.Arms = append(m.Arms, a)
	}
	if err = want(lex, "}"); err != nil {
		return nil, err
	}
	m.EndPos = lex.Peek().Pos
	return m, nil
}

// parseArm reads Value "=>" (Expr | Block) ","?; a "{" not followed by a field opens
// the block.
func parseArm(lex *lexer.PeekingLexer) (*Arm, error) {
	a := &Arm{Pos: lex.Peek().Pos, Pattern: &Value{}}
	a.Pattern.parse(lex)
	var err error
	if err = want(lex, "=>"); err != nil {
		return nil, err
	}
	if lex.Peek().Value == "{" && !fieldFollows(lex) {
		a.Block = &Block{}
		err = a.Block.parse(lex)
	} else {
		a.Expr, err = parseExpr(lex)
	}
	if err != nil {
		return nil, err
	}
	skip(lex, ",")
	a.EndPos = lex.Peek().Pos
	return a, nil
}

// isValue reports whether t is a value token: a string, duration, number, vault URL or
// identifier.
func isValue(t *lexer.Token) bool {
	switch t.Type {
	case tokString, tokDuration, tokNumber, tokVault, tokIdent:
		return true
	}
	return false
}

// parse reads a value token; the caller has checked isValue. The value's text is the
// token's own (the file keeps its tokens).
func (v *Value) parse(lex *lexer.PeekingLexer) {
	t := lex.Next()
	v.Pos = t.Pos
	s := &t.Value
	switch t.Type {
	case tokString:
		v.String = s
	case tokDuration:
		v.Duration = s
	case tokNumber:
		v.Number = s
	case tokVault:
		v.Vault = s
	default:
		v.Ident = s
	}
	v.EndPos = lex.Peek().Pos
}

// parseLiteral reads an array, a record or a value.
func parseLiteral(lex *lexer.PeekingLexer) (*Literal, error) {
	t := lex.Peek()
	l := &Literal{Pos: t.Pos}
	var err error
	switch {
	case t.Value == "[":
		l.Array = &Array{}
		err = l.Array.parse(lex)
	case t.Value == "{":
		l.Record = &Record{}
		err = l.Record.parse(lex)
	case isValue(t):
		l.Value = &Value{}
		l.Value.parse(lex)
	default:
		return nil, unexpected(lex, "a value, array or record")
	}
	l.EndPos = lex.Peek().Pos
	return l, err
}

// parseMetaEntry reads Ident ("=" | ":") Literal ","?; the caller has checked the
// identifier.
func parseMetaEntry(lex *lexer.PeekingLexer) (*MetaEntry, error) {
	t := lex.Next()
	m := &MetaEntry{Pos: t.Pos, Key: t.Value}
	if v := lex.Peek().Value; v != "=" && v != ":" {
		return nil, unexpected(lex, `"="`)
	}
	lex.Next()
	var err error
	if m.Value, err = parseLiteral(lex); err != nil {
		return nil, err
	}
	skip(lex, ",")
	m.EndPos = lex.Peek().Pos
	return m, nil
}

// parseWithSetting reads Ident "=" (Array | Value); the caller has checked the
// identifier.
func parseWithSetting(lex *lexer.PeekingLexer) (*WithSetting, error) {
	t := lex.Next()
	w := &WithSetting{Pos: t.Pos, Key: t.Value}
	if err := want(lex, "="); err != nil {
		return nil, err
	}
	switch t := lex.Peek(); {
	case t.Value == "[":
		w.Array = &Array{}
		if err := w.Array.parse(lex); err != nil {
			return nil, err
		}
	case isValue(t):
		w.Value = &Value{}
		w.Value.parse(lex)
	default:
		return nil, unexpected(lex, "an array or a value")
	}
	w.EndPos = lex.Peek().Pos
	return w, nil
}

// parse reads Ident ("<" Type ("," Type)* ">")?.
func (ty *Type) parse(lex *lexer.PeekingLexer) error { return ty.parseAt(lex, 1) }

// parseAt is parse of a type nested depth levels deep (1: not nested). Its own depth
// bounds its recursion: the lexer's count of a bracket level starts again at each ",",
// which separates type arguments while the enclosing types are still being parsed
// (A<B,A<B,A<B,… nests without that count growing).
func (ty *Type) parseAt(lex *lexer.PeekingLexer, depth int) error {
	t := lex.Next()
	ty.Pos, ty.Name = t.Pos, t.Value
	if depth > MaxChainDepth {
		return &Error{Line: t.Pos.Line, Column: t.Pos.Column, Offset: t.Pos.Offset, Msg: fmt.Sprintf("type nested deeper than %d levels", MaxChainDepth), Err: ErrNesting}
	}
	if skip(lex, "<") {
		for {
			if lex.Peek().Type != tokIdent {
				return unexpected(lex, "a type")
			}
			a := &Type{}
			if err := a.parseAt(lex, depth+1); err != nil {
				return err
			}
			ty.Args = append(ty.Args, a)
			if !skip(lex, ",") {
				break
			}
		}
		if err := want(lex, ">"); err != nil {
			return err
		}
	}
	ty.EndPos = lex.Peek().Pos
	return nil
}

// parseTry reads Block Catch* after "try".
func parseTry(lex *lexer.PeekingLexer) (*TryStmt, error) {
	s := &TryStmt{Pos: lex.Peek().Pos}
	var err error
	if s.Body, err = block(lex); err != nil {
		return nil, err
	}
	for lex.Peek().Value == "catch" {
		c, err := parseCatch(lex)
		if err != nil {
			return nil, err
		}
		s.Catches = append(s.Catches, c)
	}
	s.EndPos = lex.Peek().Pos
	return s, nil
}

// parseCatch reads "catch" "(" Ident Ident? ")" Block.
func parseCatch(lex *lexer.PeekingLexer) (*Catch, error) {
	c := &Catch{Pos: lex.Next().Pos}
	var err error
	if err = want(lex, "("); err != nil {
		return nil, err
	}
	if c.First, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if t := lex.Peek(); t.Type == tokIdent {
		c.Second = lex.Next().Value
	}
	if err = want(lex, ")"); err != nil {
		return nil, err
	}
	if c.Body, err = block(lex); err != nil {
		return nil, err
	}
	c.EndPos = lex.Peek().Pos
	return c, nil
}

// parseReturn reads Expr? ";" after "return".
func parseReturn(lex *lexer.PeekingLexer) (*ReturnStmt, error) {
	r := &ReturnStmt{Pos: lex.Peek().Pos}
	var err error
	if startsExpr(lex.Peek()) {
		if r.Value, err = parseExpr(lex); err != nil {
			return nil, err
		}
	}
	if err = want(lex, ";"); err != nil {
		return nil, err
	}
	r.EndPos = lex.Peek().Pos
	return r, nil
}

// parseExprStmt reads Expr (AssignOp Expr)? ";"?.
func parseExprStmt(lex *lexer.PeekingLexer) (*ExprStmt, error) {
	s := &ExprStmt{Pos: lex.Peek().Pos}
	var err error
	if s.Target, err = parseExpr(lex); err != nil {
		return nil, err
	}
	switch op := lex.Peek().Value; op {
	case "=", "+=", "-=", "*=", "/=", "%=":
		lex.Next()
		s.Op = op
		if s.Value, err = parseExpr(lex); err != nil {
			return nil, err
		}
	}
	s.Semi = skip(lex, ";")
	s.EndPos = lex.Peek().Pos
	return s, nil
}

// operand is the storage of one operand: a Unary, its Primary and the text a field
// of the Primary points to, allocated together.
type operand struct {
	u    Unary
	p    Primary
	text string
}

// exprStorage is an expression allocated together with its first operand.
type exprStorage struct {
	e    Expr
	left operand
}

// parse reads Unary ((BinOp | "in") Unary)*, the first operand into left.
func (e *Expr) parse(lex *lexer.PeekingLexer, left *operand) error {
	e.Pos = lex.Peek().Pos
	if err := left.parse(lex); err != nil {
		return err
	}
	e.Left = &left.u
	var opsBuf [8]string
	var operandsBuf [8]*Unary
	ops, operands := opsBuf[:0], operandsBuf[:0]
	for t := lex.Peek(); t.Type == tokBinOp || t.Value == "in"; t = lex.Peek() {
		lex.Next()
		ops = append(ops, t.Value)
		o := new(operand)
		if err := o.parse(lex); err != nil {
			return err
		}
		operands = append(operands, &o.u)
	}
	e.Ops, e.Operands = exact(ops), exact(operands)
	e.EndPos = lex.Peek().Pos
	return nil
}

func parseExpr(lex *lexer.PeekingLexer) (*Expr, error) {
	s := new(exprStorage)
	return &s.e, s.e.parse(lex, &s.left)
}

// parse reads ("!" | "not" | "-")* Primary Suffix* into o.u.
func (o *operand) parse(lex *lexer.PeekingLexer) error {
	u := &o.u
	u.Pos = lex.Peek().Pos
	for t := lex.Peek(); t.Value == "!" || t.Value == "not" || t.Value == "-"; t = lex.Peek() {
		lex.Next()
		u.Ops = append(u.Ops, t.Value)
	}
	if err := o.parsePrimary(lex); err != nil {
		return err
	}
	u.Primary = &o.p
	var err error
	var buf [8]*Suffix
	suffix := buf[:0]
	for {
		t := lex.Peek()
		var s *Suffix
		switch t.Value {
		case ".":
			lex.Next()
			s = &Suffix{Pos: t.Pos}
			if s.Field, err = ident(lex, "an identifier"); err != nil {
				return err
			}
		case "(":
			lex.Next()
			s = &Suffix{Pos: t.Pos, Call: true}
			if s.Args, err = parseArgs(lex); err != nil {
				return err
			}
		case "[":
			lex.Next()
			s = &Suffix{Pos: t.Pos}
			if s.Index, err = parseExpr(lex); err != nil {
				return err
			}
			if err = want(lex, "]"); err != nil {
				return err
			}
		}
		if s == nil {
			break
		}
		suffix = append(suffix, s)
	}
	u.Suffix = exact(suffix)
	u.EndPos = lex.Peek().Pos
	return nil
}

// parseArgs reads (Arg ("," Arg)* ","?)? ")" after "(".
func parseArgs(lex *lexer.PeekingLexer) ([]*Arg, error) {
	var buf [8]*Arg
	args := buf[:0]
	if startsExpr(lex.Peek()) {
		for {
			a := &Arg{Pos: lex.Peek().Pos}
			if lex.Peek().Type == tokIdent {
				if sep := tokAt(lex, 1).Value; sep == "=" || sep == ":" {
					a.Name = lex.Next().Value
					lex.Next()
				}
			}
			var err error
			if a.Value, err = parseExpr(lex); err != nil {
				return nil, err
			}
			args = append(args, a)
			if lex.Peek().Value != "," || tokAt(lex, 1).Value == ")" {
				break
			}
			lex.Next()
		}
		skip(lex, ",")
	}
	return exact(args), want(lex, ")")
}

// parsePrimary reads an operand: an if expression, a name (possibly a lambda parameter
// or a typed literal), a string, duration, number or vault URL, an array, a record, or
// a parenthesised expression.
func (o *operand) parsePrimary(lex *lexer.PeekingLexer) error {
	t := lex.Peek()
	p := &o.p
	p.Pos = t.Pos
	var err error
	switch {
	case t.Value == "if":
		lex.Next()
		p.If, err = parseIfExpr(lex)
	case t.Type == tokIdent:
		lex.Next()
		o.text = t.Value
		p.Name = &o.text
		if skip(lex, "=>") {
			p.Lambda, err = parseExpr(lex)
		} else if fieldFollows(lex) {
			lex.Next()
			var buf [8]*Field
			typed := buf[:0]
			for isKey(lex.Peek()) {
				f, ferr := parseField(lex)
				if ferr != nil {
					return ferr
				}
				typed = append(typed, f)
				skip(lex, ",")
			}
			p.Typed = exact(typed)
			err = want(lex, "}")
		}
	case t.Type == tokString, t.Type == tokDuration, t.Type == tokNumber, t.Type == tokVault:
		lex.Next()
		o.text = t.Value
		switch t.Type {
		case tokString:
			p.String = &o.text
		case tokDuration:
			p.Duration = &o.text
		case tokNumber:
			p.Number = &o.text
		default:
			p.Vault = &o.text
		}
	case t.Value == "[":
		p.Array = &Array{}
		err = p.Array.parse(lex)
	case t.Value == "{":
		p.Record = &Record{}
		err = p.Record.parse(lex)
	case t.Value == "(":
		lex.Next()
		if p.Paren, err = parseExpr(lex); err == nil {
			err = want(lex, ")")
		}
	default:
		return unexpected(lex, "an expression")
	}
	if err != nil {
		return err
	}
	p.EndPos = lex.Peek().Pos
	return nil
}

// parseIfExpr reads Expr Block ("else" "if" Expr Block)* "else" Block after "if".
func parseIfExpr(lex *lexer.PeekingLexer) (*IfExpr, error) {
	x := &IfExpr{Pos: lex.Peek().Pos}
	var err error
	if x.Cond, err = parseExpr(lex); err != nil {
		return nil, err
	}
	if x.Then, err = block(lex); err != nil {
		return nil, err
	}
	for lex.Peek().Value == "else" && tokAt(lex, 1).Value == "if" {
		lex.Next()
		lex.Next()
		e := &ElseIfExpr{}
		if e.Cond, err = parseExpr(lex); err != nil {
			return nil, err
		}
		if e.Then, err = block(lex); err != nil {
			return nil, err
		}
		x.ElseIfs = append(x.ElseIfs, e)
	}
	if err = want(lex, "else"); err != nil {
		return nil, err
	}
	if x.Else, err = block(lex); err != nil {
		return nil, err
	}
	x.EndPos = lex.Peek().Pos
	return x, nil
}

// parse reads "[" (Expr ("," Expr)* ","?)? "]".
func (a *Array) parse(lex *lexer.PeekingLexer) error {
	a.Pos = lex.Next().Pos
	var buf [8]*Expr
	elems := buf[:0]
	if startsExpr(lex.Peek()) {
		for {
			e, err := parseExpr(lex)
			if err != nil {
				return err
			}
			elems = append(elems, e)
			if lex.Peek().Value != "," || tokAt(lex, 1).Value == "]" {
				break
			}
			lex.Next()
		}
		skip(lex, ",")
	}
	a.Elems = exact(elems)
	if err := want(lex, "]"); err != nil {
		return err
	}
	a.EndPos = lex.Peek().Pos
	return nil
}

// parse reads "{" (Field ","?)* "}".
func (r *Record) parse(lex *lexer.PeekingLexer) error {
	r.Pos = lex.Next().Pos
	var buf [8]*Field
	fields := buf[:0]
	for isKey(lex.Peek()) {
		f, err := parseField(lex)
		if err != nil {
			return err
		}
		fields = append(fields, f)
		skip(lex, ",")
	}
	r.Fields = exact(fields)
	if err := want(lex, "}"); err != nil {
		return err
	}
	r.EndPos = lex.Peek().Pos
	return nil
}

// parseField reads (Ident | String) ":" Expr.
func parseField(lex *lexer.PeekingLexer) (*Field, error) {
	t := lex.Next()
	f := &Field{Pos: t.Pos, Key: t.Value}
	var err error
	if err = want(lex, ":"); err != nil {
		return nil, err
	}
	if f.Value, err = parseExpr(lex); err != nil {
		return nil, err
	}
	f.EndPos = lex.Peek().Pos
	return f, nil
}
