package dsl_test

// The admission rules and the parser's limits at their edges: what each rule refuses
// and names, the condition language's bare forms, escapes decoded exactly, and every
// bound at its value and one past it.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"symbi/internal/dsl"
)

// admitA admits src as the registration "a".
func admitA(src string) *dsl.Admission {
	return dsl.AdmitSource("a.symbi", "a", []byte(src))
}

// TestSelectionStemIsExact: among several agents the stem must equal exactly one
// declared name (docs/dsl.md, Selection): a stem differing only in letter case selects
// none, so a file cannot be registered as an agent it does not declare.
func TestSelectionStemIsExact(t *testing.T) {
	for _, tc := range []struct{ stem, src string }{
		{"Reader", "agent reader {}\nagent b {}"},
		{"reader", "agent Reader {}\nagent b {}"},
	} {
		a := dsl.AdmitSource(tc.stem+".symbi", tc.stem, []byte(tc.src))
		if a.Admitted || a.Rule != "selection" || !strings.Contains(a.Reason, "none is named") {
			t.Errorf("stem %q over %q: admitted=%v agent=%q reason=%q; want a selection refusal", tc.stem, tc.src, a.Admitted, a.Agent, a.Reason)
		}
	}
}

// TestCapabilityIsABareStringLiteral: rule 4 — a capability is a string literal, with
// no prefix operator and no field access, call or index after it; such an element is
// refused and records no capability.
func TestCapabilityIsABareStringLiteral(t *testing.T) {
	for _, c := range []string{`!"read"`, `not "read"`, `-"read"`, `"read".x`, `"read"[0]`, `"read"("x")`} {
		a := admitA(`agent a { capabilities = [` + c + `] }`)
		if a.Admitted || a.Rule != "rule 4" || !strings.Contains(a.Reason, "is not a string literal") {
			t.Errorf("capability %s: admitted=%v reason=%q; want rule 4 refusal", c, a.Admitted, a.Reason)
		}
		if len(a.Capabilities) != 0 {
			t.Errorf("capability %s: recorded %q", c, a.Capabilities)
		}
	}
}

// TestPolicyDigestInScopeOrder: rule 7 — the policy names and digest follow the scope
// order (top-level policies first, then the agent's), even when the agent's own policy
// comes first in the file.
func TestPolicyDigestInScopeOrder(t *testing.T) {
	own := "policy own { allow: true }"
	top := "policy top { deny: false }"
	a := admitA("agent a { " + own + " }\n" + top + "\n")
	if !a.Admitted {
		t.Fatalf("refused: %v", a.Reasons)
	}
	if strings.Join(a.Policies, ",") != "top,own" {
		t.Errorf("policies %q, want top,own", a.Policies)
	}
	sum := sha256.Sum256([]byte(top + "\n" + own + "\n"))
	if want := hex.EncodeToString(sum[:]); a.PolicyDigest != want {
		t.Errorf("digest %s, want %s (top-level first)", a.PolicyDigest, want)
	}
}

// TestDescriptionAndSandboxAsWritten: an admission reports the metadata
// "description" value (not another key's) and the sandbox as written in the source.
func TestDescriptionAndSandboxAsWritten(t *testing.T) {
	a := admitA(`metadata { version = "1", author = "x", description = "d" } agent a { with sandbox = GVisor {} }`)
	if !a.Admitted {
		t.Fatalf("refused: %v", a.Reasons)
	}
	if a.Description != "d" {
		t.Errorf("description %q, want d", a.Description)
	}
	if a.Sandbox != "GVisor" {
		t.Errorf("sandbox %q, want GVisor as written", a.Sandbox)
	}
}

// TestSelectorIsBare: rule 6 — a rule selector is true, false, a string or a
// non-empty array of strings; any other value (a number, a duration, a vault URL, a
// name), and a prefix operator, a field access, call or index, a lambda or a typed
// literal built on one of those, is refused.
func TestSelectorIsBare(t *testing.T) {
	for _, sel := range []string{`1`, `5s`, `30.seconds`, `vault://x`, `principal`, `read`, `!"x"`, `not false`, `!true`, `"x".y`, `true(1)`, `"read"[0]`, `true => x`, `false => "x"`, `true { a: 1 }`, `false { a: f() }`} {
		a := admitA(`agent a { policy p { allow: ` + sel + ` } }`)
		if a.Admitted || a.Rule != "rule 6" || !strings.Contains(a.Reason, "rule selector") {
			t.Errorf("selector %s: admitted=%v reason=%q; want a rule 6 selector refusal", sel, a.Admitted, a.Reason)
		}
	}
}

// TestConditionLanguage: rule 6 — a condition uses only string, integer and boolean
// literals, arrays of literals, principal, invocation.…/context.… field paths, ! not
// && || == != in < <= > >= and parentheses, comparing integers only. Every other
// construct — arithmetic, a negated comparison operand, a bare root, a typed literal or
// lambda on an allowed name, a duration, a non-literal array element — is refused.
func TestConditionLanguage(t *testing.T) {
	for _, cond := range []string{
		// arithmetic operators
		"context.n - 1 == 0", "context.n * 2 == 4", "context.n / 2 == 1", "context.n % 2 == 0",
		// a comparison operand with a prefix operator is not an integer
		"!context.n < 3", "not 3 <= context.n", "context.a > !context.b",
		// a path has at least one field
		"context", "invocation == \"x\"", "!invocation",
		// typed literals and lambdas on allowed names
		"context { a: 1 }.x == 1", "principal { a: f() } == \"x\"", "true { a: f() }", "invocation { a: 1 }.b",
		// durations are not literals of the condition language
		"context.t == 5s", "30.seconds == context.t",
		// array elements are literals, nothing else
		"context.tag in [\"a\" + f()]", "context.tag in [1 || f()]",
		"context.tag in [!true]", "context.tag in [not false]", "context.tag in [-1]",
		"context.tag in [\"a\".b]", "context.tag in [\"a\"(1)]", "context.tag in [\"a\"[0]]",
		"context.tag in [true => x]", "context.tag in [true { a: f() }]",
		"context.tag in [principal]", "context.tag in [context.x]", "context.tag in [[\"a\"]]",
		"context.tag in [(\"a\")]", "context.tag in [x]",
	} {
		a := admitA("agent a { policy p { allow: true if " + cond + " } }")
		if a.Admitted || a.Rule != "rule 6" {
			t.Errorf("condition %s: admitted=%v reason=%q; want a rule 6 refusal", cond, a.Admitted, a.Reason)
		}
	}
}

// TestEscapesAreExact: strings accept only the escapes docs/dsl.md lists; a \u escape
// is a Unicode scalar value — no surrogate, nothing past U+10FFFF however many digits
// spell it (so no longer spelling wraps around to an ordinary letter), at least one
// digit, four digits in the short form — both when parsing and when decoding.
func TestEscapesAreExact(t *testing.T) {
	for _, lit := range []string{
		`"\uD800"`, `"\uDBFF"`, `"\uDC00"`, `"\uDFFF"`,
		`"\u{100000072}ead"`, `"\u{FFFFFFFF}"`, `"\u{80000041}"`,
		`"\u{}"`, `"\u123"`, `"\b"`, `"\a"`, `"\x41"`, `"\U00000041"`,
	} {
		if s, err := dsl.Unquote(lit); err == nil {
			t.Errorf("Unquote(%s) = %q, want an error", lit, s)
		}
		a := admitA(`agent a { capabilities = [` + lit + `] }`)
		if a.Admitted || a.Rule != "rule 1" {
			t.Errorf("capability %s: admitted=%v capabilities=%q reason=%q; want a rule 1 refusal", lit, a.Admitted, a.Capabilities, a.Reason)
		}
	}
	// A short \u escape cut off by the end of the input.
	if _, err := dsl.Parse("x", []byte(`metadata { a = "\u123`)); err == nil {
		t.Error(`a source ending in "\u123 parsed`)
	}
	for lit, want := range map[string]string{`"\uD7FF"`: "\uD7FF", `"\uE000"`: "\uE000", `"\u{10FFFF}"`: "\U0010FFFF", `"\u{0000041}"`: "A"} {
		if s, err := dsl.Unquote(lit); err != nil || s != want {
			t.Errorf("Unquote(%s) = %q, %v; want %q", lit, s, err, want)
		}
	}
}

// TestCommentLineBreaksRefused: a comment holding a character some reader takes for a
// line break (vertical tab, U+2029, or a carriage return with no line feed, also at the
// very end of the input) is refused where it stands.
func TestCommentLineBreaksRefused(t *testing.T) {
	for _, src := range []string{
		"agent a { capabilities = [\"read\"] # note\vfunction exfil() { send(secrets); }\n}",
		"agent a { capabilities = [\"read\"] # note\u2029function exfil() { send(secrets); }\n}",
		"agent a {} // note\r",
	} {
		_, err := dsl.Parse("a.symbi", []byte(src))
		if err == nil || !strings.Contains(err.Error(), "line break") {
			t.Errorf("%q: %v; want refused: a comment holds a line break", src, err)
		}
	}
}

// TestChainBoundCountsBrackets: the expression nesting bound (1,024) counts open
// brackets with the "=>" chain: 1,024 levels parse, and the 1,025th, an open bracket, is
// refused where it stands.
func TestChainBoundCountsBrackets(t *testing.T) {
	// "{" of the body (1) + 1,000 lambdas + k parentheses.
	src := func(k int) string {
		return "function f() { let x = " + strings.Repeat("a => ", 1000) + strings.Repeat("(", k) + "1" + strings.Repeat(")", k) + "; }"
	}
	if _, err := dsl.Parse("x", []byte(src(23))); err != nil {
		t.Fatalf("1,024 levels: %v", err)
	}
	_, err := dsl.Parse("x", []byte(src(24)))
	if !errors.Is(err, dsl.ErrNesting) {
		t.Fatalf("1,025 levels: %v, want the nesting bound", err)
	}
	col := len("function f() { let x = ") + 5*1000 + 23 + 1 // the 24th "("
	if e := dsl.Errors(err)[0]; e.Line != 1 || e.Column != col || !strings.Contains(e.Msg, "expression nested deeper than 1024 levels") {
		t.Errorf("error %v, want 1:%d expression nested deeper than 1024 levels", e, col)
	}
}

// TestSeparatorsEndAChain: the nesting bound counts since the last "," or ";" of each
// bracket level: 1,100 lambdas separated by commas, or 1,100 statements each holding a
// lambda, parse.
func TestSeparatorsEndAChain(t *testing.T) {
	for name, src := range map[string]string{
		"array elements": "function f() { let v = [" + strings.Repeat("x => 1, ", 1100) + "]; }",
		"statements":     "function f() { " + strings.Repeat("let v = x => 1; ", 1100) + "}",
		"arguments":      "function f() { g(" + strings.Repeat("x => 1, ", 1100) + "); }",
	} {
		if _, err := dsl.Parse("x", []byte(src)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTypeDepthAtTheBound: a type nests at most 1,024 levels: exactly 1,024 parses,
// 1,025 is refused with the nesting error.
func TestTypeDepthAtTheBound(t *testing.T) {
	ty := func(levels int) string {
		n := levels - 1
		return strings.Repeat("A<B,", n) + "B" + strings.Repeat(">", n)
	}
	if _, err := dsl.Parse("x", []byte("function f(x: "+ty(1024)+") { }")); err != nil {
		t.Fatalf("1,024 levels: %v", err)
	}
	_, err := dsl.Parse("x", []byte("function f(x: "+ty(1025)+") { }"))
	if !errors.Is(err, dsl.ErrNesting) || !strings.Contains(err.Error(), "type nested deeper than 1024 levels") {
		t.Errorf("1,025 levels: %v, want type nested deeper than 1024 levels", err)
	}
}

// TestErrorListAtTheBound: a parse lists at most dsl.MaxErrors errors: exactly 100 are
// all listed, and 101 are 100 and one more saying "and 1 more errors".
func TestErrorListAtTheBound(t *testing.T) {
	// n bare expression statements without ";" make n-1 errors.
	errs := func(n int) []dsl.ErrorView {
		return dsl.Analyze("inline", []byte("function f() { "+strings.Repeat("a ", n)+"}")).Errors
	}
	if got := errs(dsl.MaxErrors + 1); len(got) != dsl.MaxErrors || strings.Contains(got[len(got)-1].Message, "more errors") {
		t.Errorf("%d errors: %d listed, last %+v", dsl.MaxErrors, len(got), got[len(got)-1])
	}
	got := errs(dsl.MaxErrors + 2)
	if len(got) != dsl.MaxErrors+1 || got[dsl.MaxErrors].Message != "and 1 more errors from here, not listed" {
		t.Errorf("%d errors: %d listed, last %+v", dsl.MaxErrors+1, len(got), got[len(got)-1])
	}
}

// TestBlockChecksInLambdaAndIndex: the checks made on blocks after parsing apply to a
// block in a lambda body and in an index expression too.
func TestBlockChecksInLambdaAndIndex(t *testing.T) {
	for _, src := range []string{
		"function f() { let g = x => if x { a + b = 1; } else { 0 }; }",
		"function f() { let v = a[if c { a + b = 1; } else { 0 }]; }",
	} {
		if _, err := dsl.Parse("x", []byte(src)); err == nil || !strings.Contains(err.Error(), "cannot assign to a + b") {
			t.Errorf("%s: %v, want cannot assign to a + b", src, err)
		}
	}
}

// TestAnalyzeHonoursExecutors: the agent views of Analyze (parse_dsl) give the verdict
// the server gives: an agent naming an executor the server registered is admitted there.
func TestAnalyzeHonoursExecutors(t *testing.T) {
	src := []byte("metadata { executor = \"coder\" }\nagent a {}\n")
	opts := dsl.Options{Executors: func(n string) bool { return n == "coder" }}
	if v := dsl.Analyze("inline", src, opts).Agents[0]; !v.Admitted || v.Refusal != "" {
		t.Errorf("registered executor: admitted=%v refusal=%q", v.Admitted, v.Refusal)
	}
	if v := dsl.Analyze("inline", src).Agents[0]; v.Admitted || !strings.Contains(v.Refusal, "rule 3") {
		t.Errorf("unregistered executor: admitted=%v refusal=%q", v.Admitted, v.Refusal)
	}
}

// TestBidiControlsRefused: a bidirectional embedding, override or isolate control
// (U+202A–U+202E, U+2066–U+2069) in a comment or a string is refused where it stands: an
// editor shows the text around it reordered, so a reader sees code where the parser reads
// a comment, or the end of a string where it goes on. Written as an escape, in a string,
// it is taken; the characters next to the range are not refused.
func TestBidiControlsRefused(t *testing.T) {
	for _, r := range []rune{0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069} {
		for _, tc := range []struct {
			src, where string
			col        int
		}{
			{"agent a {} # x" + string(r) + "y\n", "a comment", 15},
			{"agent a {} // é" + string(r) + "\n", "a comment", 16},
			{`metadata { description = "ab` + string(r) + `c" }`, "a string", 29},
		} {
			_, err := dsl.Parse("a.symbi", []byte(tc.src))
			want := fmt.Sprintf("%s holds %U, a bidirectional control", tc.where, r)
			errs := dsl.Errors(err)
			if len(errs) == 0 || !errors.Is(err, dsl.ErrSyntax) || !strings.Contains(errs[0].Msg, want) || errs[0].Line != 1 || errs[0].Column != tc.col {
				t.Errorf("%q: %v; want 1:%d %s", tc.src, err, tc.col, want)
			}
		}
	}
	for _, src := range []string{
		`metadata { description = "ab\u{202E}c" }`,
		"metadata { description = \"a\u2029\u2065\u206A\u2029b\" } # \u2010\u2030\u200F\n",
	} {
		if _, err := dsl.Parse("a.symbi", []byte(src)); err != nil {
			t.Errorf("%q: %v; want it parsed", src, err)
		}
	}
}
