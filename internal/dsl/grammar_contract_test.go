package dsl_test

import (
	"strings"
	"testing"

	"symbi/internal/dsl"
)

// TestContractAssignToPostfix: the grammar assigns to a postfix,
//
//	statement = … | postfix ( "=" | "+=" | "-=" | "*=" | "/=" | "%=" ) expr ";"
//	postfix   = primary ( "." identifier | "(" args? ")" | "[" expr "]" )* | …
//
// so an assignment whose target holds a call is grammatical, and parses; one whose target
// holds an operator does not.
func TestContractAssignToPostfix(t *testing.T) {
	for _, src := range []string{
		"function f() { items.get(0).name = \"x\"; }",
		"function f() { g().x = 3; }",
		"function f() { a.b(1).c += 2; }",
		"function f() { g() = 1; }",
	} {
		if _, err := dsl.Parse("x.symbi", []byte(src)); err != nil {
			t.Errorf("%s: refused, but the grammar's `postfix \"=\" expr \";\"` accepts it: %v", src, err)
		}
	}
	for _, src := range []string{"function f() { a + b = 1; }", "function f() { -a = 1; }", "function f() { !g() = 1; }"} {
		if _, err := dsl.Parse("x.symbi", []byte(src)); err == nil || !strings.Contains(err.Error(), "cannot assign to") {
			t.Errorf("%s: %v, want refused: cannot assign to", src, err)
		}
	}
}

// TestContractAdmissionBoundsAtTheLimit: rule 6's bounds (128 rules, 256 tokens per
// expression) are limits, so exactly the bound is admitted; rule 5's range 1 s .. 1 day
// is inclusive at both ends in every duration form the rule lists.
func TestContractAdmissionBoundsAtTheLimit(t *testing.T) {
	// 128 rules, split between a top-level policy and the agent's: they count together.
	top := "policy top {\n" + strings.Repeat("allow: true\n", 64) + "}\n"
	own := "policy own {\n" + strings.Repeat("deny: false\n", 64) + "}"
	// A condition of exactly 256 tokens: "!" then 128 trues joined by 127 "||".
	cond := "!" + strings.TrimSuffix(strings.Repeat("true || ", 128), " || ")
	// A selector of exactly 256 tokens: "[" 127 strings, 127 commas "]".
	sel := "[" + strings.Repeat(`"s", `, 127) + "]"
	admitted := map[string]string{
		"128 rules in scope":        top + "agent a { " + own + " }",
		"256-token condition":       "agent a { policy p { allow: true if " + cond + " } }",
		"256-token selector":        "agent a { policy p { allow: " + sel + " } }",
		"timeout 1 (integer s)":     "agent a { with timeout = 1 {} }",
		"timeout 1s":                "agent a { with timeout = 1s {} }",
		"timeout 1.seconds":         "agent a { with timeout = 1.seconds {} }",
		"timeout 24.hours":          "agent a { with timeout = 24.hours {} }",
		"timeout 1440.minutes":      "agent a { with timeout = 1440.minutes {} }",
		"timeout 86400.seconds":     "agent a { with timeout = 86400.seconds {} }",
		"timeout 24h":               "agent a { with timeout = 24h {} }",
		"timeout 1d":                "agent a { with timeout = 1d {} }",
		"sandbox DOCKER":            `agent a { with sandbox = "DOCKER" {} }`,
		"sandbox Tier1":             `agent a { with sandbox = Tier1 {} }`,
		"sandbox gVisor":            `agent a { with sandbox = "gVisor" {} }`,
		"sandbox TIER2":             `agent a { with sandbox = TIER2 {} }`,
		"sandbox FireCracker":       `agent a { with sandbox = "FireCracker" {} }`,
		"sandbox tier3":             `agent a { with sandbox = tier3 {} }`,
		"sandbox E2B":               `agent a { with sandbox = E2B {} }`,
		"settings over two blocks":  `agent a { with sandbox = "e2b" {} with timeout = 5.minutes {} }`,
		"empty with block":          `agent a { with {} }`,
		"capabilities with colon":   `agent a { capabilities: ["a", "b"] }`,
		"empty params allowed":      `agent a() {}`,
		"all metadata keys":         `metadata { description = "d", version: "1", author = "x", executor: "orga" } agent a {}`,
		"top-level policy only":     "policy p { allow: true if principal == \"Agent\" }\nagent a {}",
		"comments at top level":     "// one\n# two\nagent a {} // three",
		"integer comparison paths":  `agent a { policy p { allow: true if invocation.a.b >= context.c && 3 < context.n } }`,
		"in with a literal array":   `agent a { policy p { deny: ["x"] if context.tag in ["a", 1, false] } }`,
		"not and bang and parens":   `agent a { policy p { deny: "x" if not (context.a == 1) || !context.b } }`,
		"selector string and false": `agent a { policy p { allow: "x" deny: false } }`,
	}
	for name, src := range admitted {
		if a := dsl.AdmitSource(name, "a", []byte(src)); !a.Admitted {
			t.Errorf("%s: refused: %v", name, a.Reasons)
		}
	}
	refused := map[string]struct{ src, reason string }{
		"129 rules in scope":              {top + "agent a { " + strings.Replace(own, "{\n", "{\nallow: true\n", 1) + " }", "more than 128 policy rules in scope"},
		"257-token selector":              {"agent a { policy p { allow: [" + strings.Repeat(`"s", `, 127) + `"s"] } }`, "rule selector has 257 tokens, more than 256"},
		"timeout 86401":                   {"agent a { with timeout = 86401 {} }", "timeout 86401 is outside 1s .. 1 day"},
		"timeout 25h":                     {"agent a { with timeout = 25h {} }", "timeout 25h is outside 1s .. 1 day"},
		"timeout 0.seconds":               {"agent a { with timeout = 0.seconds {} }", "timeout 0.seconds is outside 1s .. 1 day"},
		"timeout 2.hours ok but 2d not":   {"agent a { with timeout = 2d {} }", "timeout 2d is outside 1s .. 1 day"},
		"timeout identifier":              {"agent a { with timeout = forever {} }", "timeout forever is not a duration or integer seconds"},
		"timeout and sandbox conflicting": {`agent a { with timeout = 5s {} with timeout = 6s {} }`, "timeout is set more than once"},
		"executor ORGA case":              {`metadata { executor = "ORGA" } agent a {}`, `executor "ORGA" is not registered`},
		"metadata record":                 {`metadata { description = { a: "b" } } agent a {}`, "metadata description must be a string literal"},
		"agent policy require":            {`agent a { policy p { require: true } }`, `unsupported policy: "require" rule`},
		"agent policy audit":              {`agent a { policy p { audit: "x" } }`, `unsupported policy: "audit" rule`},
		"duplicate within agent":          {`agent a { policy p { allow: true } policy p { deny: true } }`, `policy "p" is declared more than once`},
		"principal path":                  {`agent a { policy p { allow: true if principal.name == "x" } }`, "unsupported expression principal.name"},
		"vault in condition":              {`agent a { policy p { allow: true if context.k == vault://x } }`, "unsupported expression vault://x"},
	}
	for name, tt := range refused {
		a := dsl.AdmitSource(name, "a", []byte(tt.src))
		if a.Admitted || !strings.Contains(strings.Join(a.Reasons, "\n"), tt.reason) {
			t.Errorf("%s: admitted %v, reasons %q; want a refusal containing %q", name, a.Admitted, a.Reasons, tt.reason)
		}
	}
}

// TestContractRefusalCarriesPosition: "Anything else is refused … with the reason and
// the position of the offending construct": every reason starts "<rule> at L:C: " and
// L:C is where the construct begins in the source.
func TestContractRefusalCarriesPosition(t *testing.T) {
	src := "agent a {\n  with sandbox = \"docker\" {}\n  policy p {\n    audit: true\n  }\n}\nschedule s { }\n"
	a := dsl.AdmitSource("x", "a", []byte(src))
	want := []string{
		`rule 2 at 7:1: top-level schedule "s" requires an executable route`,
		`rule 6 at 4:5: unsupported policy: "audit" rule in policy "p" (only allow and deny)`,
	}
	if a.Admitted || strings.Join(a.Reasons, "\n") != strings.Join(want, "\n") {
		t.Errorf("reasons %q, want %q", a.Reasons, want)
	}
	if a.Rule != "rule 2" || a.Line != 7 || a.Column != 1 {
		t.Errorf("first refusal %s at %d:%d, want rule 2 at 7:1", a.Rule, a.Line, a.Column)
	}
}
