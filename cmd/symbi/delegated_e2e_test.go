package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/proctest"
	"symbi/internal/runs"
	"symbi/internal/syncbuf"
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

// TestE2EDelegatedShutdown: a delegated agent hangs, ignoring session/cancel and SIGTERM,
// with a background child, when the server is told to stop. Each way ends with the server
// killing the agent's whole process group, finishing the run's journal (terminated,
// cancelled) and exiting 0:
//   - stdin closed: the agent is given its grace periods, then killed;
//   - stdin closed, then SIGTERM (what MCP clients do when their server is slow to exit):
//     the signal hurries the shutdown, and the agent is killed at once;
//   - SIGTERM, then SIGINT: the second signal hurries it;
//   - the same over HTTP (symbi mcp --http).
//
// How the agent's session ended (session_finished's error) tells them apart.
func TestE2EDelegatedShutdown(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	const graceNote = "within the grace period nor exit on SIGTERM: its process group was killed"
	const hurriedNote = "the server was told again to stop"
	for _, c := range []struct {
		name  string
		first syscall.Signal // begins the shutdown; 0: closing stdin does
		then  syscall.Signal // sent once the server says it is shutting down; 0: none
		note  string
	}{
		{"stdin closed", 0, 0, graceNote},
		{"stdin closed then SIGTERM", 0, syscall.SIGTERM, hurriedNote},
		{"SIGTERM then SIGINT", syscall.SIGTERM, syscall.SIGINT, hurriedNote},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHangingAgent(t, bin)
			s := startSymbiPatient(t, h.dir, h.env, h.flags...)
			run := h.start(t, s)
			// Closing the session closes stdin and waits for the process to exit by itself.
			closed := make(chan struct{})
			closeSession := func() { go func() { s.session.Close(); close(closed) }() }
			if c.first == 0 {
				closeSession()
			} else if err := s.cmd.Process.Signal(c.first); err != nil {
				t.Fatal(err)
			}
			if c.then != 0 {
				waitLog(t, s.stderr, "shutting down")
				if err := s.cmd.Process.Signal(c.then); err != nil {
					t.Fatal(err)
				}
			}
			if c.first != 0 {
				closeSession()
			}
			<-closed
			if st := s.cmd.ProcessState; st == nil || !st.Exited() || st.ExitCode() != 0 {
				t.Fatalf("symbi mcp ended with %v, want exit 0", st)
			}
			h.checkEnd(t, run, c.note)
		})
	}
	t.Run("HTTP SIGTERM twice", func(t *testing.T) {
		h := newHangingAgent(t, bin)
		s := httpStart(t, h.dir, h.env, h.flags...)
		run := h.start(t, httpConnect(t, s, ""))
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitLog(t, s.stderr, "shutting down")
		if st := httpStop(t, s); !st.Exited() || st.ExitCode() != 0 { // SIGTERM again
			t.Fatalf("symbi mcp --http ended with %v, want exit 0", st)
		}
		h.checkEnd(t, run, hurriedNote)
	})
}

// hangingAgent is a project whose delegated agent coder (the fake agent) spawns a
// background child, reports a tool call, then hangs ignoring session/cancel and SIGTERM;
// env and flags are the server's.
type hangingAgent struct {
	dir, pidFile string
	env, flags   []string
}

func newHangingAgent(t *testing.T, bin string) *hangingAgent {
	t.Helper()
	h := &hangingAgent{dir: newE2EProject(t), pidFile: filepath.Join(t.TempDir(), "child.pid")}
	writeFile(t, filepath.Join(h.dir, "agents", "coder.symbi"), "metadata { executor = \"fake\" }\nagent coder {}\n")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	writeFile(t, execFile, `{"executors":{"fake":{"command":["`+bin+`"]}}}`)
	script := filepath.Join(t.TempDir(), "script.json")
	writeFile(t, script, `{"ignore_sigterm": true, "steps": [
		{"spawn_background": ["sleep", "1000"], "pid_file": "`+h.pidFile+`"},
		{"tool_call": {"id": "t1", "kind": "think", "title": "working"}},
		{"hang": true, "ignore_cancel": true}]}`)
	h.env = append(modelEnv(nil), "FAKE_ACP_SCRIPT="+script)
	h.flags = []string{"--executors", execFile}
	return h
}

// hungRun is the run of a hangingAgent.
type hungRun struct {
	RunID string                `json:"run_id"`
	Audit struct{ Path string } `json:"audit"`
}

// start starts coder's run on s and waits until the agent is working (its tool call,
// after the child was spawned, is an event).
func (h *hangingAgent) start(t *testing.T, s *server) hungRun {
	t.Helper()
	res := s.call(t, "start_run", map[string]any{"agent": "coder", "prompt": "work"})
	var run hungRun
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || json.Unmarshal(raw, &run) != nil {
		t.Fatalf("start_run: %s", text(res))
	}
	for cursor := int64(0); ; {
		res := s.call(t, "run_events", map[string]any{"run_id": run.RunID, "after": cursor, "wait_ms": 30000})
		var page runs.Events
		raw, _ := json.Marshal(res.StructuredContent)
		if res.IsError || json.Unmarshal(raw, &page) != nil || page.Done {
			t.Fatalf("run_events: %s", text(res))
		}
		if strings.Contains(text(res), `"type":"tool_call"`) {
			return run
		}
		cursor = page.NextCursor
	}
}

// checkEnd checks, once the server has exited, that run's journal ends terminated
// (cancelled) with session_finished's error saying note, and that the agent's background
// child did not survive.
func (h *hangingAgent) checkEnd(t *testing.T, run hungRun, note string) {
	t.Helper()
	recs := records(t, run.Audit.Path)
	last := recs[len(recs)-1]
	if last["type"] != "terminated" || last["data"].(map[string]any)["reason"] != "cancelled" {
		t.Fatalf("last record %v", last)
	}
	var fin map[string]any
	for _, r := range recs {
		if r["type"] == "session_finished" {
			fin, _ = r["data"].(map[string]any)
		}
	}
	if e, _ := fin["error"].(string); !strings.Contains(e, note) {
		t.Fatalf("session_finished %v, want its error to say %q", fin, note)
	}
	b, err := os.ReadFile(h.pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the child's pid file holds %q", b)
	}
	if proctest.Alive(pid) {
		t.Fatalf("the agent's background child %d survived", pid)
	}
}

// waitLog waits until the server's log holds want.
func waitLog(t *testing.T, log *syncbuf.Buffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); !strings.Contains(log.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("the server never logged %q:\n%s", want, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------
// The spec's delegated test list at the binary level: the real symbi binary over real
// stdio with the go-sdk client, the fake ACP agent as a real subprocess of it.

// delEnv is one symbi server with delegated agents: a project with the example tools
// policy, a workspace granted with --workspace-root, and a directory beside the
// workspace (outside it) holding the files the escapes aim at.
type delEnv struct {
	t       *testing.T
	fake    string // the fake agent binary
	dir     string // the project
	ws      string // the workspace, links resolved
	outside string // beside the workspace, outside it
	aux     string // scripts, records, pid files
	s       *server
}

// delAgent is a delegated agent and its executor, both named name, running the fake
// agent with script.
type delAgent struct {
	name    string
	script  map[string]any
	pinMode string
	body    string // the definition's body, default "{}"
}

func delNewEnv(t *testing.T) *delEnv {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", fake, "../fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &delEnv{t: t, fake: fake, dir: newE2EProject(t), ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside"), aux: t.TempDir()}
	for _, d := range []string{e.ws, e.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tools, err := os.ReadFile("../../policies/tools.cedar")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(e.dir, "policies", "tools.cedar"), string(tools))
	return e
}

// record is the file the fake agent of the named agent records its events in.
func (e *delEnv) record(name string) string { return filepath.Join(e.aux, name+".record.jsonl") }

// serve registers agents (each with its own executor and script) and starts symbi.
func (e *delEnv) serve(agents ...delAgent) {
	t := e.t
	t.Helper()
	execs := map[string]any{}
	for _, a := range agents {
		a.script["record"] = e.record(a.name)
		b, err := json.Marshal(a.script)
		if err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(e.aux, a.name+".script.json")
		writeFile(t, script, string(b))
		ex := map[string]any{"command": []string{e.fake, "--script", script}}
		if a.pinMode != "" {
			ex["pin_mode"] = a.pinMode
		}
		execs[a.name] = ex
		body := a.body
		if body == "" {
			body = "{}"
		}
		writeFile(t, filepath.Join(e.dir, "agents", a.name+".symbi"), "metadata { executor = \""+a.name+"\" }\nagent "+a.name+" "+body+"\n")
	}
	b, err := json.Marshal(map[string]any{"executors": execs})
	if err != nil {
		t.Fatal(err)
	}
	execFile := filepath.Join(e.aux, "executors.json")
	writeFile(t, execFile, string(b))
	if err := os.Chmod(execFile, 0o644); err != nil {
		t.Fatal(err)
	}
	e.s = startSymbiPatient(t, e.dir, modelEnv(nil), "--executors", execFile, "--workspace-root", e.ws)
}

// start starts a run of the named agent in the workspace.
func (e *delEnv) start(t *testing.T, name, prompt string) startRunOut {
	t.Helper()
	var out startRunOut
	e.s.callInto(t, "start_run", map[string]any{"agent": name, "prompt": prompt, "workspace": e.ws}, &out)
	if out.RunID == "" || out.Status != runs.StatusRunning || out.Audit == nil || out.Audit.Path == "" {
		t.Fatalf("start_run %s: %+v", name, out)
	}
	return out
}

// finish waits (by run_events' long poll, every line verified) until the run has ended,
// checks that its journal verifies complete, and returns its status and records.
func (e *delEnv) finish(t *testing.T, run startRunOut) (runs.Status, []map[string]any) {
	t.Helper()
	pub := pubKey(t, run.Audit.PublicKey)
	e.s.readRunEvents(t, run.RunID, 1000, pub)
	st := e.s.runStatus(t, run.RunID)
	if rep := journal.Verify(run.Audit.Path, pub, journal.VerifyOptions{RunID: run.RunID}); rep.ExitCode() != 0 {
		t.Fatalf("run %s: journal does not verify complete: %+v", run.RunID, rep)
	}
	return st, records(t, run.Audit.Path)
}

// delData returns the data of the records of type typ.
func delData(recs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["type"] == typ {
			d, _ := r["data"].(map[string]any)
			out = append(out, d)
		}
	}
	return out
}

// delEvents returns the events the fake agent recorded in file.
func delEvents(t *testing.T, file string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("record line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

func delNamed(evs []map[string]any, name string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["event"] == name {
			out = append(out, ev)
		}
	}
	return out
}

// delLive lists the live processes of process group pgid, and those of pids, from
// /proc: a zombie (dead, not yet reaped) is not live.
func delLive(pgid int, pids ...int) []string {
	var live []string
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// After the command: state ppid pgrp …
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid || slices.Contains(pids, pid) {
			live = append(live, strings.TrimSpace(s))
		}
	}
	return live
}

// delCancel cancels runID with cancel_run, which waits for the run's end up to 10 s: on a
// slow machine, or with an agent that takes its grace periods to be killed, the run may
// still be running then; it must not be reported already finished.
func delCancel(t *testing.T, s *server, runID string) {
	t.Helper()
	var out struct {
		runs.Status
		AlreadyFinished bool `json:"already_finished"`
	}
	s.callInto(t, "cancel_run", map[string]any{"run_id": runID}, &out)
	if out.AlreadyFinished || (out.Status.Status != runs.StatusCancelled && out.Status.Status != runs.StatusRunning) {
		t.Fatalf("cancel_run: %+v", out)
	}
}

// delGone waits until the agent's process group (from its recorded start event) and the
// given pids have no live process left. The run has ended when this is called: the group
// was SIGKILLed, only the delivery may still be under way — the bound is a guard, not an
// expectation of speed.
func delGone(t *testing.T, recordFile string, pids ...int) {
	t.Helper()
	starts := delNamed(delEvents(t, recordFile), "start")
	if len(starts) == 0 {
		t.Fatalf("the agent of %s never started", recordFile)
	}
	for _, st := range starts {
		pgid := int(st["pgid"].(float64))
		if pid := int(st["pid"].(float64)); pgid != pid {
			t.Fatalf("the agent %d is not the leader of its own process group (%d)", pid, pgid)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			live := delLive(pgid, pids...)
			if len(live) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run has ended but processes of the agent's group %d survive:\n%s", pgid, strings.Join(live, "\n"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitEvent waits (run_events' long poll) until the run has an event of type typ.
func (e *delEnv) waitEvent(t *testing.T, runID, typ string) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for cursor := int64(0); time.Now().Before(deadline); {
		var page runs.Events
		e.s.callInto(t, "run_events", map[string]any{"run_id": runID, "after": cursor, "wait_ms": 30000}, &page)
		for _, ev := range page.Events {
			if ev.Type == typ {
				return
			}
		}
		if page.Done {
			t.Fatalf("run %s ended without a %s event", runID, typ)
		}
		cursor = page.NextCursor
	}
	t.Fatalf("run %s: no %s event", runID, typ)
}

func delSHA(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestE2EDelegatedFS: file-system requests through the binary. Every escape from the
// workspace is refused — by the use_tool gate when the path leads outside (`..`, an
// absolute path elsewhere, a symbolic link to a file or a directory outside:
// permission_decided deny naming the path in outside, no fs record), by the confined
// reader/writer when it is inside but its file is outside too (a hard link: the gate
// allows the path, the file access is refused, no fs record). The agent hears the error (its script fails the
// run otherwise), the files outside are neither read, changed nor created, and each run
// still completes with a complete journal. A permitted write under src/ is done and
// journaled as fs_write with its digest; a read as fs_read.
func TestE2EDelegatedFS(t *testing.T) {
	t.Parallel() // its own project, workspace, fake agent binary and server
	e := delNewEnv(t)
	const secret = "outside secret\n"
	writeFile(t, filepath.Join(e.outside, "outside.txt"), secret)
	writeFile(t, filepath.Join(e.outside, "target.txt"), secret)
	writeFile(t, filepath.Join(e.outside, "hard.txt"), secret)
	writeFile(t, filepath.Join(e.ws, "src", "a.go"), "package a\n")
	for _, err := range []error{
		os.Symlink(filepath.Join(e.outside, "outside.txt"), filepath.Join(e.ws, "link.txt")),
		os.Symlink(filepath.Join(e.outside, "target.txt"), filepath.Join(e.ws, "src", "link.txt")),
		os.Symlink(e.outside, filepath.Join(e.ws, "src", "linkdir")),
		os.Link(filepath.Join(e.outside, "hard.txt"), filepath.Join(e.ws, "src", "hard.txt")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	outsideAbs := filepath.Join(e.outside, "outside.txt")
	const newContent = "package b\n\n// written by the agent\n"

	type fsCase struct {
		name     string
		step     map[string]any
		decision string // the permission_decided decision
		outside  bool   // the decision names the path as outside
		policy   string // a deciding policy id expected, "" none
		fsType   string // the fs record expected after the allow, "" none
		fsPath   string
		agentErr string // a text the error the agent heard contains
	}
	fail := true
	cases := []fsCase{
		{name: "read_dotdot", step: map[string]any{"read": "$CWD/../outside/outside.txt", "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "read_relative_dotdot", step: map[string]any{"read": "../outside/outside.txt", "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "read_absolute", step: map[string]any{"read": outsideAbs, "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "read_symlink", step: map[string]any{"read": "$CWD/link.txt", "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "read_symlinked_dir", step: map[string]any{"read": "$CWD/src/linkdir/outside.txt", "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "read_hardlink", step: map[string]any{"read": "$CWD/src/hard.txt", "expect_error": fail},
			decision: "deny", agentErr: "single link"}, // refused by its rule before any policy
		{name: "write_dotdot", step: map[string]any{"write": map[string]any{"path": "$CWD/../outside/created.txt", "content": "x"}, "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "write_absolute", step: map[string]any{"write": map[string]any{"path": filepath.Join(e.outside, "created-abs.txt"), "content": "x"}, "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "write_symlinked_dir", step: map[string]any{"write": map[string]any{"path": "$CWD/src/linkdir/evil.txt", "content": "x"}, "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "write_symlink", step: map[string]any{"write": map[string]any{"path": "$CWD/src/link.txt", "content": "x"}, "expect_error": fail},
			decision: "deny", outside: true, agentErr: "outside the workspace"},
		{name: "write_hardlink", step: map[string]any{"write": map[string]any{"path": "$CWD/src/hard.txt", "content": "x"}, "expect_error": fail},
			decision: "deny", agentErr: "single link"},
		{name: "write_outside_src", step: map[string]any{"write": map[string]any{"path": "$CWD/docs.md", "content": "x"}, "expect_error": fail},
			decision: "deny", agentErr: "denied by policy"},
		{name: "write_src", step: map[string]any{"write": map[string]any{"path": "$CWD/src/new.go", "content": newContent}, "expect_error": false},
			decision: "allow", policy: "tools-edit-src", fsType: journal.TypeFSWrite, fsPath: "src/new.go"},
		{name: "read_src", step: map[string]any{"read": "$CWD/src/a.go", "expect_content": "package a\n", "expect_error": false},
			decision: "allow", policy: "tools-read-search", fsType: journal.TypeFSRead, fsPath: "src/a.go"},
	}
	var agents []delAgent
	for _, c := range cases {
		agents = append(agents, delAgent{name: c.name, script: map[string]any{"require_fs": true, "forbid_terminal": true,
			"steps": []any{c.step, map[string]any{"message": "done " + c.name}}}})
	}
	e.serve(agents...)
	started := map[string]startRunOut{}
	for _, c := range cases {
		started[c.name] = e.start(t, c.name, "do "+c.name)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, recs := e.finish(t, started[c.name])
			if st.Status != runs.StatusCompleted || st.Text == nil || *st.Text != "done "+c.name {
				t.Fatalf("run_status %+v (reason %q): the run did not complete; the agent's expectation failed?", st, st.Reason)
			}
			pds := delData(recs, journal.TypePermissionDecided)
			if len(pds) != 1 {
				t.Fatalf("permission_decided records %v", pds)
			}
			pd := pds[0]
			// The path as the agent sent it: in outside when it leads outside (and not in
			// paths), else in paths, relative to the workspace.
			sent, _ := c.step["read"].(string)
			if w, ok := c.step["write"].(map[string]any); ok {
				sent = w["path"].(string)
			}
			sent = strings.ReplaceAll(sent, "$CWD", e.ws)
			outside, _ := pd["outside"].([]any)
			paths, _ := pd["paths"].([]any)
			if pd["decision"] != c.decision || pd["kind"] != map[bool]string{true: "edit", false: "read"}[c.step["write"] != nil] {
				t.Fatalf("permission_decided %v: want decision %s", pd, c.decision)
			}
			if c.outside && (len(outside) != 1 || outside[0] != sent || len(paths) != 0) {
				t.Fatalf("permission_decided %v: want %q in outside, nothing in paths", pd, sent)
			}
			if rel, _ := filepath.Rel(e.ws, sent); !c.outside && (len(outside) != 0 || len(paths) != 1 || paths[0] != rel) {
				t.Fatalf("permission_decided %v: want paths [%q]", pd, rel)
			}
			if ids, _ := pd["policy_ids"].([]any); c.policy != "" && !slices.Contains(ids, any(c.policy)) {
				t.Fatalf("permission_decided %v: want deciding policy %s", pd, c.policy)
			}
			reads, writes := delData(recs, journal.TypeFSRead), delData(recs, journal.TypeFSWrite)
			switch c.fsType {
			case "":
				if len(reads)+len(writes) != 0 {
					t.Fatalf("a refused access was journaled as done: %v %v", reads, writes)
				}
			case journal.TypeFSWrite:
				want := newContent
				if len(writes) != 1 || len(reads) != 0 || writes[0]["request_id"] != pd["request_id"] || writes[0]["path"] != c.fsPath ||
					writes[0]["bytes"] != float64(len(want)) || writes[0]["sha256"] != delSHA(want) {
					t.Fatalf("fs_write %v (decision %v)", writes, pd)
				}
				if b, err := os.ReadFile(filepath.Join(e.ws, c.fsPath)); err != nil || string(b) != want {
					t.Fatalf("the written file: %q, %v", b, err)
				}
			case journal.TypeFSRead:
				want := "package a\n"
				if len(reads) != 1 || len(writes) != 0 || reads[0]["request_id"] != pd["request_id"] || reads[0]["path"] != c.fsPath ||
					reads[0]["bytes"] != float64(len(want)) || reads[0]["sha256"] != delSHA(want) {
					t.Fatalf("fs_read %v (decision %v)", reads, pd)
				}
			}
			evs := delEvents(t, e.record(c.name))
			ops := append(delNamed(evs, "read"), delNamed(evs, "write")...)
			if len(ops) != 1 {
				t.Fatalf("fs events %v", ops)
			}
			if ok := ops[0]["ok"] == true; ok != (c.fsType != "") {
				t.Fatalf("the agent's fs request: %v", ops[0])
			}
			if msg, _ := ops[0]["error"].(string); !strings.Contains(msg, c.agentErr) {
				t.Fatalf("the agent heard %q, want it to say %q", msg, c.agentErr)
			}
			t.Logf("the agent heard: %v", ops[0]["error"])
			delGone(t, e.record(c.name))
		})
	}
	// Nothing outside was changed or created.
	for _, name := range []string{"outside.txt", "target.txt", "hard.txt"} {
		if b, err := os.ReadFile(filepath.Join(e.outside, name)); err != nil || string(b) != secret {
			t.Errorf("outside/%s changed: %q, %v", name, b, err)
		}
	}
	ents, err := os.ReadDir(e.outside)
	if err != nil || len(ents) != 3 {
		t.Errorf("the directory outside holds %v (%v), want only its three files", ents, err)
	}
	for _, l := range []string{filepath.Join(e.ws, "link.txt"), filepath.Join(e.ws, "src", "link.txt"), filepath.Join(e.ws, "src", "linkdir")} {
		if fi, err := os.Lstat(l); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symbolic link: %v, %v", l, fi, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(e.ws, "src", "hard.txt")); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("src/hard.txt is no longer the hard link: %v", err)
	}
}

// TestE2EDelegatedFailures: an agent that crashes, floods updates or sends malformed ACP
// ends its run with a coded error — inference_failed, its reason in run_status and in
// session_finished — and a complete journal; its process group is gone; and the server
// goes on serving: a healthy run after each completes. A background child left by an
// agent that ends normally is killed with its group.
func TestE2EDelegatedFailures(t *testing.T) {
	t.Parallel() // its own project, workspace, fake agent binary and server
	e := delNewEnv(t)
	msg := func(s string) map[string]any { return map[string]any{"message": s} }
	raw := func(v any) map[string]any { return map[string]any{"raw": v} }
	type failCase struct {
		name    string
		steps   []any
		status  string   // "": not asserted (see below)
		reasons []string // the run's reason contains one of these
		child   bool     // the first step spawns a background child
	}
	cases := []failCase{
		{name: "crash", steps: []any{msg("hi"), map[string]any{"tool_call": map[string]any{"id": "t1", "kind": "think", "title": "thinking"}}, map[string]any{"crash": 7}},
			status: runs.StatusInferenceFailed, reasons: []string{"the agent exited: exit status 7"}},
		// 400 kB of message chunks: past the answer's bound, unless the updates
		// overflow first.
		{name: "flood_text", steps: []any{map[string]any{"flood": 4000, "text": strings.Repeat("x", 100)}},
			status: runs.StatusInferenceFailed, reasons: []string{"the agent's answer exceeds", "the agent floods updates"}},
		// Empty chunks, as fast as the agent can write them: whether they come faster than
		// they are journaled is the machine's to say, so the status is not asserted — only
		// a complete journal, no process left and the server still serving (internal/acp's
		// TestUpdateFlood holds the journal so that they must overflow).
		{name: "flood_updates", steps: []any{map[string]any{"flood": 300000, "text": ""}}},
		{name: "garbage", steps: []any{msg("hi"), map[string]any{"garbage": "this is not json"}, map[string]any{"sleep": "1h"}},
			status: runs.StatusInferenceFailed, reasons: []string{"malformed ACP: the agent wrote a line that is not JSON"}},
		{name: "not_jsonrpc", steps: []any{msg("hi"), raw(map[string]any{"hello": "world"}), map[string]any{"sleep": "1h"}},
			status: runs.StatusInferenceFailed, reasons: []string{"malformed ACP: the agent wrote a line that is not a JSON-RPC message"}},
		{name: "batch", steps: []any{msg("hi"), raw([]any{map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{}}}), map[string]any{"sleep": "1h"}},
			status: runs.StatusInferenceFailed, reasons: []string{"malformed ACP: the agent wrote a line that is not a JSON-RPC message"}},
		{name: "rpc_error", steps: []any{msg("hi"), map[string]any{"error": map[string]any{"code": 1, "message": "boom"}}},
			// Its message, the agent's words, goes to the server's log, not into the run's
			// error (docs/runs.md).
			status: runs.StatusInferenceFailed, reasons: []string{`JSON-RPC error 1; its message and data (4 bytes) are in the server's log`}},
		// Well-formed JSON-RPC that symbi passes over: a session/update of a kind the SDK
		// does not know (a newer protocol's: it carries nothing symbi journals or decides
		// on), a response to no request. acp-go-sdk logs and drops both, and the run goes
		// on: its status is not asserted, only that it ends with a complete journal, no
		// process left, and the server still serving. (An update of a known kind that does
		// not decode is malformed: internal/acp's TestUndecodableUpdate.)
		{name: "bad_update", steps: []any{msg("hi"), raw(map[string]any{"jsonrpc": "2.0", "method": "session/update",
			"params": map[string]any{"sessionId": "fake-session-1", "update": map[string]any{"sessionUpdate": "bogus"}}}), msg("after")}},
		{name: "unsolicited_response", steps: []any{msg("hi"), raw(map[string]any{"jsonrpc": "2.0", "id": 9999, "result": map[string]any{}}), msg("after")}},
		{name: "background_child", steps: []any{map[string]any{"spawn_background": []string{"sleep", "1000"}}, msg("spawned")},
			status: runs.StatusCompleted, child: true},
	}
	agents := []delAgent{{name: "healthy", script: map[string]any{"steps": []any{msg("all well")}}}}
	for _, c := range cases {
		if c.child {
			c.steps[0].(map[string]any)["pid_file"] = filepath.Join(e.aux, c.name+".pid")
		}
		agents = append(agents, delAgent{name: c.name, script: map[string]any{"steps": c.steps}})
	}
	e.serve(agents...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, recs := e.finish(t, e.start(t, c.name, "work"))
			t.Logf("status %s, reason %q", st.Status, st.Reason)
			fins := delData(recs, journal.TypeSessionFinished)
			if len(fins) != 1 {
				t.Fatalf("session_finished %v", fins)
			}
			term := delData(recs, journal.TypeTerminated)
			switch c.status {
			case runs.StatusCompleted:
				if st.Status != c.status || !st.Released || fins[0]["outcome"] != "completed" || term[0]["reason"] != "completed" {
					t.Fatalf("run_status %+v, session_finished %v, terminated %v", st, fins[0], term[0])
				}
			case runs.StatusInferenceFailed:
				if st.Status != c.status || st.Released || fins[0]["outcome"] != "error" || term[0]["reason"] != "inference_failed" {
					t.Fatalf("run_status %+v, session_finished %v, terminated %v", st, fins[0], term[0])
				}
				if !slices.ContainsFunc(c.reasons, func(r string) bool { return strings.Contains(st.Reason, r) }) {
					t.Fatalf("run_status reason %q, want one of %q", st.Reason, c.reasons)
				}
				if term[0]["error"] != st.Reason {
					t.Fatalf("terminated %v: run_status reason %q", term[0], st.Reason)
				}
				if c.name == "rpc_error" {
					waitLog(t, e.s.stderr, `what="JSON-RPC error 1" words=boom`)
				}
				if fe, _ := fins[0]["error"].(string); fe == "" {
					t.Fatalf("session_finished %v without its error", fins[0])
				}
			}
			var pids []int
			if c.child {
				pids = append(pids, proctest.PID(t, filepath.Join(e.aux, c.name+".pid")))
			}
			delGone(t, e.record(c.name), pids...)
			h, _ := e.finish(t, e.start(t, "healthy", "are you there"))
			if h.Status != runs.StatusCompleted || h.Text == nil || *h.Text != "all well" {
				t.Fatalf("the next run: %+v", h)
			}
		})
	}
	delGone(t, e.record("healthy"))
}

// TestE2EDelegatedCancelAndTimeout: cancel_run of an agent that hangs (one that ends its
// turn on session/cancel, one that ignores session/cancel and SIGTERM), each with a
// background child, ends the run cancelled with a complete journal, and nothing of the
// agent's process group is left; an agent that hangs past its definition's deadline ends
// the run timeout.
func TestE2EDelegatedCancelAndTimeout(t *testing.T) {
	t.Parallel() // its own project, workspace, fake agent binary and server
	e := delNewEnv(t)
	spawn := func(name string) map[string]any {
		return map[string]any{"spawn_background": []string{"sleep", "1000"}, "pid_file": filepath.Join(e.aux, name+".pid")}
	}
	working := map[string]any{"tool_call": map[string]any{"id": "t1", "kind": "think", "title": "working"}}
	e.serve(
		delAgent{name: "hang", script: map[string]any{"steps": []any{spawn("hang"), working, map[string]any{"hang": true}}}},
		delAgent{name: "stubborn", script: map[string]any{"ignore_sigterm": true,
			"steps": []any{spawn("stubborn"), working, map[string]any{"hang": true, "ignore_cancel": true}}}},
		delAgent{name: "slow", body: "{\n  with timeout = 5.seconds {}\n}",
			script: map[string]any{"steps": []any{spawn("slow"), working, map[string]any{"hang": true}}}},
	)
	started := map[string]startRunOut{}
	for _, name := range []string{"slow", "hang", "stubborn"} {
		started[name] = e.start(t, name, "work")
	}
	for _, name := range []string{"hang", "stubborn"} {
		t.Run("cancel_"+name, func(t *testing.T) {
			run := started[name]
			e.waitEvent(t, run.RunID, journal.TypeToolCall) // the child is spawned, the agent hangs
			// The stubborn agent takes two grace periods (5 s each) to be killed.
			delCancel(t, e.s, run.RunID)
			st, recs := e.finish(t, run)
			if st.Status != runs.StatusCancelled || st.Released || !strings.Contains(st.Reason, "cancel_run") {
				t.Fatalf("run_status %+v", st)
			}
			fins, term := delData(recs, journal.TypeSessionFinished), delData(recs, journal.TypeTerminated)
			if len(fins) != 1 || fins[0]["outcome"] != "cancelled" || term[0]["reason"] != "cancelled" || term[0]["released"] != false {
				t.Fatalf("session_finished %v, terminated %v", fins, term)
			}
			evs := delEvents(t, e.record(name))
			if len(delNamed(evs, "cancel")) != 1 {
				t.Fatalf("the agent got no session/cancel: %v", evs)
			}
			if name == "stubborn" {
				if fe, _ := fins[0]["error"].(string); !strings.Contains(fe, "nor exit on SIGTERM: its process group was killed") {
					t.Fatalf("session_finished %v", fins[0])
				}
			} else if ends := delNamed(evs, "prompt_end"); len(ends) != 1 || ends[0]["stop_reason"] != "cancelled" || fins[0]["stop_reason"] != "cancelled" {
				t.Fatalf("the turn's end: agent %v, journal %v", ends, fins[0])
			}
			delGone(t, e.record(name), proctest.PID(t, filepath.Join(e.aux, name+".pid")))
		})
	}
	t.Run("timeout", func(t *testing.T) {
		st, recs := e.finish(t, started["slow"])
		if st.Status != runs.StatusTimeout || st.Released || !strings.Contains(st.Reason, "deadline") {
			t.Fatalf("run_status %+v", st)
		}
		fins, term := delData(recs, journal.TypeSessionFinished), delData(recs, journal.TypeTerminated)
		if len(fins) != 1 || fins[0]["outcome"] != "timeout" || term[0]["reason"] != "timeout" {
			t.Fatalf("session_finished %v, terminated %v", fins, term)
		}
		delGone(t, e.record("slow"), proctest.PID(t, filepath.Join(e.aux, "slow.pid")))
	})
}

// TestE2EDelegatedPinMode: an executor's pin_mode is set before the prompt; an agent that
// does not offer it fails the run before anything is sent (no session_started, no
// prompt), inference_failed naming the mode; an agent that leaves the pinned mode by
// itself ends the run with an error.
func TestE2EDelegatedPinMode(t *testing.T) {
	t.Parallel() // its own project, workspace, fake agent binary and server
	e := delNewEnv(t)
	modes := []string{"default", "read-only", "plan"}
	msg := func(s string) map[string]any { return map[string]any{"message": s} }
	e.serve(
		delAgent{name: "pin_missing", pinMode: "bypass", script: map[string]any{"modes": modes, "steps": []any{msg("never")}}},
		delAgent{name: "pin_no_modes", pinMode: "read-only", script: map[string]any{"steps": []any{msg("never")}}},
		delAgent{name: "pinned", pinMode: "read-only", script: map[string]any{"modes": modes, "require_mode": "read-only", "steps": []any{msg("read only")}}},
		delAgent{name: "pin_left", pinMode: "read-only", script: map[string]any{"modes": modes, "require_mode": "read-only",
			"steps": []any{msg("read only"), map[string]any{"mode_update": "default"}, msg("now free")}}},
	)
	for _, name := range []string{"pin_missing", "pin_no_modes"} {
		t.Run(name, func(t *testing.T) {
			st, recs := e.finish(t, e.start(t, name, "work"))
			pin := map[string]string{"pin_missing": "bypass", "pin_no_modes": "read-only"}[name]
			if st.Status != runs.StatusInferenceFailed || !strings.Contains(st.Reason, `the agent does not offer the pinned mode "`+pin+`"`) {
				t.Fatalf("run_status %+v", st)
			}
			if got := strings.Join(types(recs), ","); got != "started,session_finished,terminated" {
				t.Fatalf("records %s", got)
			}
			if fin := delData(recs, journal.TypeSessionFinished)[0]; fin["outcome"] != "error" {
				t.Fatalf("session_finished %v", fin)
			}
			evs := delEvents(t, e.record(name))
			if len(delNamed(evs, "session_new")) != 1 || len(delNamed(evs, "set_mode")) != 0 || len(delNamed(evs, "prompt")) != 0 {
				t.Fatalf("the agent's events %v", evs)
			}
			delGone(t, e.record(name))
		})
	}
	t.Run("pinned", func(t *testing.T) {
		st, recs := e.finish(t, e.start(t, "pinned", "work"))
		if st.Status != runs.StatusCompleted || st.Text == nil || *st.Text != "read only" {
			t.Fatalf("run_status %+v", st)
		}
		if ss := delData(recs, journal.TypeSessionStarted); len(ss) != 1 || ss[0]["mode"] != "read-only" {
			t.Fatalf("session_started %v", ss)
		}
		var order []string
		for _, ev := range delEvents(t, e.record("pinned")) {
			if ev["event"] == "set_mode" || ev["event"] == "prompt" {
				order = append(order, fmt.Sprint(ev["event"], ":", ev["mode"]))
			}
		}
		if strings.Join(order, ",") != "set_mode:read-only,prompt:<nil>" {
			t.Fatalf("the agent's events %v", order)
		}
		delGone(t, e.record("pinned"))
	})
	t.Run("pin_left", func(t *testing.T) {
		st, _ := e.finish(t, e.start(t, "pin_left", "work"))
		if st.Status != runs.StatusInferenceFailed || !strings.Contains(st.Reason, `the agent left the pinned mode "read-only" for another (its name is in the server's log)`) {
			t.Fatalf("run_status %+v", st)
		}
		delGone(t, e.record("pin_left"))
	})
}

// TestParseDSLKnowsExecutors: docs/dsl.md, JSON views: "For each agent,
// admitted/refusal/refusals is the admission of the file registered under that agent's own
// name"; docs/executors.md: an executor registered with --executors is admitted. So
// parse_dsl judges with the server's executors, as list_agents does: a delegated agent
// is not refused with the false reason `executor "fake" is not registered with this
// server`.
func TestParseDSLKnowsExecutors(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"fake\" }\nagent coder { capabilities = [\"code\"] }\n")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	writeFile(t, execFile, `{"executors":{"fake":{"command":["/bin/true"]}}}`)
	if err := os.Chmod(execFile, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSymbiPatient(t, dir, modelEnv(nil), "--executors", execFile)
	res := s.call(t, "list_agents", map[string]any{})
	if res.IsError || !strings.Contains(text(res), `"delegated"`) {
		t.Fatalf("list_agents does not show coder delegated: %s", text(res))
	}
	res = s.call(t, "parse_dsl", map[string]any{"file": "agents/coder.symbi"})
	raw, _ := json.Marshal(res.StructuredContent)
	var out struct {
		Agents []struct {
			Admitted bool   `json:"admitted"`
			Refusal  string `json:"refusal"`
		} `json:"agents"`
	}
	if res.IsError || json.Unmarshal(raw, &out) != nil || len(out.Agents) != 1 {
		t.Fatalf("parse_dsl: %s", text(res))
	}
	if !out.Agents[0].Admitted {
		t.Errorf("parse_dsl says coder is refused (%s) on a server that registers its executor", out.Agents[0].Refusal)
	}
}
