package acp

// An agent can hold a file system operation without end: a file on a FUSE file system a
// daemon of its own serves, whose reads or lookups are never answered. These tests run
// such a daemon — the test binary re-executed with fuseTestEnv set, a minimal FUSE server
// that serves one file, "f", never answers its reads nor a lookup of "hang", and ignores
// SIGTERM — and require the run to end anyway, with a complete journal. They need root
// and /dev/fuse to mount it, and skip without them.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/journal"
)

const fuseTestEnv = "SYMBI_TEST_FUSE_MNT"

func init() {
	mnt := os.Getenv(fuseTestEnv)
	if mnt == "" {
		return
	}
	signal.Ignore(syscall.SIGTERM)
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Exit(10)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d", fd, os.Getuid(), os.Getgid())
	if err := unix.Mount("symbitestfuse", mnt, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		os.Exit(11)
	}
	_ = os.WriteFile(mnt+".ready", nil, 0o644)
	serveFuse(fd, mnt)
	os.Exit(0)
}

// serveFuse serves the file system mounted at mnt from fd; a READ it receives (and never
// answers) is marked by the file mnt+".read", which a test's agent can wait for.
func serveFuse(fd int, mnt string) {
	le := binary.LittleEndian
	attr := func(ino uint64) []byte {
		b := make([]byte, 88)
		le.PutUint64(b[0:], ino)
		mode, nlink, size := uint32(unix.S_IFDIR|0o755), uint32(2), uint64(0)
		if ino == 2 {
			mode, nlink, size = unix.S_IFREG|0o644, 1, 5
		}
		le.PutUint64(b[8:], size)
		le.PutUint32(b[60:], mode)
		le.PutUint32(b[64:], nlink)
		le.PutUint32(b[68:], uint32(os.Getuid()))
		le.PutUint32(b[72:], uint32(os.Getgid()))
		le.PutUint32(b[80:], 4096)
		return b
	}
	reply := func(unique uint64, errno int32, payload []byte) {
		out := make([]byte, 16+len(payload))
		le.PutUint32(out[0:], uint32(len(out)))
		le.PutUint32(out[4:], uint32(errno))
		le.PutUint64(out[8:], unique)
		copy(out[16:], payload)
		_, _ = unix.Write(fd, out)
	}
	buf := make([]byte, 1<<20+4096)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n < 40 {
			return
		}
		in := buf[:n]
		opcode, unique, node := le.Uint32(in[4:]), le.Uint64(in[8:]), le.Uint64(in[16:])
		body := in[40:]
		switch opcode {
		case 26: // INIT
			out := make([]byte, 64)
			le.PutUint32(out[0:], 7)
			le.PutUint32(out[4:], 31)
			le.PutUint32(out[8:], le.Uint32(body[8:]))
			le.PutUint16(out[16:], 16)
			le.PutUint16(out[18:], 12)
			le.PutUint32(out[20:], 65536)
			le.PutUint32(out[24:], 1)
			reply(unique, 0, out)
		case 1: // LOOKUP
			name := string(bytes.TrimRight(body, "\x00"))
			if name == "hang" {
				continue // a lookup never answered
			}
			if name != "f" {
				reply(unique, -int32(unix.ENOENT), nil)
				continue
			}
			out := make([]byte, 40)
			le.PutUint64(out[0:], 2)
			le.PutUint64(out[16:], 3600)
			le.PutUint64(out[24:], 3600)
			reply(unique, 0, append(out, attr(2)...))
		case 3: // GETATTR
			out := make([]byte, 16)
			le.PutUint64(out[0:], 3600)
			reply(unique, 0, append(out, attr(node)...))
		case 14: // OPEN
			out := make([]byte, 16)
			le.PutUint64(out[0:], 1)
			le.PutUint32(out[8:], 1) // FOPEN_DIRECT_IO
			reply(unique, 0, out)
		case 15: // READ: never answered
			_ = os.WriteFile(mnt+".read", nil, 0o644)
		case 2, 42, 36: // FORGET, BATCH_FORGET, INTERRUPT: no answer
		case 18, 25, 29: // RELEASE, FLUSH, RELEASEDIR
			reply(unique, 0, nil)
		default:
			reply(unique, -int32(unix.ENOSYS), nil)
		}
	}
}

// TestHeldReadEndsRun: an allowed read of a file whose daemon, started by the agent,
// never answers holds the handler in the kernel; at the run's deadline the agent's
// processes are killed before the session closes — its daemon with them, which ends the
// read — and the run ends timeout with a complete journal.
func TestHeldReadEndsRun(t *testing.T) {
	e, res := fuseRun(t, true, []any{
		map[string]any{"read": "$CWD/mnt/f"},
		map[string]any{"message": "done"},
	})
	mustOutcome(t, res, OutcomeTimeout)
	e.finishAndVerify(res)
}

// TestHeldToolCallEndsRun: a tool_call whose location's lookup the agent's daemon never
// answers holds the journaler; the agent then ends its turn. The drain waits the grace
// period, no longer: the run ends with an error (its updates could not all be journaled,
// so its answer is not released) and a complete journal.
func TestHeldToolCallEndsRun(t *testing.T) {
	e, res := fuseRun(t, true, []any{
		map[string]any{"tool_call": map[string]any{"id": "t1", "kind": "read", "title": "Read", "locations": []string{"$CWD/mnt/hang"}}},
		map[string]any{"message": "done"},
	})
	mustOutcome(t, res, OutcomeError)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "could not all be journaled within the grace period") {
		t.Fatalf("error %v; want the updates not all journaled", res.Err)
	}
	e.finishAndVerify(res)
}

// TestHeldReadAbandoned: the same read, from a daemon the agent did not start (killing the
// agent's processes does not end it): the close waits the grace period for the access,
// then abandons it, and the run ends timeout, saying so, with a complete journal.
func TestHeldReadAbandoned(t *testing.T) {
	e, res := fuseRun(t, false, []any{
		map[string]any{"read": "$CWD/mnt/f"},
		map[string]any{"message": "done"},
	})
	mustOutcome(t, res, OutcomeTimeout)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "a file access of the agent did not end within the grace period") {
		t.Fatalf("error %v; want the access abandoned", res.Err)
	}
	e.finishAndVerify(res)
}

// fuseRun runs a session with the FUSE daemon on <workspace>/mnt — started by the agent
// (byAgent), or by the test — whose agent then takes steps. The run's deadline is 6 s; it
// must end within guard.
func fuseRun(t *testing.T, byAgent bool, steps []any) (*env, Result) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("mounting the FUSE file system needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "fuse.pid")
	var script []any
	if byAgent {
		script = append(script,
			map[string]any{"spawn_background": []string{self, "-test.run=^$"}, "pid_file": pidFile},
			map[string]any{"wait_file": "$CWD/mnt.ready"})
	}
	e := newEnv(t, map[string]any{"steps": append(script, steps...)})
	mnt := filepath.Join(e.dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// stopDaemon kills the daemon if it still runs (known by its environment, so that a
	// pid reused since is never signalled), and unmounts.
	stopDaemon := func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && bytes.Contains(env, []byte(fuseTestEnv+"="+mnt+"\x00")) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	}
	t.Cleanup(stopDaemon)
	if byAgent {
		e.cfg.Env = append(e.cfg.Env, fuseTestEnv+"="+mnt)
	} else {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), fuseTestEnv+"="+mnt)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(guard); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(mnt + ".ready"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the FUSE daemon did not mount")
			}
		}
	}
	e.cfg.Decide = allowKinds("read")
	e.cfg.Grace = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, e.cfg) }()
	select {
	case res := <-done:
		if _, err := os.Stat(mnt + ".ready"); err != nil {
			t.Fatalf("the FUSE daemon did not mount (%v); the run ended %q: %v", err, res.Outcome, res.Err)
		}
		return e, res
	case <-time.After(guard):
		stopDaemon() // releases the run
		<-done
		t.Fatal("the run did not end: it waited on a file system operation the daemon holds")
	}
	return nil, Result{}
}

// TestHurriedDrainNotAnFSHold: a session whose agent answered drains the updates handed
// over also when hurried (the server told again to stop): the drain is of symbi's own
// journaler, and only an agent's file system can hold it. The answer is not withheld for
// a hold that never was.
func TestHurriedDrainNotAnFSHold(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"message": "Hello "},
		map[string]any{"message": "world"},
	}})
	hurry := make(chan struct{})
	close(hurry) // the server was told again to stop; this session's agent answers anyway
	e.cfg.Hurry = hurry
	res := e.run(nil)
	if res.Err != nil && strings.Contains(res.Err.Error(), "held by a file system operation") {
		t.Fatalf("outcome %s, err %v: a hurried session whose agent answered is reported as held by a file system operation (nothing held it)", res.Outcome, res.Err)
	}
	mustOutcome(t, res, OutcomeCompleted)
}

// TestHurriedCloseNotAbandoned: a hurried session that made no file access closes without
// saying one was abandoned — not in its error, not in its signed session_finished.
func TestHurriedCloseNotAbandoned(t *testing.T) {
	e := newEnv(t, map[string]any{"ignore_sigterm": true, "steps": []any{map[string]any{"hang": true, "ignore_cancel": true}}})
	e.cfg.Grace = time.Hour
	hurry := make(chan struct{})
	e.cfg.Hurry = hurry
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startRun(ctx, e.cfg)
	e.waitEvent("prompt")
	close(hurry)
	cancel()
	res := wait(t)
	mustOutcome(t, res, OutcomeCancelled)
	if res.Err != nil && strings.Contains(res.Err.Error(), "was abandoned") {
		t.Fatalf("err %v: the session made no file access, yet its error says one was abandoned", res.Err)
	}
	fin := data[journal.SessionFinished](t, ofType(e.entries(), journal.TypeSessionFinished)[0])
	if strings.Contains(fin.Error, "was abandoned") {
		t.Fatalf("session_finished.error %q: records an abandoned file access that never was", fin.Error)
	}
}

// TestAbandonedAccessOfCompletedTurnJournaled: an agent that does not wait for its read —
// held by a FUSE daemon it did not start — and ends its turn completes, and its
// session_finished says the access was abandoned: the journal, not only the log, tells an
// access allowed and never made from one made and not recorded.
func TestAbandonedAccessOfCompletedTurnJournaled(t *testing.T) {
	// A raw request: the agent does not wait for the answer, it sleeps and ends its turn.
	read := map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "id": 4242, "method": "fs/read_text_file",
		"params": map[string]any{"sessionId": "fake-session-1", "path": "mnt/f"}}}
	e, res := fuseRun(t, false, []any{
		read,
		map[string]any{"wait_file": "$CWD/mnt.read"}, // the read is held in the kernel
		map[string]any{"message": "done"},
	})
	es := e.entries()
	var allowed, recorded bool
	for _, ent := range ofType(es, journal.TypePermissionDecided) {
		if pd := data[journal.PermissionDecided](t, ent); pd.Decision == "allow" && pd.Kind == "read" {
			allowed = true
		}
	}
	recorded = len(ofType(es, journal.TypeFSRead)) > 0
	if !allowed || recorded {
		t.Fatalf("read allowed %v, fs_read recorded %v (outcome %s, err %v); want allowed, held, unrecorded", allowed, recorded, res.Outcome, res.Err)
	}
	fin := data[journal.SessionFinished](t, ofType(es, journal.TypeSessionFinished)[0])
	if res.Outcome != OutcomeCompleted || !strings.Contains(fin.Error, "it was abandoned, unrecorded and unanswered") {
		t.Fatalf("a read was allowed and abandoned (no fs_read), yet the run ended %s with error %v and session_finished %+v: the journal does not say the access was abandoned",
			res.Outcome, res.Err, fin)
	}
}

// TestAbandonedAccessOfFailedTurnSaid: however the agent's turn ends — an error answering
// its prompt, a turn it cancelled itself — an abandoned file access is said in the run's
// error and in session_finished, not only in the server's log.
func TestAbandonedAccessOfFailedTurnSaid(t *testing.T) {
	for name, end := range map[string]any{
		"rpc error":       map[string]any{"error": map[string]any{"code": 1, "message": "boom"}},
		"agent cancelled": map[string]any{"stop_reason": "cancelled"},
	} {
		t.Run(name, func(t *testing.T) {
			read := map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "id": 4242, "method": "fs/read_text_file",
				"params": map[string]any{"sessionId": "fake-session-1", "path": "mnt/f"}}}
			e, res := fuseRun(t, false, []any{
				read,
				map[string]any{"wait_file": "$CWD/mnt.read"}, // the read is held in the kernel
				end,
			})
			es := e.entries()
			if len(ofType(es, journal.TypeFSRead)) > 0 {
				t.Fatalf("fs_read recorded: the read was not held")
			}
			fins := ofType(es, journal.TypeSessionFinished)
			if len(fins) != 1 {
				t.Fatalf("%d session_finished records", len(fins))
			}
			fin := data[journal.SessionFinished](t, fins[0])
			said := strings.Contains(fin.Error, "abandoned") || (res.Err != nil && strings.Contains(res.Err.Error(), "abandoned"))
			if !said {
				t.Fatalf("a read was allowed and abandoned (no fs_read); the run ended %s with error %v and session_finished.error %q: neither says the access was abandoned",
					res.Outcome, res.Err, fin.Error)
			}
		})
	}
}
