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

// TestPolicyEvalRunJSONNames: the access dry run's `run` object must use the names
// of the model it describes (docs/http.md: resource `Run::"<run id>"` with `owner`,
// `agent` and `status`), snake_case like every other member of the same output
// (`caller_auth`, `mentioned`).
func TestPolicyEvalRunJSONNames(t *testing.T) {
	run, out := policyEvalMember(t, "run", "--action", "read_run", "--caller", "auditor", "--run-owner", "alice")
	for _, k := range []string{"owner", "agent", "status"} {
		if _, ok := run[k]; !ok {
			t.Errorf("run has no member %q: %s", k, out)
		}
	}
}

// TestPolicyEvalImpossibleInputs: `policy eval` must refuse (exit 2) a principal or
// resource the server never produces, as it already does for --caller-auth (policy.go:
// "Only what the server can produce: another value would answer for a caller that never
// exists"). docs/http.md: "`stdio` and `anonymous` are reserved" (no token or JWT may
// claim them; over stdio "the one caller is `stdio`"); a run's `status` is one of
// docs/runs.md's statuses.
func TestPolicyEvalImpossibleInputs(t *testing.T) {
	dir := newE2EProject(t)
	for name, args := range map[string][]string{
		"run status not a status":      {"--action", "read_run", "--run-status", "bogus"},
		"stdio authenticated by token": {"--action", "read_run", "--caller", "stdio", "--caller-auth", "token"},
		"anonymous by token":           {"--action", "read_run", "--caller", "anonymous", "--caller-auth", "token"},
		"alice over stdio":             {"--action", "read_run", "--caller", "alice", "--caller-auth", "stdio"},
	} {
		code, out, errOut := runCLI(t, "", append([]string{"policy", "eval", "--project", dir}, args...)...)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (a usage error)\n%s%s", name, code, out, errOut)
		}
	}
	// anonymous is the caller without authentication: its method is none unless given.
	if code, out, errOut := runCLI(t, "", "policy", "eval", "--project", dir, "--action", "read_run", "--caller", "anonymous"); code != 0 || !strings.Contains(out, "caller: anonymous (none)") {
		t.Errorf("--caller anonymous: exit %d\n%s%s", code, out, errOut)
	}
}
