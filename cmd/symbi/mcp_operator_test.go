package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/loopback"
	"symbi/internal/syncbuf"
)

// symbi mcp as an operator runs it: flags, signals, stdio, logging.

// TestHTTPOnlyFlagsWithoutHTTP: the flags whose help says "with --http" (or "with
// --auth-jwks") are a usage error without it, as --tls-cert, --public-url and
// --auth-issuer are: never accepted to do nothing.
func TestHTTPOnlyFlagsWithoutHTTP(t *testing.T) {
	dir := newE2EProject(t)
	for _, args := range [][]string{
		{"--max-sessions", "5"},
		{"--max-sessions-per-caller", "3"},
		{"--auth-claim", "email"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if code, _, stderr := runCLI(t, "", append([]string{"mcp", "--project", dir}, args...)...); code != 2 {
				t.Fatalf("symbi mcp %s: exit %d, want 2 (a flag that cannot apply is a usage error); stderr:\n%s", strings.Join(args, " "), code, stderr)
			}
		})
	}
}

// TestWorkspaceRootChecked: --workspace-root is checked at start: a missing directory is a
// usage error (exit 2), not a refusal of every delegated run; a relative one is made
// absolute, as --project is, and a delegated run in the project itself is not refused for
// it. Without --executors it cannot apply: a usage error too, never ignored.
func TestWorkspaceRootChecked(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"fake\" }\nagent coder {}\n")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	writeFile(t, execFile, `{"executors":{"fake":{"command":["/bin/true"]}}}`)
	if code, _, stderr := runCLI(t, "", "mcp", "--project", dir, "--executors", execFile, "--workspace-root", filepath.Join(t.TempDir(), "missing")); code != 2 || !strings.Contains(stderr, "--workspace-root") || !strings.Contains(stderr, "no such file") {
		t.Fatalf("a missing --workspace-root: exit %d, want 2 naming the flag; stderr:\n%s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "", "mcp", "--project", dir, "--workspace-root", t.TempDir()); code != 2 || !strings.Contains(stderr, "--workspace-root applies only with --executors") {
		t.Fatalf("--workspace-root without --executors: exit %d, want 2 naming both flags; stderr:\n%s", code, stderr)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir) // the project, relative to where symbi runs
	if err != nil {
		t.Fatal(err)
	}
	s := startRaw(t, dir, modelEnv(nil), "--executors", execFile, "--workspace-root", rel)
	s.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_run","arguments":{"agent":"coder","prompt":"x"}}}`)
	if r := s.next(t); isToolError(r) {
		t.Fatalf("symbi mcp --workspace-root %s (the project, relative) refused a delegated run in the project: %s", rel, toolText(r))
	}
}

// TestDelegatedAgentSIGPIPEDefault: symbi mcp catches SIGPIPE (a write to a closed pipe
// fails with EPIPE instead of ending it) without ignoring it: an ignored disposition
// survives exec, and every coding agent a delegated run starts — and what it starts in
// turn (a shell's `git log | head`) — would run with SIGPIPE ignored.
func TestDelegatedAgentSIGPIPEDefault(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"probe\" }\nagent coder {}\n")
	out := filepath.Join(t.TempDir(), "sigign")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	probe := fmt.Sprintf("grep SigIgn /proc/self/status > %s.tmp; mv %s.tmp %s", out, out, out)
	cmdJSON, _ := json.Marshal([]string{"/bin/sh", "-c", probe})
	writeFile(t, execFile, `{"executors":{"probe":{"command":`+string(cmdJSON)+`}}}`)
	s := startRaw(t, dir, modelEnv(nil), "--executors", execFile)
	s.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_run","arguments":{"agent":"coder","prompt":"x"}}}`)
	if r := s.next(t); isToolError(r) {
		t.Fatalf("start_run: %s", toolText(r))
	}
	deadline := time.Now().Add(hangGuard)
	var line string
	for {
		if b, err := os.ReadFile(out); err == nil {
			line = strings.TrimSpace(string(b))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the executor never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatalf("SigIgn line %q: %v", line, err)
	}
	if mask&(1<<(uint(syscall.SIGPIPE)-1)) != 0 {
		t.Fatalf("the delegated agent's process runs with SIGPIPE ignored (SigIgn %016x), inherited from symbi mcp", mask)
	}
}

// TestNohupSIGHUP: a stop signal ignored when symbi mcp starts stays ignored — `nohup
// symbi mcp --http …`, the usual way to keep a shared server past a logout, does not shut
// down on the hangup nohup shields it from: sent a hangup and then a termination, it shuts
// down for the termination.
func TestNohupSIGHUP(t *testing.T) {
	dir := newE2EProject(t)
	cmd := exec.Command("/bin/sh", "-c", `trap "" HUP; exec "$0" "$@"`, symbiBin, "mcp", "--project", dir, "--http", "127.0.0.1:0")
	cmd.Env = modelEnv(nil)
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(hangGuard):
			cmd.Process.Kill()
		}
	}()
	deadline := time.Now().Add(hangGuard)
	for !strings.Contains(stderr.String(), "msg=serving") {
		if time.Now().After(deadline) {
			t.Fatalf("never served; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(hangGuard):
		t.Fatal("symbi mcp did not exit on SIGTERM")
	}
	if log := stderr.String(); strings.Contains(log, "signal=hangup") || !strings.Contains(log, `msg="shutting down" signal=terminated`) {
		t.Fatalf("started with SIGHUP ignored, symbi mcp acted on SIGHUP, or not on SIGTERM; stderr:\n%s", log)
	}
}

// TestACPLogFollowsLogLevel: the ACP session's and SDK's log lines go through the server's
// logger: its --log-level (no INFO line under --log-level error) and its format.
func TestACPLogFollowsLogLevel(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"quits\" }\nagent coder {}\n")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	writeFile(t, execFile, `{"executors":{"quits":{"command":["/bin/true"]}}}`)
	s := startRaw(t, dir, modelEnv(nil), "--executors", execFile, "--log-level", "error")
	s.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"start_run","arguments":{"agent":"coder","prompt":"x"}}}`)
	r := s.next(t)
	if isToolError(r) {
		t.Fatalf("start_run: %s", toolText(r))
	}
	awaitRunEnd(t, s, structuredField(r, "run_id")) // the agent exits at once; its session ends
	s.stdin.Close()
	s.wait(t)
	for _, line := range strings.Split(s.allStderr(t), "\n") {
		if strings.Contains(line, " INFO ") || strings.Contains(line, "level=INFO") {
			t.Fatalf("an INFO line under --log-level error: %q", line)
		}
	}
}

// structuredField is the string member name of a tool result's structuredContent.
func structuredField(m map[string]any, name string) string {
	r, _ := m["result"].(map[string]any)
	sc, _ := r["structuredContent"].(map[string]any)
	v, _ := sc[name].(string)
	return v
}

// awaitRunEnd long-polls run_events until the run has ended and every event is read.
func awaitRunEnd(t *testing.T, s *rawSymbi, runID string) {
	t.Helper()
	after := int64(0)
	for id := 1000; ; id++ {
		s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_events","arguments":{"run_id":%q,"after":%d,"wait_ms":30000}}}`, id, runID, after))
		r := s.next(t)
		if isToolError(r) {
			t.Fatalf("run_events: %s", toolText(r))
		}
		res, _ := r["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		if sc["done"] == true {
			return
		}
		next, _ := sc["next_cursor"].(float64)
		after = int64(next)
	}
}

// TestUnreadStderrHoldsNoRun: a client that holds the server's stderr open without reading
// it (a pipe it drains only on failure) fills the pipe after a few log lines; a log line is
// then dropped, never waited for: every run is answered and frees its slot, and the server
// exits when its input ends.
func TestUnreadStderrHoldsNoRun(t *testing.T) {
	u := startUnreadStderr(t)
	for i := range 80 {
		u.send(invokeLine(i+1, "hi", ""))
		if r := u.next(t, fmt.Sprintf("invocation %d", i+1)); toolText(r) != "answered" {
			t.Fatalf("invocation %d: %v", i+1, r)
		}
	}
	u.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- u.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("symbi mcp exited with %v once its input ended", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("symbi mcp did not exit once its input ended: its shutdown waits on the unread stderr")
	}
}

// unreadStderr is a symbi mcp (initialized, its model answering "answered", logging at
// debug level) whose client never reads its stderr, a pipe of one page.
type unreadStderr struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	errR      *os.File // stderr's read end, never read
	responses chan map[string]any
}

func startUnreadStderr(t *testing.T) *unreadStderr {
	t.Helper()
	dir := newE2EProject(t)
	model := startModel(t, loopback.WithReply(loopback.Reply{Text: "answered"}))
	cmd := exec.Command(symbiBin, "mcp", "--project", dir, "--log-level", "debug")
	cmd.Env = modelEnv(model)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { errR.Close() })
	// The smallest pipe (one page), so that a few lines fill it.
	if _, err := unix.FcntlInt(errR.Fd(), unix.F_SETPIPE_SZ, 4096); err != nil {
		t.Skipf("F_SETPIPE_SZ: %v", err)
	}
	cmd.Stderr = errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	errW.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	u := &unreadStderr{cmd: cmd, stdin: stdin, errR: errR, responses: make(chan map[string]any, 1000)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["id"] != nil {
				u.responses <- m
			}
		}
		close(u.responses)
	}()
	u.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"stderr","version":"1"}}}`)
	u.next(t, "initialize")
	u.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return u
}

func (u *unreadStderr) send(s string) { io.WriteString(u.stdin, s+"\n") }

// next waits for the next answer to what.
func (u *unreadStderr) next(t *testing.T, what string) map[string]any {
	t.Helper()
	select {
	case r, ok := <-u.responses:
		if !ok {
			t.Fatalf("%s: symbi closed stdout", what)
		}
		return r
	case <-time.After(hangGuard):
		t.Fatalf("%s: no answer: the server is stalled on its unread stderr", what)
	}
	return nil
}

// TestStartupErrorFormat: symbi mcp refused at start (a --project that does not exist)
// prints "symbi mcp: <code>: <message>" on stderr, as every subcommand does
// (docs/errors.md, The command line), and exits 1.
func TestStartupErrorFormat(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	code, _, stderr := runCLI(t, "", "mcp", "--project", missing)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.HasPrefix(stderr, "symbi mcp: not_found: ") || !strings.Contains(stderr, missing) {
		t.Errorf("stderr %q; want \"symbi mcp: not_found: <message naming the directory>\" (docs/errors.md)", stderr)
	}
}

// TestLogLineOfClientInput: a client's text the SDK logs (logging/setLevel's level, here
// 1 MiB) reaches stderr cut to 16 KiB, with its length: the log queue holds at most 1,024
// lines, and lines of a client's megabytes would make that unbounded memory.
func TestLogLineOfClientInput(t *testing.T) {
	dir := newE2EProject(t)
	s := startRaw(t, dir, modelEnv(nil))
	level := strings.Repeat("A", 1<<20)
	s.send(t, `{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"`+level+`"}}`)
	if r := s.next(t); r["id"] != float64(2) {
		t.Fatalf("logging/setLevel: %v", r)
	}
	s.stdin.Close()
	s.wait(t)
	const maxLine = 64 << 10
	for _, l := range strings.Split(s.allStderr(t), "\n") {
		if len(l) > maxLine {
			t.Errorf("a %d-byte stderr line (want at most %d): %.120s…", len(l), maxLine, l)
		}
	}
}
