package dsl_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/dsl"
)

func addCorpusSeeds(f *testing.F, add func(src []byte)) {
	for _, dir := range []string{"valid", "invalid"} {
		paths, _ := filepath.Glob(filepath.Join(corpus, dir, "*.symbi"))
		for _, p := range paths {
			src, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			add(src)
		}
	}
}

// checkPositions asserts that every error of err lies inside src.
func checkPositions(t *testing.T, src []byte, err error) {
	t.Helper()
	errs := dsl.Errors(err)
	if len(errs) == 0 {
		t.Fatalf("error without position: %v", err)
	}
	lines := bytes.Count(src, []byte("\n")) + 1
	for _, e := range errs {
		if e.Line < 1 || e.Line > lines || e.Column < 1 || e.Offset < 0 || e.Offset > len(src) {
			t.Fatalf("error %v (offset %d) outside the input of %d lines, %d bytes", e, e.Offset, lines, len(src))
		}
	}
}

func FuzzParse(f *testing.F) {
	addCorpusSeeds(f, func(src []byte) { f.Add(src) })
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := dsl.Parse("fuzz", src)
		r := dsl.Analyze("fuzz", src)
		if err != nil {
			checkPositions(t, src, err)
			if r.Valid || len(r.Errors) == 0 {
				t.Fatalf("Analyze disagrees with Parse error %v", err)
			}
			return
		}
		if !r.Valid || len(r.Agents) != len(file.AgentNames()) {
			t.Fatalf("Analyze valid=%v agents=%d, Parse agents %q", r.Valid, len(r.Agents), file.AgentNames())
		}
	})
}

func FuzzAdmit(f *testing.F) {
	addCorpusSeeds(f, func(src []byte) { f.Add(src, "a") })
	f.Add([]byte(minimalReader), "reader")
	f.Add([]byte("agent declared {}"), "x")
	f.Fuzz(func(t *testing.T, src []byte, stem string) {
		a := dsl.AdmitSource("fuzz", stem, src)
		if !a.Admitted {
			prefix := fmt.Sprintf("%s at %d:%d: ", a.Rule, a.Line, a.Column)
			if a.Rule == "" || a.Line < 1 || a.Column < 1 || !strings.HasPrefix(a.Reason, prefix) {
				t.Fatalf("refusal without rule or position: %+v", a)
			}
			return
		}
		if a.Agent == "" || !bytes.Contains(src, a.Declaration) || !bytes.HasPrefix(a.Declaration, []byte("agent")) {
			t.Fatalf("admitted without a declaration: %+v", a)
		}
		if a.Timeout != 0 && (a.Timeout < dsl.MinTimeout || a.Timeout > dsl.MaxTimeout) {
			t.Fatalf("admitted timeout %v out of range", a.Timeout)
		}
		if len(a.PolicyDigest) != 64 {
			t.Fatalf("digest %q", a.PolicyDigest)
		}
	})
}
