package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/table.golden")

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		line    string
		ok      bool
		bench   string
		metrics []metric
	}{
		{"invoke line, suffix stripped", "BenchmarkInvoke/c=64-2   \t     100\t    982181 fsync-floor-ns/inv\t      1940 fsync-floor-p50-us\t         2.993 ratio-p50\n",
			true, "BenchmarkInvoke/c=64", []metric{{"fsync-floor-ns/inv", 982181}, {"fsync-floor-p50-us", 1940}, {"ratio-p50", 2.993}}},
		{"GOMAXPROCS 1: no suffix", "BenchmarkParse \t 2\t 1.322 x-baseline", true, "BenchmarkParse", []metric{{"x-baseline", 1.322}}},
		{"many procs", "BenchmarkVerify-64 3 1.5 x-raw-verify", true, "BenchmarkVerify", []metric{{"x-raw-verify", 1.5}}},
		{"only the last -N is the suffix", "BenchmarkFoo/size-1024-2 1 5 ms", true, "BenchmarkFoo/size-1024", []metric{{"ms", 5}}},
		{"a dash in a sub-name is kept", "BenchmarkFoo/a-b-2 1 5 ms", true, "BenchmarkFoo/a-b", []metric{{"ms", 5}}},
		{"benchmem and MB/s", "BenchmarkParse-2  2  1193556 ns/op  10.25 MB/s  767700 B/op  2192 allocs/op", true, "BenchmarkParse",
			[]metric{{"ns/op", 1193556}, {"MB/s", 10.25}, {"B/op", 767700}, {"allocs/op", 2192}}},
		{"a value that is not finite is left out", "BenchmarkX-2 10 NaN ratio +Inf other 1.5 x-baseline", true, "BenchmarkX", []metric{{"x-baseline", 1.5}}},
		{"goos", "goos: linux", false, "", nil},
		{"pkg", "pkg: symbi/internal/journal", false, "", nil},
		{"PASS", "PASS", false, "", nil},
		{"ok", "ok  \tsymbi/internal/dsl\t0.314s", false, "", nil},
		{"failure", "--- FAIL: BenchmarkAppendSync", false, "", nil},
		{"log", "    bench_test.go:43: journal record out of order", false, "", nil},
		{"parent name alone", "BenchmarkInvoke", false, "", nil},
		{"empty", "", false, "", nil},
		{"no pairs", "BenchmarkX-2   100", false, "", nil},
		{"odd pairs", "BenchmarkX-2 100 1.5 ratio 2.5", false, "", nil},
		{"value not a number", "BenchmarkX-2 100 fast ns/op", false, "", nil},
		{"iterations not a number", "BenchmarkX-2 many 1.5 ns/op", false, "", nil},
		{"zero iterations", "BenchmarkX-2 0 1.5 ns/op", false, "", nil},
		{"result cut by a log line", "BenchmarkX-2   \t2026/12/01 10:12:33 INFO session closed", false, "", nil},
		{"not a benchmark", "TestX-2 100 1.5 ns/op", false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bench, metrics, ok := parseLine(tc.line)
			if ok != tc.ok || bench != tc.bench || !reflect.DeepEqual(metrics, tc.metrics) {
				t.Errorf("parseLine(%q) = %q, %v, %v; want %q, %v, %v", tc.line, bench, metrics, ok, tc.bench, tc.metrics, tc.ok)
			}
		})
	}
}

func TestRead(t *testing.T) {
	const input = `goos: linux
goarch: amd64
pkg: symbi/internal/journal
cpu: AMD EPYC
--- FAIL: BenchmarkAppendSync
    bench_test.go:43: journal record out of order
BenchmarkVerify-2   	       3	1421722975 ns/op	         1.228 x-raw-verify
BenchmarkVerify-2   	       3	1241240154 ns/op	         1.286 x-raw-verify
BenchmarkVerify-2   	       3	1198372565 ns/op	         1.352 x-raw-verify	garbage
BenchmarkVerify-2   	       3	1198372565 ns/op	         1.352 x-raw-verify
FAIL
pkg: symbi/internal/invoke
BenchmarkInvoke
BenchmarkInvoke/c=1-2   100   2.0 ratio
BenchmarkInvoke/c=1-2   100   3.0 ratio   1.1 ratio-p50
    --- FAIL: BenchmarkInvoke/c=8-2
--- FAIL: BenchmarkInvoke
--- FAIL: TestSomething (0.01s)
ok  	symbi/internal/invoke	3.2s
`
	r := newResults()
	if err := r.read(strings.NewReader(input)); err != nil {
		t.Fatal(err)
	}
	type view struct {
		pkg    string
		values map[string][]float64
	}
	got := map[string]view{}
	var order []string
	for _, b := range r.list {
		got[b.name] = view{b.pkg, b.values}
		order = append(order, b.name)
	}
	want := map[string]view{
		"BenchmarkVerify": {"symbi/internal/journal", map[string][]float64{
			"ns/op":        {1421722975, 1241240154, 1198372565},
			"x-raw-verify": {1.228, 1.286, 1.352},
		}},
		"BenchmarkInvoke/c=1": {"symbi/internal/invoke", map[string][]float64{
			"ratio":     {2, 3},
			"ratio-p50": {1.1},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read:\n got %v\nwant %v", got, want)
	}
	if wantOrder := []string{"BenchmarkVerify", "BenchmarkInvoke/c=1"}; !reflect.DeepEqual(order, wantOrder) {
		t.Errorf("order %v, want %v", order, wantOrder)
	}
	if want := []string{"BenchmarkAppendSync", "BenchmarkInvoke/c=8", "BenchmarkInvoke"}; !reflect.DeepEqual(r.failed, want) {
		t.Errorf("failed %v, want %v", r.failed, want)
	}
	// A metric over runs: the median, the range, and the number of runs that reported it.
	if s, ok := r.metric("BenchmarkVerify", "x-raw-verify"); !ok || s != (stat{median: 1.286, min: 1.228, max: 1.352, n: 3}) {
		t.Errorf("x-raw-verify = %+v, %v", s, ok)
	}
	if s, ok := r.metric("BenchmarkInvoke/c=1", "ratio-p50"); !ok || s != (stat{median: 1.1, min: 1.1, max: 1.1, n: 1}) {
		t.Errorf("ratio-p50 = %+v, %v", s, ok)
	}
	if _, ok := r.metric("BenchmarkInvoke/c=1", "x-baseline"); ok {
		t.Error("a metric the benchmark does not report was found")
	}
	if _, ok := r.metric("BenchmarkParse", "x-baseline"); ok {
		t.Error("a benchmark absent from the input was found")
	}
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		values []float64
		want   stat
	}{
		{[]float64{1.5}, stat{1.5, 1.5, 1.5, 1}},
		{[]float64{3, 1, 2}, stat{2, 1, 3, 3}},
		{[]float64{4, 1, 3, 2}, stat{2.5, 1, 4, 4}},
		{[]float64{1.2, 1.2, 9, 0.5, 1.3}, stat{1.2, 0.5, 9, 5}},
	} {
		in := append([]float64(nil), tc.values...)
		if got := summarize(tc.values); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.values, got, tc.want)
		}
		if !reflect.DeepEqual(in, tc.values) {
			t.Errorf("summarize reordered its input: %v", tc.values)
		}
	}
}

func TestVerdict(t *testing.T) {
	atMost12 := target{bench: "BenchmarkInvoke/c=1", metric: "ratio-p50", cmp: atMost, goal: 1.2, unit: ratio}
	atLeast125 := target{bench: "BenchmarkParse", metric: "x-baseline", cmp: atLeast, goal: 1.25, unit: ratio, note: "allocs/file"}
	for _, tc := range []struct {
		name         string
		input        string
		target       target
		status, note string
	}{
		{"met below", "BenchmarkInvoke/c=1-2 100 1.1 ratio-p50", atMost12, "met", ""},
		{"met at the target", "BenchmarkInvoke/c=1-2 100 1.2 ratio-p50", atMost12, "met", ""},
		{"missed above", "BenchmarkInvoke/c=1-2 100 1.21 ratio-p50", atMost12, "missed", ""},
		{"the median decides", "BenchmarkInvoke/c=1-2 100 1.1 ratio-p50\nBenchmarkInvoke/c=1-2 100 1.3 ratio-p50\nBenchmarkInvoke/c=1-2 100 1.25 ratio-p50", atMost12, "missed", ""},
		{"at least, met, with its note", "BenchmarkParse-2 2 1.3 x-baseline 730.8 allocs/file", atLeast125, "met", "731 allocs/file"},
		{"at least, missed", "BenchmarkParse-2 2 1.2 x-baseline", atLeast125, "missed", ""},
		{"another sub-benchmark is not this one", "BenchmarkInvoke/c=64-2 100 1.1 ratio-p50", atMost12, "not run", "no BenchmarkInvoke/c=1 in the input"},
		{"not run", "BenchmarkOther-2 1 1 x", atLeast125, "not run", "no BenchmarkParse in the input"},
		{"not reported", "BenchmarkParse-2 2 1000 ns/op", atLeast125, "not reported", "BenchmarkParse reports no x-baseline"},
		{"failed", "--- FAIL: BenchmarkParse-2\nBenchmarkOther-2 1 1 x", atLeast125, "failed", "BenchmarkParse failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResults()
			if err := r.read(strings.NewReader(tc.input)); err != nil {
				t.Fatal(err)
			}
			if _, status, note := r.verdict(tc.target); status != tc.status || note != tc.note {
				t.Errorf("verdict = %q, %q; want %q, %q", status, note, tc.status, tc.note)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{formatStat(stat{median: 1.2345, n: 1}, ratio), "1.23×"},
		{formatStat(stat{median: 2.993, min: 2.5, max: 3.229, n: 3}, ratio), "2.99× [2.50–3.23]"},
		{formatStat(stat{median: 36.4, min: 31, max: 101.5, n: 5}, ms), "36.4 ms [31.0–102]"},
		{formatGoal(1, ratio), "1.0×"},
		{formatGoal(1.25, ratio), "1.25×"},
		{formatGoal(50, ms), "50 ms"},
		{formatNumber(730.8), "731"},
		{formatNumber(0.6406), "0.64"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestTable prints the table of a realistic `make bench` output: real lines of
// internal/journal (with the failure of BenchmarkAppendSync) and internal/dsl, and lines in
// the same format for the other packages. Run with -update to rewrite the golden file.
func TestTable(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{filepath.Join("testdata", "bench.txt")}, nil, &out); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("table differs from %s (go test ./cmd/symbi-bench -update to accept):\n%s", golden, out.Bytes())
	}
	for i, line := range strings.Split(out.String(), "\n") {
		if strings.TrimRight(line, " \t") != line {
			t.Errorf("line %d ends with white space: %q", i+1, line)
		}
	}
}

func TestRunInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	verify := write("verify.txt", "pkg: symbi/internal/journal\nBenchmarkVerify-2 3 1.5 x-raw-verify\nPASS\n")
	parse := write("parse.txt", "pkg: symbi/internal/dsl\nBenchmarkParse-2 2 1.1 x-baseline\n")
	junk := write("junk.txt", "PASS\nok  \tsymbi/internal/dsl\t0.1s\n")

	for _, tc := range []struct {
		name    string
		files   []string
		stdin   string
		err     string   // a part of the error, or "" for none
		present []string // parts of the table
	}{
		{"one file", []string{verify}, "", "", []string{"1 benchmark read, from 1 package", "1.50×", "met", "not run", "Other side-by-side ratios\n(none in the input)\n"}},
		{"several files", []string{verify, parse}, "", "", []string{"2 benchmarks read, from 2 packages", "1.10×", "missed"}},
		{"standard input", nil, "BenchmarkVerify-2 3 0.9 x-raw-verify\n", "", []string{"0.90×", "missed"}},
		{"a missing file", []string{verify, filepath.Join(dir, "absent.txt")}, "", "absent.txt", nil},
		{"a directory", []string{dir}, "", "read " + dir, nil},
		{"no result lines", []string{junk}, "", "no benchmark result lines in " + junk, nil},
		{"empty standard input", nil, "", "no benchmark result lines in standard input", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(tc.files, strings.NewReader(tc.stdin), &out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.present {
				if !strings.Contains(out.String(), p) {
					t.Errorf("table lacks %q:\n%s", p, out.String())
				}
			}
		})
	}
}

func Example() {
	input := `pkg: symbi/internal/dsl
BenchmarkParse-2   2   1193556 ns/op   730.7 allocs/file   1.322 x-baseline
BenchmarkParse-2   2   1155880 ns/op   730.7 allocs/file   1.282 x-baseline
BenchmarkParse-2   2   1984500 ns/op   730.8 allocs/file   0.6406 x-baseline
BenchmarkParseRegistryFiles-2   2   122444 ns/op   2.488 x-baseline
PASS
`
	if err := run(nil, strings.NewReader(input), os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// 2 benchmarks read, from 1 package
	//
	// Targets (performance close to the floor)
	// MEASURE                                                      VALUE              RUNS  TARGET   STATUS   NOTE
	// journal verification vs raw ed25519.Verify                   -                        ≥ 1.0×   not run  no BenchmarkVerify in the input
	// directory verification vs raw (all cores)                    -                        ≥ 1.0×   not run  no BenchmarkVerifyDir in the input
	// project verification vs raw (all cores)                      -                        ≥ 1.0×   not run  no BenchmarkVerifyProject in the input
	// governed invoke_agent p50 / (ungoverned + fsync floor), c=1  -                        ≤ 1.2×   not run  no BenchmarkInvoke/c=1 in the input
	// the same, c=64                                               -                        ≤ 2.0×   not run  no BenchmarkInvoke/c=64 in the input
	// parser throughput vs the previous parser                     1.28× [0.64–1.32]  3     ≥ 1.25×  met      731 allocs/file
	// start-up to initialize, 1,024 files, idle                    -                        ≤ 50 ms  not run  no BenchmarkStartupRealistic/hogs=0 in the input
	// the same with two CPU hogs                                   -                        ≤ 50 ms  not run  no BenchmarkStartupRealistic/hogs=2 in the input
	// journal append + fsync vs raw write + fsync                  -                        ≤ 1.2×   not run  no BenchmarkAppendSync in the input
	// governed throughput with the ledger vs without, c=1          -                        ≥ 0.9×   not run  no BenchmarkLedger/c=1 in the input
	// the same, c=64                                               -                        ≥ 0.9×   not run  no BenchmarkLedger/c=64 in the input
	// 1 of 11 met, 10 not run
	//
	// Other side-by-side ratios
	// BENCHMARK                    METRIC      VALUE  RUNS
	// BenchmarkParseRegistryFiles  x-baseline  2.49×  1
}
