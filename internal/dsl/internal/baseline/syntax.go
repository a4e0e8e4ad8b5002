package baseline

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// Statements, expressions and values are parsed by hand: Block, Expr, Array, Record,
// Literal, Value, Type, MetaEntry and WithSetting implement participle.Parseable, so the
// participle grammar of the items delegates to them, and they build every node below
// them directly from the token stream. They follow the productions documented on each
// node type, decide every choice on the next token or on the same lookahead as the
// grammar, and report errors in the grammar's words: "unexpected X, expected Y" at the
// first token that does not fit.

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

// Parse implements participle.Parseable for a block.
func (b *Block) Parse(lex *lexer.PeekingLexer) error {
	if lex.Peek().Value != "{" {
		return participle.NextMatch
	}
	return b.parse(lex)
}

// parse reads "{" Stmt* "}".
func (b *Block) parse(lex *lexer.PeekingLexer) error {
	b.Pos = lex.Next().Pos
	for t := lex.Peek(); t.Value != "}" && startsExpr(t); t = lex.Peek() {
		s, err := parseStmt(lex)
		if err != nil {
			return err
		}
		b.Stmts = append(b.Stmts, s)
	}
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

// Parse implements participle.Parseable for a value.
func (v *Value) Parse(lex *lexer.PeekingLexer) error {
	if !isValue(lex.Peek()) {
		return participle.NextMatch
	}
	v.parse(lex)
	return nil
}

// parse reads a value token; the caller has checked isValue.
func (v *Value) parse(lex *lexer.PeekingLexer) {
	t := lex.Next()
	v.Pos = t.Pos
	s := t.Value
	switch t.Type {
	case tokString:
		v.String = &s
	case tokDuration:
		v.Duration = &s
	case tokNumber:
		v.Number = &s
	case tokVault:
		v.Vault = &s
	default:
		v.Ident = &s
	}
	v.EndPos = lex.Peek().Pos
}

// Parse implements participle.Parseable for a literal: an array, a record or a value.
func (l *Literal) Parse(lex *lexer.PeekingLexer) error {
	t := lex.Peek()
	l.Pos = t.Pos
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
		return participle.NextMatch
	}
	l.EndPos = lex.Peek().Pos
	return err
}

// Parse implements participle.Parseable for a metadata entry.
func (m *MetaEntry) Parse(lex *lexer.PeekingLexer) error {
	t := lex.Peek()
	if t.Type != tokIdent {
		return participle.NextMatch
	}
	lex.Next()
	m.Pos, m.Key = t.Pos, t.Value
	if v := lex.Peek().Value; v != "=" && v != ":" {
		return unexpected(lex, `"="`)
	}
	lex.Next()
	m.Value = &Literal{}
	if err := m.Value.Parse(lex); err != nil {
		if err == participle.NextMatch {
			return unexpected(lex, "a value, array or record")
		}
		return err
	}
	skip(lex, ",")
	m.EndPos = lex.Peek().Pos
	return nil
}

// Parse implements participle.Parseable for a setting of a with block.
func (w *WithSetting) Parse(lex *lexer.PeekingLexer) error {
	t := lex.Peek()
	if t.Type != tokIdent {
		return participle.NextMatch
	}
	lex.Next()
	w.Pos, w.Key = t.Pos, t.Value
	if err := want(lex, "="); err != nil {
		return err
	}
	switch t := lex.Peek(); {
	case t.Value == "[":
		w.Array = &Array{}
		if err := w.Array.parse(lex); err != nil {
			return err
		}
	case isValue(t):
		w.Value = &Value{}
		w.Value.parse(lex)
	default:
		return unexpected(lex, "an array or a value")
	}
	w.EndPos = lex.Peek().Pos
	return nil
}

// Parse implements participle.Parseable for a type reference.
func (ty *Type) Parse(lex *lexer.PeekingLexer) error {
	if lex.Peek().Type != tokIdent {
		return participle.NextMatch
	}
	return ty.parse(lex)
}

// parse reads Ident ("<" Type ("," Type)* ">")?.
func (ty *Type) parse(lex *lexer.PeekingLexer) error {
	t := lex.Next()
	ty.Pos, ty.Name = t.Pos, t.Value
	if skip(lex, "<") {
		for {
			if lex.Peek().Type != tokIdent {
				return unexpected(lex, "a type")
			}
			a := &Type{}
			if err := a.parse(lex); err != nil {
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

// Parse implements participle.Parseable for an expression.
func (e *Expr) Parse(lex *lexer.PeekingLexer) error { return e.parse(lex, new(operand)) }

// parse reads Unary ((BinOp | "in") Unary)*, the first operand into left.
func (e *Expr) parse(lex *lexer.PeekingLexer, left *operand) error {
	e.Pos = lex.Peek().Pos
	if err := left.parse(lex); err != nil {
		return err
	}
	e.Left = &left.u
	for t := lex.Peek(); t.Type == tokBinOp || t.Value == "in"; t = lex.Peek() {
		lex.Next()
		e.Ops = append(e.Ops, t.Value)
		o := new(operand)
		if err := o.parse(lex); err != nil {
			return err
		}
		e.Operands = append(e.Operands, &o.u)
	}
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
		u.Suffix = append(u.Suffix, s)
	}
	u.EndPos = lex.Peek().Pos
	return nil
}

// parseArgs reads (Arg ("," Arg)* ","?)? ")" after "(".
func parseArgs(lex *lexer.PeekingLexer) ([]*Arg, error) {
	var args []*Arg
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
	return args, want(lex, ")")
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
			for isKey(lex.Peek()) {
				f, ferr := parseField(lex)
				if ferr != nil {
					return ferr
				}
				p.Typed = append(p.Typed, f)
				skip(lex, ",")
			}
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
		return unexpected(lex, "")
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

// Parse implements participle.Parseable for an array literal.
func (a *Array) Parse(lex *lexer.PeekingLexer) error {
	if lex.Peek().Value != "[" {
		return participle.NextMatch
	}
	return a.parse(lex)
}

// parse reads "[" (Expr ("," Expr)* ","?)? "]".
func (a *Array) parse(lex *lexer.PeekingLexer) error {
	a.Pos = lex.Next().Pos
	if startsExpr(lex.Peek()) {
		for {
			e, err := parseExpr(lex)
			if err != nil {
				return err
			}
			a.Elems = append(a.Elems, e)
			if lex.Peek().Value != "," || tokAt(lex, 1).Value == "]" {
				break
			}
			lex.Next()
		}
		skip(lex, ",")
	}
	if err := want(lex, "]"); err != nil {
		return err
	}
	a.EndPos = lex.Peek().Pos
	return nil
}

// Parse implements participle.Parseable for a record literal.
func (r *Record) Parse(lex *lexer.PeekingLexer) error {
	if lex.Peek().Value != "{" {
		return participle.NextMatch
	}
	return r.parse(lex)
}

// parse reads "{" (Field ","?)* "}".
func (r *Record) parse(lex *lexer.PeekingLexer) error {
	r.Pos = lex.Next().Pos
	for isKey(lex.Peek()) {
		f, err := parseField(lex)
		if err != nil {
			return err
		}
		r.Fields = append(r.Fields, f)
		skip(lex, ",")
	}
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
