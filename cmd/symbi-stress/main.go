// Command symbi-stress runs the reliability harnesses against a built symbi binary and
// prints a summary table: each harness with pass or FAIL and its figures (counts,
// throughput, latency percentiles, the server's peak RSS, the seed).
//
// Usage:
//
//	symbi-stress [-symbi PATH] [-fake-agent PATH] [-short] [-seed N] [-only NAME[,NAME...]] [-v]
//
// The harnesses are crash, storage, model, client, load, shutdown and acp;
// docs/reliability.md says what each one does and asserts. The acp harness runs delegated
// runs (coding agents over ACP) with the scripted agent of cmd/fake-acp-agent, built
// beforehand: -fake-agent names it (default: fake-acp-agent next to the -symbi binary, as
// make stress builds it). Everything runs on 127.0.0.1 and in temporary directories, and
// every loop is bounded; the acp harness kills any process its agents leave behind. -short
// runs the sizes meant for CI (fewer kills, fewer invocations); every invariant is still
// asserted. The exit status is 0 when every invariant held, 1 when any failed, 2 on a usage
// error.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the selected harnesses and prints the summary on stdout.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("symbi-stress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("symbi", "bin/symbi", "path of the symbi binary under test")
	fakeAgent := fs.String("fake-agent", "", "path of a built cmd/fake-acp-agent, for the acp harness (default: fake-acp-agent in the directory of -symbi)")
	short := fs.Bool("short", false, "run the short sizes (for CI); every invariant is still asserted")
	seed := fs.Uint64("seed", 0, "seed of the random choices (0: derived from the clock, and reported)")
	only := fs.String("only", "", "comma-separated harness names to run (default: all)")
	verbose := fs.Bool("v", false, "log progress on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "symbi-stress: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	selected, err := selectHarnesses(*only)
	if err != nil {
		fmt.Fprintln(stderr, "symbi-stress:", err)
		return 2
	}
	if st, err := os.Stat(*bin); err != nil || st.IsDir() {
		fmt.Fprintf(stderr, "symbi-stress: -symbi %s: not a binary (build it first: make build)\n", *bin)
		return 2
	}
	cfg := config{bin: *bin, seed: *seed, sizes: fullSizes}
	for _, h := range selected {
		if h.name != "acp" {
			continue
		}
		if *fakeAgent == "" {
			*fakeAgent = filepath.Join(filepath.Dir(*bin), "fake-acp-agent")
		}
		st, err := os.Stat(*fakeAgent)
		if err == nil && !st.IsDir() {
			cfg.fakeAgent, err = filepath.Abs(*fakeAgent)
		}
		if err != nil || st.IsDir() {
			fmt.Fprintf(stderr, "symbi-stress: -fake-agent %s: not a binary (build it first: go build -o %s ./cmd/fake-acp-agent, or leave out the acp harness with -only)\n", *fakeAgent, *fakeAgent)
			return 2
		}
	}
	if *short {
		cfg.sizes = shortSizes
	}
	if *verbose {
		cfg.log = stderr
	}
	results := runAll(cfg, selected)
	printSummary(stdout, cfg, results)
	for _, r := range results {
		if !r.ok() {
			return 1
		}
	}
	return 0
}

// selectHarnesses returns the harnesses named in only (all when empty), in table order.
func selectHarnesses(only string) ([]harness, error) {
	if only == "" {
		return harnesses, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []harness
	for _, h := range harnesses {
		if want[h.name] {
			out = append(out, h)
			delete(want, h.name)
		}
	}
	for n := range want {
		var names []string
		for _, h := range harnesses {
			names = append(names, h.name)
		}
		return nil, fmt.Errorf("-only: unknown harness %q (have %s)", n, strings.Join(names, ", "))
	}
	return out, nil
}
