package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// Read is one record of a journal read back: its type, time and data, every line of it
// verified.
type Read struct {
	Seq  int
	Type string
	Time string
	Data json.RawMessage
}

// ErrNotResumable is wrapped by Reopen's error for a journal that cannot be continued.
var ErrNotResumable = errors.New("journal cannot be continued")

// Reopen opens the journal name (<agent_id>.<run_id>.jsonl) of the governed directory so
// that its run can continue: a run that was waiting at a human gate when its server
// stopped. It takes the writer's lock (a journal another process writes is refused),
// then verifies the whole file with the store's key — every line signed, chained, in
// order, for its run, a story the state machine accepts, no torn tail, not terminated —
// and only then returns a Writer positioned after its last line, with the records read.
// Nothing is written. A journal that fails any check is ErrNotResumable, and the file is
// left as it was.
func (s *Store) Reopen(name string) (*Writer, []Read, error) {
	ids, ok := strings.CutSuffix(name, ".jsonl")
	agentID, runID, _ := strings.Cut(ids, ".")
	if !ok || !ValidID(agentID) || !ValidID(runID) || FileName(agentID, runID) != name {
		return nil, nil, fmt.Errorf("%w: %q is not a journal's name", ErrNotResumable, name)
	}
	path := filepath.Join(s.path, name)
	rootFD, err := unix.FcntlInt(s.root.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, errcode.Errorf(errcode.AuditUnavailable, "journal: duplicate the project descriptor: %w", err)
	}
	fd, err := unix.Openat(int(s.dir.Fd()), name, unix.O_RDWR|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(rootFD)
		return nil, nil, fmt.Errorf("%w: open %s: %w", ErrNotResumable, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	fail := func(format string, a ...any) (*Writer, []Read, error) {
		f.Close()
		unix.Close(rootFD)
		return nil, nil, fmt.Errorf("%w: %s: %s", ErrNotResumable, path, fmt.Sprintf(format, a...))
	}
	if err := lockForWriting(fd, path); err != nil {
		return fail("another writer holds it: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("stat: %v", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fail("not a regular file")
	case st.Nlink != 1:
		return fail("%d links, want 1", st.Nlink)
	case st.Size > MaxFileBytes:
		return fail("%d bytes, over the %d-byte limit", st.Size, MaxFileBytes)
	}
	data, err := io.ReadAll(io.NewSectionReader(f, 0, st.Size))
	if err != nil {
		return fail("read: %v", err)
	}
	// The lines read may be in the page cache only (their writer was stopped between a
	// write and its fsync): they are durable, and counted so, once this fsync returns.
	if err := f.Sync(); err != nil {
		return fail("fsync: %v", err)
	}
	w := newWriter(f, path, s.key, agentID, runID)
	w.root = os.NewFile(uintptr(rootFD), s.root.Name())
	w.name = name
	entries, err := w.replay(data, s.PublicKey())
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrNotResumable, path, err)
	}
	return w, entries, nil
}

// replay verifies data, the whole journal, as the verifier does, and sets w's state to
// continue after it.
func (w *Writer) replay(data []byte, pub []byte) ([]Read, error) {
	r := &Report{}
	verifyData(r, data, pub, VerifyOptions{RunID: w.runID})
	switch {
	case len(r.Problems) > 0:
		return nil, fmt.Errorf("line %d: %s", r.Problems[0].Line, r.Problems[0].Message)
	case r.TailBytes > 0:
		return nil, fmt.Errorf("a torn last line (%d bytes after the last newline)", r.TailBytes)
	case r.Records == 0:
		return nil, errors.New("empty")
	case r.TerminalReason != "" || r.Complete:
		return nil, errors.New("the run has ended (terminated)")
	}
	var entries []Read
	msg := make([]byte, 0, 4096)
	var machine Machine
	for rest := data; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		e, err := checkLine(line, pub, &msg)
		if err != nil {
			return nil, err
		}
		if e.agentID != w.agentID {
			return nil, fmt.Errorf("agent_id %q, the file's name says %q", e.agentID, w.agentID)
		}
		if err := machine.Next(e.step); err != nil {
			return nil, err
		}
		entries = append(entries, Read{Seq: len(entries), Type: e.typ, Time: e.time, Data: e.data})
		// A gate's wait the journal leaves open is open still; after session_finished the
		// rest may use ClosingReserve.
		w.track(waitChangeOfStep(e.step))
		w.finished = w.finished || e.typ == TypeSessionFinished
	}
	w.seq, w.durable, w.durableSize = r.Records, r.Records, int64(len(data))
	w.prev, w.durableHead = r.Head, r.Head
	w.durableWait = len(w.waits) > 0
	w.size = int64(len(data))
	w.machine = machine
	return entries, nil
}

// writerLockWait bounds how long lockForWriting waits for shared locks to be let go.
var writerLockWait = 10 * time.Second

// testLockWaits, when a test sets it, is called once lockForWriting begins to wait for
// shared locks to be let go.
var testLockWaits func()

// lockForWriting takes the exclusive lock of the journal open as fd, which its writer
// holds for the run's lifetime. A shared lock held for an instant (InProgress, asked by
// another process) does not make it another writer's: when no exclusive lock is held —
// a shared one can be had on another descriptor — it waits for the probes to let go, for
// writerLockWait at most: a shared lock held longer (a process that took one and keeps
// it) is refused, rather than hold the server's start for ever.
func lockForWriting(fd int, path string) error {
	err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if !errors.Is(err, unix.EWOULDBLOCK) {
		return err
	}
	probe, perr := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if perr != nil {
		return err
	}
	shared := unix.Flock(probe, unix.LOCK_SH|unix.LOCK_NB)
	unix.Close(probe)
	if shared != nil {
		return err // an exclusive lock: another writer
	}
	deadline := time.Now().Add(writerLockWait)
	if testLockWaits != nil {
		testLockWaits()
	}
	for {
		time.Sleep(10 * time.Millisecond) // a probe holds it for an instant
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case !errors.Is(err, unix.EWOULDBLOCK):
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("a lock another process holds on it was not let go within %v: %w", writerLockWait, err)
		}
	}
}
