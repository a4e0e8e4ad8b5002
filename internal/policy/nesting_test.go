package policy

import (
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

const respondHead = `@id("p") permit (principal, action == Action::"respond", resource) when { `

// TestCheckNesting: expressions nested past the bounds are refused before cedar-go parses
// them, counted once over the text; what real policies hold is not: long chains of
// comparisons, long sets, many policies, brackets and operators inside strings and
// comments.
func TestCheckNesting(t *testing.T) {
	orChain := strings.TrimSuffix(strings.Repeat(`context.response == "x" || `, 2000), " || ")
	set := "[" + strings.TrimSuffix(strings.Repeat(`"x", `, 20000), ", ") + "]"
	for _, tc := range []struct {
		name, src string
		refused   bool
	}{
		{"2,000 comparisons or-ed", respondHead + orChain + " };", false},
		{"a set of 20,000 strings", respondHead + `context.response in ` + set + " };", false},
		{"many policies", strings.Repeat(strings.Replace(respondHead, `@id("p") `, "", 1)+`context.response == "a" && context.response != "b" };`+"\n", 3000), false},
		{"brackets in strings and comments", respondHead + `context.response == "((((((!!!!" // ((((((((((!!!!!!!!` + "\n };", false},
		{"256 brackets with when's", respondHead + strings.Repeat("(", 255) + "true" + strings.Repeat(")", 255) + " };", false},
		{"257 brackets with when's", respondHead + strings.Repeat("(", 256) + "true" + strings.Repeat(")", 256) + " };", true},
		{"9,000 !", respondHead + strings.Repeat("!", 9000) + "true };", true},
		{"an and-chain of 9,000", respondHead + strings.TrimSuffix(strings.Repeat("true && ", 9000), " && ") + " };", true},
		{"200 brackets of 50 operators each", respondHead + strings.Repeat("(true && true && "+strings.Repeat("!", 48), 200) + "true" + strings.Repeat(")", 200) + " };", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := checkNesting([]byte(tc.src))
			if (err != nil) != tc.refused {
				t.Fatalf("checkNesting: %v; want refused %v", err, tc.refused)
			}
			if s := loadDir(t, makeProject(t, map[string]string{"policies/p.cedar": tc.src}, nil)); (s.Mode == ModeDenyAll) != tc.refused {
				t.Fatalf("loaded as %s (%s); want refused %v", s.Mode, s.Reason, tc.refused)
			}
		})
	}
}

// deepPolicy is one policy whose condition nests n levels: "!"×n true, or "("×n true
// ")"×n. Either is about n bytes, far below MaxFileBytes (1 MiB).
func deepPolicy(kind string, n int) string {
	cond := strings.Repeat("!", n) + "true"
	if kind == "paren" {
		cond = strings.Repeat("(", n) + "true" + strings.Repeat(")", n)
	}
	return "permit (principal, action == Action::\"respond\", resource) when { " + cond + " };\n"
}

// TestDeepPolicyLoad: a policy file within the documented limits does not crash the
// loader (nor a decision): 100,000 levels of "!" or "(" (≈100–200 KB), which overflowed a
// 64 MiB stack in cedar-go's parser and constant folding, put the set in deny_all with the
// problem named. A stack overflow is fatal, so each load runs in a child process with a
// 64 MiB stack.
func TestDeepPolicyLoad(t *testing.T) {
	if kind := os.Getenv("SYMBI_TEST_POLICY_KIND"); kind != "" {
		debug.SetMaxStack(64 << 20)
		dir := makeProject(t, map[string]string{"policies/deep.cedar": deepPolicy(kind, 100_000)}, nil)
		s := loadDir(t, dir)
		if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "nested deeper than") {
			t.Fatalf("mode %s, reason %q: want deny_all naming the nesting", s.Mode, s.Reason)
		}
		return
	}
	for _, kind := range []string{"not", "paren"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDeepPolicyLoad$", "-test.v")
		cmd.Env = append(os.Environ(), "SYMBI_TEST_POLICY_KIND="+kind)
		if out, err := cmd.CombinedOutput(); err != nil {
			o := string(out)
			if i := strings.Index(o, "\ngoroutine "); i > 0 {
				o = o[:i]
			}
			t.Errorf("loading a policy nested 100,000 levels (%s) at a 64 MiB stack: %v\n%.2000s", kind, err, o)
		}
	}
}
