// Package proctest reads from /proc what the tests and the reliability harnesses need to
// know of the processes they start: whether one is still alive, its state, group and
// command name, the pid a pid file names, and whether one waits for a file's lock. It is
// for tests and harnesses only.
package proctest

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Stat reads a process's state, process group and command name from /proc/PID/stat
// (ok false when there is no such process, or its stat cannot be read).
func Stat(pid int) (state byte, pgrp int, comm string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, "", false
	}
	s := string(b)
	// The command name is parenthesised and may hold anything, parentheses and spaces
	// included: the fields follow its last ")".
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return 0, 0, "", false
	}
	f := strings.Fields(s[closing+1:]) // state ppid pgrp …
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, "", false
	}
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], pgrp, s[open+1 : closing], true
}

// Alive reports whether pid is a process that has not exited: it exists and is neither
// a zombie nor dead.
func Alive(pid int) bool {
	st, _, _, ok := Stat(pid)
	return ok && st != 'Z' && st != 'X'
}

// ReadPID reads a pid file: a positive decimal pid, with white space around it.
func ReadPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s holds %q, not a pid", path, b)
	}
	return pid, nil
}

// PID is ReadPID for a test: a pid file that holds no pid fails it.
func PID(tb testing.TB, path string) int {
	tb.Helper()
	pid, err := ReadPID(path)
	if err != nil {
		tb.Fatal(err)
	}
	return pid
}

// LockFile takes an exclusive flock of the file at path, as another process would, and
// returns what lets it go (which may be called again).
func LockFile(tb testing.TB, path string) (unlock func()) {
	tb.Helper()
	fh, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Flock(int(fh.Fd()), unix.LOCK_EX); err != nil {
		fh.Close()
		tb.Fatal(err)
	}
	unlocked := false
	return func() {
		if !unlocked {
			unlocked = true
			unix.Flock(int(fh.Fd()), unix.LOCK_UN)
			fh.Close()
		}
	}
}

// WaitFlockWaiter waits until something is blocked on a flock of the file with inode ino
// (/proc/locks lists a blocked waiter with "->"), or fails the test after guard — a hang
// guard, not an expectation. It skips the test where /proc/locks cannot be read.
func WaitFlockWaiter(tb testing.TB, ino uint64, guard time.Duration) {
	tb.Helper()
	suffix := fmt.Sprintf(":%d ", ino)
	deadline := time.Now().Add(guard)
	for time.Now().Before(deadline) {
		fh, err := os.Open("/proc/locks")
		if err != nil {
			tb.Skipf("no /proc/locks: %v", err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, "->") && strings.Contains(l, suffix) {
				fh.Close()
				return
			}
		}
		fh.Close()
		time.Sleep(2 * time.Millisecond)
	}
	tb.Fatalf("nothing blocked on the lock of inode %d within %v", ino, guard)
}

// LimitFileSize lowers this process's file size limit (RLIMIT_FSIZE, its soft limit) to n
// bytes with SIGXFSZ ignored, so that a write past it fails with EFBIG, as on a full disk
// or a quota, instead of killing the process. restore sets the limit back. The limit is
// the process's: a test sets it in a child process of its own (its test binary run again).
func LimitFileSize(n uint64) (restore func(), err error) {
	signal.Ignore(syscall.SIGXFSZ)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		return nil, fmt.Errorf("getrlimit RLIMIT_FSIZE: %w", err)
	}
	lim := old
	lim.Cur = min(n, old.Max)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		return nil, fmt.Errorf("setrlimit RLIMIT_FSIZE %d: %w", n, err)
	}
	return func() { unix.Setrlimit(unix.RLIMIT_FSIZE, &old) }, nil
}
