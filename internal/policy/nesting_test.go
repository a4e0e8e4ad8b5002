package policy

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

const respondHead = `@id("p") permit (principal, action == Action::"respond", resource) when { `

// TestCheckNesting: expressions nested past the bounds, and "has" and entity type paths
// past theirs, are refused before cedar-go parses them, counted once over the text — block
// comments read as cedar-go reads them, so that nothing in one hides or resets a count;
// what real policies hold is not: long chains of comparisons, long sets, many policies,
// brackets and operators inside strings and comments.
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
		{"brackets in block comments", "/* ((((( \" ;;; */" + respondHead + `/* !!!! ((( */ context.response == "x" /**/ };`, false},
		{"a quote in a block comment hides nothing", `/* " */ ` + respondHead + strings.Repeat("!", 9000) + `true }; /* " */`, true},
		{"a ; in a block comment resets nothing", respondHead + strings.Repeat(strings.Repeat("!", 3000)+"/*;*/", 3) + "true };", true},
		{"a // in a block comment hides nothing", respondHead + "/* // */ " + strings.Repeat("!", 9000) + "true };", true},
		{"has, a path of 32", respondHead + "context has a" + strings.Repeat(".a", 31) + " };", false},
		{"has, a path of 33", respondHead + "context has a" + strings.Repeat(" . a", 32) + " };", true},
		{"has after digits, a path of 33", respondHead + "1has a" + strings.Repeat(".a", 32) + " };", true},
		{"an entity type path of 64", respondHead + "principal == " + strings.Repeat("A::", 63) + `"x" };`, false},
		{"an entity type path of 65", respondHead + "principal == " + strings.Repeat("A :: ", 64) + `"x" };`, true},
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
// ")"×n; or "!"×n true behind a block comment that would hide it from a scanner that does
// not know them (a quote in it, or a ";" every 4,000 "!"). Each is at most about 1.01 n
// bytes, below MaxFileBytes (1 MiB) for a million.
func deepPolicy(kind string, n int) string {
	head, tail := "", ""
	cond := strings.Repeat("!", n) + "true"
	switch kind {
	case "paren":
		cond = strings.Repeat("(", n) + "true" + strings.Repeat(")", n)
	case "quote in a block comment":
		head, tail = `/* " */ `, ` /* " */`
	case "semicolons in block comments":
		cond = strings.Repeat(strings.Repeat("!", 4000)+"/*;*/", n/4000) + "true"
	}
	return head + "permit (principal, action == Action::\"respond\", resource) when { " + cond + " };" + tail + "\n"
}

// TestDeepPolicyLoad: a policy file within the documented limits does not crash the
// loader (nor a decision): 100,000 levels of "!" or "(" (≈100–200 KB), which overflowed a
// 64 MiB stack in cedar-go's parser and constant folding, and a million "!" behind a block
// comment, put the set in deny_all with the problem named. A stack overflow is fatal, so
// each load runs in a child process with a 64 MiB stack.
func TestDeepPolicyLoad(t *testing.T) {
	if kind := os.Getenv("SYMBI_TEST_POLICY_KIND"); kind != "" {
		debug.SetMaxStack(64 << 20)
		n := 100_000
		if strings.Contains(kind, "comment") {
			n = 1_000_000
		}
		dir := makeProject(t, map[string]string{"policies/deep.cedar": deepPolicy(kind, n)}, nil)
		s := loadDir(t, dir)
		if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "nested deeper than") {
			t.Fatalf("mode %s, reason %q: want deny_all naming the nesting", s.Mode, s.Reason)
		}
		return
	}
	for _, kind := range []string{"not", "paren", "quote in a block comment", "semicolons in block comments"} {
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

// TestLinearPolicyText: the constructs cedar-go parses in quadratic time or memory — a
// "has" with a long dotted path, a long entity type path — are refused before it sees
// them: loading such a file costs at most a few hundred bytes per byte of text (a 589 KB
// set literal costs about 145), never gigabytes.
func TestLinearPolicyText(t *testing.T) {
	for name, src := range map[string]string{
		"has with a dotted path": respondHead + "context has a" + strings.Repeat(".a", 3000) + " };\n",
		"long entity type path":  respondHead + "principal == " + strings.Repeat("A::", 40000) + "\"x\" };\n",
	} {
		t.Run(name, func(t *testing.T) {
			s, alloc := loadMeasured(t, makeProject(t, map[string]string{"policies/p.cedar": src}, nil))
			if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "path of more than") {
				t.Errorf("mode %s, reason %q: want deny_all naming the path's bound", s.Mode, s.Reason)
			}
			if limit := max(uint64(1000*len(src)), 32<<20); alloc > limit {
				t.Errorf("loading a %d-byte policy file allocated %d MiB, more than %d MiB", len(src), alloc>>20, limit>>20)
			}
		})
	}
}

// loadMeasured loads the policies of the project dir and returns the set and the bytes
// allocated meanwhile.
func loadMeasured(t *testing.T, dir string) (*Set, uint64) {
	t.Helper()
	root, err := os.Open(dir)
	must(t, err)
	defer root.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := Load(root)
	runtime.ReadMemStats(&after)
	return s, after.TotalAlloc - before.TotalAlloc
}

// TestIndexChainNesting: an index access (e["a"]) is counted as the member operator it
// is — cedar-go nests each one level deeper, and folds and evaluates the tree by recursion
// — so 9,000 chained accesses are refused like 9,000 "!", and a file of 100,000 of them
// makes the set deny_all naming the nesting, where it used to end the process with a stack
// overflow (at the 64 MiB stack TestDeepPolicyLoad uses). A "[" after an operator or "in"
// is a set literal, a bracket as before.
func TestIndexChainNesting(t *testing.T) {
	if os.Getenv("SYMBI_TEST_REVIEW_INDEX_CHAIN") != "" {
		debug.SetMaxStack(64 << 20)
		src := respondHead + "context" + strings.Repeat(`["a"]`, 100_000) + ` == "x" };`
		s := loadDir(t, makeProject(t, map[string]string{"policies/deep.cedar": src}, nil))
		if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "nested deeper than") {
			t.Fatalf("mode %s, reason %q: want deny_all naming the nesting", s.Mode, s.Reason)
		}
		return
	}
	src := respondHead + "context" + strings.Repeat(`["a"]`, 9000) + ` == "x" };`
	if _, _, err := checkNesting([]byte(src)); err == nil {
		t.Errorf("checkNesting accepted a chain of 9,000 index accesses (an AST 9,000 levels deep); 9,000 \"!\" is refused")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIndexChainNesting$", "-test.v")
	cmd.Env = append(os.Environ(), "SYMBI_TEST_REVIEW_INDEX_CHAIN=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		o := string(out)
		if i := strings.Index(o, "\ngoroutine "); i > 0 {
			o = o[:i]
		}
		t.Errorf("loading a policy with 100,000 chained index accesses at a 64 MiB stack: %v\n%.1500s", err, o)
	}
}
