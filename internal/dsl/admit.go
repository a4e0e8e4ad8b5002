package dsl

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"symbi/internal/errcode"
	"time"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2/lexer"
)

// Admission bounds of rule 6.
const (
	MaxPolicyRules     = 128 // rules over all in-scope policies
	MaxConditionTokens = 256 // tokens in one selector or condition
	MaxConditionDepth  = 24  // parentheses and arrays nested in one condition
)

// Timeout bounds of rule 5.
const (
	MinTimeout = time.Second
	MaxTimeout = 24 * time.Hour
)

// Admission is the verdict on a file considered as the registration of one agent.
type Admission struct {
	Agent        string        // selected declared agent name ("" when none could be selected)
	Admitted     bool          // whether the definition is canonical conversational
	Rule         string        // which rule refused first: "selection", "rule 1" … "rule 6"; "" when admitted
	Reason       string        // the first refusal: "<rule> at <line>:<column>: <message>"; "" when admitted
	Reasons      []string      // every refusal, in rule order then source order (at most MaxReasons, then a count)
	Line, Column int           // position of the first refusal (0 when admitted)
	Description  string        // metadata description, decoded ("" if none)
	Capabilities []string      // the selected agent's capabilities (decoded string literals)
	Timeout      time.Duration // the with timeout (0 when absent)
	Sandbox      string        // the with sandbox value as written ("" when absent)
	Declaration  []byte        // exact source bytes of the selected agent definition
	Definition   []byte        // what the model is sent as the agent's definition (admitted only; see definitionOf)
	Policies     []string      // names of in-scope inline policies: top-level then the agent's
	PolicyDigest string        // lowercase hex SHA-256 over the in-scope policies' source, in order
	// Executor is the metadata executor a delegated agent names ("" for a conversational
	// one, or "orga"); it is admitted only when the server registered it (Options).
	Executor string
}

// Delegated reports whether a is an admitted delegated agent: one a registered coding
// agent runs over ACP, instead of a model answering once.
func (a *Admission) Delegated() bool { return a.Admitted && a.Executor != "" && a.Executor != "orga" }

// Options are what admission needs to know of the server.
type Options struct {
	// Executors reports whether an executor name is registered (symbi mcp --executors).
	// nil: none is.
	Executors func(name string) bool
}

// refusal is returned by a rule check that refuses.
type refusal struct {
	rule   string
	pos    lexer.Position
	format string // the message, formatted only if listed (apply lists MaxReasons)
	args   []any
}

func refuse(rule string, pos lexer.Position, format string, args ...any) *refusal {
	return &refusal{rule: rule, pos: pos, format: format, args: args}
}

func (r *refusal) String() string {
	// Every piece of the source a refusal names — a name, a key, a literal — is quoted at
	// most errcode.MaxQuoted bytes of it (and its length): a refusal is repeated for each
	// rule it names and in each agent's view, and a megabyte name would be as many
	// megabytes of reasons.
	args := make([]any, len(r.args))
	for i, a := range r.args {
		if s, ok := a.(string); ok {
			a = errcode.Clip(s)
		}
		args[i] = a
	}
	return fmt.Sprintf("%s at %d:%d: %s", r.rule, r.pos.Line, r.pos.Column, fmt.Sprintf(r.format, args...))
}

// MaxReasons bounds the refusals an Admission lists; past it, one last entry counts the
// rest.
const MaxReasons = 50

// apply refuses a with rs (at least one), every one of them listed: a person fixing a
// definition sees all that is wrong at once, not one round trip at a time.
func (a *Admission) apply(rs []*refusal) *Admission {
	a.Admitted = false
	a.Rule = rs[0].rule
	a.Line, a.Column = rs[0].pos.Line, rs[0].pos.Column
	a.Reason = rs[0].String()
	a.Reasons = nil
	for i, r := range rs {
		if i == MaxReasons {
			a.Reasons = append(a.Reasons, fmt.Sprintf("and %d more refusals not listed", len(rs)-MaxReasons))
			break
		}
		a.Reasons = append(a.Reasons, r.String())
	}
	a.Timeout, a.Sandbox, a.Policies, a.PolicyDigest, a.Definition = 0, "", nil, "", nil
	return a
}

// AdmitSource parses src then admits it as the registration named stem; a syntax error
// is a rule-1 refusal at its position.
func AdmitSource(name, stem string, src []byte, opts ...Options) *Admission {
	f, err := Parse(name, src)
	if err != nil {
		a := &Admission{}
		e := Errors(err)[0]
		return a.apply([]*refusal{refuse("rule 1", lexer.Position{Line: e.Line, Column: e.Column}, "%s", e.Msg)})
	}
	return Admit(f, stem, opts...)
}

// Admit considers f as the registration named stem (the file name without .symbi or
// .dsl): it selects the agent (exactly one agent is selected whatever the stem; among
// several, the stem must name exactly one), then applies admission rules 2–6.
func Admit(f *File, stem string, opts ...Options) *Admission {
	a := &Admission{}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	agent, r := selectAgent(f, stem)
	if agent != nil {
		a.Agent = agent.Name
		a.Declaration = f.bytes(agent.Pos, agent.EndPos)
		a.Capabilities = capabilities(agent)
	}
	a.Description = description(f)
	var rs []*refusal
	if r != nil {
		rs = append(rs, r)
	}
	checks := []func(*File, *Agent, *Admission) []*refusal{topLevel, func(f *File, ag *Agent, a *Admission) []*refusal { return metadataRule(f, a, o) }}
	if agent != nil { // the agent's own rules need the agent
		checks = append(checks, agentShape, withRule, policyRule)
	}
	for _, check := range checks {
		rs = append(rs, check(f, agent, a)...)
	}
	if len(rs) > 0 {
		return a.apply(rs)
	}
	a.Admitted = true
	a.Definition = definitionOf(f, agent)
	return a
}

// definitionOf returns the selected agent's definition as the model is to read it: the
// metadata block, the top-level policies and the selected declaration, each as its exact
// source bytes, in source order, separated by a blank line. The file's other agents —
// never admitted themselves — are left out.
func definitionOf(f *File, agent *Agent) []byte {
	var parts [][]byte
	for _, it := range f.Items {
		if it.Metadata != nil || it.Policy != nil || (it.Agent != nil && it.Agent == agent) {
			parts = append(parts, f.bytes(it.Pos, it.EndPos))
		}
	}
	return bytes.Join(parts, []byte("\n\n"))
}

func selectAgent(f *File, stem string) (*Agent, *refusal) {
	var agents []*Agent
	for _, it := range f.Items {
		if it.Agent != nil {
			agents = append(agents, it.Agent)
		}
	}
	switch len(agents) {
	case 0:
		return nil, refuse("selection", lexer.Position{Line: 1, Column: 1}, "the file declares no agent")
	case 1:
		return agents[0], nil
	}
	var match *Agent
	for _, ag := range agents {
		if ag.Name != stem {
			continue
		}
		if match != nil {
			return nil, refuse("selection", ag.Pos, "agent %q is declared more than once", stem)
		}
		match = ag
	}
	if match == nil {
		names := make([]string, len(agents))
		for i, ag := range agents {
			names[i] = ag.Name
		}
		return nil, refuse("selection", agents[0].Pos, "the file declares %d agents (%s) and none is named %q", len(agents), strings.Join(names, ", "), stem)
	}
	return match, nil
}

func description(f *File) string {
	for _, it := range f.Items {
		if it.Metadata == nil {
			continue
		}
		for _, e := range it.Metadata.Entries {
			if e.Key == "description" && e.Value.Value != nil && e.Value.Value.String != nil {
				if s, err := Unquote(*e.Value.Value.String); err == nil {
					return s
				}
			}
		}
		return ""
	}
	return ""
}

func capabilities(ag *Agent) []string {
	for _, it := range ag.Body {
		if it.Capabilities == nil {
			continue
		}
		var caps []string
		for _, e := range it.Capabilities.List.Elems {
			if s, ok := stringLiteral(e); ok {
				caps = append(caps, s)
			}
		}
		return caps
	}
	return nil
}

// stringLiteral returns the decoded value of an expression that is a bare string literal.
func stringLiteral(e *Expr) (string, bool) {
	if len(e.Ops) > 0 || len(e.Left.Ops) > 0 || len(e.Left.Suffix) > 0 || e.Left.Primary.String == nil {
		return "", false
	}
	s, err := Unquote(*e.Left.Primary.String)
	return s, err == nil
}

// Rule 2: only metadata (once), agents and policies at top level.
func topLevel(f *File, _ *Agent, _ *Admission) []*refusal {
	var rs []*refusal
	seenMeta := false
	for _, it := range f.Items {
		kind, name := "", ""
		switch {
		case it.Metadata != nil:
			if seenMeta {
				rs = append(rs, refuse("rule 2", it.Pos, "more than one metadata block"))
			}
			seenMeta = true
			continue
		case it.Agent != nil, it.Policy != nil:
			continue
		case it.Schedule != nil:
			kind, name = "schedule", it.Schedule.Name
		case it.Channel != nil:
			kind, name = "channel", it.Channel.Name
		case it.Memory != nil:
			kind, name = "memory", it.Memory.Name
		case it.Webhook != nil:
			kind, name = "webhook", it.Webhook.Name
		case it.Type != nil:
			kind, name = "type", it.Type.Name
		case it.Function != nil:
			kind, name = "function", it.Function.Name
		}
		rs = append(rs, refuse("rule 2", it.Pos, "top-level %s %q requires an executable route", kind, name))
	}
	return rs
}

var metadataKeys = map[string]bool{"description": true, "version": true, "author": true, "executor": true}

// Rule 3: metadata keys and values.
func metadataRule(f *File, a *Admission, o Options) []*refusal {
	var rs []*refusal
	for _, it := range f.Items {
		if it.Metadata == nil {
			continue
		}
		seen := map[string]bool{}
		for _, e := range it.Metadata.Entries {
			if !metadataKeys[e.Key] {
				rs = append(rs, refuse("rule 3", e.Pos, "metadata key %q is not allowed (only description, version, author, executor)", e.Key))
				continue
			}
			if seen[e.Key] {
				rs = append(rs, refuse("rule 3", e.Pos, "metadata key %q is repeated", e.Key))
				continue
			}
			seen[e.Key] = true
			v := e.Value.Value
			if v == nil || v.String == nil {
				rs = append(rs, refuse("rule 3", e.Value.Pos, "metadata %s must be a string literal", e.Key))
				continue
			}
			s, err := Unquote(*v.String)
			switch {
			case err != nil:
				rs = append(rs, refuse("rule 3", e.Value.Pos, "metadata %s: %v", e.Key, err))
			case e.Key == "executor" && s != "orga" && (o.Executors == nil || !o.Executors(s)):
				rs = append(rs, refuse("rule 3", e.Value.Pos, "executor %q is not registered with this server (symbi mcp --executors FILE); only \"orga\" runs without one", s))
			case e.Key == "executor":
				a.Executor = s
			}
		}
	}
	return rs
}

// Rule 4: the agent's shape and capabilities.
func agentShape(f *File, ag *Agent, _ *Admission) []*refusal {
	var rs []*refusal
	if len(ag.Params) > 0 {
		rs = append(rs, refuse("rule 4", ag.Params[0].Pos, "agent %q declares parameters", ag.Name))
	}
	if ag.Returns != nil {
		rs = append(rs, refuse("rule 4", ag.Returns.Pos, "agent %q declares a return type", ag.Name))
	}
	seenCaps := false
	for _, it := range ag.Body {
		if it.Function != nil {
			rs = append(rs, refuse("rule 4", it.Pos, "agent %q defines function %q", ag.Name, it.Function.Name))
			continue
		}
		if it.Capabilities == nil {
			continue
		}
		if seenCaps {
			rs = append(rs, refuse("rule 4", it.Pos, "capabilities declared more than once"))
			continue
		}
		seenCaps = true
		for _, e := range it.Capabilities.List.Elems {
			if _, ok := stringLiteral(e); !ok {
				rs = append(rs, refuse("rule 4", e.Pos, "capability %s is not a string literal", f.clip(e)))
			}
		}
	}
	return rs
}

var sandboxes = map[string]bool{"docker": true, "tier1": true, "gvisor": true, "tier2": true, "firecracker": true, "tier3": true, "e2b": true}

// Rule 5: with blocks carry only sandbox and timeout, with empty bodies.
func withRule(_ *File, ag *Agent, a *Admission) []*refusal {
	var rs []*refusal
	var sandbox, timeout *WithSetting
	for _, it := range ag.Body {
		w := it.With
		if w == nil {
			continue
		}
		for _, s := range w.Settings {
			switch s.Key {
			case "sandbox":
				if sandbox != nil {
					rs = append(rs, refuse("rule 5", s.Pos, "sandbox is set more than once (first at %d:%d)", sandbox.Pos.Line, sandbox.Pos.Column))
					continue
				}
				sandbox = s
				v, ok := word(s.Value)
				// Case-insensitive in ASCII only: strings.ToLower would also take a
				// lookalike (a Kelvin sign for the k of "docker").
				if !ok || strings.IndexFunc(v, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0 || !sandboxes[strings.ToLower(v)] {
					rs = append(rs, refuse("rule 5", s.Pos, "sandbox %s is not one of docker|tier1, gvisor|tier2, firecracker|tier3, e2b", settingText(s)))
					continue
				}
				if a.Executor != "" && a.Executor != "orga" {
					// A model answering once runs nothing; a coding agent runs commands, as
					// its executor starts it. A sandbox declared for it would be a promise
					// symbi does not keep.
					rs = append(rs, refuse("rule 5", s.Pos, "sandbox %s is not honoured for a delegated agent: its executor runs it as the executors file starts it (put the sandbox in that command)", settingText(s)))
					continue
				}
				a.Sandbox = v
			case "timeout":
				if timeout != nil {
					rs = append(rs, refuse("rule 5", s.Pos, "timeout is set more than once (first at %d:%d)", timeout.Pos.Line, timeout.Pos.Column))
					continue
				}
				timeout = s
				d, r := timeoutValue(s)
				if r != nil {
					rs = append(rs, r)
					continue
				}
				a.Timeout = d
			default:
				rs = append(rs, refuse("rule 5", s.Pos, "with setting %q is not allowed (only sandbox and timeout)", s.Key))
			}
		}
		if len(w.Body.Stmts) > 0 {
			rs = append(rs, refuse("rule 5", w.Body.Stmts[0].Pos, "with block body must be empty"))
		}
	}
	return rs
}

// word returns a string literal's value or an identifier.
func word(v *Value) (string, bool) {
	switch {
	case v == nil:
		return "", false
	case v.String != nil:
		s, err := Unquote(*v.String)
		return s, err == nil
	case v.Ident != nil:
		return *v.Ident, true
	}
	return "", false
}

func settingText(s *WithSetting) string {
	if s.Value != nil {
		for _, p := range []*string{s.Value.String, s.Value.Duration, s.Value.Number, s.Value.Vault, s.Value.Ident} {
			if p != nil {
				return *p
			}
		}
	}
	return "array"
}

func timeoutValue(s *WithSetting) (time.Duration, *refusal) {
	v := s.Value
	var lit string
	switch {
	case v != nil && v.Duration != nil:
		lit = *v.Duration
	case v != nil && v.Number != nil && !strings.Contains(*v.Number, "."):
		// An integer number; the grammar puts underscores only between digits, as
		// separators ("1_000" is 1000 seconds).
		lit = strings.ReplaceAll(*v.Number, "_", "")
	default:
		return 0, refuse("rule 5", s.Pos, "timeout %s is not a duration or integer seconds", settingText(s))
	}
	d, err := ParseDuration(lit)
	if err != nil || d < MinTimeout || d > MaxTimeout {
		return 0, refuse("rule 5", s.Pos, "timeout %s is outside 1s .. 1 day", settingText(s))
	}
	return d, nil
}

// Rule 6: in-scope policies are allow/deny rules over a small condition language.
func policyRule(f *File, ag *Agent, a *Admission) []*refusal {
	var scope []*Policy
	for _, it := range f.Items {
		if it.Policy != nil {
			scope = append(scope, it.Policy)
		}
	}
	for _, it := range ag.Body {
		if it.Policy != nil {
			scope = append(scope, it.Policy)
		}
	}
	// The refusals in source order (docs/dsl.md: each check's in source order), so a
	// repeat is the later declaration and the limit is passed where the file passes it;
	// the names and their digest (rule 7) in scope order, below.
	inSource := slices.Clone(scope)
	slices.SortStableFunc(inSource, func(a, b *Policy) int { return cmp.Compare(a.Pos.Offset, b.Pos.Offset) })
	var rs []*refusal
	seen := map[string]*Policy{}
	rules := 0
	for _, p := range inSource {
		// A repeated name is refused, and the repeated policy's rules are checked still:
		// every failure is reported at once.
		if first := seen[p.Name]; first != nil {
			rs = append(rs, refuse("rule 6", p.Pos, "policy %q is declared more than once (first at %d:%d)", p.Name, first.Pos.Line, first.Pos.Column))
		} else {
			seen[p.Name] = p
		}
		for _, r := range p.Rules {
			rules++
			if rules == MaxPolicyRules+1 {
				rs = append(rs, refuse("rule 6", r.Pos, "more than %d policy rules in scope", MaxPolicyRules))
			}
			if rules > MaxPolicyRules {
				continue
			}
			if r.Kind != "allow" && r.Kind != "deny" {
				rs = append(rs, refuse("rule 6", r.Pos, "unsupported policy: %q rule in policy %q (only allow and deny)", r.Kind, p.Name))
				continue // its selector and condition are not an allow's or a deny's
			}
			if rf := f.selector(r.Selector); rf != nil {
				rs = append(rs, rf)
			}
			if r.Condition != nil {
				if rf := f.condition(r.Condition); rf != nil {
					rs = append(rs, rf)
				}
			}
		}
	}
	h := sha256.New()
	var names []string
	named := map[string]bool{}
	for _, p := range scope {
		if named[p.Name] {
			continue // refused above
		}
		named[p.Name] = true
		names = append(names, p.Name)
		h.Write(f.bytes(p.Pos, p.EndPos))
		h.Write([]byte{'\n'})
	}
	a.Policies = names
	a.PolicyDigest = hex.EncodeToString(h.Sum(nil))
	return rs
}

// clip returns an expression's source text, shortened for messages.
func (f *File) clip(e *Expr) string {
	return clipText(f.text(e.Pos, e.EndPos))
}

func clipText(s string) string { return clipBytes(s, 60) }

// clipBytes returns s if it has at most max bytes, else its first max-3 bytes or fewer,
// cut at a character boundary, and "...".
func clipBytes(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - 3
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
