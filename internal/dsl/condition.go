package dsl

import "strings"

// selector checks a rule selector: true, false, a string, or a non-empty array of strings.
func (f *File) selector(e *Expr) *refusal {
	if n := f.tokenCount(e); n > MaxConditionTokens {
		return refuse("rule 6", e.Pos, "rule selector has %d tokens, more than %d", n, MaxConditionTokens)
	}
	bad := refuse("rule 6", e.Pos, "rule selector %s is not true, false, a string or a non-empty array of strings", f.clip(e))
	if len(e.Ops) > 0 || len(e.Left.Ops) > 0 || len(e.Left.Suffix) > 0 {
		return bad
	}
	p := e.Left.Primary
	switch {
	case p.String != nil:
		return nil
	case p.Name != nil && p.Lambda == nil && p.Typed == nil && (*p.Name == "true" || *p.Name == "false"):
		return nil
	case p.Array != nil && len(p.Array.Elems) > 0:
		for _, el := range p.Array.Elems {
			if _, ok := stringLiteral(el); !ok {
				return refuse("rule 6", el.Pos, "rule selector element %s is not a string", f.clip(el))
			}
		}
		return nil
	}
	return bad
}

var conditionOps = map[string]bool{"||": true, "&&": true, "==": true, "!=": true, "in": true, "<": true, "<=": true, ">": true, ">=": true}

func isComparison(op string) bool { return op == "<" || op == "<=" || op == ">" || op == ">=" }

// condition checks a rule condition: literals, principal, invocation.… and context.…
// paths, ! not && || == != in < <= > >= and parentheses, integer comparisons only.
func (f *File) condition(e *Expr) *refusal {
	if n := f.tokenCount(e); n > MaxConditionTokens {
		return refuse("rule 6", e.Pos, "condition has %d tokens, more than %d", n, MaxConditionTokens)
	}
	return f.condExpr(e, 0)
}

// tokenCount returns the number of tokens of an expression.
func (f *File) tokenCount(e *Expr) int {
	return f.tokenIndex(e.EndPos.Offset) - f.tokenIndex(e.Pos.Offset)
}

func (f *File) condExpr(e *Expr, depth int) *refusal {
	if depth > MaxConditionDepth {
		return refuse("rule 6", e.Pos, "condition nested deeper than %d levels", MaxConditionDepth)
	}
	operands := make([]*Unary, 0, 1+len(e.Ops))
	operands = append(operands, e.Left)
	operands = append(operands, e.Operands...)
	for i, op := range e.Ops {
		opPos := operands[i].EndPos // the operator is the token after its left operand
		if !conditionOps[op] {
			return refuse("rule 6", opPos, "unsupported operator %q in policy condition", op)
		}
		if !isComparison(op) {
			continue
		}
		if i > 0 && isComparison(e.Ops[i-1]) {
			return refuse("rule 6", opPos, "chained comparison %q in policy condition", op)
		}
		for _, u := range []*Unary{operands[i], operands[i+1]} {
			if !integerOperand(u) {
				return refuse("rule 6", u.Pos, "comparison %q needs integer operands, not %s", op, f.clipUnary(u))
			}
		}
	}
	for _, u := range operands {
		if rf := f.condUnary(u, depth); rf != nil {
			return rf
		}
	}
	return nil
}

func (f *File) clipUnary(u *Unary) string { return clipText(f.text(u.Pos, u.EndPos)) }

// integerOperand reports whether u is an integer literal or an invocation/context path.
func integerOperand(u *Unary) bool {
	if len(u.Ops) > 0 {
		return false
	}
	p := u.Primary
	if p.Number != nil && len(u.Suffix) == 0 {
		return !strings.Contains(*p.Number, ".")
	}
	return isPath(u)
}

// isPath reports whether u is invocation.… or context.… with field accesses only.
func isPath(u *Unary) bool {
	p := u.Primary
	if p.Name == nil || p.Lambda != nil || p.Typed != nil || (*p.Name != "invocation" && *p.Name != "context") || len(u.Suffix) == 0 {
		return false
	}
	for _, s := range u.Suffix {
		if s.Field == "" {
			return false
		}
	}
	return true
}

func (f *File) condUnary(u *Unary, depth int) *refusal {
	for _, op := range u.Ops {
		if op == "-" {
			return refuse("rule 6", u.Pos, "unsupported operator \"-\" in policy condition")
		}
	}
	if isPath(u) {
		return nil
	}
	p := u.Primary
	if len(u.Suffix) > 0 {
		at := p.Pos
		if p.Name != nil && (*p.Name == "invocation" || *p.Name == "context") {
			for _, s := range u.Suffix {
				if s.Field == "" {
					at = s.Pos
					break
				}
			}
		}
		return refuse("rule 6", at, "unsupported expression %s in policy condition (only invocation.… and context.… paths)", f.clipUnary(u))
	}
	switch {
	case p.Number != nil && strings.Contains(*p.Number, "."):
		return refuse("rule 6", p.Pos, "number %s in policy condition is not an integer", *p.Number)
	case p.String != nil, p.Number != nil:
		return nil
	case p.Name != nil && p.Lambda == nil && p.Typed == nil:
		switch *p.Name {
		case "true", "false", "principal":
			return nil
		}
		return refuse("rule 6", p.Pos, "unsupported name %q in policy condition (only principal, invocation.… and context.… paths)", *p.Name)
	case p.Paren != nil:
		return f.condExpr(p.Paren, depth+1)
	case p.Array != nil:
		if depth+1 > MaxConditionDepth {
			return refuse("rule 6", p.Pos, "condition nested deeper than %d levels", MaxConditionDepth)
		}
		for _, el := range p.Array.Elems {
			if len(el.Ops) > 0 || len(el.Left.Ops) > 0 || len(el.Left.Suffix) > 0 {
				return refuse("rule 6", el.Pos, "array element %s in policy condition is not a literal", f.clip(el))
			}
			ep := el.Left.Primary
			if ep.Number != nil && strings.Contains(*ep.Number, ".") {
				return refuse("rule 6", el.Pos, "number %s in policy condition is not an integer", *ep.Number)
			}
			literal := ep.String != nil || ep.Number != nil ||
				(ep.Name != nil && ep.Lambda == nil && ep.Typed == nil && (*ep.Name == "true" || *ep.Name == "false"))
			if !literal {
				return refuse("rule 6", el.Pos, "array element %s in policy condition is not a literal", f.clip(el))
			}
		}
		return nil
	}
	return refuse("rule 6", p.Pos, "unsupported expression %s in policy condition", clipText(f.text(p.Pos, p.EndPos)))
}
