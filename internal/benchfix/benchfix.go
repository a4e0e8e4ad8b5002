// Package benchfix is the fixture the governed-run benchmarks share: a project with one
// agent and a Cedar respond policy, a zero-latency loopback model, the provider pointing
// at it, and the registry snapshot. It is for tests and benchmarks only.
package benchfix

import (
	"os"
	"path/filepath"
	"testing"

	"symbi/internal/inference"
	"symbi/internal/loopback"
	"symbi/internal/project"
)

// Fixture is a served project's parts.
type Fixture struct {
	Dir      string
	Project  *project.Project
	Registry *project.Registry
	Provider inference.Provider
	Model    *loopback.Server
}

// New builds the fixture in a temporary directory; everything is closed when tb ends.
func New(tb testing.TB) *Fixture {
	tb.Helper()
	dir := tb.TempDir()
	files := map[string]string{
		"agents/helper.symbi":    "metadata { description = \"answers\" }\nagent helper { capabilities = [\"answer\"] }\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n@id(\"no-keys\") forbid (principal, action == Action::\"respond\", resource) when { context.response like \"*PRIVATE KEY*\" };\n",
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	model := loopback.New(loopback.WithReply(loopback.Reply{Text: "ok"}))
	if err := model.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(model.Close)
	prov, err := inference.NewOpenAI(model.URL(), "", "bench")
	if err != nil {
		tb.Fatal(err)
	}
	p, err := project.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	reg, err := p.LoadRegistry(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return &Fixture{Dir: dir, Project: p, Registry: reg, Provider: prov, Model: model}
}
