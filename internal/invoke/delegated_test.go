package invoke

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/workspace"
)

// fakeExecutor builds cmd/fake-acp-agent and registers it as the executor "fake", playing
// the script the caller writes to the returned file (writeScript).
func fakeExecutor(t *testing.T) (*executors.Registry, string) {
	t.Helper()
	aux := t.TempDir()
	fake := filepath.Join(aux, "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", fake, "symbi/cmd/fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	script := filepath.Join(aux, "script.json")
	execs, err := json.Marshal(map[string]any{"executors": map[string]any{"fake": map[string]any{"command": []string{fake, "--script", script}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := executors.Parse(execs, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return reg, script
}

// writeScript writes the fake agent's steps to path.
func writeScript(t *testing.T, path string, steps ...any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// delegatedFixture is a project whose agent coder is delegated to reg's executor "fake",
// with policies (file name → Cedar) besides one permitting every answer.
func delegatedFixture(t *testing.T, reg *executors.Registry, policies map[string]string) *fixture {
	t.Helper()
	files := map[string]string{
		"agents/coder.symbi":     "metadata { executor = \"fake\" }\nagent coder {}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
	}
	for name, text := range policies {
		files["policies/"+name] = text
	}
	return newFixture(t, files, func(c *Config) {
		c.Executors = reg
		var err error
		if c.Registry, err = c.Project.LoadRegistry(nil, dsl.Options{Executors: func(n string) bool { _, ok := reg.Get(n); return ok }}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDelegatedWorkspacePlace: start_run refuses, before anything is journaled, a
// workspace in which the agent's own tools would work on the project's governance: its
// audit store (every path the agent names would be inside .symbiont, yet none would carry
// the name), its policies, or a directory holding the signing key.
func TestDelegatedWorkspacePlace(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, map[string]string{"tools.cedar": "@id(\"tools\") permit (principal, action == Action::\"use_tool\", resource);\n"})
	// One run, so that the audit store exists.
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(t.Context()); err != nil {
		t.Fatalf("a run in the project: %v", err)
	}
	before := journals(t, f)
	for _, ws := range []string{".symbiont", ".symbiont/governed", "policies"} {
		t.Run(ws, func(t *testing.T) {
			_, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true, Workspace: filepath.Join(f.dir, ws)}, nil)
			if !errors.Is(err, workspace.ErrWorkspaceGoverned) || errcode.Of(err) != errcode.ProtectedPath {
				t.Fatalf("start_run in %s: %v; want protected_path, %v", ws, err, workspace.ErrWorkspaceGoverned)
			}
			if got := journals(t, f); got != before {
				t.Fatalf("%d journals after the refusal, %d before", got, before)
			}
		})
	}
}

// journals counts the project's journal files.
func journals(t *testing.T, f *fixture) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(f.dir, ".symbiont/governed/*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}
