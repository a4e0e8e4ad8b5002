package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// delegatedPolicyProject is a project whose one agent is delegated to the executor
// "coder", with a policy that permits reads and every answer.
func delegatedPolicyProject(t *testing.T) (dir, execFile string) {
	t.Helper()
	dir = t.TempDir()
	files := map[string]string{
		"agents/pair.symbi": `metadata {
    description = "works on code",
    executor = "coder"
}

agent pair {
    capabilities = ["code"]
}
`,
		"policies/p.cedar": `@id("reads")
permit (principal, action == Action::"use_tool", resource == Tool::"read");
@id("answers")
permit (principal, action == Action::"respond", resource);
`,
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	execFile = filepath.Join(t.TempDir(), "executors.json")
	if err := os.WriteFile(execFile, []byte(`{"executors":{"coder":{"command":["/bin/true"]}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, execFile
}

// TestPolicyEvalDelegatedAgent: policy eval dry-runs a delegated agent's decisions
// (use_tool, start_run, respond) given the executors file the server is started with
// (--executors), and refuses the agent without it — by rule 3, as the server would.
func TestPolicyEvalDelegatedAgent(t *testing.T) {
	dir, execFile := delegatedPolicyProject(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"use_tool", []string{"--agent", "pair", "--action", "use_tool", "--tool", "read", "--path", "a.txt"}},
		{"start_run", []string{"--agent", "pair", "--action", "start_run"}},
		{"respond", []string{"--agent", "pair", "--response", "done"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, "", append([]string{"policy", "eval", "--project", dir, "--json"}, tc.args...)...)
			if code != 1 || !strings.Contains(errOut, "rule 3") {
				t.Errorf("without --executors: exit %d, %q; want 1, refused by rule 3", code, strings.TrimSpace(errOut))
			}
			code, out, errOut := runCLI(t, "", append([]string{"policy", "eval", "--project", dir, "--executors", execFile, "--json"}, tc.args...)...)
			var got struct {
				Decision string `json:"decision"`
			}
			if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Decision != "allow" {
				t.Fatalf("with --executors: exit %d, decision %q (%v): %s%s", code, got.Decision, err, out, errOut)
			}
		})
	}
}

// TestPolicyEvalExecutorsOnlyWithAnAgent: --executors goes with the actions that resolve an
// agent (the respond gate, use_tool, start_run); with a run action nothing is resolved, so
// it is a usage error (exit 2), as every other flag that does not go with the action is —
// never ignored.
func TestPolicyEvalExecutorsOnlyWithAnAgent(t *testing.T) {
	dir, execFile := delegatedPolicyProject(t)
	code, out, errOut := runCLI(t, "", "policy", "eval", "--project", dir, "--action", "read_run", "--caller", "bob", "--run-owner", "bob", "--executors", execFile)
	if code != 2 || out != "" || !strings.Contains(errOut, "--executors goes with start_run") {
		t.Fatalf("policy eval --action read_run --executors: exit %d, stdout %q, stderr %q; want 2", code, out, errOut)
	}
	// The usage error is said before the file is read: a missing file is not what is wrong.
	missing := filepath.Join(t.TempDir(), "none.toml")
	code, out, errOut = runCLI(t, "", "policy", "eval", "--project", dir, "--action", "read_run", "--caller", "bob", "--run-owner", "bob", "--executors", missing)
	if code != 2 || out != "" || !strings.Contains(errOut, "--executors goes with start_run") {
		t.Fatalf("policy eval --action read_run --executors MISSING: exit %d, stdout %q, stderr %q; want 2", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "policy", "eval", "--project", dir, "--agent", "helper", "--executors", missing)
	if code != 2 || out != "" || !strings.Contains(errOut, "give exactly one of --response and --response-file") {
		t.Fatalf("policy eval without a response, --executors MISSING: exit %d, stdout %q, stderr %q; want 2", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "", "policy", "eval", "--project", dir, "--agent", "helper", "--response", "hi", "--executors", missing)
	if code != 1 || !strings.Contains(errOut, "none.toml") {
		t.Fatalf("policy eval --executors MISSING: exit %d, stderr %q; want 1 naming the file", code, errOut)
	}
}

// TestPolicyCheckEmptySetProblems: a policy set whose files hold no policy is deny_all,
// and policy check lists the problem as every other: a `file: message` line on stderr,
// an entry of --json's "problems".
func TestPolicyCheckEmptySetProblems(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies", "a.cedar"), []byte("// nothing yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "policy", "check", "--project", dir, "--json")
	var got struct {
		Mode     string            `json:"mode"`
		Problems []json.RawMessage `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, out)
	}
	if code != 1 || got.Mode != "deny_all" {
		t.Fatalf("exit %d, mode %q; want 1 and deny_all", code, got.Mode)
	}
	if len(got.Problems) == 0 {
		t.Errorf("--json: mode deny_all with \"problems\": [] — the problem that made the set unusable is not listed")
	}
	if !strings.Contains(errOut, "\npolicies/a.cedar: ") && !strings.HasPrefix(errOut, "policies/a.cedar: ") {
		t.Errorf("stderr has no `file: message` problem line: %q", errOut)
	}
}
