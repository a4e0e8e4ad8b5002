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
	fake := filepath.Join(dir, "fake-acp-agent")
	for target, pkg := range map[string]string{bin: "../symbi", fake: "../fake-acp-agent"} {
		build := exec.Command("go", "build", "-o", target, pkg)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
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
	if err := demo(&out, bin, fake, filepath.Join(dir, "example"), "reviewer"); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "level=") || !strings.Contains(out.String(), "its log: ") {
		t.Errorf("the server's log is mixed into the narrative, or not named:\n%s", out.String())
	}
	for _, want := range []string{"answer: ", "valid and complete", "policy_denied: ", "no-private-keys", "refused_definition: ", "start_run ", "event 4: terminated", "resolution: accepted",
		"pair_coder refused: rule 3 at ", "--executors", "delegated to the executor coder", "runs only through start_run",
		"read " + delegatedRead + ": allow (policy tools-read-search)", "fs_read", `execute "go test ./..." in .: deny (policy tools-no-execute)`,
		"text (read back from the journal): " + delegatedAnswer,
		"approval_required: ", "by gate " + gatePolicy, "status: awaiting_approval, caller alice (token), text withheld", "approval: gate " + gatePolicy,
		`access_denied: caller "alice" may not approve_run`, "a caller may not approve a run it started", "status: completed, approved by bob (token)",
		"text (read back from the journal): " + gatedAnswer, "held at the gate " + gatePolicy, "approval_decided: approve by bob (token, via approve_run)",
		`approval: {"run_id":`, "terminated completed (text released)", "symbi mcp --http exited 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
