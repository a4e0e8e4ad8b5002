package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/project"
)

func TestAgentsMDGenerate(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "agents/a.symbi"), []byte(`metadata { description = "the a agent" } agent a {}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "agents-md", "generate", "--project", root)
	if code != 0 || !strings.HasPrefix(out, "created ") {
		t.Fatalf("first generate: exit %d, %q %q", code, out, errOut)
	}
	md, _ := os.ReadFile(filepath.Join(root, "AGENTS.md"))
	edited := append([]byte("# Mine\n\nkeep me\n\n"), md...)
	edited = append(edited, "\ntrailer"...)
	if err := os.WriteFile(filepath.Join(root, "AGENTS.md"), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI(t, "", "agents-md", "generate", "--project", root)
	if code != 0 || !strings.HasPrefix(out, "updated ") {
		t.Fatalf("second generate: exit %d, %q", code, out)
	}
	after, _ := os.ReadFile(filepath.Join(root, "AGENTS.md"))
	if !bytes.Equal(after, edited) {
		t.Fatalf("regenerating an up-to-date file changed it:\n%s", after)
	}
	if g, err := project.Guidance(after); err != nil || !strings.Contains(g, "the a agent") {
		t.Fatalf("section lacks the agent:\n%s", after)
	}

	if err := os.WriteFile(filepath.Join(root, "AGENTS.md"), []byte(project.AutoStart), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, "", "agents-md", "generate", "--project", root)
	if code != 1 || !strings.Contains(errOut, "invalid_request") {
		t.Fatalf("malformed markers: exit %d, stderr %q", code, errOut)
	}
}

// TestRootAgentsMDUpToDate fails when the example project's agents change without
// "symbi agents-md generate" being run at the repository root.
func TestRootAgentsMDUpToDate(t *testing.T) {
	p, err := project.Open("../..")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	reg, err := p.LoadRegistry(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	md, err := p.AgentsMD()
	if err != nil {
		t.Fatal(err)
	}
	want, err := project.GenerateAgentsMD(md, reg.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, want) {
		t.Fatalf("AGENTS.md is stale; run: symbi agents-md generate")
	}
}
