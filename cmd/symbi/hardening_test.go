package main

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/loopback"
	"symbi/internal/syncbuf"
)

// rawSymbi is symbi mcp driven by raw JSON-RPC lines over pipes the test holds: stdout and
// stderr are os.Pipe read ends the test can close, as a vanished client would.
type rawSymbi struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	stdoutR   *os.File
	stderrR   *os.File
	responses chan map[string]any
	stderr    *syncbuf.Buffer
	// stderrDone is closed once stderr is copied whole (the process closed it).
	stderrDone chan struct{}
	holding    atomic.Bool // set: the reader stops reading stdout, keeping the pipe open
}

func startRaw(t *testing.T, dir string, env []string, args ...string) *rawSymbi {
	t.Helper()
	cmd := exec.Command(symbiBin, append([]string{"mcp", "--project", dir}, args...)...)
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	errW.Close()
	s := &rawSymbi{cmd: cmd, stdin: stdin, stdoutR: outR, stderrR: errR, responses: make(chan map[string]any, 4096), stderr: &syncbuf.Buffer{}, stderrDone: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["id"] != nil {
				s.responses <- m
			}
			if s.holding.Load() {
				select {} // a client that stopped reading but did not go away
			}
		}
		close(s.responses)
	}()
	go func() {
		io.Copy(s.stderr, errR)
		close(s.stderrDone)
	}()
	t.Cleanup(func() {
		stdin.Close()
		if s.cmd.ProcessState == nil {
			s.cmd.Process.Kill()
			s.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("symbi stderr:\n%s", s.stderr.String())
		}
	})
	s.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hardening","version":"1"}}}`)
	if r := s.next(t); r["id"] != "init" || r["result"] == nil {
		t.Fatalf("initialize: %v", r)
	}
	s.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *rawSymbi) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatalf("writing to symbi: %v", err)
	}
}

func (s *rawSymbi) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case r, ok := <-s.responses:
		if !ok {
			t.Fatalf("symbi closed stdout")
		}
		return r
	case <-time.After(hangGuard):
		t.Fatal("no response")
	}
	panic("unreachable")
}

// allStderr waits until the process's stderr is closed (it exited) and returns all of it.
func (s *rawSymbi) allStderr(t *testing.T) string {
	t.Helper()
	select {
	case <-s.stderrDone:
	case <-time.After(hangGuard):
		t.Fatal("symbi's stderr was never closed")
	}
	return s.stderr.String()
}

// wait waits for the process to exit and returns its state.
func (s *rawSymbi) wait(t *testing.T) *os.ProcessState {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal("symbi did not exit")
	}
	return s.cmd.ProcessState
}

func invokeLine(id int, prompt, systemPrompt string) string {
	args, _ := json.Marshal(map[string]string{"agent": "helper", "prompt": prompt, "system_prompt": systemPrompt})
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"invoke_agent","arguments":%s}}`, id, args)
}

// peakRSS returns the process's peak resident set size in bytes (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// terminatedReasons waits until every journal of dir ends with terminated and returns
// their reasons; each journal must verify complete.
func terminatedReasons(t *testing.T, dir string, want int) map[string]int {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(dir, ".symbiont", "governed", "audit-signing.key"))
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.NewKeyFromSeed(key).Public().(ed25519.PublicKey)
	files := journals(t, dir)
	if len(files) != want {
		t.Fatalf("%d journals, want %d", len(files), want)
	}
	reasons := map[string]int{}
	for _, f := range files {
		rep := journal.Verify(f, pub, journal.VerifyOptions{})
		if rep.ExitCode() != 0 {
			t.Errorf("%s does not verify complete: %+v", filepath.Base(f), rep)
		}
		reasons[rep.TerminalReason]++
	}
	return reasons
}

// TestE2EBusyBoundsMemory pipelines 2,000 invoke_agent calls, each with a 65,000-byte
// prompt and system_prompt, at a model that holds every request. Runs in flight are
// bounded (--max-runs, default 64): the rest fail at once with busy, and the server's
// peak memory stays bounded (it grew past 1 GiB without the bound).
func TestE2EBusyBoundsMemory(t *testing.T) {
	const calls, inFlight = 2000, 64
	dir := newE2EProject(t)
	var mu sync.Mutex
	arrived := 0
	model := startModel(t, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	model.OnRequest(func(loopback.Request) { mu.Lock(); arrived++; mu.Unlock() })
	s := startRaw(t, dir, modelEnv(model))
	big := strings.Repeat("p", 65000)
	go func() {
		for i := range calls {
			if _, err := io.WriteString(s.stdin, invokeLine(i+1, big, big)+"\n"); err != nil {
				return
			}
		}
	}()
	busy := 0
	for range calls - inFlight {
		r := s.next(t)
		if text := toolText(r); !strings.HasPrefix(text, "busy: ") {
			t.Fatalf("response %v: %s, want busy", r["id"], text)
		}
		busy++
	}
	rss := peakRSS(t, s.cmd.Process.Pid)
	t.Logf("%d calls: %d busy; peak RSS %d MiB", calls, busy, rss>>20)
	if rss > 256<<20 {
		t.Errorf("peak RSS %d MiB, want at most 256 MiB", rss>>20)
	}
	mu.Lock()
	if arrived > inFlight {
		t.Errorf("the model received %d requests, more than the %d runs allowed in flight", arrived, inFlight)
	}
	mu.Unlock()
	// The server still serves, and ends the held runs when its client goes.
	s.send(t, `{"jsonrpc":"2.0","id":"list","method":"tools/call","params":{"name":"list_agents","arguments":{}}}`)
	for r := s.next(t); r["id"] != "list"; r = s.next(t) {
	}
	s.stdin.Close()
	if st := s.wait(t); !st.Exited() || st.ExitCode() != 0 {
		t.Errorf("exit %v, want 0", st)
	}
	if reasons := terminatedReasons(t, dir, inFlight); reasons["cancelled"] != inFlight {
		t.Errorf("terminated reasons %v, want %d cancelled", reasons, inFlight)
	}
}

// TestE2EVanishedClient: the client stops reading stdout — or only stderr — while ten runs
// are held by the model. A write to the broken pipe must not kill the server (SIGPIPE):
// with stdout gone it cancels the runs, each journal ends with terminated (cancelled),
// and it exits cleanly; with only stderr gone it goes on serving.
func TestE2EVanishedClient(t *testing.T) {
	for _, which := range []string{"stdout", "stderr"} {
		t.Run(which, func(t *testing.T) {
			const runs = 10
			dir := newE2EProject(t)
			arrived := make(chan struct{}, runs)
			reply := loopback.Reply{Fault: loopback.FaultHang}
			if which == "stderr" {
				reply = loopback.Reply{Text: "answered", Delay: 2 * time.Second}
			}
			model := startModel(t, loopback.WithReply(reply))
			model.OnRequest(func(loopback.Request) { arrived <- struct{}{} })
			s := startRaw(t, dir, modelEnv(model), "--log-level", "debug")
			for i := range runs {
				s.send(t, invokeLine(i+1, "hold", ""))
			}
			for range runs {
				select {
				case <-arrived:
				case <-time.After(hangGuard):
					t.Fatal("the model did not receive every request")
				}
			}
			if which == "stdout" {
				s.stdoutR.Close()
				// The next answer the server writes meets the broken pipe.
				s.send(t, `{"jsonrpc":"2.0","id":"ping","method":"ping"}`)
				st := s.wait(t)
				ws := st.Sys().(syscall.WaitStatus)
				if ws.Signaled() || !st.Exited() || st.ExitCode() != 0 {
					t.Fatalf("symbi ended with %v; want a clean exit, 0", st)
				}
				if reasons := terminatedReasons(t, dir, runs); reasons["cancelled"] != runs {
					t.Errorf("terminated reasons %v, want %d cancelled", reasons, runs)
				}
				return
			}
			s.stderrR.Close()
			// Debug logging writes to the broken stderr on every request; the server
			// must go on: every run completes and is answered on stdout.
			for range runs {
				if r := s.next(t); toolText(r) != "answered" {
					t.Fatalf("response %v: %s", r["id"], toolText(r))
				}
			}
			s.send(t, `{"jsonrpc":"2.0","id":"ping","method":"ping"}`)
			if r := s.next(t); r["id"] != "ping" {
				t.Fatalf("ping: %v", r)
			}
			s.stdin.Close()
			if st := s.wait(t); !st.Exited() || st.ExitCode() != 0 {
				t.Errorf("exit %v, want 0", st)
			}
			if reasons := terminatedReasons(t, dir, runs); reasons["completed"] != runs {
				t.Errorf("terminated reasons %v, want %d completed", reasons, runs)
			}
		})
	}
}

// TestE2EBlockedClient: a client asks for progress, then stops reading stdout while it
// keeps sending calls, so the server's writes block. The run must not stall on its
// progress notifications — its journal completes — and SIGTERM must still end the server,
// with every journal finished, although its writes to the client never complete.
func TestE2EBlockedClient(t *testing.T) {
	dir := newE2EProject(t)
	// A large AGENTS.md: 200 answers to get_agents_md fill any pipe buffer many times.
	writeFile(t, filepath.Join(dir, "AGENTS.md"), "# Test project\n\n"+strings.Repeat("guidance line\n", 2000))
	answered := make(chan struct{})
	model := startModel(t, loopback.WithResponder(func(loopback.Request) loopback.Reply {
		<-answered // answer only once stdout is full
		return loopback.Reply{Text: "late answer"}
	}))
	s := startRaw(t, dir, modelEnv(model))
	s.holding.Store(true) // stdout is read no more after the next line, but stays open
	s.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":"helper","prompt":"hi"},"_meta":{"progressToken":"p"}}}`)
	for i := range 200 {
		s.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_agents_md","arguments":{}}}`, 100+i))
	}
	close(answered)
	// The run finishes its journal although its notifications cannot be written.
	deadline := time.Now().Add(hangGuard)
	for {
		if files := journals(t, dir); len(files) == 1 && lastRecordType(t, files[0]) == "terminated" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run's journal did not end: the run is stalled behind the blocked client")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := s.wait(t); !st.Exited() {
		t.Fatalf("symbi did not exit cleanly: %v", st)
	}
	if reasons := terminatedReasons(t, dir, 1); reasons["completed"] != 1 {
		t.Errorf("terminated reasons %v, want completed", reasons)
	}
}

// lastRecordType is the type of the last complete line of a journal that may still be
// being written ("" when it has none yet).
func lastRecordType(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := strings.LastIndexByte(string(data), '\n')
	if end < 0 {
		return ""
	}
	lines := strings.Split(string(data[:end]), "\n")
	var l struct {
		Payload struct {
			Type string `json:"type"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &l); err != nil {
		t.Fatalf("journal line %q: %v", lines[len(lines)-1], err)
	}
	return l.Payload.Type
}
