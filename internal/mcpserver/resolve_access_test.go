package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestResolveRunReadForbidden: the access policies let the caller resolve runs and forbid
// it to read them (run_status is access_denied). resolve_run's answer, the run's status,
// does not carry the released text that read_run denies this caller — as approve_run
// never hands it to an approver forbidden to read the run (TestGateReadForbidden).
func TestResolveRunReadForbidden(t *testing.T) {
	model := newGatedModel(t)
	files := map[string]string{"policies/access/read.cedar": `@id("no-reading") forbid (principal == Caller::"stdio", action == Action::"read_run", resource);
@id("resolve-all") permit (principal, action == Action::"resolve_run", resource);
`}
	cs := serve(t, testProject(t, files), serveOpts{env: model.env()})
	res := call(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "the secret plan"})
	if res.IsError {
		t.Fatalf("invoke_agent: %s", textOf(t, res))
	}
	var out struct {
		Audit struct {
			RunID string `json:"run_id"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(structuredJSON(t, res), &out); err != nil || out.Audit.RunID == "" {
		t.Fatalf("invoke_agent's audit: %s (%v)", structuredJSON(t, res), err)
	}
	id := out.Audit.RunID
	wantToolError(t, call(t, cs, "run_status", map[string]any{"run_id": id}), "access_denied", "no-reading")
	res = call(t, cs, "resolve_run", map[string]any{"run_id": id, "resolution": "accepted"})
	if res.IsError {
		t.Fatalf("resolve_run: %s", textOf(t, res))
	}
	if body := textOf(t, res); strings.Contains(body, "echo: the secret plan") || !strings.Contains(body, `"accepted"`) {
		t.Fatalf("resolve_run's answer to a caller whom read_run denies: %s", body)
	}
}
