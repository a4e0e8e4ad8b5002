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
	// The agent's own reports and symbi's decisions run concurrently, so only the order
	// the journal's state machine requires is asserted: a decision before the read, and
	// the session, gate and end last.
	got := strings.Join(types, ",")
	if !strings.HasPrefix(got, "started,session_started,") || !strings.HasSuffix(got, ",session_finished,policy_evaluated,terminated") ||
		strings.Count(got, "permission_decided") != 2 || strings.Index(got, "permission_decided") > strings.Index(got, "fs_read") {
		t.Fatalf("events %s", got)
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

// TestE2EDelegatedShutdown: closing stdin while a delegated agent hangs, ignoring
// session/cancel and SIGTERM, with a background child: the server kills the agent's whole
// process group, finishes the run's journal (terminated, cancelled) and exits 0.
func TestE2EDelegatedShutdown(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"fake\" }\nagent coder {}\n")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	writeFile(t, execFile, `{"executors":{"fake":{"command":["`+bin+`"]}}}`)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	script := filepath.Join(t.TempDir(), "script.json")
	writeFile(t, script, `{"ignore_sigterm": true, "steps": [
		{"spawn_background": ["sleep", "1000"], "pid_file": "`+pidFile+`"},
		{"tool_call": {"id": "t1", "kind": "think", "title": "working"}},
		{"hang": true, "ignore_cancel": true}]}`)
	s := startSymbiPatient(t, dir, append(modelEnv(nil), "FAKE_ACP_SCRIPT="+script), "--executors", execFile)
	res := s.call(t, "start_run", map[string]any{"agent": "coder", "prompt": "work"})
	var st struct {
		RunID string                `json:"run_id"`
		Audit struct{ Path string } `json:"audit"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || json.Unmarshal(raw, &st) != nil {
		t.Fatalf("start_run: %s", text(res))
	}
	// Wait until the agent is working (its tool call, after the child was spawned, is an
	// event), then leave.
	for cursor := int64(0); ; {
		res := s.call(t, "run_events", map[string]any{"run_id": st.RunID, "after": cursor, "wait_ms": 30000})
		var page runs.Events
		raw, _ := json.Marshal(res.StructuredContent)
		if res.IsError || json.Unmarshal(raw, &page) != nil || page.Done {
			t.Fatalf("run_events: %s", text(res))
		}
		if strings.Contains(text(res), `"type":"tool_call"`) {
			break
		}
		cursor = page.NextCursor
	}
	s.session.Close() // closes stdin, and waits for the process to exit by itself
	if st := s.cmd.ProcessState; st == nil || !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("symbi mcp ended with %v, want exit 0", st)
	}
	recs := records(t, st.Audit.Path)
	last := recs[len(recs)-1]
	if last["type"] != "terminated" || last["data"].(map[string]any)["reason"] != "cancelled" {
		t.Fatalf("last record %v", last)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	if _, err := os.Stat("/proc/" + pid); err == nil {
		if stat, _ := os.ReadFile("/proc/" + pid + "/stat"); !strings.Contains(string(stat), ") Z ") {
			t.Fatalf("the agent's background child %s survived", pid)
		}
	}
}
