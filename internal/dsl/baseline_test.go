package dsl

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/participle/v2/lexer"

	"symbi/internal/dsl/internal/baseline"
	"symbi/internal/errcode"
)

// The parser against its frozen baseline (package baseline: the parser before the
// items were parsed by hand): for every input both must build the same tree, every
// node and position, or report the same errors, positions, codes and sentinels.

// diffParse parses src with Parse and with the baseline parser and describes the first
// difference, or returns "".
func diffParse(src []byte) string {
	if otherLineBreak(src) {
		return "" // refused since the baseline: a lone CR, or a line break of another kind in a comment
	}
	f, err := Parse("diff", src)
	bf, berr := baseline.Parse("diff", src)
	if berr != nil && slices.ContainsFunc(baseline.Errors(berr), func(e *baseline.Error) bool { return strings.Contains(e.Msg, "cannot assign to") }) {
		// The baseline refused an assignment to a target other than a name, a field or an
		// index; the grammar's target is any postfix, which the parser now takes
		// (TestContractAssignToPostfix): from there the two differ by design.
		return ""
	}
	switch {
	case err != nil && berr != nil:
		now, was := Errors(err), baseline.Errors(berr)
		if len(now) == 1 && len(was) == 1 && now[0].Offset < was[0].Offset {
			if le := firstLexError(src); le != nil && le.Offset == was[0].Offset && strings.HasPrefix(was[0].Msg, le.Msg) {
				// The baseline lexed the whole input before parsing and reported a lexical
				// error past the parser's first syntax error; the parser reports the first.
				// Up to the lexical error the two must agree.
				return diffPrefix(src, le.Offset, now[0])
			}
		}
		if errcode.Of(err) != errcode.Of(berr) || sinceBaseline(err.Error()) != berr.Error() {
			return fmt.Sprintf("errors differ:\n  now: %s %v\n  was: %s %v", errcode.Of(err), err, errcode.Of(berr), berr)
		}
		if len(now) != len(was) {
			return fmt.Sprintf("%d errors, was %d", len(now), len(was))
		}
		for i := range now {
			a, b := now[i], was[i]
			if a.Line != b.Line || a.Column != b.Column || a.Offset != b.Offset || sinceBaseline(a.Msg) != b.Msg || a.Err.Error() != b.Err.Error() {
				return fmt.Sprintf("error %d: now %+v, was %+v", i, *a, *b)
			}
		}
		return ""
	case err != nil:
		return fmt.Sprintf("now an error, the baseline parsed it: %v", err)
	case berr != nil:
		return fmt.Sprintf("now parsed, the baseline said: %v", berr)
	}
	now, err := json.Marshal(f)
	if err != nil {
		return err.Error()
	}
	was, err := json.Marshal(bf)
	if err != nil {
		return err.Error()
	}
	if !bytes.Equal(now, was) {
		return fmt.Sprintf("trees differ:\n  now: %s\n  was: %s", now, was)
	}
	if !bytes.Equal(f.Source(), bf.Source()) || fmt.Sprint(f.AgentNames()) != fmt.Sprint(bf.AgentNames()) {
		return "sources or agent names differ"
	}
	return ""
}

// sinceBaseline returns an error message as the baseline worded it: a missing expression
// now says so.
func sinceBaseline(msg string) string {
	return strings.ReplaceAll(msg, ", expected an expression", "")
}

// firstLexError returns the lexer's first error on src, reading it whole, or nil.
func firstLexError(src []byte) *Error {
	s := newScanner("diff", src)
	for {
		s.emitted = false
		if err := s.run(); err != nil {
			return err.(*Error)
		}
		if s.tok.Type == lexer.EOF {
			return nil
		}
	}
}

// diffPrefix checks that src cut at the offset of its first lexical error gives the same
// first error e as src whole, and compares the parsers on that prefix.
func diffPrefix(src []byte, off int, e *Error) string {
	_, err := Parse("diff", src[:off])
	if errs := Errors(err); len(errs) == 0 || errs[0].Offset != e.Offset || errs[0].Msg != e.Msg {
		return fmt.Sprintf("the first error %+v is not the first error of the input cut at the lexical error (%d): %v", *e, off, err)
	}
	return diffParse(src[:off])
}

// otherLineBreak reports whether src holds a carriage return not followed by a line feed
// or another character some readers take for a line break (vertical tab, form feed,
// U+0085, U+2028, U+2029), which the parser refuses in comments and the baseline did not.
func otherLineBreak(src []byte) bool {
	for i, c := range src {
		if c == '\r' && (i+1 == len(src) || src[i+1] != '\n') {
			return true
		}
	}
	return bytes.ContainsAny(src, "\v\f\u0085\u2028\u2029")
}

// corpusSources returns the files of the valid and invalid corpora.
func corpusSources(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, dir := range []string{"valid", "invalid"} {
		paths, err := filepath.Glob(filepath.Join("../../testdata/dsl", dir, "*.symbi"))
		if err != nil || len(paths) == 0 {
			tb.Fatalf("no corpus in %s: %v", dir, err)
		}
		for _, p := range paths {
			src, err := os.ReadFile(p)
			if err != nil {
				tb.Fatal(err)
			}
			out[dir+"/"+filepath.Base(p)] = src
		}
	}
	return out
}

// probes are the tokens the mutation test puts in place of, and in front of, each token.
var probes = []string{"}", "{", "(", ")", "[", ",", ":", "=", "->", "=>", ";", "x", `"s"`, "5s", "1",
	"vault://a/b", "agent", "policy", "if", "search", "data_classification", "with", "<"}

var allMutations = flag.Bool("mutations", false, "TestBaselineMutations: every mutation at every token (about 300,000 inputs, minutes)")

// TestBaselineMutations runs every file of the corpora, and variants of each made by
// cutting it before a token and by deleting a token, through both parsers: at every
// seventh token (-short: none), or with -mutations at every token, adding variants that
// replace the token with each probe or insert a probe before it.
func TestBaselineMutations(t *testing.T) {
	stride := 7
	if *allMutations {
		stride = 1
	}
	n := 0
	for name, src := range corpusSources(t) {
		check := func(what string, variant []byte) {
			t.Helper()
			n++
			if d := diffParse(variant); d != "" {
				t.Fatalf("%s, %s:\n%s\n--- input:\n%s", name, what, d, variant)
			}
		}
		check("as is", src)
		peek, sc, err := lex("mut", src)
		if err != nil || sc.lexErr != nil {
			continue // the lexer refuses it: only the whole file is compared
		}
		var toks []span
		for _, tok := range peek.Range(0, lexer.RawCursor(sc.n-1)) { // without EOF
			toks = append(toks, span{tok.Pos.Offset, tok.Pos.Offset + len(tok.Value)})
		}
		for i, tk := range toks {
			if testing.Short() || (i+len(name))%stride != 0 {
				continue
			}
			check(fmt.Sprintf("cut before token %d", i), src[:tk.start])
			check(fmt.Sprintf("token %d deleted", i), splice(src, tk.start, tk.end, ""))
			if !*allMutations {
				continue
			}
			for _, p := range probes {
				check(fmt.Sprintf("token %d replaced by %s", i, p), splice(src, tk.start, tk.end, " "+p+" "))
				check(fmt.Sprintf("%s inserted before token %d", p, i), splice(src, tk.start, tk.start, p+" "))
			}
		}
	}
	t.Logf("%d inputs compared", n)
}

type span struct{ start, end int }

// splice returns src with src[i:j] replaced by s.
func splice(src []byte, i, j int, s string) []byte {
	out := make([]byte, 0, len(src)+len(s))
	out = append(out, src[:i]...)
	out = append(out, s...)
	return append(out, src[j:]...)
}

// FuzzParseBaseline requires Parse and the baseline parser to agree on every input.
func FuzzParseBaseline(f *testing.F) {
	for _, src := range corpusSources(f) {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if d := diffParse(src); d != "" {
			t.Fatalf("%s\n--- input:\n%q", d, src)
		}
	})
}

// TestBaselineAssignmentTargets: the parser takes an assignment to any postfix, as the
// grammar has it (TestContractAssignToPostfix), where the frozen baseline refused a target
// that is a literal or a call ("cannot assign to …"): diffParse, FuzzParseBaseline's
// oracle, allows that difference, by design (the first input is one the fuzzer found).
func TestBaselineAssignmentTargets(t *testing.T) {
	for _, src := range []string{
		"function A(){[]=0}",  // the fuzzer's input: both refuse it, with other errors
		"function A(){[]=0;}", // parsed now, refused by the baseline
		"function A(){g()=1;}",
	} {
		if d := diffParse([]byte(src)); d != "" {
			t.Errorf("FuzzParseBaseline fails on %q: %s", src, d)
		}
	}
}
