package dsl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Generic type arguments and the nesting bound. Type.parse recurses once per "<"; the
// lexer's count of a bracket level starts again at each "," — which separates type
// arguments while the enclosing types are still being parsed — so a type bounds its own
// depth. Without that, "A<B,A<B,A<B,…" nested one level per 4 bytes, and runs of 1,000
// "A<" ended by "B," one level per 3 bytes: 349,000 levels in a 1 MiB source.

// typeDepth is the nesting depth of a type reference, measured without recursion.
func typeDepth(t *Type) int {
	type item struct {
		t *Type
		d int
	}
	deepest := 0
	stack := []item{{t, 1}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		deepest = max(deepest, it.d)
		for _, a := range it.t.Args {
			stack = append(stack, item{a, it.d + 1})
		}
	}
	return deepest
}

// commaType is a type of n levels: "A<B," n times, "B", then n ">".
func commaType(n int) string {
	return strings.Repeat("A<B,", n) + "B" + strings.Repeat(">", n)
}

// compactType is a type of n levels (n a multiple of 1,000): runs of 1,000 "A<", each
// within the chain bound, ended by "B," which resets the count.
func compactType(n int) string {
	var b strings.Builder
	for i := 0; i < n; i += 1000 {
		b.WriteString(strings.Repeat("A<", 1000))
		b.WriteString("B,")
	}
	b.WriteString("B")
	b.WriteString(strings.Repeat(">", n))
	return b.String()
}

// TestTypeArgsDepthBounded: a type nesting 2,000 levels (10 KB), in each place a type
// goes, is refused with ErrNesting, not parsed 2,000 recursive calls deep.
func TestTypeArgsDepthBounded(t *testing.T) {
	const n = 2000
	ty := commaType(n)
	for _, c := range []struct {
		name, src string
		get       func(*File) *Type
	}{
		{"function parameter", "function f(x: " + ty + ") { }\n", func(f *File) *Type { return f.Items[0].Function.Params[0].Type }},
		{"function return", "function f() -> " + ty + " { }\n", func(f *File) *Type { return f.Items[0].Function.Returns }},
		{"agent return", "agent a -> " + ty + " { }\n", func(f *File) *Type { return f.Items[0].Agent.Returns }},
		{"record type field", "type T = { x: " + ty + " }\n", func(f *File) *Type { return f.Items[0].Type.Fields[0].Type }},
	} {
		f, err := Parse("inline", []byte(c.src))
		if errors.Is(err, ErrNesting) {
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if d := typeDepth(c.get(f)); d > MaxChainDepth {
			t.Errorf("%s: a %d-byte source parsed a type %d levels deep (Type.parse recursed %d times); the bound is %d", c.name, len(c.src), d, d, MaxChainDepth)
		}
	}
	// The same through admission: an agent's function parameter.
	src := "agent a { function f(x: " + ty + ") { } }\n"
	if a := AdmitSource("x", "a", []byte(src)); a.Rule != "rule 1" {
		t.Errorf("AdmitSource of a %d-level parameter type: rule %q %s; want a rule-1 nesting refusal", n, a.Rule, a.Reason)
	}
}

// TestDeepestSourcesFitAStack: in a child process whose goroutine stacks are limited to
// 32 MiB, parsing a 1 MiB source of comma-separated generic types does not overflow the
// stack (it is refused); the deepest source the bound allows (1,023 nested "<", 1,024
// recursive calls) parses with 4 MiB.
func TestDeepestSourcesFitAStack(t *testing.T) {
	if os.Getenv("SYMBI_TEST_STACK_CHILD") != "" {
		mib, _ := strconv.Atoi(os.Getenv("SYMBI_TEST_STACK_MIB"))
		debug.SetMaxStack(mib << 20)
		var ty string
		if os.Getenv("SYMBI_TEST_STACK_SHAPE") == "baseline" {
			ty = strings.Repeat("A<", MaxChainDepth-1) + "B" + strings.Repeat(">", MaxChainDepth-1)
		} else {
			ty = compactType(349000)
		}
		src := "function f(x: " + ty + ") { }\n"
		done := make(chan string)
		go func() {
			start := time.Now()
			f, err := Parse("inline", []byte(src))
			if err != nil {
				done <- fmt.Sprintf("%d bytes: %v", len(src), err)
				return
			}
			done <- fmt.Sprintf("%d bytes parsed, type depth %d, in %v", len(src), typeDepth(f.Items[0].Function.Params[0].Type), time.Since(start))
		}()
		fmt.Println("STACKRESULT", <-done)
		return
	}
	run := func(shape string, mib int) (string, bool) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDeepestSourcesFitAStack$")
		cmd.Env = append(os.Environ(), "SYMBI_TEST_STACK_CHILD=1", "SYMBI_TEST_STACK_SHAPE="+shape, "SYMBI_TEST_STACK_MIB="+strconv.Itoa(mib))
		out, _ := cmd.CombinedOutput()
		s := string(out)
		if i := strings.Index(s, "STACKRESULT "); i >= 0 {
			return strings.SplitN(s[i+len("STACKRESULT "):], "\n", 2)[0], true
		}
		if i := strings.Index(s, "fatal error"); i >= 0 {
			return strings.SplitN(s[i:], "\n", 2)[0] + ": " + strings.SplitN(s, "\n", 2)[0], false
		}
		return s, false
	}
	if res, ok := run("baseline", 4); !ok {
		t.Fatalf("baseline (1,024 levels) with a 4 MiB stack: %s", res)
	} else {
		t.Logf("baseline, 4 MiB stack: %s", res)
	}
	if res, ok := run("attack", 32); !ok {
		t.Errorf("a 1 MiB source of comma-reset generic types, 32 MiB stack: the child crashed: %s", res)
	} else {
		t.Logf("attack, 32 MiB stack: %s", res)
	}
}
