package dsl_test

// Security checks of admission (dsl.md, "Admission"): what is not a literal, chained
// comparisons, the depth bound of a condition, and which definitions count as delegated.

import (
	"strings"
	"testing"

	"symbi/internal/dsl"
)

// dsl.md rule 4: "Its capabilities ... is an array of string literals"; rule 6: "A rule's
// selector is true/false, a string, or a non-empty array of strings". A string-literal
// operand of an expression is not a string literal: "read" + "write" is refused, and no
// capability "read" is recorded: what an agent may do is only what its source spells out.
func TestBinaryExpressionIsNotAStringLiteral(t *testing.T) {
	for _, tc := range []struct{ name, src, rule, want string }{
		{"capability", `agent a { capabilities = ["read" + "write"] }`, "rule 4", "is not a string literal"},
		{"capability or", `agent a { capabilities = ["read" || "write"] }`, "rule 4", "is not a string literal"},
		{"selector element", `agent a { policy p { allow: ["read" + "write"] } }`, "rule 6", "is not a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := dsl.AdmitSource("a.symbi", "a", []byte(tc.src))
			if a.Admitted || a.Rule != tc.rule || !strings.Contains(a.Reason, tc.want) {
				t.Fatalf("admitted=%v rule=%q reason=%q; want refused by %s (%q)", a.Admitted, a.Rule, a.Reason, tc.rule, tc.want)
			}
			if tc.rule == "rule 4" && len(a.Capabilities) != 0 {
				t.Errorf("capabilities %q recorded from a non-literal", a.Capabilities)
			}
		})
	}
}

// dsl.md rule 6: comparisons are "integer comparisons only"; a chained comparison
// (a < b < c) compares a boolean with an integer, and is refused with the offending token,
// not admitted as a condition that means something other than it reads.
func TestChainedComparisonRefused(t *testing.T) {
	for _, cond := range []string{"context.n < 5 < 10", "1 <= invocation.n >= 0"} {
		a := dsl.AdmitSource("a.symbi", "a", []byte("agent a { policy p { allow: true if "+cond+" } }"))
		if a.Admitted || a.Rule != "rule 6" || !strings.Contains(a.Reason, "chained comparison") {
			t.Errorf("%s: admitted=%v reason=%q; want rule 6 chained comparison", cond, a.Admitted, a.Reason)
		}
	}
}

// dsl.md rule 6: "Bounds: ... depth 24". An array counts as one level, as a parenthesis
// does: inside 23 parentheses an array is at depth 24 (admitted); inside 24 it would be at
// 25 (refused). The bound holds for arrays as for every other nesting.
func TestArrayDepthBound(t *testing.T) {
	nest := func(k int) string {
		return strings.Repeat("(", k) + `context.tag in ["a", 1]` + strings.Repeat(")", k)
	}
	src := func(k int) []byte { return []byte("agent a { policy p { allow: true if " + nest(k) + " } }") }
	if a := dsl.AdmitSource("a.symbi", "a", src(dsl.MaxConditionDepth-1)); !a.Admitted {
		t.Errorf("array at depth %d (the bound): refused: %s", dsl.MaxConditionDepth, a.Reason)
	}
	a := dsl.AdmitSource("a.symbi", "a", src(dsl.MaxConditionDepth))
	if a.Admitted || a.Rule != "rule 6" || !strings.Contains(a.Reason, "nested deeper than 24") {
		t.Errorf("array at depth %d: admitted=%v reason=%q; want rule 6 depth refusal", dsl.MaxConditionDepth+1, a.Admitted, a.Reason)
	}
}

// Admission.Delegated: "whether a is an admitted delegated agent". A definition naming a
// registered executor but refused by another rule is not delegated: the registry lists
// its mode from Delegated, and a refused definition is not listed as a delegated agent.
func TestRefusedIsNotDelegated(t *testing.T) {
	opts := dsl.Options{Executors: func(name string) bool { return name == "coder" }}
	ok := dsl.AdmitSource("a.symbi", "a", []byte(`metadata { executor = "coder" } agent a {}`), opts)
	if !ok.Admitted || !ok.Delegated() {
		t.Fatalf("registered executor: admitted=%v delegated=%v reason=%q", ok.Admitted, ok.Delegated(), ok.Reason)
	}
	a := dsl.AdmitSource("a.symbi", "a", []byte(`metadata { executor = "coder" } agent a(x: String) {}`), opts)
	if a.Admitted {
		t.Fatal("an agent with parameters was admitted")
	}
	if a.Delegated() {
		t.Errorf("a refused definition (%s) reports Delegated() = true (executor %q)", a.Reason, a.Executor)
	}
}
