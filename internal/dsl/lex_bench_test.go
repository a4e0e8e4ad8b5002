package dsl

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkLex measures the hand-written lexer, up to the token stream the parser reads,
// over the same files as BenchmarkParse, to separate lexing from parsing.
func BenchmarkLex(b *testing.B) {
	paths, err := filepath.Glob("../../testdata/dsl/valid/*.symbi")
	if err != nil || len(paths) == 0 {
		b.Fatalf("no corpus: %v", err)
	}
	var corpus [][]byte
	total := 0
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		if len(src) >= 3000 {
			corpus = append(corpus, src)
			total += len(src)
		}
	}
	b.SetBytes(int64(total))
	for b.Loop() {
		for _, src := range corpus {
			if _, _, err := lex("bench", src); err != nil {
				b.Fatal(err)
			}
		}
	}
}
