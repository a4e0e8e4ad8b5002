package dsl

// visitBlocks calls fn for every block of f, in source order, including blocks nested
// inside expressions — wherever an expression may stand: a function or with body, a
// policy rule (top-level, in an agent or a channel), a capability list, a with setting, a
// metadata value, a channel setting. TestVisitBlocksEverywhere holds it to that.
func visitBlocks(f *File, fn func(*Block)) {
	w := walker{fn: fn}
	for _, it := range f.Items {
		switch {
		case it.Metadata != nil:
			for _, e := range it.Metadata.Entries {
				w.literal(e.Value)
			}
		case it.Policy != nil:
			w.policy(it.Policy)
		case it.Function != nil:
			w.block(it.Function.Body)
		case it.Agent != nil:
			for _, ai := range it.Agent.Body {
				switch {
				case ai.Capabilities != nil:
					w.array(ai.Capabilities.List)
				case ai.Policy != nil:
					w.policy(ai.Policy)
				case ai.Function != nil:
					w.block(ai.Function.Body)
				case ai.With != nil:
					for _, s := range ai.With.Settings {
						w.array(s.Array)
					}
					w.block(ai.With.Body)
				}
			}
		case it.Channel != nil:
			for _, ci := range it.Channel.Entries {
				switch {
				case ci.Policy != nil:
					w.policy(ci.Policy)
				case ci.Setting != nil:
					w.array(ci.Setting.Array)
				}
			}
		}
	}
}

func (w walker) policy(p *Policy) {
	for _, r := range p.Rules {
		w.expr(r.Selector)
		w.expr(r.Condition)
	}
}

func (w walker) literal(l *Literal) {
	if l == nil {
		return
	}
	w.array(l.Array)
	w.record(l.Record)
}

func (w walker) record(r *Record) {
	if r == nil {
		return
	}
	for _, f := range r.Fields {
		w.expr(f.Value)
	}
}

func (w walker) array(a *Array) {
	if a == nil {
		return
	}
	for _, e := range a.Elems {
		w.expr(e)
	}
}

type walker struct{ fn func(*Block) }

func (w walker) block(b *Block) {
	if b == nil {
		return
	}
	w.fn(b)
	for _, s := range b.Stmts {
		w.stmt(s)
	}
}

func (w walker) stmt(s *Stmt) {
	switch {
	case s.Let != nil:
		w.expr(s.Let.Value)
	case s.If != nil:
		w.cond(s.If.Cond)
		w.block(s.If.Then)
		for _, e := range s.If.ElseIfs {
			w.cond(e.Cond)
			w.block(e.Then)
		}
		w.block(s.If.Else)
	case s.For != nil:
		w.expr(s.For.Iter)
		w.block(s.For.Body)
	case s.Match != nil:
		w.expr(s.Match.Subject)
		for _, a := range s.Match.Arms {
			w.block(a.Block)
			w.expr(a.Expr)
		}
	case s.Try != nil:
		w.block(s.Try.Body)
		for _, c := range s.Try.Catches {
			w.block(c.Body)
		}
	case s.Return != nil:
		w.expr(s.Return.Value)
	case s.Expr != nil:
		w.expr(s.Expr.Target)
		w.expr(s.Expr.Value)
	}
}

func (w walker) cond(c *Cond) {
	w.expr(c.Value)
	w.expr(c.Expr)
}

func (w walker) expr(e *Expr) {
	if e == nil {
		return
	}
	w.unary(e.Left)
	for _, u := range e.Operands {
		w.unary(u)
	}
}

func (w walker) unary(u *Unary) {
	w.primary(u.Primary)
	for _, s := range u.Suffix {
		for _, a := range s.Args {
			w.expr(a.Value)
		}
		w.expr(s.Index)
	}
}

func (w walker) primary(p *Primary) {
	switch {
	case p.If != nil:
		w.expr(p.If.Cond)
		w.block(p.If.Then)
		for _, e := range p.If.ElseIfs {
			w.expr(e.Cond)
			w.block(e.Then)
		}
		w.block(p.If.Else)
	case p.Lambda != nil:
		w.expr(p.Lambda)
	case p.Typed != nil:
		for _, f := range p.Typed {
			w.expr(f.Value)
		}
	case p.Array != nil:
		w.array(p.Array)
	case p.Record != nil:
		w.record(p.Record)
	case p.Paren != nil:
		w.expr(p.Paren)
	}
}
