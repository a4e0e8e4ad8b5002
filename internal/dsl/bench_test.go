package dsl

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkParse parses each file of the valid corpus; the figure to report is MB/s over
// the realistic files (3 KB and more).
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
		if len(src) >= 2500 {
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
