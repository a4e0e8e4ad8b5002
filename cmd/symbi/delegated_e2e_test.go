package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/journal"
	"symbi/internal/runs"
)

// TestE2EDelegatedRun runs a delegated agent through the real binary: the fake ACP agent,
// registered with --executors, reads a file the example policy allows, is refused a
// command, and answers; the answer passes the respond gate and the journal verifies.
// invoke_agent refuses the delegated agent.
func TestE2EDelegatedRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"fake\" }\nagent coder { capabilities = [\"code\"] }\n")
	tools, err := os.ReadFile("../../policies/tools.cedar")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "policies", "tools.cedar"), string(tools))
	writeFile(t, filepath.Join(dir, "src", "a.go"), "package a\n")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	writeFile(t, execFile, `{"executors":{"fake":{"command":["`+bin+`"]}}}`)
	if err := os.Chmod(execFile, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "script.json")
	writeFile(t, script, `{"forbid_terminal": true, "steps": [
		{"thought": "Reading the file."},
		{"read": "$CWD/src/a.go", "expect_content": "package a\n"},
		{"permission": {"tool_call_id": "t1", "kind": "execute", "title": "go test ./...", "locations": ["$CWD"]}, "expect": "reject"},
		{"message": "src/a.go declares package a."},
		{"stop_reason": "end_turn"}]}`)

	env := append(modelEnv(nil), "FAKE_ACP_SCRIPT="+script)
	cmd := exec.Command(symbiBin, "mcp", "--project", dir, "--executors", execFile)
	cmd.Env = env
	s := connectSymbi(t, cmd, nil)

	res := s.call(t, "invoke_agent", map[string]any{"agent": "coder", "prompt": "review"})
	if !res.IsError || !strings.Contains(text(res), "refused_definition") || !strings.Contains(text(res), "start_run") {
		t.Fatalf("invoke_agent of a delegated agent: %s", text(res))
	}
	res = s.call(t, "start_run", map[string]any{"agent": "coder", "prompt": "Review src/a.go"})
	var st struct {
		RunID string `json:"run_id"`
		Audit struct {
			PublicKey string `json:"public_key"`
			Path      string `json:"path"`
		} `json:"audit"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || json.Unmarshal(raw, &st) != nil || st.RunID == "" {
		t.Fatalf("start_run: %s", text(res))
	}
	var types []string
	for cursor, done := int64(0), false; !done; {
		res := s.call(t, "run_events", map[string]any{"run_id": st.RunID, "after": cursor, "wait_ms": 30000})
		var page runs.Events
		raw, _ := json.Marshal(res.StructuredContent)
		if res.IsError || json.Unmarshal(raw, &page) != nil {
			t.Fatalf("run_events: %s", text(res))
		}
		for _, ev := range page.Events {
			types = append(types, ev.Type)
		}
		cursor, done = page.NextCursor, page.Done
	}
	got := strings.Join(types, ",")
	for _, want := range []string{"session_started", "permission_decided,fs_read", "permission_decided", "session_finished,policy_evaluated,terminated"} {
		if !strings.Contains(got, want) {
			t.Fatalf("events %s lack %s", got, want)
		}
	}
	res = s.call(t, "run_status", map[string]any{"run_id": st.RunID})
	var status runs.Status
	raw, _ = json.Marshal(res.StructuredContent)
	if res.IsError || json.Unmarshal(raw, &status) != nil || status.Status != runs.StatusCompleted || status.Text == nil || *status.Text != "src/a.go declares package a." {
		t.Fatalf("run_status: %s", text(res))
	}
	if rep := journal.Verify(st.Audit.Path, pubKey(t, st.Audit.PublicKey), journal.VerifyOptions{RunID: st.RunID}); rep.ExitCode() != 0 {
		t.Fatalf("journal: %+v", rep)
	}
	// The denied command: reject-once answered, deciding policy named.
	b, _ := os.ReadFile(st.Audit.Path)
	if !strings.Contains(string(b), `"decision":"deny","policy_ids":["tools-no-execute"]`) || !strings.Contains(string(b), `"kind":"read"`) {
		t.Fatalf("journal lacks the decisions:\n%s", b)
	}
}
