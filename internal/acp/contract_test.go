package acp

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"symbi/internal/journal"
)

// TestContractToolCallRawOutputJournaled: the delegation contract, Journal: "`tool_call` /
// `tool_call_update` (no content blocks; raw output digests and a bounded excerpt)". An
// agent may announce a tool call already run — status completed, its raw output in the
// tool_call itself (ACP's ToolCall carries rawOutput as a ToolCallUpdate does). The
// journal must keep that output's digest (and, in full mode, an excerpt): otherwise what
// the tool returned is never in the signed journal at all.
func TestContractToolCallRawOutputJournaled(t *testing.T) {
	const output = "root:x:0:0:root:/root:/bin/bash"
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "Read passwd", "status": "completed",
			"locations": []string{"$CWD/a.txt"}, "raw_output": output}},
		map[string]any{"message": "done"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	tcs := ofType(e.entries(), journal.TypeToolCall)
	if len(tcs) != 1 {
		t.Fatalf("%d tool_call records, want 1", len(tcs))
	}
	tc := data[journal.ToolCall](t, tcs[0])
	// The raw output as json.Marshal gives it (what tool_call_update digests).
	if tc.RawOutputSHA256 != sha(`"`+output+`"`) || tc.RawOutputBytes != int64(len(output)+2) || tc.Excerpt != output {
		t.Fatalf("tool_call %+v: want the raw output's digest, length and excerpt", tc)
	}
	e.finishAndVerify(res)
}

// TestContractTextFlushedWhileFlowing: the delegation contract, Journal: agent_message "streamed
// chunks coalesced, at least one record per second while text flows". The agent sends a
// message chunk and then waits (its turn still open) until the test sees that text in
// the journal; without the periodic flush it would wait for ever (the guard fails it).
func TestContractTextFlushedWhileFlowing(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"message": "first part "},
		map[string]any{"wait_file": "$CWD/go"},
		map[string]any{"message": "second part"},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startRun(ctx, e.cfg)
	deadline := time.Now().Add(guard)
	for {
		es, _, _ := journal.ReadEntries(e.w.Path())
		found := false
		for _, x := range es {
			if x.Type == journal.TypeAgentMessage && bytes.Contains(x.Data, []byte("first part")) {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's message text was not journaled while the turn went on (records %v)", types(es))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := wait(t)
	mustOutcome(t, res, OutcomeCompleted)
	if res.Text != "first part second part" {
		t.Fatalf("answer %q", res.Text)
	}
	e.finishAndVerify(res)
}

// TestContractAgentProcessPlacement: the delegation contract, Workspace: "The agent process runs
// there, in its own process group, with the server's environment", and The ACP client:
// "session/new (cwd = workspace)".
func TestContractAgentProcessPlacement(t *testing.T) {
	const probe = "SYMBI_CONTRACT_PROBE"
	t.Setenv(probe, "server-env-value")
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"wait_file": "$CWD/go"},
		map[string]any{"message": "ok"},
	}})
	e.cfg.Env = nil // the server's environment, as the delegated executor passes it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startRun(ctx, e.cfg)
	e.waitEvent("prompt")
	st := e.eventsNamed("start")[0]
	pid, pgid := int(st["pid"].(float64)), int(st["pgid"].(float64))
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := wait(t)
	mustOutcome(t, res, OutcomeCompleted)
	if st["cwd"] != e.dir {
		t.Errorf("the agent runs in %v, want the workspace %s", st["cwd"], e.dir)
	}
	if pgid != pid || pgid == syscall.Getpgrp() {
		t.Errorf("the agent (pid %d) is in process group %d (the server's is %d), want its own", pid, pgid, syscall.Getpgrp())
	}
	if !bytes.Contains(env, []byte(probe+"=server-env-value\x00")) {
		t.Errorf("the agent's environment lacks the server's %s", probe)
	}
	if sn := e.eventsNamed("session_new"); len(sn) != 1 || sn[0]["cwd"] != e.dir {
		t.Errorf("session/new %v, want cwd %s", sn, e.dir)
	}
	e.finishAndVerify(res)
}

// TestContractFSRecordsAndSessionStarted: the delegation contract, Journal: "`fs_read` / `fs_write`
// (path, bytes, digest)" and "`session_started` (agent session id, executor, agent
// name/version from initialize)". The read's record carries the file's size and SHA-256,
// the write's the content's, each naming the allow it follows.
func TestContractFSRecordsAndSessionStarted(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"read": "$CWD/a.txt", "expect_content": "hello\n"},
		map[string]any{"write": map[string]any{"path": "$CWD/b.txt", "content": "xyz"}, "expect_error": false},
		map[string]any{"message": "done"},
	}})
	if err := os.WriteFile(filepath.Join(e.dir, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	es := e.entries()
	st := data[journal.SessionStarted](t, es[0])
	if st.Executor != "fake" || st.AgentName != "fake-acp-agent" || st.AgentVersion == "" || st.SessionID != "fake-session-1" || len(st.Command) == 0 || st.Command[0] != fakeBin {
		t.Errorf("session_started %+v", st)
	}
	reads, writes := ofType(es, journal.TypeFSRead), ofType(es, journal.TypeFSWrite)
	if len(reads) != 1 || len(writes) != 1 {
		t.Fatalf("%d fs_read, %d fs_write", len(reads), len(writes))
	}
	r, w := data[journal.FSAccess](t, reads[0]), data[journal.FSAccess](t, writes[0])
	if r.Path != "a.txt" || r.Bytes != 6 || r.SHA256 != sha("hello\n") || r.RequestID != "fs-1" {
		t.Errorf("fs_read %+v", r)
	}
	if w.Path != "b.txt" || w.Bytes != 3 || w.SHA256 != sha("xyz") || w.RequestID != "fs-2" {
		t.Errorf("fs_write %+v", w)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "b.txt")); err != nil || string(b) != "xyz" {
		t.Errorf("b.txt %q %v", b, err)
	}
	e.finishAndVerify(res)
}

// TestContractPinnedModeLeftByConfigOption: the delegation contract pins the permission mode;
// docs/executors.md: "an agent that reports another current mode ends the run". ACP's
// session config options carry the mode too (a select of category "mode"): an agent that
// reports, by config_option_update, its mode option set to another value than the pin
// has left the pinned mode as surely as by current_mode_update.
func TestContractPinnedModeLeftByConfigOption(t *testing.T) {
	e := newEnv(t, map[string]any{"modes": []string{"default", "bypassPermissions"}, "require_mode": "default",
		"steps": []any{
			map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "fake-session-1",
				"update": map[string]any{"sessionUpdate": "config_option_update", "configOptions": []any{map[string]any{
					"type": "select", "id": "mode", "name": "Mode", "category": "mode", "currentValue": "bypassPermissions",
					"options": []any{map[string]any{"value": "default", "name": "Default"}, map[string]any{"value": "bypassPermissions", "name": "Bypass"}},
				}}}}}},
			map[string]any{"message": "now unrestricted"},
		}})
	e.cfg.Executor.PinMode = "default"
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if res.Err == nil || !strings.Contains(res.Err.Error(), `left the pinned mode "default"`) || res.Text != "" {
		t.Fatalf("the agent set its mode option to bypassPermissions, leaving the pinned mode: %v, answer %q", res.Err, res.Text)
	}
}
