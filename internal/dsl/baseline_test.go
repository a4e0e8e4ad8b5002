package dsl

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
	f, err := Parse("diff", src)
	bf, berr := baseline.Parse("diff", src)
	switch {
	case err != nil && berr != nil:
		if errcode.Of(err) != errcode.Of(berr) || err.Error() != berr.Error() {
			return fmt.Sprintf("errors differ:\n  now: %s %v\n  was: %s %v", errcode.Of(err), err, errcode.Of(berr), berr)
		}
		now, was := Errors(err), baseline.Errors(berr)
		if len(now) != len(was) {
			return fmt.Sprintf("%d errors, was %d", len(now), len(was))
		}
		for i := range now {
			a, b := now[i], was[i]
			if a.Line != b.Line || a.Column != b.Column || a.Offset != b.Offset || a.Msg != b.Msg || a.Err.Error() != b.Err.Error() {
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
		if err != nil {
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
