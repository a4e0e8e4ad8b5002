package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo runs the demo against a copy of the repository's example project, so that
// "make demo" is known to work.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds symbi")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "symbi")
	build := exec.Command("go", "build", "-o", bin, "../symbi")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, sub := range []string{"agents", "policies"} {
		if err := os.CopyFS(filepath.Join(dir, "example", sub), os.DirFS(filepath.Join("../..", sub))); err != nil {
			t.Fatal(err)
		}
	}
	md, err := os.ReadFile("../../AGENTS.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "example", "AGENTS.md"), md, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := demo(&out, bin, filepath.Join(dir, "example"), "reviewer"); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "level=") || !strings.Contains(out.String(), "its log: ") {
		t.Errorf("the server's log is mixed into the narrative, or not named:\n%s", out.String())
	}
	for _, want := range []string{"answer: ", "valid and complete", "policy_denied: ", "no-private-keys", "refused_definition: ", "start_run ", "event 4: terminated", "resolution: accepted"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
