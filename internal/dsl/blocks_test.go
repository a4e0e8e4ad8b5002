package dsl_test

import (
	"errors"
	"strings"
	"testing"

	"symbi/internal/dsl"
)

// TestBlocksEverywhereChecked: the checks made on blocks — an assignment ends with ";",
// only a postfix (no operator) is assigned to — apply to a block wherever
// an expression may hold one, not only in function and with bodies: a file with such a
// syntax error anywhere is refused by rule 1, whichever agent the file is selected for.
func TestBlocksEverywhereChecked(t *testing.T) {
	for _, c := range []struct{ name, src string }{
		{"a function body", `agent a {} agent b { function f() { x = 1 } }`},
		{"another agent's policy", `agent a {} agent b { policy p { allow: if true { x = 1 } else { true } } }`},
		{"another agent's policy, a bad target", `agent a {} agent b { policy p { allow: if true { a + b = 1; } else { true } } }`},
		{"another agent's capabilities", `agent a {} agent b { capabilities = [if c { x = 1 } else { "r" }] }`},
		{"another agent's with setting", `agent a {} agent b { with sandbox = [if c { x = 1 } else { 1 }] {} }`},
		{"a top-level policy", `policy p { allow: true if (if true { x = 1 } else { true }) } agent a {}`},
		{"a metadata value", `metadata { tags = [if c { x = 1 } else { 1 }] } agent a {}`},
		{"a channel's policy", `agent a {} channel c { policy p { allow: if true { x = 1 } else { true } } }`},
		{"a channel's setting", `agent a {} channel c { channels = [if c { x = 1 } else { "#a" }] }`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := dsl.Parse("x", []byte(c.src)); err == nil {
				t.Fatalf("Parse accepted %s", c.src)
			}
			if a := dsl.AdmitSource("x", "a", []byte(c.src)); a.Admitted || a.Rule != "rule 1" {
				t.Fatalf("AdmitSource: admitted=%v rule=%q reason=%q; want a rule 1 refusal", a.Admitted, a.Rule, a.Reason)
			}
		})
	}
}

// TestErrorListBounded: a file with an error every few bytes reports at most
// dsl.MaxErrors of them, and one more saying how many it left out.
func TestErrorListBounded(t *testing.T) {
	src := "function f() { " + strings.Repeat("a ", 500000) + "}"
	r := dsl.Analyze("inline", []byte(src))
	if len(r.Errors) != dsl.MaxErrors+1 || !strings.Contains(r.Errors[dsl.MaxErrors].Message, "and 499899 more errors from here, not listed") {
		t.Fatalf("%d errors, the last %+v", len(r.Errors), r.Errors[len(r.Errors)-1])
	}
}

// TestPolicyRulesAreSiblings: the nesting bound counts a policy's rules as siblings, not
// as one nested expression: a policy within rule 6's bounds is admitted, and one with too
// many rules is refused by rule 6, not as nested too deep.
func TestPolicyRulesAreSiblings(t *testing.T) {
	cmp := strings.TrimSuffix(strings.Repeat("context.a < 1 || ", 42), " || ")
	var ok strings.Builder
	for range 24 {
		ok.WriteString("allow: true if " + cmp + "\n")
	}
	if a := dsl.AdmitSource("x", "a", []byte("agent a { policy p {\n"+ok.String()+"} }")); !a.Admitted {
		t.Fatalf("24 rules of 42 comparisons each: %s %s", a.Rule, a.Reason)
	}
	many := "agent a { policy p {\n" + strings.Repeat("allow: \"x\" if true\n", 1100) + "} }"
	if a := dsl.AdmitSource("x", "a", []byte(many)); a.Admitted || a.Rule != "rule 6" || !strings.Contains(a.Reason, "policy rules") {
		t.Fatalf("1,100 rules: admitted=%v %s %s; want rule 6 on the rule count", a.Admitted, a.Rule, a.Reason)
	}
}

// TestErrorBytesBounded: an error quotes at most 256 bytes of source, so the bytes of the
// error list are bounded too — not only its length: here 100 assignments to targets that
// nest each other, each target about 1 MB, once gave 100 MB of messages.
func TestErrorBytesBounded(t *testing.T) {
	t0 := strings.TrimSuffix(strings.Repeat("a + ", 250000), " + ")
	for range 99 {
		t0 = "(if c { " + t0 + " = 1; } else { 0 }) + 0"
	}
	src := "function f() { " + t0 + " = 1; }"
	r := dsl.Analyze("inline", []byte(src))
	total := 0
	for _, e := range r.Errors {
		total += len(e.Message)
	}
	if len(r.Errors) != 100 || total > 100*(256+100) {
		t.Fatalf("a %d-byte source: %d errors holding %d bytes of messages", len(src), len(r.Errors), total)
	}
}

// TestStatementsAreSiblings: the nesting bound counts a block's statements as siblings:
// 1,100 `if a < b { }` statements (each condition a right-nested "<") parse, while one
// condition chaining more "<" than the bound is still refused, and so are if expressions
// nested through "else if" (which continues inside the expression that holds it).
func TestStatementsAreSiblings(t *testing.T) {
	for _, kw := range []string{"if a < b { }\n", "if a < b { } else { }\n", "for x in a < b { }\n", "if a < b { }\nlet x = c < d;\n"} {
		src := "function f() {\n" + strings.Repeat(kw, 1100) + "}\n"
		if r := dsl.Analyze("inline", []byte(src)); len(r.Errors) > 0 {
			t.Fatalf("1,100 sibling statements %q: %v", kw, r.Errors[0])
		}
	}
	for _, deep := range []string{
		"function f() { if " + strings.Repeat("a < ", dsl.MaxChainDepth+1) + "b { } }\n",
		"function f() { if a < b { } else if " + strings.Repeat("a < ", dsl.MaxChainDepth+1) + "b { } }\n",
		"function f() { if a < b { } if " + strings.Repeat("a < ", dsl.MaxChainDepth+1) + "b { } }\n",
		"function f() { let x = " + strings.Repeat("a < if c { 1 } else if ", dsl.MaxChainDepth/2+1) + "d { 1 } else { 2 }; }\n",
	} {
		if _, err := dsl.Parse("inline", []byte(deep)); !errors.Is(err, dsl.ErrNesting) {
			t.Fatalf("a condition of %d right-nested \"<\": %v; want ErrNesting", dsl.MaxChainDepth+1, err)
		}
	}
}
