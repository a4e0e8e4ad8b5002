package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// startupAgentFiles is the size of the registry BenchmarkStartupRealistic serves: the
// most files the registry inspects (project.RegistryMaxEntries).
const startupAgentFiles = 1024

// startupProject writes a project of n realistic agent files, the example project's
// Cedar policies and an AGENTS.md, and returns its directory; n = 0 gives the same
// project with an empty agents/ directory. The agent files are those of the registry
// benchmark (internal/project/testdata/registry, see its README.md): file i is the
// template i mod 8, every NNN replaced by i in four digits.
func startupProject(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		b.Fatal(err)
	}
	templates, err := filepath.Glob("../../internal/project/testdata/registry/*.symbi")
	if err != nil || len(templates) == 0 {
		b.Fatalf("no agent templates: %v", err)
	}
	for i := range n {
		src, err := os.ReadFile(templates[i%len(templates)])
		if err != nil {
			b.Fatal(err)
		}
		num := fmt.Sprintf("%04d", i)
		writeFile(b, filepath.Join(dir, "agents", "a"+num+".symbi"), strings.ReplaceAll(string(src), "NNN", num))
	}
	policies, _ := filepath.Glob("../../policies/*/*.cedar")
	top, _ := filepath.Glob("../../policies/*.cedar*")
	for _, p := range append(policies, top...) {
		src, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		rel, _ := filepath.Rel("../..", p)
		writeFile(b, filepath.Join(dir, rel), string(src))
	}
	writeFile(b, filepath.Join(dir, "AGENTS.md"), "# Project\n\n<!-- agents-md:auto-start -->\nBe brief.\n<!-- agents-md:auto-end -->\n")
	return dir
}

const startupInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}` + "\n"

// startupListAgents is what a client sends once initialized: the notification, then a
// call that needs the registry.
const startupListAgents = `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
	`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}` + "\n"

// startupOnce starts "symbi mcp" on dir, sends initialize on its stdin as soon as it is
// started, and returns the time from starting the process to the answer's last byte;
// then, as a client does, it sends initialized and calls list_agents, which waits for
// the registry, and returns the time from the start to that answer too. Then it closes
// stdin and waits for the server to exit (not timed).
func startupOnce(b *testing.B, dir string) (toInitialize, toListAgents time.Duration) {
	b.Helper()
	cmd := exec.Command(symbiBin, "mcp", "--project", dir, "--log-level", "error")
	cmd.Env = modelEnv(nil)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	io.WriteString(stdin, startupInitialize)
	r := bufio.NewReaderSize(stdout, 1<<20)
	line, err := r.ReadString('\n')
	toInitialize = time.Since(t0)
	if err != nil || !strings.Contains(line, `"protocolVersion"`) {
		b.Fatalf("initialize answer %q: %v", line, err)
	}
	io.WriteString(stdin, startupListAgents)
	line, err = r.ReadString('\n')
	toListAgents = time.Since(t0)
	if err != nil || !strings.Contains(line, `"id":2`) || strings.Contains(line, `"isError":true`) {
		b.Fatalf("list_agents answer %.300q: %v", line, err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("symbi mcp: %v", err)
	}
	return toInitialize, toListAgents
}

// startupMedian returns the median of ds in milliseconds.
func startupMedian(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return float64(m.Microseconds()) / 1000
}

// startHogs starts n CPU hogs, each a shell busy loop (another process, as a busy
// machine's other work is), and returns what stops them.
func startHogs(b *testing.B, n int) (stop func()) {
	b.Helper()
	var hogs []*exec.Cmd
	stop = func() {
		for _, h := range hogs {
			h.Process.Kill()
			h.Wait()
		}
	}
	for range n {
		h := exec.Command("sh", "-c", "while :; do :; done")
		if err := h.Start(); err != nil {
			stop()
			b.Fatal(err)
		}
		hogs = append(hogs, h)
	}
	return stop
}

// BenchmarkStartupRealistic measures, through the real binary over stdio, the time from
// starting "symbi mcp" on a project of 1,024 realistic agent files (metadata,
// capabilities, inline policies, with blocks, a few files refused by admission; see
// startupProject) with the example project's Cedar policies, to its answer to
// initialize (target: 50 ms), and to its answer to the first list_agents, which needs
// the whole registry; idle (hogs=0) and with two CPU hogs running (hogs=2). Side by side
// in each iteration it starts the same project with an empty agents/ directory: the
// floor (process start, policies, ledger, MCP server). Each iteration is one start of
// each; it reports medians: ms-to-initialize and ms-to-list-agents (1,024 files),
// ms-empty-registry (the floor's initialize), and ms-registry, what the registry adds
// to the first list_agents.
func BenchmarkStartupRealistic(b *testing.B) {
	full := startupProject(b, startupAgentFiles)
	empty := startupProject(b, 0)
	// The first start creates each project's key and ledger; it is not measured.
	startupOnce(b, full)
	startupOnce(b, empty)
	for _, hogs := range []int{0, 2} {
		b.Run(fmt.Sprintf("hogs=%d", hogs), func(b *testing.B) {
			defer startHogs(b, hogs)()
			var init, list, floorInit, floorList []time.Duration
			for b.Loop() {
				i, l := startupOnce(b, full)
				fi, fl := startupOnce(b, empty)
				init, list, floorInit, floorList = append(init, i), append(list, l), append(floorInit, fi), append(floorList, fl)
			}
			b.StopTimer()
			b.ReportMetric(startupMedian(init), "ms-to-initialize")
			b.ReportMetric(startupMedian(list), "ms-to-list-agents")
			b.ReportMetric(startupMedian(floorInit), "ms-empty-registry")
			b.ReportMetric(startupMedian(list)-startupMedian(floorList), "ms-registry")
			b.ReportMetric(0, "ns/op")
		})
	}
}
