package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("stress.seed", 1, "seed of TestStressShort")

// TestStressShort builds symbi and the fake ACP agent and runs every harness with the
// short sizes: it fails if any invariant fails.
func TestStressShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers for a minute or more")
	}
	dir := t.TempDir()
	bin, fake := filepath.Join(dir, "symbi"), filepath.Join(dir, "fake-acp-agent")
	for out, pkg := range map[string]string{bin: "../symbi", fake: "../fake-acp-agent"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-symbi", bin, "-fake-agent", fake, "-short", "-seed", strconv.FormatUint(*seedFlag, 10)}, &stdout, &stderr)
	t.Logf("summary:\n%s", stdout.String())
	if code != 0 {
		t.Fatalf("symbi-stress -short exited %d\n%s", code, stderr.String())
	}
	for _, h := range harnesses {
		if !strings.Contains(stdout.String(), "\n"+h.name+" ") {
			t.Errorf("the summary has no row for %s", h.name)
		}
	}
}

func TestUsage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "symbi")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown harness", []string{"-symbi", bin, "-only", "crash,nope"}, `unknown harness "nope"`},
		{"missing binary", []string{"-symbi", filepath.Join(t.TempDir(), "absent")}, "not a binary"},
		{"binary is a directory", []string{"-symbi", t.TempDir()}, "not a binary"},
		{"stray argument", []string{"-symbi", bin, "extra"}, "unexpected arguments"},
		{"unknown flag", []string{"-kills", "3"}, "flag provided but not defined"},
		{"missing fake agent", []string{"-symbi", bin, "-only", "acp", "-fake-agent", filepath.Join(t.TempDir(), "absent")}, "-fake-agent"},
		{"no fake agent next to symbi", []string{"-symbi", bin, "-only", "load,acp"}, "fake-acp-agent: not a binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) || stdout.Len() != 0 {
				t.Fatalf("stderr %q (want %q), stdout %q", stderr.String(), tt.want, stdout.String())
			}
		})
	}
}

func TestSelectHarnesses(t *testing.T) {
	tests := []struct {
		only string
		want string
	}{
		{"", "crash,storage,model,client,load,shutdown,acp"},
		{"acp,crash", "crash,acp"},
		{"load", "load"},
		{"shutdown, crash", "crash,shutdown"},
	}
	for _, tt := range tests {
		hs, err := selectHarnesses(tt.only)
		if err != nil {
			t.Fatalf("%q: %v", tt.only, err)
		}
		var names []string
		for _, h := range hs {
			names = append(names, h.name)
		}
		if got := strings.Join(names, ","); got != tt.want {
			t.Errorf("%q: %s, want %s", tt.only, got, tt.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i
	}
	tests := []struct {
		name string
		ds   []time.Duration
		p    int
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median of odd", ms(5, 1, 3), 50, 3 * time.Millisecond},
		{"p50 of 1..100", ms(hundred...), 50, 50 * time.Millisecond},
		{"p99 of 1..100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100", ms(hundred...), 100, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.ds, tt.p); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestSummaryMarksFailures(t *testing.T) {
	ok := &result{name: "load", elapsed: time.Second}
	ok.figure("calls", 3)
	bad := &result{name: "crash"}
	bad.failf("journal %s is invalid", "x.jsonl")
	var b bytes.Buffer
	printSummary(&b, config{bin: "bin/symbi", seed: 9, sizes: shortSizes}, []*result{ok, bad})
	out := b.String()
	for _, want := range []string{"short sizes, seed 9", "load ", "pass", "calls=3", "crash ", "FAIL (1)", "FAIL crash: journal x.jsonl is invalid"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}
