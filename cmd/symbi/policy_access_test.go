package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPolicyCheckAccess: policy check shows the access set, and a broken access set
// fails the check (exit 1) while the respond set stays usable.
func TestPolicyCheckAccess(t *testing.T) {
	code, out, errOut := runCLI(t, "", "policy", "check", "--project", "../..")
	if code != 0 || !strings.Contains(out, "access (policies/access):\nmode: cedar\n") || !strings.Contains(out, "permit access-auditor-reads-all") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	dir := policyCopy(t, map[string]string{"policies/access/broken.cedar": "permit ("})
	code, out, errOut = runCLI(t, "", "policy", "check", "--project", dir)
	if code != 1 || !strings.Contains(out, "mode: cedar\n") || !strings.Contains(out, "access (policies/access):\nmode: deny_all\n") ||
		!strings.Contains(errOut, "policies/access/broken.cedar:1:9") || !strings.Contains(errOut, "every run access would be denied") {
		t.Fatalf("broken access set: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "", "policy", "check", "--json", "--project", dir)
	var v struct {
		Mode   string `json:"mode"`
		Access struct {
			Mode     string `json:"mode"`
			Problems []struct{ File string }
		} `json:"access"`
	}
	if code != 1 || json.Unmarshal([]byte(out), &v) != nil || v.Mode != "cedar" || v.Access.Mode != "deny_all" || len(v.Access.Problems) != 1 || v.Access.Problems[0].File != "policies/access/broken.cedar" {
		t.Fatalf("--json: exit %d %s", code, out)
	}
}

// TestPolicyEvalAccess dry-runs access decisions against the example project.
func TestPolicyEvalAccess(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{args: []string{"--action", "read_run", "--caller", "auditor", "--run-owner", "alice"}, stdout: []string{"decision: allow\n", "policies: access-auditor-reads-all\n", "caller: auditor (token)\n"}},
		{args: []string{"--action", "read_run", "--caller", "bob", "--run-owner", "alice"}, stdout: []string{"decision: deny\n", "reason: denied: no permit matched\n"}},
		{args: []string{"--action", "read_run", "--caller", "alice", "--run-owner", "alice"}, stdout: []string{"decision: allow\n", "policies: access-read-own\n"}},
		{args: []string{"--action", "cancel_run", "--caller", "auditor", "--run-owner", "alice"}, stdout: []string{"decision: deny\n", "built-in default"}},
		{args: []string{"--action", "approve_run", "--caller", "bob", "--run-owner", "alice", "--caller-auth", "jwt"}, stdout: []string{"decision: allow\n", "caller: bob (jwt)\n"}},
		{args: []string{"--action", "approve_run"}, stdout: []string{"decision: allow\n", "caller: stdio (stdio)\n", "over stdio the one caller approves its own runs"}},
		{args: []string{"--action", "approve_run", "--caller", "alice", "--run-owner", "alice"}, stdout: []string{"decision: deny\n", "may not approve a run it started"}},
		{args: []string{"--action", "start_run", "--caller", "ci", "--agent", "reviewer"}, stdout: []string{"decision: allow\n", "agent: reviewer\n"}},
		{args: []string{"--action", "start_run", "--caller", "ci"}, code: 2, stderr: "--agent is required with --action start_run"},
		{args: []string{"--action", "read_run", "--agent", "reviewer"}, code: 2, stderr: "--agent goes with start_run"},
		{args: []string{"--action", "start_run", "--agent", "reviewer", "--run-owner", "x"}, code: 2, stderr: "not start_run"},
		{args: []string{"--action", "read_run", "--response", "x"}, code: 2, stderr: "do not go with --action read_run"},
		{args: []string{"--action", "respond", "--agent", "reviewer", "--response", "x", "--run-owner", "x"}, code: 2, stderr: "go with the run actions"},
		{args: []string{"--action", "delete_run", "--agent", "reviewer"}, code: 2, stderr: "want respond, use_tool or one of start_run, read_run"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, "", append([]string{"policy", "eval", "--project", "../.."}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.code, out, errOut)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
		})
	}
}

// TestPolicyEvalGate: a deny held by the example gate says so.
func TestPolicyEvalGate(t *testing.T) {
	code, out, _ := runCLI(t, "", "policy", "eval", "--project", "../..", "--agent", "summarizer", "--response", "About ACME Corp")
	if code != 0 || !strings.Contains(out, "decision: deny\ngate: customer-names-review (held for a person") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "policy", "eval", "--project", "../..", "--agent", "summarizer", "--response", "About ACME Corp", "--json")
	if code != 0 || !strings.Contains(out, `"gate": "customer-names-review"`) {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}
}
