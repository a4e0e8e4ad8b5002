// Command symbi-bench reads the output of `go test -bench` and prints one table of every
// performance ratio the project tracks, each beside its target, so a reader sees at a
// glance which targets are met. `make bench` ends with it; on saved output:
//
//	go run ./cmd/symbi-bench FILE...
//
// It reads the files named as arguments, or standard input when there are none.
//
// Input: Go's benchmark format. A result line is the benchmark's name (with the
// "-GOMAXPROCS" suffix Go appends, which is dropped here), the iteration count, then
// pairs "value unit":
//
//	BenchmarkInvoke/c=64-2   100   982181 fsync-floor-ns/inv   2.993 ratio-p50
//
// A "pkg:" line names the package of the result lines that follow it, and a
// "--- FAIL: BenchmarkName" line a benchmark that failed. Every other line (goos:, cpu:,
// PASS, ok, logs) and every malformed result line is ignored. A benchmark run with
// -count N has N result lines: each metric is reported as the median of its N values, with
// their range [min–max] when N > 1, and N.
//
// Output: a section "Targets" with one row per target (met or missed by the median; failed
// or not run when the input has no result of its benchmark), a section of the other
// side-by-side ratios the input holds, and the benchmarks that failed. The exit status is 0 whether
// targets are met or not — it is a measurement, not a gate — and 1 only when an input
// cannot be read or holds no result line at all.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: symbi-bench [FILE...]  (go test -bench output; standard input when no FILE)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(flag.Args(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "symbi-bench:", err)
		os.Exit(1)
	}
}

// run reads the named files (stdin when there are none) and prints the table to stdout.
func run(files []string, stdin io.Reader, stdout io.Writer) error {
	res := newResults()
	for _, name := range files {
		if err := res.readFile(name); err != nil {
			return err
		}
	}
	if len(files) == 0 {
		if err := res.read(stdin); err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
		files = []string{"standard input"}
	}
	if len(res.list) == 0 {
		return fmt.Errorf("no benchmark result lines in %s (expected the output of go test -bench)", strings.Join(files, ", "))
	}
	_, err := stdout.Write(res.table())
	return err
}

// A metric is one "value unit" pair of a result line.
type metric struct {
	unit  string
	value float64
}

// A benchmark gathers the result lines of one benchmark: one per run.
type benchmark struct {
	name   string               // without the -GOMAXPROCS suffix
	pkg    string               // from the "pkg:" line above its first result line, if any
	values map[string][]float64 // by unit, one value per run that reported it
}

// results are the benchmarks of the input, in the order they first appear.
type results struct {
	list   []*benchmark
	byName map[string]*benchmark
	failed []string // names from "--- FAIL:" lines, without the -GOMAXPROCS suffix
}

func newResults() *results {
	return &results{byName: map[string]*benchmark{}}
}

func (r *results) readFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := r.read(f); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// read adds the result lines of one input. The package is the last "pkg:" line seen in
// this input (benchmark names are unique across the module's packages, so results are
// kept by name).
func (r *results) read(in io.Reader) error {
	br := bufio.NewReader(in)
	pkg := ""
	for {
		line, err := br.ReadString('\n')
		if p, ok := strings.CutPrefix(line, "pkg:"); ok {
			pkg = strings.TrimSpace(p)
		} else if f, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: "); ok {
			r.fail(f)
		} else if name, metrics, ok := parseLine(line); ok {
			r.add(pkg, name, metrics)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// fail records the benchmark a "--- FAIL: " line names.
func (r *results) fail(rest string) {
	f := strings.Fields(rest)
	if len(f) == 0 || !strings.HasPrefix(f[0], "Benchmark") {
		return
	}
	if name := stripProcs(f[0]); !slices.Contains(r.failed, name) {
		r.failed = append(r.failed, name)
	}
}

func (r *results) add(pkg, name string, metrics []metric) {
	b := r.byName[name]
	if b == nil {
		b = &benchmark{name: name, pkg: pkg, values: map[string][]float64{}}
		r.byName[name] = b
		r.list = append(r.list, b)
	}
	for _, m := range metrics {
		b.values[m.unit] = append(b.values[m.unit], m.value)
	}
}

// parseLine parses one result line: "BenchmarkName-N  iterations  value unit ...". It
// reports false for any other line, and for a result line whose iteration count or pairs
// are malformed. A value that is not finite (a ratio over zero) is left out.
func parseLine(line string) (name string, metrics []metric, ok bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", nil, false
	}
	if n, err := strconv.Atoi(f[1]); err != nil || n < 1 {
		return "", nil, false
	}
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", nil, false
		}
		if math.IsInf(v, 0) || math.IsNaN(v) {
			continue
		}
		metrics = append(metrics, metric{unit: f[i+1], value: v})
	}
	return stripProcs(f[0]), metrics, true
}

// stripProcs drops the "-N" suffix Go appends to a benchmark's name when GOMAXPROCS is N > 1.
func stripProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return name
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return name
		}
	}
	return name[:i]
}

// A stat summarizes a metric's values over the runs.
type stat struct {
	median, min, max float64
	n                int
}

func summarize(values []float64) stat {
	s := slices.Sorted(slices.Values(values))
	n := len(s)
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return stat{median: m, min: s[0], max: s[n-1], n: n}
}

// metric returns the summary of one benchmark's metric, and false when the input lacks it.
func (r *results) metric(bench, unit string) (stat, bool) {
	b := r.byName[bench]
	if b == nil || len(b.values[unit]) == 0 {
		return stat{}, false
	}
	return summarize(b.values[unit]), true
}

// A comparison says on which side of its target a value meets it.
type comparison int

const (
	atLeast comparison = iota
	atMost
)

func (c comparison) met(v, goal float64) bool {
	if c == atLeast {
		return v >= goal
	}
	return v <= goal
}

func (c comparison) String() string {
	if c == atLeast {
		return "≥"
	}
	return "≤"
}

// Units of the values printed: a ratio of two measures, or milliseconds.
const (
	ratio = "×"
	ms    = " ms"
)

// A target is one row of the Targets section: a benchmark's metric against its goal.
type target struct {
	label  string
	bench  string
	metric string
	cmp    comparison
	goal   float64
	unit   string
	note   string // another metric of the benchmark shown beside it, if any
}

// targets are the performance targets ("close to the floor"), in the order
// they are printed.
var targets = []target{
	{"journal verification vs raw ed25519.Verify", "BenchmarkVerify", "x-raw-verify", atLeast, 1.0, ratio, ""},
	{"directory verification vs raw (all cores)", "BenchmarkVerifyDir", "x-raw-verify", atLeast, 1.0, ratio, ""},
	{"project verification vs raw (all cores)", "BenchmarkVerifyProject", "x-raw-verify", atLeast, 1.0, ratio, ""},
	{"governed invoke_agent p50 / (ungoverned + fsync floor), c=1", "BenchmarkInvoke/c=1", "ratio-p50", atMost, 1.2, ratio, ""},
	{"the same, c=64", "BenchmarkInvoke/c=64", "ratio-p50", atMost, 2.0, ratio, "floor-only-ratio-p50"},
	{"parser throughput vs the previous parser", "BenchmarkParse", "x-baseline", atLeast, 1.25, ratio, "allocs/file"},
	{"start-up to initialize, 1,024 files, idle", "BenchmarkStartupRealistic/hogs=0", "ms-to-initialize", atMost, 50, ms, ""},
	{"the same with two CPU hogs", "BenchmarkStartupRealistic/hogs=2", "ms-to-initialize", atMost, 50, ms, ""},
	{"journal append + fsync vs raw write + fsync", "BenchmarkAppendSync", "journal/raw", atMost, 1.2, ratio, ""},
	{"governed throughput with the ledger vs without, c=1", "BenchmarkLedger/c=1", "throughput-ratio", atLeast, 0.9, ratio, ""},
	{"the same, c=64", "BenchmarkLedger/c=64", "throughput-ratio", atLeast, 0.9, ratio, ""},
}

// others are the other side-by-side ratios, printed when the input holds them: each
// benchmark named here and each of its sub-benchmarks (Name/...), in input order.
var others = []struct {
	bench   string
	metrics []string
}{
	{"BenchmarkInvoke", []string{"ratio", "ratio-p50-combined"}},
	{"BenchmarkParseRegistryFiles", []string{"x-baseline"}},
	{"BenchmarkStartRun", []string{"ratio", "ratio-p50"}},
	{"BenchmarkRunEvents", []string{"warm/floor"}},
	{"BenchmarkListRuns", []string{"open/floor", "server-start/floor"}},
	{"BenchmarkHTTPThroughput", []string{"http/stdio", "http-pool/stdio", "stdio/mem"}},
}

// verdict measures a target: the summary of its metric (n == 0 without one), the status
// ("met", "missed", "not reported", "failed" or "not run") and a note.
func (r *results) verdict(t target) (s stat, status, note string) {
	s, ok := r.metric(t.bench, t.metric)
	switch {
	case ok && t.cmp.met(s.median, t.goal):
		status = "met"
	case ok:
		status = "missed"
	case r.byName[t.bench] != nil:
		return s, "not reported", t.bench + " reports no " + t.metric
	case slices.Contains(r.failed, t.bench):
		return s, "failed", t.bench + " failed"
	default:
		return s, "not run", "no " + t.bench + " in the input"
	}
	if n, ok := r.metric(t.bench, t.note); t.note != "" && ok {
		note = formatNumber(n.median) + " " + t.note
	}
	return s, status, note
}

// table renders the sections as aligned plain text.
func (r *results) table() []byte {
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)

	pkgs := map[string]bool{}
	for _, b := range r.list {
		pkgs[b.pkg] = true
	}
	delete(pkgs, "")
	fmt.Fprintf(tw, "%s read, from %s\n", plural(len(r.list), "benchmark"), plural(len(pkgs), "package"))

	fmt.Fprint(tw, "\nTargets (performance close to the floor)\n")
	fmt.Fprint(tw, "MEASURE\tVALUE\tRUNS\tTARGET\tSTATUS\tNOTE\n")
	count := map[string]int{}
	for _, t := range targets {
		goal := t.cmp.String() + " " + formatGoal(t.goal, t.unit)
		s, status, note := r.verdict(t)
		count[status]++
		if s.n == 0 {
			fmt.Fprintf(tw, "%s\t-\t\t%s\t%s\t%s\n", t.label, goal, status, note)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", t.label, formatStat(s, t.unit), s.n, goal, status, note)
		}
	}
	fmt.Fprintf(tw, "%d of %d met", count["met"], len(targets))
	for _, k := range []string{"missed", "not reported", "failed", "not run"} {
		if count[k] > 0 {
			fmt.Fprintf(tw, ", %d %s", count[k], k)
		}
	}

	var rows []string
	for _, o := range others {
		for _, b := range r.list {
			if b.name != o.bench && !strings.HasPrefix(b.name, o.bench+"/") {
				continue
			}
			for _, m := range o.metrics {
				if s, ok := r.metric(b.name, m); ok {
					rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%d\n", b.name, m, formatStat(s, ratio), s.n))
				}
			}
		}
	}
	fmt.Fprint(tw, "\n\nOther side-by-side ratios\n")
	if len(rows) == 0 {
		fmt.Fprint(tw, "(none in the input)\n")
	} else {
		fmt.Fprint(tw, "BENCHMARK\tMETRIC\tVALUE\tRUNS\n")
		fmt.Fprint(tw, strings.Join(rows, ""))
	}

	if len(r.failed) > 0 {
		fmt.Fprintf(tw, "\nFailed (see their output): %s\n", strings.Join(r.failed, ", "))
	}
	tw.Flush()
	return trimLineEnds(out.String())
}

// formatStat prints a median, and the range when there were several runs.
func formatStat(s stat, unit string) string {
	v := formatNumber(s.median) + unit
	if s.n > 1 {
		v += " [" + formatNumber(s.min) + "–" + formatNumber(s.max) + "]"
	}
	return v
}

// formatNumber prints three significant digits, or the whole part of larger numbers.
func formatNumber(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// formatGoal prints a target as it is stated: a ratio with at least one decimal.
func formatGoal(goal float64, unit string) string {
	g := strconv.FormatFloat(goal, 'f', -1, 64)
	if unit == ratio && !strings.Contains(g, ".") {
		g += ".0"
	}
	return g + unit
}

// plural prints a count of a noun.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// trimLineEnds drops the padding tabwriter leaves after a row's last non-empty cell.
func trimLineEnds(s string) []byte {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return []byte(strings.Join(lines, "\n"))
}
