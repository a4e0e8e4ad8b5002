package dsl

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkParse parses the realistic files of the valid corpus (3 KB and more), AST
// included, and reports MB/s.
func BenchmarkParse(b *testing.B) {
	paths, err := filepath.Glob("../../testdata/dsl/valid/*.symbi")
	if err != nil || len(paths) == 0 {
		b.Fatalf("no corpus: %v", err)
	}
	var corpus [][]byte
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		if len(src) >= 3000 {
			corpus = append(corpus, src)
		}
	}
	total := 0
	for _, src := range corpus {
		total += len(src)
	}
	b.SetBytes(int64(total))
	b.ReportAllocs()
	for b.Loop() {
		for _, src := range corpus {
			if _, err := Parse("bench", src); err != nil {
				b.Fatal(err)
			}
		}
	}
}
