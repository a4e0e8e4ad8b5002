package project

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeRealisticAgents writes n agent files into root/agents, cycling through the
// templates of testdata/registry (see its README.md), and returns their total size.
func writeRealisticAgents(tb testing.TB, root string, n int) int {
	tb.Helper()
	paths, err := filepath.Glob("testdata/registry/*.symbi")
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no templates: %v", err)
	}
	var templates []string
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		templates = append(templates, string(src))
	}
	total := 0
	for i := range n {
		num := fmt.Sprintf("%04d", i)
		src := strings.ReplaceAll(templates[i%len(templates)], "NNN", num)
		writeFile(tb, root, "agents/a"+num+".symbi", []byte(src))
		total += len(src)
	}
	return total
}

// BenchmarkLoadRegistry takes the registry snapshot of a project of 1,024 realistic
// agent files (RegistryMaxEntries): list, confined reads, parsing, admission, digests.
func BenchmarkLoadRegistry(b *testing.B) {
	root := b.TempDir()
	b.SetBytes(int64(writeRealisticAgents(b, root, RegistryMaxEntries)))
	p := openProject(b, root, false)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.ReportAllocs()
	for b.Loop() {
		r, err := p.LoadRegistry(log)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.agents) != RegistryMaxEntries {
			b.Fatalf("%d agents", len(r.agents))
		}
	}
}
