package dsl

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"symbi/internal/dsl/internal/baseline"
)

// benchCorpus returns the realistic files of the valid corpus (3 KB and more) and their
// total size.
func benchCorpus(b *testing.B) ([][]byte, int) {
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
	return corpus, total
}

// registryFiles returns the agent files of the registry benchmarks (the templates of
// internal/project/testdata/registry, small files like those of a real agents/
// directory) and their total size.
func registryFiles(b *testing.B) ([][]byte, int) {
	b.Helper()
	paths, err := filepath.Glob("../project/testdata/registry/*.symbi")
	if err != nil || len(paths) == 0 {
		b.Fatalf("no registry templates: %v", err)
	}
	var files [][]byte
	total := 0
	for i, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		src = []byte(strings.ReplaceAll(string(src), "NNN", strings.Repeat("7", i+1)))
		files = append(files, src)
		total += len(src)
	}
	return files, total
}

// parseFunc is one parser: Parse, or the baseline's.
type parseFunc func(name string, src []byte) error

func parseNow(name string, src []byte) error {
	_, err := Parse(name, src)
	return err
}

func parseBaseline(name string, src []byte) error {
	_, err := baseline.Parse(name, src)
	return err
}

// passCost returns the allocations and bytes allocated by one pass of parse over files.
func passCost(b *testing.B, parse parseFunc, files [][]byte) (allocs, bytes float64) {
	b.Helper()
	const passes = 20
	pass := func() {
		for _, src := range files {
			if err := parse("bench", src); err != nil {
				b.Fatal(err)
			}
		}
	}
	pass()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range passes {
		pass()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / passes, float64(after.TotalAlloc-before.TotalAlloc) / passes
}

// benchSideBySide parses files with Parse and with the baseline parser (package
// baseline: the parser as it was before the items were parsed by hand) in each
// iteration, in alternating order, timing each separately. It reports, for Parse: MB/s,
// ns/op, B/op and allocs/op (one pass over the files), allocs/file and B/file; for the
// baseline, MB/s, allocs/file and B/file with a baseline- prefix; and x-baseline, the
// ratio of the throughputs (Parse / baseline).
func benchSideBySide(b *testing.B, files [][]byte, total int) {
	nowAllocs, nowBytes := passCost(b, parseNow, files)
	wasAllocs, wasBytes := passCost(b, parseBaseline, files)
	var now, was time.Duration
	timed := func(parse parseFunc) time.Duration {
		t0 := time.Now()
		for _, src := range files {
			if err := parse("bench", src); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	n := 0
	for b.Loop() {
		if n%2 == 0 {
			now += timed(parseNow)
			was += timed(parseBaseline)
		} else {
			was += timed(parseBaseline)
			now += timed(parseNow)
		}
		n++
	}
	mbps := func(d time.Duration) float64 { return float64(total) * float64(n) / d.Seconds() / 1e6 }
	perFile := float64(len(files))
	b.ReportMetric(float64(now.Nanoseconds())/float64(n), "ns/op")
	b.ReportMetric(nowAllocs, "allocs/op")
	b.ReportMetric(nowBytes, "B/op")
	b.ReportMetric(mbps(now), "MB/s")
	b.ReportMetric(mbps(was), "baseline-MB/s")
	b.ReportMetric(was.Seconds()/now.Seconds(), "x-baseline")
	b.ReportMetric(nowAllocs/perFile, "allocs/file")
	b.ReportMetric(wasAllocs/perFile, "baseline-allocs/file")
	b.ReportMetric(nowBytes/perFile, "B/file")
	b.ReportMetric(wasBytes/perFile, "baseline-B/file")
}

// BenchmarkParse parses the realistic files of the valid corpus (3 KB and more), AST
// included, side by side with the baseline parser (see benchSideBySide).
func BenchmarkParse(b *testing.B) {
	files, total := benchCorpus(b)
	benchSideBySide(b, files, total)
}

// BenchmarkParseRegistryFiles is BenchmarkParse over small agent files like those a
// registry loads at start-up (the registry benchmarks' templates, 0.2–0.6 KB).
func BenchmarkParseRegistryFiles(b *testing.B) {
	files, total := registryFiles(b)
	benchSideBySide(b, files, total)
}

// BenchmarkLex measures the hand-written lexer, up to the token stream the parser reads,
// over the same files as BenchmarkParse, to separate lexing from parsing.
func BenchmarkLex(b *testing.B) {
	corpus, total := benchCorpus(b)
	b.SetBytes(int64(total))
	b.ReportAllocs()
	for b.Loop() {
		for _, src := range corpus {
			if _, _, err := lex("bench", src); err != nil {
				b.Fatal(err)
			}
		}
	}
}
