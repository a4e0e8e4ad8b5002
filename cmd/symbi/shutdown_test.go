package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/loopback"
	"symbi/internal/syncbuf"
)

// waitPipeFull waits until the pipe whose read end is r has less room than one more
// answer line (each get_agents_md answer here is about 32 KB): the writer (symbi) is then
// blocked.
func waitPipeFull(t *testing.T, r *os.File) {
	t.Helper()
	size, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Skipf("F_GETPIPE_SZ: %v", err)
	}
	deadline := time.Now().Add(exitGuard)
	for {
		n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if n > size-40<<10 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdout pipe never filled (%d of %d bytes)", n, size)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSIGTERMAfterStdinClosedWhileStdoutBlocked: a client that stopped reading stdout
// (the pipe is full, the server's writes block) closes stdin and then sends SIGTERM —
// what TypeScript-SDK clients do to stop their server. The server exits by itself, 0:
// docs/runs.md, "Ownership, cancellation and shutdown": stdin closing cancels every live
// run, the server waits (up to 15 s) until each has written terminated, then exits; a
// call blocked writing to a client that no longer reads gets serve.TransportGrace and is then
// left behind, after stdin closed as after a signal.
func TestSIGTERMAfterStdinClosedWhileStdoutBlocked(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "AGENTS.md"), "# Test project\n\n"+strings.Repeat("guidance line\n", 2000))
	s := startRaw(t, dir, modelEnv(nil))
	s.holding.Store(true) // the test's reader stops after the next line, keeping stdout open
	for i := range 3 {    // two answers fill the pipe; the third blocks, and symbi still reads its input
		s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_agents_md","arguments":{}}}`, 100+i))
	}
	waitPipeFull(t, s.stdoutR)
	s.stdin.Close()
	// The server has seen the end of its input once it logs the shutdown's cause.
	deadline := time.Now().Add(exitGuard)
	for !strings.Contains(s.stderr.String(), "the client closed stdin") {
		if time.Now().After(deadline) {
			t.Fatalf("the server never noticed stdin closing; stderr:\n%s", s.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
		if st := s.cmd.ProcessState; !st.Exited() || st.ExitCode() != 0 {
			t.Fatalf("symbi ended with %v; want exit 0", st)
		}
	case <-time.After(exitGuard):
		// A second signal must hurry it too.
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			t.Fatalf("symbi mcp did not exit within %v of SIGTERM (stdin closed, stdout blocked); it exited only after a second SIGTERM", exitGuard)
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("symbi mcp did not exit within %v of SIGTERM, nor after a second SIGTERM (stdin closed, stdout blocked): only SIGKILL ends it; stderr:\n%s", exitGuard, s.stderr.String())
	}
}

// TestStdinClosedWhileStdoutBlockedRunEnds: the same blocked client, with an
// invoke_agent run held by a hanging model when it closes stdin: the run ends with
// terminated (reason cancelled) and the server exits within its grace periods.
func TestStdinClosedWhileStdoutBlockedRunEnds(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "AGENTS.md"), "# Test project\n\n"+strings.Repeat("guidance line\n", 2000))
	arrived := make(chan struct{}, 1)
	model := startModel(t, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	model.OnRequest(func(loopback.Request) { arrived <- struct{}{} })
	s := startRaw(t, dir, modelEnv(model))
	s.holding.Store(true)
	s.send(t, invokeLine(1, "hold", ""))
	select {
	case <-arrived:
	case <-time.After(hangGuard):
		t.Fatal("the model never received the request")
	}
	for i := range 3 {
		s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_agents_md","arguments":{}}}`, 100+i))
	}
	waitPipeFull(t, s.stdoutR)
	s.stdin.Close()
	deadline := time.Now().Add(exitGuard)
	for {
		if files := journals(t, dir); len(files) == 1 && lastRecordType(t, files[0]) == "terminated" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's journal has no terminated %v after stdin closed", exitGuard)
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(exitGuard):
		t.Fatalf("the run ended but symbi mcp did not exit within %v of stdin closing (stdout blocked): it waits forever for the SDK session", exitGuard)
	}
}

// TestUnreadStderrThenClientStop: a client that never reads the server's stderr (its pipe
// full) stops the server as MCP clients do — close stdin, SIGTERM 2 s later if the process
// has not exited. No run is in flight. The stop signals stay caught until the exit, the
// last log lines' flush included, and a signal cuts that flush short: exit 0, not a kill
// (docs/reliability.md: closing stdin ends the server with exit status 0;
// docs/security-model.md: a stderr not read never holds the shutdown).
func TestUnreadStderrThenClientStop(t *testing.T) {
	u := startUnreadStderr(t)
	cmd, stdin, errR := u.cmd, u.stdin, u.errR
	send := u.send
	next := func() { u.next(t, "an invocation") }
	// Each run logs lines: invoke until the 4 KiB pipe is nearly
	// full, then as many again, so that the log writer is blocked on it.
	size, _ := unix.FcntlInt(errR.Fd(), unix.F_GETPIPE_SZ, 0)
	for i := 0; ; i++ {
		send(invokeLine(i+1, "hi", ""))
		next()
		if n, _ := unix.IoctlGetInt(int(errR.Fd()), unix.TIOCINQ); n > size-2048 {
			break
		}
		if i > 1000 {
			t.Fatal("stderr never filled")
		}
	}
	for i := range 20 {
		send(invokeLine(100000+i, "hi", ""))
		next()
	}
	// The client's stop: close stdin; SIGTERM after 2 s if the server is still there
	// (the TypeScript SDK's StdioClientTransport.close, docs/runs.md).
	stdin.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(exitGuard):
			t.Fatal("symbi mcp did not exit after stdin closed and SIGTERM")
		}
	}
	st := cmd.ProcessState
	if ws := st.Sys().(syscall.WaitStatus); ws.Signaled() || st.ExitCode() != 0 {
		t.Fatalf("symbi mcp ended with %v (stdin closed, then the client's SIGTERM while stderr is unread); want exit 0: the signal should hurry the shutdown, not kill the process", st)
	}
}

// exitGuard bounds the wait for an exit the docs promise within 15 s (runs) + 5 s
// (transport): only a hang reaches it.
const exitGuard = 90 * time.Second

// TestSignalDuringStartupEndsIt: symbi mcp held at start-up (here on the project ledger's
// lock, which another process holds) ends at a stop signal, as a process whose signals are
// not caught does: nothing is served yet that a shutdown would end in order.
func TestSignalDuringStartupEndsIt(t *testing.T) {
	dir := newE2EProject(t)
	if code, _, errOut := runCLI(t, "", "mcp", "--project", dir); code != 0 { // makes the ledger
		t.Fatalf("first serve: exit %d\n%s", code, errOut)
	}
	lf, err := os.OpenFile(filepath.Join(dir, ".symbiont", "ledger.jsonl"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(symbiBin, "mcp", "--project", dir)
	cmd.Env = modelEnv(nil)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// A log line is written once the signals are caught (the log comes first).
	for deadline := time.Now().Add(hangGuard); !strings.Contains(stderr.String(), "level="); {
		if time.Now().After(deadline) {
			t.Fatalf("no log line at start-up:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(stderr.String(), "msg=serving") {
		t.Fatalf("served without the ledger lock:\n%s", stderr.String())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatalf("symbi mcp did not end at SIGTERM while starting up (waiting on the ledger lock):\n%s", stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("symbi mcp ended %v; want killed by SIGTERM, as an uncaught signal does", cmd.ProcessState)
	}
}
