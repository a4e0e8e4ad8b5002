package dsl

import (
	"os"
	"path/filepath"
	"testing"
)

// benchCorpus returns the realistic files of the valid corpus (3 KB and more) and sets
// b's byte count to their total size.
func benchCorpus(b *testing.B) [][]byte {
	b.Helper()
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
	return corpus
}

// BenchmarkParse parses the realistic files of the valid corpus, AST included, and
// reports MB/s.
func BenchmarkParse(b *testing.B) {
	corpus := benchCorpus(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, src := range corpus {
			if _, err := Parse("bench", src); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkLex measures the hand-written lexer, up to the token stream the parser reads,
// over the same files as BenchmarkParse, to separate lexing from parsing.
func BenchmarkLex(b *testing.B) {
	corpus := benchCorpus(b)
	for b.Loop() {
		for _, src := range corpus {
			if _, _, err := lex("bench", src); err != nil {
				b.Fatal(err)
			}
		}
	}
}
