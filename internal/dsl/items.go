package dsl

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

// The items and everything in them are parsed by hand, like the statements (syntax.go):
// Item implements participle.Parseable, answering participle.NextMatch unless the next
// token is an item's keyword, and the participle grammar of File (ast.go) reads items up
// to the end of the input. Each parser follows the production in its node's doc comment,
// makes every choice on the same tokens as participle's grammar of these nodes did
// (including its lookahead guards: "policy" Ident, "data_classification" "{",
// "search"/"filter" "{"), and reports the same errors: "unexpected X, expected Y" at the
// first token that does not fit, Y naming the first term the grammar wanted there. Each
// parser of a construct that starts with a keyword is called with that keyword next.

// Parse implements participle.Parseable for an item.
func (it *Item) Parse(lex *lexer.PeekingLexer) error {
	t := lex.Peek()
	it.Pos = t.Pos
	var err error
	switch t.Value {
	case "metadata":
		it.Metadata, err = parseMetadata(lex)
	case "agent":
		it.Agent, err = parseAgent(lex)
	case "policy":
		it.Policy, err = parsePolicy(lex)
	case "type":
		it.Type, err = parseTypeDef(lex)
	case "function":
		it.Function, err = parseFunction(lex)
	case "schedule":
		it.Schedule, err = parseSchedule(lex)
	case "channel":
		it.Channel, err = parseChannel(lex)
	case "memory":
		m := &Memory{Pos: lex.Next().Pos}
		m.Name, m.Entries, m.EndPos, err = parseNested(lex, "search")
		it.Memory = m
	case "webhook":
		w := &Webhook{Pos: lex.Next().Pos}
		w.Name, w.Entries, w.EndPos, err = parseNested(lex, "filter")
		it.Webhook = w
	default:
		return participle.NextMatch
	}
	if err != nil {
		return err
	}
	it.EndPos = lex.Peek().Pos
	return nil
}

// parseMetadata reads "metadata" "{" MetaEntry* "}".
func parseMetadata(lex *lexer.PeekingLexer) (*Metadata, error) {
	m := &Metadata{Pos: lex.Next().Pos}
	if err := want(lex, "{"); err != nil {
		return nil, err
	}
	var buf [8]*MetaEntry
	entries := buf[:0]
	for lex.Peek().Type == tokIdent {
		e, err := parseMetaEntry(lex)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	m.Entries = exact(entries)
	if err := want(lex, "}"); err != nil {
		return nil, err
	}
	m.EndPos = lex.Peek().Pos
	return m, nil
}

// parseAgent reads "agent" Ident ("(" (Param ","?)* ")")? ("->" Type)? "{" AgentItem*
// "}".
func parseAgent(lex *lexer.PeekingLexer) (*Agent, error) {
	a := &Agent{Pos: lex.Next().Pos}
	var err error
	if a.Name, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if skip(lex, "(") {
		a.HasParams = true
		if a.Params, err = parseParams(lex, ")"); err != nil {
			return nil, err
		}
	}
	if skip(lex, "->") {
		if a.Returns, err = typeRef(lex); err != nil {
			return nil, err
		}
	}
	if err = want(lex, "{"); err != nil {
		return nil, err
	}
	var buf [8]*AgentItem
	body := buf[:0]
	for {
		it, err := parseAgentItem(lex)
		if err != nil {
			return nil, err
		}
		if it == nil {
			break
		}
		body = append(body, it)
	}
	a.Body = exact(body)
	if err = want(lex, "}"); err != nil {
		return nil, err
	}
	a.EndPos = lex.Peek().Pos
	return a, nil
}

// parseParams reads (Param ","?)* and the closing bracket end.
func parseParams(lex *lexer.PeekingLexer, end string) ([]*Param, error) {
	var buf [8]*Param
	params := buf[:0]
	for t := lex.Peek(); t.Type == tokIdent; t = lex.Peek() {
		lex.Next()
		p := &Param{Pos: t.Pos, Name: t.Value}
		if err := want(lex, ":"); err != nil {
			return nil, err
		}
		var err error
		if p.Type, err = typeRef(lex); err != nil {
			return nil, err
		}
		p.EndPos = lex.Peek().Pos
		params = append(params, p)
		skip(lex, ",")
	}
	return exact(params), want(lex, end)
}

// typeRef reads a required type.
func typeRef(lex *lexer.PeekingLexer) (*Type, error) {
	if lex.Peek().Type != tokIdent {
		return nil, unexpected(lex, "a type")
	}
	ty := &Type{}
	return ty, ty.parse(lex)
}

// parseAgentItem reads one item of an agent body, or returns nil if the next token
// starts none.
func parseAgentItem(lex *lexer.PeekingLexer) (*AgentItem, error) {
	t := lex.Peek()
	it := &AgentItem{Pos: t.Pos}
	var err error
	switch t.Value {
	case "capabilities":
		it.Capabilities, err = parseCapabilities(lex)
	case "policy":
		it.Policy, err = parsePolicy(lex)
	case "function":
		it.Function, err = parseFunction(lex)
	case "with":
		it.With, err = parseWith(lex)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	it.EndPos = lex.Peek().Pos
	return it, nil
}

// parseCapabilities reads "capabilities" ("=" | ":") Array.
func parseCapabilities(lex *lexer.PeekingLexer) (*Capabilities, error) {
	c := &Capabilities{Pos: lex.Next().Pos}
	if v := lex.Peek().Value; v != "=" && v != ":" {
		return nil, unexpected(lex, `"="`)
	}
	lex.Next()
	if lex.Peek().Value != "[" {
		return nil, unexpected(lex, "an array")
	}
	c.List = &Array{}
	if err := c.List.parse(lex); err != nil {
		return nil, err
	}
	c.EndPos = lex.Peek().Pos
	return c, nil
}

// parsePolicy reads "policy" Ident "{" Rule* "}".
func parsePolicy(lex *lexer.PeekingLexer) (*Policy, error) {
	p := &Policy{Pos: lex.Next().Pos}
	var err error
	if p.Name, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if err = want(lex, "{"); err != nil {
		return nil, err
	}
	var buf [8]*Rule
	rules := buf[:0]
	for {
		t := lex.Peek()
		switch t.Value {
		case "allow", "deny", "require", "audit":
		default:
			p.Rules = exact(rules)
			if err = want(lex, "}"); err != nil {
				return nil, err
			}
			p.EndPos = lex.Peek().Pos
			return p, nil
		}
		r, err := parseRule(lex)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
}

// parseRule reads ("allow" | "deny" | "require" | "audit") ":" Expr ("if" Expr)?.
func parseRule(lex *lexer.PeekingLexer) (*Rule, error) {
	t := lex.Next()
	r := &Rule{Pos: t.Pos, Kind: t.Value}
	var err error
	if err = want(lex, ":"); err != nil {
		return nil, err
	}
	if r.Selector, err = parseExpr(lex); err != nil {
		return nil, err
	}
	if skip(lex, "if") {
		if r.Condition, err = parseExpr(lex); err != nil {
			return nil, err
		}
	}
	r.EndPos = lex.Peek().Pos
	return r, nil
}

// parseFunction reads "function" Ident "(" (Param ","?)* ")" ("->" Type)? Block.
func parseFunction(lex *lexer.PeekingLexer) (*Function, error) {
	f := &Function{Pos: lex.Next().Pos}
	var err error
	if f.Name, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if err = want(lex, "("); err != nil {
		return nil, err
	}
	if f.Params, err = parseParams(lex, ")"); err != nil {
		return nil, err
	}
	if skip(lex, "->") {
		if f.Returns, err = typeRef(lex); err != nil {
			return nil, err
		}
	}
	if f.Body, err = block(lex); err != nil {
		return nil, err
	}
	f.EndPos = lex.Peek().Pos
	return f, nil
}

// parseWith reads "with" (WithSetting ","?)* Block.
func parseWith(lex *lexer.PeekingLexer) (*WithBlock, error) {
	w := &WithBlock{Pos: lex.Next().Pos}
	var buf [8]*WithSetting
	settings := buf[:0]
	for lex.Peek().Type == tokIdent {
		s, err := parseWithSetting(lex)
		if err != nil {
			return nil, err
		}
		settings = append(settings, s)
		skip(lex, ",")
	}
	w.Settings = exact(settings)
	var err error
	if w.Body, err = block(lex); err != nil {
		return nil, err
	}
	w.EndPos = lex.Peek().Pos
	return w, nil
}

// parseTypeDef reads "type" Ident "=" ("{" (Param ","?)* "}" | Ident).
func parseTypeDef(lex *lexer.PeekingLexer) (*TypeDef, error) {
	d := &TypeDef{Pos: lex.Next().Pos}
	var err error
	if d.Name, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if err = want(lex, "="); err != nil {
		return nil, err
	}
	switch t := lex.Peek(); {
	case t.Value == "{":
		lex.Next()
		d.IsRecord = true
		if d.Fields, err = parseParams(lex, "}"); err != nil {
			return nil, err
		}
	case t.Type == tokIdent:
		lex.Next()
		d.Alias = t.Value
	default:
		return nil, unexpected(lex, `"{"`)
	}
	d.EndPos = lex.Peek().Pos
	return d, nil
}

// parseSchedule reads "schedule" Ident "{" Pair* "}".
func parseSchedule(lex *lexer.PeekingLexer) (*Schedule, error) {
	s := &Schedule{Pos: lex.Next().Pos}
	var err error
	if s.Name, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if err = want(lex, "{"); err != nil {
		return nil, err
	}
	var buf [8]*Pair
	entries := buf[:0]
	for t := lex.Peek(); t.Type == tokIdent; t = lex.Peek() {
		lex.Next()
		p := &Pair{Pos: t.Pos, Key: t.Value}
		if v := lex.Peek().Value; v != "=" && v != ":" {
			return nil, unexpected(lex, `"="`)
		}
		lex.Next()
		if p.Value, err = valueOf(lex); err != nil {
			return nil, err
		}
		skip(lex, ",")
		p.EndPos = lex.Peek().Pos
		entries = append(entries, p)
	}
	s.Entries = exact(entries)
	if err = want(lex, "}"); err != nil {
		return nil, err
	}
	s.EndPos = lex.Peek().Pos
	return s, nil
}

// valueOf reads a required value.
func valueOf(lex *lexer.PeekingLexer) (*Value, error) {
	if !isValue(lex.Peek()) {
		return nil, unexpected(lex, "a value")
	}
	v := &Value{}
	v.parse(lex)
	return v, nil
}

// parseChannel reads "channel" Ident "{" ChannelItem* "}".
func parseChannel(lex *lexer.PeekingLexer) (*Channel, error) {
	c := &Channel{Pos: lex.Next().Pos}
	var err error
	if c.Name, err = ident(lex, "an identifier"); err != nil {
		return nil, err
	}
	if err = want(lex, "{"); err != nil {
		return nil, err
	}
	var buf [8]*ChannelItem
	entries := buf[:0]
	for {
		t := lex.Peek()
		it := &ChannelItem{Pos: t.Pos}
		switch {
		case t.Value == "policy" && tokAt(lex, 1).Type == tokIdent:
			if it.Policy, err = parsePolicy(lex); err != nil {
				return nil, err
			}
		case t.Value == "data_classification" && tokAt(lex, 1).Value == "{":
			if it.DataClassification, err = parseClassifications(lex); err != nil {
				return nil, err
			}
		case t.Type == tokIdent:
			if it.Setting, err = parseSetting(lex); err != nil {
				return nil, err
			}
			skip(lex, ",")
		default:
			c.Entries = exact(entries)
			if err = want(lex, "}"); err != nil {
				return nil, err
			}
			c.EndPos = lex.Peek().Pos
			return c, nil
		}
		it.EndPos = lex.Peek().Pos
		entries = append(entries, it)
	}
}

// parseClassifications reads "data_classification" "{" (Classification ","?)* "}".
func parseClassifications(lex *lexer.PeekingLexer) ([]*Classification, error) {
	lex.Next()
	lex.Next()
	var buf [8]*Classification
	list := buf[:0]
	for t := lex.Peek(); t.Type == tokIdent; t = lex.Peek() {
		lex.Next()
		c := &Classification{Pos: t.Pos, Key: t.Value}
		if err := want(lex, ":"); err != nil {
			return nil, err
		}
		var err error
		if c.Value, err = ident(lex, "an identifier"); err != nil {
			return nil, err
		}
		c.EndPos = lex.Peek().Pos
		list = append(list, c)
		skip(lex, ",")
	}
	return exact(list), want(lex, "}")
}

// parseSetting reads Ident ("=" | ":") (Array | Value).
func parseSetting(lex *lexer.PeekingLexer) (*Setting, error) {
	t := lex.Next()
	s := &Setting{Pos: t.Pos, Key: t.Value}
	if v := lex.Peek().Value; v != "=" && v != ":" {
		return nil, unexpected(lex, `"="`)
	}
	lex.Next()
	switch t := lex.Peek(); {
	case t.Value == "[":
		s.Array = &Array{}
		if err := s.Array.parse(lex); err != nil {
			return nil, err
		}
	case isValue(t):
		s.Value = &Value{}
		s.Value.parse(lex)
	default:
		return nil, unexpected(lex, "an array or a value")
	}
	s.EndPos = lex.Peek().Pos
	return s, nil
}

// parseNested reads Ident "{" NestedItem* "}" after "memory" or "webhook", and returns
// the name, the items and the end position. sub, the kind's sub-block keyword ("search"
// for a memory, "filter" for a webhook), followed by "{" opens a sub-block; elsewhere it
// is a key like any other, followed by a value.
func parseNested(lex *lexer.PeekingLexer, sub string) (name string, items []*NestedItem, end lexer.Position, err error) {
	if name, err = ident(lex, "an identifier"); err != nil {
		return "", nil, end, err
	}
	if err = want(lex, "{"); err != nil {
		return "", nil, end, err
	}
	var buf [8]*NestedItem
	list := buf[:0]
	for {
		t := lex.Peek()
		n := &NestedItem{Pos: t.Pos}
		switch {
		case t.Value == sub && tokAt(lex, 1).Value == "{":
			lex.Next()
			lex.Next()
			n.Block = t.Value
			var pairs []*BarePair
			for lex.Peek().Type == tokIdent {
				p, err := parseBarePair(lex)
				if err != nil {
					return "", nil, end, err
				}
				pairs = append(pairs, p)
			}
			n.Pairs = pairs
			if err = want(lex, "}"); err != nil {
				return "", nil, end, err
			}
		case t.Type == tokIdent:
			if n.Pair, err = parseBarePair(lex); err != nil {
				return "", nil, end, err
			}
		default:
			if err = want(lex, "}"); err != nil {
				return "", nil, end, err
			}
			return name, exact(list), lex.Peek().Pos, nil
		}
		n.EndPos = lex.Peek().Pos
		list = append(list, n)
	}
}

// parseBarePair reads Ident Value ","?.
func parseBarePair(lex *lexer.PeekingLexer) (*BarePair, error) {
	t := lex.Next()
	p := &BarePair{Pos: t.Pos, Key: t.Value}
	var err error
	if p.Value, err = valueOf(lex); err != nil {
		return nil, err
	}
	skip(lex, ",")
	p.EndPos = lex.Peek().Pos
	return p, nil
}
