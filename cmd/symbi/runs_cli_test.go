package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"symbi/internal/loopback"
	"symbi/internal/runs"
)

// TestRunsCLI makes runs through a real server, stops it, and reads them with the CLI
// twins from the files alone: list (filters, paging, JSON), status, events, resolve.
func TestRunsCLI(t *testing.T) {
	model := startModel(t, loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	dir := newE2EProject(t)
	s := startSymbi(t, dir, modelEnv(model), nil)
	var ids []string
	for i, prompt := range []string{"one", "say FORBIDDEN", "three"} {
		res := s.call(t, "start_run", map[string]any{"agent": "helper", "prompt": prompt})
		var st struct {
			RunID string `json:"run_id"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if res.IsError || json.Unmarshal(raw, &st) != nil || st.RunID == "" {
			t.Fatalf("start_run %d: %s", i, text(res))
		}
		// Wait for the run's end through the long poll.
		for done := false; !done; {
			res := s.call(t, "run_events", map[string]any{"run_id": st.RunID, "after": 0, "wait_ms": 30000, "limit": 1000})
			var page runs.Events
			raw, _ := json.Marshal(res.StructuredContent)
			if res.IsError || json.Unmarshal(raw, &page) != nil {
				t.Fatalf("run_events: %s", text(res))
			}
			done = page.Done
		}
		ids = append(ids, st.RunID)
	}
	s.session.Close()
	s.cmd.Wait()

	// list: newest first, in the text and JSON forms, with filters and a cursor.
	code, out, errOut := runCLI(t, "", "runs", "list", "--project", dir)
	if code != 0 || !strings.Contains(out, "RUN_ID") || strings.Index(out, ids[2]) > strings.Index(out, ids[0]) {
		t.Fatalf("runs list: exit %d\n%s%s", code, out, errOut)
	}
	var page runs.Page
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--limit", "2")
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 2 || page.NextCursor == "" || page.Runs[0].RunID != ids[2] {
		t.Fatalf("runs list --json --limit 2: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--after", page.NextCursor)
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 1 || page.Runs[0].RunID != ids[0] || page.NextCursor != "" {
		t.Fatalf("runs list --after: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--status", "policy_denied")
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 1 || page.Runs[0].RunID != ids[1] {
		t.Fatalf("runs list --status policy_denied: exit %d\n%s", code, out)
	}

	// status: the released text, read back from the journal.
	code, out, _ = runCLI(t, "", "runs", "status", "--project", dir, ids[0])
	if code != 0 || !strings.Contains(out, "status:") || !strings.Contains(out, "completed") || !strings.HasSuffix(out, "\necho: one\n") {
		t.Fatalf("runs status: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "status", "--project", dir, ids[1])
	if code != 0 || !strings.Contains(out, "policy_denied") || !strings.Contains(out, "no-forbidden-word") || strings.Contains(out, "FORBIDDEN\n") {
		t.Fatalf("runs status of the denied run: exit %d\n%s", code, out)
	}

	// events: every record, and --json with the signed lines.
	code, out, _ = runCLI(t, "", "runs", "events", "--project", dir, ids[0])
	if code != 0 || strings.Count(out, "\n") != 7 || !strings.Contains(out, "terminated") || !strings.Contains(out, "all events read") {
		t.Fatalf("runs events: exit %d\n%s", code, out)
	}
	var evs runs.Events
	code, out, _ = runCLI(t, "", "runs", "events", "--project", dir, "--json", "--after", "3", ids[0])
	if code != 0 || unmarshalFresh(out, &evs) != nil || len(evs.Events) != 2 || evs.Events[0].Seq != 3 || !evs.Done || !strings.HasPrefix(evs.Events[0].Line, `{"payload":`) {
		t.Fatalf("runs events --json --after 3: exit %d\n%s", code, out)
	}

	// resolve, then revise: the ledger keeps both, the latest wins.
	code, out, errOut = runCLI(t, "", "runs", "resolve", "--project", dir, "--resolution", "rejected", "--note", "wrong tone", ids[0])
	if code != 0 || !strings.Contains(out, "rejected by cli:") || !strings.Contains(out, "wrong tone") {
		t.Fatalf("runs resolve: exit %d\n%s%s", code, out, errOut)
	}
	var st runs.Status
	code, out, _ = runCLI(t, "", "runs", "resolve", "--project", dir, "--resolution", "accepted", "--json", ids[0])
	if code != 0 || unmarshalFresh(out, &st) != nil || st.Resolution == nil || st.Resolution.Value != "accepted" || st.Resolution.Revisions != 2 || st.Status != "completed" {
		t.Fatalf("runs resolve --json: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--resolution", "unresolved")
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 2 {
		t.Fatalf("runs list --resolution unresolved: exit %d\n%s", code, out)
	}
	// The ledger still verifies as a whole, resolutions included.
	_, key, _ := runCLI(t, "", "audit", "key", "--project", dir)
	if code, out, errOut := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", strings.TrimSpace(key)); code != 0 {
		t.Fatalf("audit verify --project: exit %d\n%s%s", code, out, errOut)
	}

	// Refusals: each names its rule, with its own exit code.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"runs", "status", "--project", dir, "0190a000-0000-7000-8000-000000000000"}, 1, "run_not_found"},
		{[]string{"runs", "status", "--project", dir, "../x"}, 1, "invalid_request"},
		{[]string{"runs", "status", "--project", dir}, 2, "want one RUN_ID"},
		{[]string{"runs", "resolve", "--project", dir, ids[0]}, 2, "--resolution is required"},
		{[]string{"runs", "resolve", "--project", dir, "--resolution", "maybe", ids[0]}, 1, "invalid_request"},
		{[]string{"runs", "resolve", "--project", dir, "--resolution", "accepted", "--note", strings.Repeat("n", 4097), ids[0]}, 1, "limit_exceeded"},
		{[]string{"runs", "list", "--project", dir, "--limit", "0"}, 2, "1..1000"},
		{[]string{"runs", "list", "--project", dir, "--after", "garbage"}, 1, "cursor"},
		{[]string{"runs", "events", "--project", dir, "--limit", "1001", ids[0]}, 2, "1..1000"},
		{[]string{"runs", "list", "--project", t.TempDir()}, 1, "no run records"},
		{[]string{"runs", "list", "--project", dir + "/missing"}, 1, "not_found"},
	} {
		t.Run(fmt.Sprint(tc.args[:2], tc.msg), func(t *testing.T) {
			code, out, errOut := runCLI(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Fatalf("exit %d, want %d; stderr %q does not say %q (stdout %q)", code, tc.code, errOut, tc.msg, out)
			}
		})
	}
}

// unmarshalFresh decodes out into a zeroed *v: members absent from out stay zero.
func unmarshalFresh[T any](out string, v *T) error {
	var zero T
	*v = zero
	return json.Unmarshal([]byte(out), v)
}
