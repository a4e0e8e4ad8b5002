package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestApproveRunHonoursReadForbid: each caller sees only what policy grants. A caller
// whom a read_run forbid keeps from reading a held run (run_status is access_denied, so it
// never saw the held text) but who may approve_run it is not handed the released text in
// approve_run's answer.
func TestApproveRunHonoursReadForbid(t *testing.T) {
	model := newGatedModel(t)
	files := map[string]string{"policies/access/read.cedar": `@id("no-reading") forbid (principal == Caller::"stdio", action == Action::"read_run", resource);
@id("approve") permit (principal, action == Action::"approve_run", resource);
`}
	for k, v := range gatePolicies {
		files[k] = v
	}
	cs := serve(t, testProject(t, files), serveOpts{env: model.env()})
	res := call(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "write to ACME"})
	wantToolError(t, res, "approval_required")
	var failed struct {
		Audit struct {
			RunID string `json:"run_id"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(structuredJSON(t, res), &failed); err != nil {
		t.Fatal(err)
	}
	id := failed.Audit.RunID
	// The caller may not read the run: it never sees the held text.
	wantToolError(t, call(t, cs, "run_status", map[string]any{"run_id": id}), "access_denied", "no-reading")

	// It may approve it (blind), and the run releases its text to its owner ...
	res = call(t, cs, "approve_run", map[string]any{"run_id": id, "decision": "approve"})
	if res.IsError {
		t.Fatalf("approve_run: %s", textOf(t, res))
	}
	// ... but read_run is still forbidden for this caller: the answer must not carry the text.
	if body := string(structuredJSON(t, res)); strings.Contains(body, "echo: write to ACME") {
		t.Fatalf("approve_run handed the released text to a caller a read_run forbid denies: %s", body)
	}
	for _, c := range res.Content {
		if b, _ := json.Marshal(c); strings.Contains(string(b), "echo: write to ACME") {
			t.Fatalf("approve_run's content carries the released text to a caller a read_run forbid denies: %s", b)
		}
	}
	// And run_status still refuses it.
	wantToolError(t, call(t, cs, "run_status", map[string]any{"run_id": id}), "access_denied", "no-reading")
}
