package dsl

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Result is the JSON view of a source used by "symbi dsl parse" and parse_dsl. Lists
// are empty, never null.
type Result struct {
	Source    string         `json:"source"`
	Valid     bool           `json:"valid"`
	Errors    []ErrorView    `json:"errors"`
	Metadata  map[string]any `json:"metadata"`
	Agents    []AgentView    `json:"agents"`
	Policies  []PolicyView   `json:"policies"`
	Types     []TypeView     `json:"types"`
	Functions []FunctionView `json:"functions"`
	Schedules []ScheduleView `json:"schedules"`
	Channels  []ChannelView  `json:"channels"`
	Memories  []MemoryView   `json:"memories"`
	Webhooks  []WebhookView  `json:"webhooks"`
}

// ErrorView is a positioned error.
type ErrorView struct {
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

// AgentView describes an agent and its verdict when the file is registered under the
// agent's own name.
type AgentView struct {
	Name         string         `json:"name"`
	Line         int            `json:"line"`
	Column       int            `json:"column"`
	Params       []ParamView    `json:"params"`
	ReturnType   string         `json:"return_type"`
	Capabilities []any          `json:"capabilities"`
	Policies     []PolicyView   `json:"policies"`
	With         []WithView     `json:"with"`
	Functions    []FunctionView `json:"functions"`
	Admitted     bool           `json:"admitted"`
	Refusal      string         `json:"refusal"`  // the first refusal ("" when admitted)
	Refusals     []string       `json:"refusals"` // every refusal, each with its rule and line:column
}

// ParamView is a parameter or a record field: a name and a type.
type ParamView struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// PolicyView is a policy block.
type PolicyView struct {
	Name   string     `json:"name"`
	Line   int        `json:"line"`
	Column int        `json:"column"`
	Rules  []RuleView `json:"rules"`
}

// RuleView is a rule; selector and condition are source text.
type RuleView struct {
	Kind      string `json:"kind"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	Selector  string `json:"selector"`
	Condition string `json:"condition"`
}

// WithView is a with block: its settings and the number of statements of its body.
type WithView struct {
	Line       int            `json:"line"`
	Column     int            `json:"column"`
	Settings   map[string]any `json:"settings"`
	Statements int            `json:"statements"`
}

// FunctionView is a function signature.
type FunctionView struct {
	Name       string      `json:"name"`
	Line       int         `json:"line"`
	Column     int         `json:"column"`
	Params     []ParamView `json:"params"`
	ReturnType string      `json:"return_type"`
}

// TypeView is a type definition: fields of a record type, or the aliased name.
type TypeView struct {
	Name   string      `json:"name"`
	Line   int         `json:"line"`
	Column int         `json:"column"`
	Fields []ParamView `json:"fields"`
	Alias  string      `json:"alias"`
}

// ScheduleView is a schedule block.
type ScheduleView struct {
	Name     string         `json:"name"`
	Line     int            `json:"line"`
	Column   int            `json:"column"`
	Settings map[string]any `json:"settings"`
}

// ChannelView is a channel block.
type ChannelView struct {
	Name               string            `json:"name"`
	Line               int               `json:"line"`
	Column             int               `json:"column"`
	Settings           map[string]any    `json:"settings"`
	Policies           []PolicyView      `json:"policies"`
	DataClassification map[string]string `json:"data_classification"`
}

// MemoryView is a memory block.
type MemoryView struct {
	Name     string         `json:"name"`
	Line     int            `json:"line"`
	Column   int            `json:"column"`
	Settings map[string]any `json:"settings"`
	Search   map[string]any `json:"search"`
}

// WebhookView is a webhook block.
type WebhookView struct {
	Name     string         `json:"name"`
	Line     int            `json:"line"`
	Column   int            `json:"column"`
	Settings map[string]any `json:"settings"`
	Filter   map[string]any `json:"filter"`
}

// Analyze parses src and returns its views; syntax errors are part of the result.
// name is reported as source (a file path, or "inline"). Each agent's verdict is its
// admission with opts (at most one), as Admit's.
func Analyze(name string, src []byte, opts ...Options) *Result {
	r := &Result{
		Source: name, Errors: []ErrorView{}, Metadata: map[string]any{}, Agents: []AgentView{},
		Policies: []PolicyView{}, Types: []TypeView{}, Functions: []FunctionView{}, Schedules: []ScheduleView{},
		Channels: []ChannelView{}, Memories: []MemoryView{}, Webhooks: []WebhookView{},
	}
	f, err := Parse(name, src)
	if err != nil {
		for _, e := range Errors(err) {
			r.Errors = append(r.Errors, ErrorView{Line: e.Line, Column: e.Column, Message: e.Msg})
		}
		return r
	}
	r.Valid = true
	for _, it := range f.Items {
		switch {
		case it.Metadata != nil:
			for _, e := range it.Metadata.Entries {
				if _, dup := r.Metadata[e.Key]; !dup {
					r.Metadata[e.Key] = f.literal(e.Value)
				}
			}
		case it.Agent != nil:
			r.Agents = append(r.Agents, f.agentView(it.Agent, len(r.Agents) < MaxAdmissionViews, opts))
		case it.Policy != nil:
			r.Policies = append(r.Policies, f.policyView(it.Policy))
		case it.Type != nil:
			t := it.Type
			v := TypeView{Name: t.Name, Line: t.Pos.Line, Column: t.Pos.Column, Fields: params(t.Fields), Alias: t.Alias}
			r.Types = append(r.Types, v)
		case it.Function != nil:
			r.Functions = append(r.Functions, functionView(it.Function))
		case it.Schedule != nil:
			s := it.Schedule
			v := ScheduleView{Name: s.Name, Line: s.Pos.Line, Column: s.Pos.Column, Settings: map[string]any{}}
			for _, p := range s.Entries {
				v.Settings[p.Key] = value(p.Value)
			}
			r.Schedules = append(r.Schedules, v)
		case it.Channel != nil:
			r.Channels = append(r.Channels, f.channelView(it.Channel))
		case it.Memory != nil:
			m := it.Memory
			v := MemoryView{Name: m.Name, Line: m.Pos.Line, Column: m.Pos.Column, Settings: map[string]any{}, Search: map[string]any{}}
			nested(m.Entries, v.Settings, v.Search)
			r.Memories = append(r.Memories, v)
		case it.Webhook != nil:
			w := it.Webhook
			v := WebhookView{Name: w.Name, Line: w.Pos.Line, Column: w.Pos.Column, Settings: map[string]any{}, Filter: map[string]any{}}
			nested(w.Entries, v.Settings, v.Filter)
			r.Webhooks = append(r.Webhooks, v)
		}
	}
	return r
}

func nested(items []*NestedItem, settings, sub map[string]any) {
	for _, it := range items {
		if it.Pair != nil {
			settings[it.Pair.Key] = value(it.Pair.Value)
			continue
		}
		for _, p := range it.Pairs {
			sub[p.Key] = value(p.Value)
		}
	}
}

// MaxAdmissionViews bounds the agents of one file that Analyze gives an admission verdict:
// each verdict reads the whole file, so a file of many agents would cost their square.
// The agents after them are shown with a refusal saying so ("selection"); the registry
// admits each file once, for the agent its name selects, and is not bounded by it.
const MaxAdmissionViews = 16

func (f *File) agentView(a *Agent, admit bool, opts []Options) AgentView {
	v := AgentView{Name: a.Name, Line: a.Pos.Line, Column: a.Pos.Column, Params: params(a.Params),
		Capabilities: []any{}, Policies: []PolicyView{}, With: []WithView{}, Functions: []FunctionView{}}
	if a.Returns != nil {
		v.ReturnType = typeString(a.Returns)
	}
	capsSeen := false
	for _, it := range a.Body {
		switch {
		case it.Capabilities != nil && !capsSeen:
			capsSeen = true
			for _, e := range it.Capabilities.List.Elems {
				v.Capabilities = append(v.Capabilities, f.exprValue(e))
			}
		case it.Policy != nil:
			v.Policies = append(v.Policies, f.policyView(it.Policy))
		case it.Function != nil:
			v.Functions = append(v.Functions, functionView(it.Function))
		case it.With != nil:
			w := WithView{Line: it.With.Pos.Line, Column: it.With.Pos.Column, Settings: map[string]any{}, Statements: len(it.With.Body.Stmts)}
			for _, s := range it.With.Settings {
				if s.Array != nil {
					w.Settings[s.Key] = f.array(s.Array)
				} else {
					w.Settings[s.Key] = value(s.Value)
				}
			}
			v.With = append(v.With, w)
		}
	}
	if !admit {
		v.Refusal = fmt.Sprintf("selection at %d:%d: not evaluated: a verdict is given for the first %d agents of a file only; register this agent in a file of its own (agents/%s.symbi) for its own", a.Pos.Line, a.Pos.Column, MaxAdmissionViews, a.Name)
		v.Refusals = []string{v.Refusal}
		return v
	}
	ad := Admit(f, a.Name, opts...)
	v.Admitted, v.Refusal, v.Refusals = ad.Admitted, ad.Reason, ad.Reasons
	if v.Refusals == nil {
		v.Refusals = []string{}
	}
	return v
}

func (f *File) policyView(p *Policy) PolicyView {
	v := PolicyView{Name: p.Name, Line: p.Pos.Line, Column: p.Pos.Column, Rules: []RuleView{}}
	for _, r := range p.Rules {
		rv := RuleView{Kind: r.Kind, Line: r.Pos.Line, Column: r.Pos.Column, Selector: f.text(r.Selector.Pos, r.Selector.EndPos)}
		if r.Condition != nil {
			rv.Condition = f.text(r.Condition.Pos, r.Condition.EndPos)
		}
		v.Rules = append(v.Rules, rv)
	}
	return v
}

func (f *File) channelView(c *Channel) ChannelView {
	v := ChannelView{Name: c.Name, Line: c.Pos.Line, Column: c.Pos.Column, Settings: map[string]any{},
		Policies: []PolicyView{}, DataClassification: map[string]string{}}
	for _, it := range c.Entries {
		switch {
		case it.Policy != nil:
			v.Policies = append(v.Policies, f.policyView(it.Policy))
		case it.Setting != nil:
			if it.Setting.Array != nil {
				v.Settings[it.Setting.Key] = f.array(it.Setting.Array)
			} else {
				v.Settings[it.Setting.Key] = value(it.Setting.Value)
			}
		default:
			for _, d := range it.DataClassification {
				v.DataClassification[d.Key] = d.Value
			}
		}
	}
	return v
}

func functionView(fn *Function) FunctionView {
	v := FunctionView{Name: fn.Name, Line: fn.Pos.Line, Column: fn.Pos.Column, Params: params(fn.Params)}
	if fn.Returns != nil {
		v.ReturnType = typeString(fn.Returns)
	}
	return v
}

func params(ps []*Param) []ParamView {
	out := make([]ParamView, 0, len(ps))
	for _, p := range ps {
		out = append(out, ParamView{Name: p.Name, Type: typeString(p.Type)})
	}
	return out
}

func typeString(t *Type) string {
	if len(t.Args) == 0 {
		return t.Name
	}
	var b strings.Builder
	writeType(&b, t)
	return b.String()
}

// writeType writes t as typeString gives it, in one pass (not a copy per level).
func writeType(b *strings.Builder, t *Type) {
	b.WriteString(t.Name)
	if len(t.Args) == 0 {
		return
	}
	b.WriteByte('<')
	for i, a := range t.Args {
		if i > 0 {
			b.WriteString(", ")
		}
		writeType(b, a)
	}
	b.WriteByte('>')
}

// value decodes a literal: strings decoded, numbers as JSON numbers (see jsonNumber),
// true/false as booleans; durations, vault URLs and identifiers as their text.
func value(v *Value) any {
	switch {
	case v.String != nil:
		if s, err := Unquote(*v.String); err == nil {
			return s
		}
		return *v.String
	case v.Number != nil:
		return jsonNumber(*v.Number)
	case v.Duration != nil:
		return *v.Duration
	case v.Vault != nil:
		return *v.Vault
	case *v.Ident == "true":
		return true
	case *v.Ident == "false":
		return false
	}
	return *v.Ident
}

// jsonNumber is the JSON number a DSL number literal (digits ("_" digits)* ("." digits)?)
// denotes: its "_" separators and the leading zeros of its integer part dropped, which
// JSON does not allow (007 is 7, 00.5 is 0.5).
func jsonNumber(lit string) json.Number {
	n := strings.ReplaceAll(lit, "_", "")
	i := 0
	for i+1 < len(n) && n[i] == '0' && n[i+1] != '.' {
		i++
	}
	return json.Number(n[i:])
}

func (f *File) literal(l *Literal) any {
	switch {
	case l.Array != nil:
		return f.array(l.Array)
	case l.Record != nil:
		return f.record(l.Record)
	}
	return value(l.Value)
}

func (f *File) array(a *Array) []any {
	out := make([]any, 0, len(a.Elems))
	for _, e := range a.Elems {
		out = append(out, f.exprValue(e))
	}
	return out
}

func (f *File) record(r *Record) map[string]any {
	out := make(map[string]any, len(r.Fields))
	for _, fl := range r.Fields {
		k := fl.Key
		if strings.HasPrefix(k, `"`) {
			if s, err := Unquote(k); err == nil {
				k = s
			}
		}
		out[k] = f.exprValue(fl.Value)
	}
	return out
}

// exprValue decodes an expression that is a literal, an array or a record; any other
// expression is given as its source text.
func (f *File) exprValue(e *Expr) any {
	if len(e.Ops) == 0 && len(e.Left.Ops) == 0 && len(e.Left.Suffix) == 0 {
		p := e.Left.Primary
		switch {
		case p.String != nil:
			return value(&Value{String: p.String})
		case p.Number != nil:
			return value(&Value{Number: p.Number})
		case p.Duration != nil:
			return *p.Duration
		case p.Vault != nil:
			return *p.Vault
		case p.Name != nil && p.Lambda == nil && p.Typed == nil:
			return value(&Value{Ident: p.Name})
		case p.Array != nil:
			return f.array(p.Array)
		case p.Record != nil:
			return f.record(p.Record)
		}
	}
	return f.text(e.Pos, e.EndPos)
}
