package dsl_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"symbi/internal/dsl"
)

const minimalReader = `metadata { description = "reader", executor = "orga" } agent reader() { capabilities =
["read"] with sandbox = "docker", timeout = 3.seconds {} }`

func TestAdmission(t *testing.T) {
	many := strings.Repeat("allow: true\n", dsl.MaxPolicyRules+1)
	deep := strings.Repeat("(", dsl.MaxConditionDepth) + "true" + strings.Repeat(")", dsl.MaxConditionDepth)
	long := strings.TrimSuffix(strings.Repeat("true || ", 129), " || ")
	tests := []struct {
		name   string
		stem   string
		src    string
		rule   string // "" when admitted
		reason string // exact reason when admitted is false
	}{
		// Admitted.
		{"minimal declared", "declared", `agent declared {}`, "", ""},
		{"minimal reader", "reader", minimalReader, "", ""},
		{"filename alias", "other_name", `agent declared {}`, "", ""},
		{"stem selects among several", "b", "agent a { capabilities = [1] }\nagent b {}", "", ""},
		{"sandbox case-insensitive identifier", "a", `agent a { with sandbox = GVisor {} }`, "", ""},
		{"every sandbox", "a", `agent a { with sandbox = "tier1" {} with timeout = 86400 {} }`, "", ""},
		{"policies admitted", "a", "metadata { version = \"1\", author = \"x\" }\npolicy top { allow: [\"read\"] if principal == \"p\" && (context.n >= 3 || !invocation.flag) deny: false if context.tag in [\"a\", 1, true] }\nagent a { policy own { deny: \"x\" if not context.ok != false } }", "", ""},
		{"depth at the bound", "a", "agent a { policy p { allow: true if " + deep + " } }", "", ""},

		// Refused: selection.
		{"no agent", "x", `policy p { allow: true }`, "selection", `selection at 1:1: the file declares no agent`},
		{"several, none named", "c", "agent a {}\nagent b {}", "selection", `selection at 1:1: the file declares 2 agents (a, b) and none is named "c"`},
		{"several, duplicate", "a", "agent a {}\nagent b {}\nagent a {}", "selection", `selection at 3:1: agent "a" is declared more than once`},

		// Refused: rule 1.
		{"syntax error", "a", "agent a {\n  capabilities = \n}", "rule 1", `rule 1 at 3:1: unexpected "}", expected an array`},
		{"nesting", "a", "agent a { with x = " + strings.Repeat("[", 300) + " {} }", "rule 1", `rule 1 at 1:275: brackets nested deeper than 256 levels`},

		// Refused: rule 2.
		{"schedule", "a", "agent a {}\nschedule s { cron = \"* * * * *\" }", "rule 2", `rule 2 at 2:1: top-level schedule "s" requires an executable route`},
		{"channel", "a", "agent a {}\nchannel c { platform = \"slack\" }", "rule 2", `rule 2 at 2:1: top-level channel "c" requires an executable route`},
		{"memory", "a", "memory m { store \"x\" }\nagent a {}", "rule 2", `rule 2 at 1:1: top-level memory "m" requires an executable route`},
		{"webhook", "a", "agent a {}\nwebhook w { path \"/x\" }", "rule 2", `rule 2 at 2:1: top-level webhook "w" requires an executable route`},
		{"type", "a", "type T = String\nagent a {}", "rule 2", `rule 2 at 1:1: top-level type "T" requires an executable route`},
		{"function", "a", "agent a {}\nfunction f() {}", "rule 2", `rule 2 at 2:1: top-level function "f" requires an executable route`},
		{"two metadata blocks", "a", "metadata {}\nmetadata {}\nagent a {}", "rule 2", `rule 2 at 2:1: more than one metadata block`},

		// Refused: rule 3.
		{"metadata key", "a", "metadata { tags = \"x\" }\nagent a {}", "rule 3", `rule 3 at 1:12: metadata key "tags" is not allowed (only description, version, author, executor)`},
		{"metadata not a string", "a", "metadata { version = 2 }\nagent a {}", "rule 3", `rule 3 at 1:22: metadata version must be a string literal`},
		{"metadata array", "a", "metadata { author = [\"x\"] }\nagent a {}", "rule 3", `rule 3 at 1:21: metadata author must be a string literal`},
		{"metadata repeated", "a", "metadata { version = \"1\", version = \"2\" }\nagent a {}", "rule 3", `rule 3 at 1:27: metadata key "version" is repeated`},
		{"alternate executor", "a", "metadata { executor = \"python\" }\nagent a {}", "rule 3", `rule 3 at 1:23: executor "python" is not registered with this server (symbi mcp --executors FILE); only "orga" runs without one`},

		// Refused: rule 4.
		{"parameters", "a", "agent a(x: String) {}", "rule 4", `rule 4 at 1:9: agent "a" declares parameters`},
		{"return type", "a", "agent a -> String {}", "rule 4", `rule 4 at 1:12: agent "a" declares a return type`},
		{"agent function", "a", "agent a {\n  function f() {}\n}", "rule 4", `rule 4 at 2:3: agent "a" defines function "f"`},
		{"capabilities twice", "a", "agent a { capabilities = [] capabilities = [] }", "rule 4", `rule 4 at 1:29: capabilities declared more than once`},
		{"capability not a string", "a", "agent a { capabilities = [\"a\", read] }", "rule 4", `rule 4 at 1:32: capability read is not a string literal`},

		// Refused: rule 5.
		{"with setting", "a", "agent a { with memory = \"1Gi\" {} }", "rule 5", `rule 5 at 1:16: with setting "memory" is not allowed (only sandbox and timeout)`},
		{"with body", "a", "agent a { with timeout = 5s {\n  run();\n} }", "rule 5", `rule 5 at 2:3: with block body must be empty`},
		{"sandbox unknown", "a", "agent a { with sandbox = \"chroot\" {} }", "rule 5", `rule 5 at 1:16: sandbox "chroot" is not one of docker|tier1, gvisor|tier2, firecracker|tier3, e2b`},
		{"sandbox lookalike", "a", "agent a { with sandbox = \"doc\u212Aer\" {} }", "rule 5", "rule 5 at 1:16: sandbox \"doc\u212Aer\" is not one of docker|tier1, gvisor|tier2, firecracker|tier3, e2b"},
		{"sandbox repeated", "a", "agent a { with sandbox = \"docker\" {} with sandbox = \"docker\" {} }", "rule 5", `rule 5 at 1:43: sandbox is set more than once (first at 1:16)`},
		{"timeout repeated", "a", "agent a { with timeout = 5s, timeout = 6s {} }", "rule 5", `rule 5 at 1:30: timeout is set more than once (first at 1:16)`},
		{"timeout too long", "a", "agent a { with timeout = 1w {} }", "rule 5", `rule 5 at 1:16: timeout 1w is outside 1s .. 1 day`},
		{"timeout zero", "a", "agent a { with timeout = 0 {} }", "rule 5", `rule 5 at 1:16: timeout 0 is outside 1s .. 1 day`},
		{"timeout grouped too long", "a", "agent a { with timeout = 86_401 {} }", "rule 5", `rule 5 at 1:16: timeout 86_401 is outside 1s .. 1 day`},
		{"timeout fractional", "a", "agent a { with timeout = 1.5 {} }", "rule 5", `rule 5 at 1:16: timeout 1.5 is not a duration or integer seconds`},
		{"timeout string", "a", "agent a { with timeout = \"5s\" {} }", "rule 5", `rule 5 at 1:16: timeout "5s" is not a duration or integer seconds`},

		// Refused: rule 6.
		{"require rule", "a", "agent a { policy p {\n  require: { approval: true }\n} }", "rule 6", `rule 6 at 2:3: unsupported policy: "require" rule in policy "p" (only allow and deny)`},
		{"audit rule at top level", "a", "policy p { audit: true }\nagent a {}", "rule 6", `rule 6 at 1:12: unsupported policy: "audit" rule in policy "p" (only allow and deny)`},
		{"selector record", "a", "agent a { policy p { allow: { x: 1 } } }", "rule 6", `rule 6 at 1:29: rule selector { x: 1 } is not true, false, a string or a non-empty array of strings`},
		{"selector empty array", "a", "agent a { policy p { allow: [] } }", "rule 6", `rule 6 at 1:29: rule selector [] is not true, false, a string or a non-empty array of strings`},
		{"selector element", "a", "agent a { policy p { allow: [\"a\", 1] } }", "rule 6", `rule 6 at 1:35: rule selector element 1 is not a string`},
		{"condition call", "a", "agent a { policy p { allow: true if context.list.contains(\"x\") } }", "rule 6", `rule 6 at 1:58: unsupported expression context.list.contains("x") in policy condition (only invocation.… and context.… paths)`},
		{"condition arithmetic", "a", "agent a { policy p { allow: true if context.n + 1 > 2 } }", "rule 6", `rule 6 at 1:47: unsupported operator "+" in policy condition`},
		{"condition float", "a", "agent a { policy p { allow: true if context.n < 2.5 } }", "rule 6", `rule 6 at 1:49: comparison "<" needs integer operands, not 2.5`},
		{"condition float equality", "a", "agent a { policy p { allow: true if context.n == 1.5 } }", "rule 6", `rule 6 at 1:50: number 1.5 in policy condition is not an integer`},
		{"condition float in array", "a", "agent a { policy p { allow: true if context.n in [2, 1.5] } }", "rule 6", `rule 6 at 1:54: number 1.5 in policy condition is not an integer`},
		{"condition float first", "a", "agent a { policy p { deny: true if 0.0 != context.x } }", "rule 6", `rule 6 at 1:36: number 0.0 in policy condition is not an integer`},
		{"condition string comparison", "a", "agent a { policy p { deny: true if \"a\" >= context.s } }", "rule 6", `rule 6 at 1:36: comparison ">=" needs integer operands, not "a"`},
		{"condition unknown name", "a", "agent a { policy p { allow: true if user.admin } }", "rule 6", `rule 6 at 1:37: unsupported expression user.admin in policy condition (only invocation.… and context.… paths)`},
		{"condition bare name", "a", "agent a { policy p { allow: true if admin } }", "rule 6", `rule 6 at 1:37: unsupported name "admin" in policy condition (only principal, invocation.… and context.… paths)`},
		{"condition negation", "a", "agent a { policy p { allow: true if -context.n == 1 } }", "rule 6", `rule 6 at 1:37: unsupported operator "-" in policy condition`},
		{"condition lambda", "a", "agent a { policy p { allow: true if x => x } }", "rule 6", `rule 6 at 1:37: unsupported expression x => x in policy condition`},
		{"condition too deep", "a", "agent a { policy p { allow: true if (" + deep + ") } }", "rule 6", `rule 6 at 1:62: condition nested deeper than 24 levels`},
		{"condition too long", "a", "agent a { policy p { allow: true if " + long + " } }", "rule 6", `rule 6 at 1:37: condition has 257 tokens, more than 256`},
		{"selector too long", "a", "agent a { policy p { allow: [" + strings.Repeat("\"s\", ", 128) + "] } }", "rule 6", `rule 6 at 1:29: rule selector has 258 tokens, more than 256`},
		{"duplicate policy", "a", "policy p { allow: true }\nagent a { policy p { deny: true } }", "rule 6", `rule 6 at 2:11: policy "p" is declared more than once (first at 1:1)`},
		{"too many rules", "a", "agent a { policy p {\n" + many + "} }", "rule 6", fmt.Sprintf(`rule 6 at %d:1: more than 128 policy rules in scope`, dsl.MaxPolicyRules+2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := dsl.AdmitSource(tt.name, tt.stem, []byte(tt.src))
			if tt.rule == "" {
				if !a.Admitted || a.Rule != "" || a.Reason != "" || a.Line != 0 {
					t.Fatalf("refused: %s", a.Reason)
				}
				return
			}
			if a.Admitted {
				t.Fatalf("admitted, want refusal by %s", tt.rule)
			}
			if a.Rule != tt.rule || a.Reason != tt.reason {
				t.Errorf("rule %q reason %q\nwant %q reason %q", a.Rule, a.Reason, tt.rule, tt.reason)
			}
			if want := fmt.Sprintf("%s at %d:%d: ", a.Rule, a.Line, a.Column); !strings.HasPrefix(a.Reason, want) {
				t.Errorf("reason %q does not start with its position %q", a.Reason, want)
			}
			if a.Timeout != 0 || a.Sandbox != "" || a.Policies != nil || a.PolicyDigest != "" {
				t.Errorf("refusal carries run settings: %+v", a)
			}
		})
	}
}

func TestAdmissionDetails(t *testing.T) {
	a := dsl.AdmitSource("reader.symbi", "reader", []byte(minimalReader))
	if !a.Admitted || a.Agent != "reader" || a.Description != "reader" || a.Sandbox != "docker" || a.Timeout != 3*time.Second {
		t.Fatalf("admission %+v", a)
	}
	if strings.Join(a.Capabilities, ",") != "read" {
		t.Errorf("capabilities %q", a.Capabilities)
	}
	wantDecl := "agent reader() { capabilities =\n[\"read\"] with sandbox = \"docker\", timeout = 3.seconds {} }"
	if string(a.Declaration) != wantDecl {
		t.Errorf("declaration %q, want %q", a.Declaration, wantDecl)
	}
	if a.Policies != nil && len(a.Policies) != 0 {
		t.Errorf("policies %q", a.Policies)
	}
	if want := hex.EncodeToString(sha256.New().Sum(nil)); a.PolicyDigest != want {
		t.Errorf("empty policy digest %s, want %s", a.PolicyDigest, want)
	}

	src := "policy top { allow: true } // note\n" +
		"agent a { capabilities = [\"x\"] policy own {\n  deny: \"x\" if context.n > 3\n} with timeout = 1d {} }  # trailing\n" +
		"agent b {}\n"
	a = dsl.AdmitSource("two.symbi", "a", []byte(src))
	if !a.Admitted {
		t.Fatalf("refused: %s", a.Reason)
	}
	if strings.Join(a.Policies, ",") != "top,own" {
		t.Errorf("policies %q", a.Policies)
	}
	h := sha256.New()
	h.Write([]byte("policy top { allow: true }\n"))
	h.Write([]byte("policy own {\n  deny: \"x\" if context.n > 3\n}\n"))
	if want := hex.EncodeToString(h.Sum(nil)); a.PolicyDigest != want {
		t.Errorf("digest %s, want %s", a.PolicyDigest, want)
	}
	if a.Timeout != 24*time.Hour {
		t.Errorf("timeout %v", a.Timeout)
	}
	// Bare integer seconds may group digits with underscores, as any number may.
	for src, want := range map[string]time.Duration{
		"agent a { with timeout = 1_000 {} }":  1000 * time.Second,
		"agent a { with timeout = 86_400 {} }": 24 * time.Hour,
		"agent a { with timeout = 0_1 {} }":    time.Second,
	} {
		if a := dsl.AdmitSource("t.symbi", "a", []byte(src)); !a.Admitted || a.Timeout != want {
			t.Errorf("%s: admitted %v (%s), timeout %v, want %v", src, a.Admitted, a.Reason, a.Timeout, want)
		}
	}
	if !strings.HasPrefix(string(a.Declaration), "agent a {") || !strings.HasSuffix(string(a.Declaration), "{} }") {
		t.Errorf("declaration %q", a.Declaration)
	}
	// The definition the model reads: top-level policies and the selected agent, not b.
	if want := "policy top { allow: true }\n\n" + string(a.Declaration); string(a.Definition) != want {
		t.Errorf("definition %q, want %q", a.Definition, want)
	}
	if a = dsl.AdmitSource("two.symbi", "b", []byte(src)); !a.Admitted || string(a.Definition) != "policy top { allow: true }\n\nagent b {}" {
		t.Errorf("definition of b %q (admitted %v)", a.Definition, a.Admitted)
	}
	if a = dsl.AdmitSource("reader.symbi", "reader", []byte(minimalReader)); !strings.HasPrefix(string(a.Definition), "metadata {") || !strings.HasSuffix(string(a.Definition), wantDecl) {
		t.Errorf("definition with metadata %q", a.Definition)
	}

	// Description and capabilities are reported even when the definition is refused.
	a = dsl.AdmitSource("x", "x", []byte("metadata { description = \"d\\n\" }\nagent x(p: int) { capabilities = [\"c\"] }"))
	if a.Admitted || a.Description != "d\n" || strings.Join(a.Capabilities, ",") != "c" || a.Agent != "x" {
		t.Errorf("refused admission %+v", a)
	}
}

func ExampleAdmitSource() {
	a := dsl.AdmitSource("agents/reader.symbi", "reader", []byte(`agent reader {
  capabilities = ["read"]
  with sandbox = "docker", timeout = 30s {}
}`))
	fmt.Println(a.Admitted, a.Agent, a.Capabilities, a.Sandbox, a.Timeout)

	a = dsl.AdmitSource("agents/writer.symbi", "writer", []byte(`agent writer {
  with timeout = 2d {}
}`))
	fmt.Println(a.Admitted, a.Reason)
	// Output:
	// true reader [read] docker 30s
	// false rule 5 at 2:8: timeout 2d is outside 1s .. 1 day
}

func ExampleParseDuration() {
	for _, s := range []string{"30.seconds", "5m", "2d", "90"} {
		d, _ := dsl.ParseDuration(s)
		fmt.Println(s, d)
	}
	// Output:
	// 30.seconds 30s
	// 5m 5m0s
	// 2d 48h0m0s
	// 90 1m30s
}

func ExampleAnalyze() {
	r := dsl.Analyze("inline", []byte(`metadata { description = "helper" }
agent helper(topic: String) { capabilities = ["answer"] }`))
	a := r.Agents[0]
	fmt.Println(r.Valid, r.Metadata["description"], a.Name, a.Params[0].Type, a.Capabilities)
	fmt.Println(a.Admitted, a.Refusal)

	r = dsl.Analyze("inline", []byte("agent {}"))
	fmt.Println(r.Valid, r.Errors[0].Line, r.Errors[0].Column, r.Errors[0].Message)
	// Output:
	// true helper helper String [answer]
	// false rule 4 at 2:14: agent "helper" declares parameters
	// false 1 7 unexpected "{", expected an identifier
}

// TestEveryReason: a definition in the style of real Symbiont agents, wrong in several
// ways, is refused with every reason at once — each with its rule and line:column — in
// rule order; Reason stays the first.
func TestEveryReason(t *testing.T) {
	src := `metadata {
    version = "1.0.0"
    description = "Reviews code"
    tags = ["review", "quality"]
}

schedule nightly {
    cron = "0 0 * * *"
}

agent code_reviewer(code: String) -> Review {
    capabilities = ["review", analyze]
    with memory = "persistent", sandbox = "docker" {}
    function score(x: Int) -> Int { return x; }
}
`
	a := dsl.AdmitSource("code_reviewer.symbi", "code_reviewer", []byte(src))
	want := []string{
		`rule 2 at 7:1: top-level schedule "nightly" requires an executable route`,
		`rule 3 at 4:5: metadata key "tags" is not allowed (only description, version, author, executor)`,
		`rule 4 at 11:21: agent "code_reviewer" declares parameters`,
		`rule 4 at 11:38: agent "code_reviewer" declares a return type`,
		`rule 4 at 12:31: capability analyze is not a string literal`,
		`rule 4 at 14:5: agent "code_reviewer" defines function "score"`,
		`rule 5 at 13:10: with setting "memory" is not allowed (only sandbox and timeout)`,
	}
	if a.Admitted || strings.Join(a.Reasons, "\n") != strings.Join(want, "\n") {
		t.Fatalf("reasons:\n%s\nwant:\n%s", strings.Join(a.Reasons, "\n"), strings.Join(want, "\n"))
	}
	if a.Reason != want[0] || a.Rule != "rule 2" || a.Line != 7 || a.Column != 1 {
		t.Errorf("first reason %q (%s at %d:%d)", a.Reason, a.Rule, a.Line, a.Column)
	}
	// A selection refusal still reports what can be judged without an agent.
	b := dsl.AdmitSource("x.symbi", "c", []byte("metadata { tags = [] }\nagent a {}\nagent b {}\n"))
	if len(b.Reasons) != 2 || b.Rule != "selection" || !strings.HasPrefix(b.Reasons[1], "rule 3 at 1:12:") {
		t.Errorf("selection refusal reasons %q", b.Reasons)
	}
	// The list is bounded.
	many := "agent a {\n    capabilities = [" + strings.TrimSuffix(strings.Repeat("x, ", dsl.MaxReasons+10), ", ") + "]\n}\n"
	c := dsl.AdmitSource("a.symbi", "a", []byte(many))
	if len(c.Reasons) != dsl.MaxReasons+1 || c.Reasons[dsl.MaxReasons] != "and 10 more refusals not listed" {
		t.Errorf("%d reasons, last %q", len(c.Reasons), c.Reasons[len(c.Reasons)-1])
	}
}

// TestErrorPositions: a syntax error is reported where the mistake is, not at the end
// of the file.
func TestErrorPositions(t *testing.T) {
	for _, tt := range []struct{ name, src, want string }{
		{"missing } mid-file: the parser's error", "metadata {\n    description = \"x\"\n}\n\nagent a {\n    capabilities = [\"read\"]\n    policy p {\n        allow: true\n    with timeout = 5.seconds {}\n}\n",
			`9:5: unexpected "with", expected "}"`},
		{"missing } at the end: where it opened", "agent a {\n    capabilities = [\"read\"]\n    policy p {\n        allow: true\n    }\n",
			`1:9: "{" opened here is never closed (the input ends with 1 bracket(s) open)`},
		{"unclosed array: the innermost", "metadata {\n  tags = [1, 2\n", `2:10: "[" opened here is never closed (the input ends with 2 bracket(s) open)`},
		{"unterminated string: the first error, and where the string started", "metadata {\n    description = \"unclosed\n    version = \"1.0\"\n}\nagent a {\n    capabilities = [\"read\"]\n}\n",
			`3:16: unexpected number 1.0, expected "}" (the string opened at 2:19 runs to line 3: if its closing quote is missing, the mistake is there)`},
		{"a lexical error after the first syntax error: the first", "agent a { function f() { x = ; } }\n\n\n$\n", `1:30: unexpected ";", expected an expression`},
		{"a lexical error first", "agent a { $ }\nagent b { x = ; }\n", `1:11: unexpected character '$'`},
	} {
		_, err := dsl.Parse("t.symbi", []byte(tt.src))
		errs := dsl.Errors(err)
		if len(errs) == 0 {
			t.Errorf("%s: parsed", tt.name)
			continue
		}
		if got := fmt.Sprintf("%d:%d: %s", errs[0].Line, errs[0].Column, errs[0].Msg); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// TestAdmitDelegated: an executor the server registered admits the definition as a
// delegated agent; any other is refused by rule 3, naming the flag.
func TestAdmitDelegated(t *testing.T) {
	src := []byte("metadata { executor = \"claude_code\" }\nagent coder { capabilities = [\"code\"] }\n")
	registered := dsl.Options{Executors: func(n string) bool { return n == "claude_code" }}
	a := dsl.AdmitSource("agents/coder.symbi", "coder", src, registered)
	if !a.Admitted || !a.Delegated() || a.Executor != "claude_code" || a.Agent != "coder" {
		t.Fatalf("registered executor: %+v", a)
	}
	for _, o := range []dsl.Options{{}, {Executors: func(string) bool { return false }}} {
		a := dsl.AdmitSource("agents/coder.symbi", "coder", src, o)
		if a.Admitted || a.Delegated() || a.Rule != "rule 3" || !strings.Contains(a.Reason, "--executors") {
			t.Fatalf("unregistered executor: %+v", a)
		}
	}
	if a := dsl.AdmitSource("x", "a", []byte("metadata { executor = \"orga\" }\nagent a {}\n")); !a.Admitted || a.Delegated() {
		t.Fatalf("orga: %+v", a)
	}
	// A sandbox is a promise symbi keeps only where nothing runs: a delegated agent's is
	// refused; a model agent's (orga, or no executor) is admitted.
	sandboxed := []byte("metadata { executor = \"claude_code\" }\nagent coder { with sandbox = \"gvisor\" {} }\n")
	if a := dsl.AdmitSource("agents/coder.symbi", "coder", sandboxed, registered); a.Admitted || a.Rule != "rule 5" ||
		a.Reason != `rule 5 at 2:20: sandbox "gvisor" is not honoured for a delegated agent: its executor runs it as the executors file starts it (put the sandbox in that command)` {
		t.Fatalf("a delegated agent's sandbox: %+v", a)
	}
	if a := dsl.AdmitSource("x", "a", []byte("metadata { executor = \"orga\" }\nagent a { with sandbox = \"gvisor\" {} }\n")); !a.Admitted || a.Sandbox != "gvisor" {
		t.Fatalf("a model agent's sandbox: %+v", a)
	}
}

// TestAnalyzeManyAgents: Analyze gives an admission verdict for the first
// MaxAdmissionViews agents of a file — each verdict reads the whole file — and says so of
// the others, which the registry would still admit one file at a time.
func TestAnalyzeManyAgents(t *testing.T) {
	var src strings.Builder
	n := dsl.MaxAdmissionViews + 4
	for i := range n {
		fmt.Fprintf(&src, "agent a%d { capabilities = [\"answer\"] }\n", i)
	}
	r := dsl.Analyze("many.symbi", []byte(src.String()))
	if len(r.Agents) != n {
		t.Fatalf("%d agents, want %d", len(r.Agents), n)
	}
	for i, a := range r.Agents {
		evaluated := !strings.Contains(a.Refusal, "not evaluated")
		if evaluated != (i < dsl.MaxAdmissionViews) {
			t.Errorf("agent %d: refusal %q; evaluated %v", i, a.Refusal, evaluated)
		}
		if i < dsl.MaxAdmissionViews && !a.Admitted {
			t.Errorf("agent %d: refused %q", i, a.Refusal)
		}
	}
}

// TestLoneLineBreaksRefused: to an editor (and to the model, which is sent the
// declaration's bytes) a lone CR, or U+2028 and its kin, may end a line, and a comment
// with it: what follows would look like code — a schedule, a function — that a parse
// reading the comment on to "\n" skips, and admission with it. docs/dsl.md, Lexical:
// "comments run from `//` or `#` to end of line"; rule 2: any top-level `schedule` ...
// or `function` → refused; rule 4: "no functions". Such a file is refused.
func TestLoneLineBreaksRefused(t *testing.T) {
	for _, src := range []string{
		"agent a {}\r# note\rschedule s { x = 1 }",
		"agent a {}\r// note\rfunction f() { }",
		"agent a { capabilities = [\"read\"] # note\rfunction exfil() { send(secrets); }\n}",
		"agent a { capabilities = [\"read\"] # note\u2028function exfil() { send(secrets); }\n}",
		"agent a { capabilities = [\"read\"] // note\u0085function exfil() { send(secrets); }\r\n}",
		"agent a { capabilities = [\"read\"] # note\ffunction exfil() { send(secrets); }\n}",
		"agent a { capabilities = [\"read\rfunction exfil() { send(secrets); }\"] }", // in a string
	} {
		a := dsl.AdmitSource("a.symbi", "a", []byte(src))
		if a.Admitted {
			t.Errorf("%q admitted; the line after the lone CR holds a construct admission must refuse (definition sent to the model: %q)", src, a.Definition)
		}
	}
}

// TestReasonsValidUTF8: refusal reasons and syntax errors quote source text
// (clipText cuts at byte 57, describe at byte 37); they must cut at a rune boundary, or
// the reason carries invalid UTF-8 (shown as U+FFFD by JSON encoders, a broken byte in
// logs). docs/dsl.md: messages quote the source; errcode.Clip already cuts at a rune
// boundary.
func TestReasonsValidUTF8(t *testing.T) {
	e := strings.Repeat("é", 40)
	for _, src := range []string{
		`agent a { capabilities = [f("a` + e + `")] }`, // rule 4 refusal, clipText
		`agent a { with x = 1 "a` + e + `" {} }`,       // rule 1 syntax error, describe
	} {
		a := dsl.AdmitSource("a.symbi", "a", []byte(src))
		for _, r := range append([]string{a.Reason}, a.Reasons...) {
			if !utf8.ValidString(r) {
				t.Errorf("reason %q is not valid UTF-8", r)
			}
		}
	}
}

// TestFirstSyntaxErrorReported: docs/dsl.md, Errors: "Parsing stops at the first
// syntax error ... Errors are placed where the mistake is"; spec: "A syntax error reports
// line:column". A lexical error on a later line (a stray character, a stray closing
// bracket, a bad escape) does not hide the first error, on line 1.
func TestFirstSyntaxErrorReported(t *testing.T) {
	for _, tail := range []string{"$", ")", `"bad \q"`} {
		src := "agent a { function f() { x = ; } }\n\n\n" + tail + "\n"
		_, err := dsl.Parse("a.symbi", []byte(src))
		errs := dsl.Errors(err)
		if len(errs) == 0 {
			t.Fatalf("%q parses", src)
		}
		if errs[0].Line != 1 || errs[0].Column != 30 {
			t.Errorf("tail %q: first error reported at %d:%d (%s), want 1:30 (the \";\" where an expression is missing)", tail, errs[0].Line, errs[0].Column, errs[0].Msg)
		}
	}
}

// TestMissingExpressionSaysExpected: a syntax error reports
// `line:column` (1-based) and what was expected. Where an expression is missing (an empty
// rule selector, condition, right side, argument), the parser knows an expression was
// expected, and says so.
func TestMissingExpressionSaysExpected(t *testing.T) {
	for _, src := range []string{
		"agent a { policy p { allow: } }",
		"agent a { policy p { allow: true if } }",
		"agent a { function f() { x = ; } }",
		"agent a { function f() { f(a: ) } }",
	} {
		_, err := dsl.Parse("a.symbi", []byte(src))
		errs := dsl.Errors(err)
		if len(errs) == 0 {
			t.Fatalf("%q parses", src)
		}
		if !strings.Contains(errs[0].Msg, ", expected ") {
			t.Errorf("%q: error %q does not say what was expected", src, errs[0].Msg)
		}
	}
}

// maxReasonBytes is what one refusal may take: its rule and position, a fixed message
// and at most two quoted pieces of source of errcode.MaxQuoted (256) bytes each.
const maxReasonBytes = 1024

// TestRefusalQuotesAreBounded: an admission refusal quotes at most errcode.MaxQuoted bytes
// of each name, key or literal of the source it names. A refusal is repeated for each
// rule it names and, in Analyze (parse_dsl, which any MCP or HTTP client may call with
// 1 MiB of inline content), in each agent's view (up to MaxAdmissionViews): unbounded, a
// 100 KB source made 81 MB of refusal text, and one agent with a 1 MB name and 49
// functions 50 MB of reasons in the registry. Bounded, each refusal is at most 1 KiB and
// all of Analyze's are at most MaxAdmissionViews × (MaxReasons+1) of them, whatever the
// source.
func TestRefusalQuotesAreBounded(t *testing.T) {
	long := strings.Repeat("n", 20_000)
	check := func(what string, reasons []string) {
		t.Helper()
		for _, r := range reasons {
			if len(r) > maxReasonBytes {
				t.Errorf("%s: a refusal of %d bytes (%.80q…); want at most %d", what, len(r), r, maxReasonBytes)
				return
			}
		}
	}

	// Registry path: the agent's name repeated in every rule-4 refusal.
	src := "agent " + long + "(x: int) -> int {" + strings.Repeat(" function f() {}", 49) + " }"
	a := dsl.AdmitSource("x", "x", []byte(src))
	check("agent with a long name and 49 functions", a.Reasons)

	// Each kind of name or literal quoted by a refusal.
	for _, c := range []struct{ what, src string }{
		{"metadata key", "metadata { " + long + " = \"x\" }\nagent a {}"},
		{"top-level item name", "schedule " + long + " { cron = \"x\" }\nagent a {}"},
		{"with key", "agent a { with " + long + " = 1 {} }"},
		{"sandbox value", "agent a { with sandbox = " + long + " {} }"},
		{"timeout value", "agent a { with timeout = " + strings.Repeat("9", 20_000) + " {} }"},
		{"policy name", "agent a { policy " + long + " { require: true } }"},
		{"condition name", "agent a { policy p { allow: true if " + long + " } }"},
		{"condition number", "agent a { policy p { allow: true if context.n == 1." + strings.Repeat("5", 20_000) + " } }"},
		{"selection", "agent " + long + " {}\nagent b {}"},
	} {
		a := dsl.AdmitSource("x", "x", []byte(c.src))
		if a.Admitted {
			t.Fatalf("%s: admitted", c.what)
		}
		check(c.what, a.Reasons)
	}

	// parse_dsl path: the same refusals once per agent view.
	src = "policy " + long + " {" + strings.Repeat(" require: true", 50) + " }\n"
	for i := range dsl.MaxAdmissionViews {
		src += fmt.Sprintf("agent a%d {}\n", i)
	}
	r := dsl.Analyze("inline", []byte(src))
	total := 0
	for i, ag := range r.Agents {
		if i == 0 {
			check("Analyze agent "+ag.Name, ag.Refusals)
		}
		for _, x := range ag.Refusals {
			total += len(x)
		}
	}
	if limit := dsl.MaxAdmissionViews * (dsl.MaxReasons + 1) * maxReasonBytes; total > limit {
		t.Errorf("Analyze of a %d-byte source holds %d bytes of refusals, more than %d", len(src), total, limit)
	}
}

// TestSyntaxErrorQuotesAreBounded: a syntax error quotes at most 40 bytes of the token it
// did not expect, whatever its kind — an identifier, a number, a duration, a vault URL,
// not only a string (docs/dsl.md: an error quotes at most 256 bytes of the source).
func TestSyntaxErrorQuotesAreBounded(t *testing.T) {
	for _, tok := range []string{
		strings.Repeat("x", 2000),              // identifier
		"1" + strings.Repeat("0", 2000),        // number
		"1" + strings.Repeat("0", 2000) + "s",  // duration
		"vault://" + strings.Repeat("a", 2000), // vault URL
	} {
		_, err := dsl.Parse("x", []byte("agent a { "+tok+" }"))
		errs := dsl.Errors(err)
		if len(errs) == 0 {
			t.Fatalf("%.20s…: no error", tok)
		}
		if m := errs[0].Msg; len(m) > 256+64 {
			t.Errorf("%.20s…: the error is %d bytes (%.60q…); an error quotes at most 256 bytes of the source", tok, len(m), m)
		}
	}
}

// TestSubBlockKeywordPerKind: the grammar gives a memory only a "search" sub-block and a
// webhook only a "filter" one (dsl.md); the other keyword is an ordinary key there, which
// a value must follow, and "{" is none: a syntax error.
func TestSubBlockKeywordPerKind(t *testing.T) {
	for _, src := range []string{
		"memory m { filter { k 1 } }",
		"webhook w { search { k 1 } }",
	} {
		if _, err := dsl.Parse("x", []byte(src)); err == nil {
			t.Errorf("%s: parsed; the grammar refuses it (a %s block has no such sub-block)", src, strings.Fields(src)[0])
		}
	}
}

// TestPolicyRefusalsInSourceOrder: rule 6's refusals come in source order (docs/dsl.md:
// "each check's in source order; the first is the reason shown"), though the top-level
// policies come first in scope: a repeated name is reported at the later declaration,
// naming the earlier as first, and an agent's policy before a top-level one is refused
// first.
func TestPolicyRefusalsInSourceOrder(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"agent a { policy p { allow: true } }\npolicy p { allow: true }",
			`rule 6 at 2:1: policy "p" is declared more than once (first at 1:11)`},
		{"agent a { policy q { require: true } }\npolicy p { audit: true }",
			`rule 6 at 1:22: unsupported policy: "require" rule in policy "q" (only allow and deny)`},
	} {
		a := dsl.AdmitSource("x", "a", []byte(c.src))
		if a.Admitted || a.Reason != c.want {
			t.Errorf("%q:\n reason %q (all: %q)\n want   %q", c.src, a.Reason, a.Reasons, c.want)
		}
	}
}

// TestAdmitReportsEveryPolicyFailure: rule 6 reports every failure of a policy rule at
// once, as docs/dsl.md promises of admission — a bad selector does not hide the same
// rule's bad condition, nor a repeated policy name the failures of that policy's rules.
func TestAdmitReportsEveryPolicyFailure(t *testing.T) {
	src := `agent p {
  policy q { allow: [1] if foo(1) }
  policy q { deny: true if context.n > 1.5 }
}`
	a := dsl.AdmitSource("agents/p.symbi", "p", []byte(src))
	if a.Admitted {
		t.Fatal("admitted")
	}
	all := strings.Join(a.Reasons, "\n")
	for _, want := range []string{
		"rule selector element 1 is not a string", // reported
		"foo", // the call in the same rule's condition
		"1.5", // the second q's non-integer comparison
	} {
		if !strings.Contains(all, want) {
			t.Errorf("refusals do not report %q; got:\n%s", want, all)
		}
	}
}
