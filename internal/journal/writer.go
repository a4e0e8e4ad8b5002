package journal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// Errors of the writer, checked with errors.Is. ErrStopped and write failures carry
// errcode.AuditUnavailable; the size limits carry errcode.LimitExceeded.
var (
	// ErrStopped: an earlier append or sync failed, so the writer refuses everything.
	ErrStopped = errors.New("journal writer stopped after a failure")
	// ErrRecordTooLarge: the line would exceed MaxRecordBytes; nothing was written.
	ErrRecordTooLarge = errors.New("journal record too large")
	// ErrFileTooLarge: the file would exceed MaxFileBytes; nothing was written.
	ErrFileTooLarge = errors.New("journal file too large")
	// ErrOrder: the record is not allowed here (first must be started; nothing after terminated).
	ErrOrder = errors.New("journal record out of order")
)

// file is what the writer needs of its journal file (an *os.File).
type file interface {
	Write([]byte) (int, error)
	Sync() error
	Stat() (fs.FileInfo, error)
	Truncate(size int64) error
	Close() error
}

// Writer appends the records of one run. Its methods are safe for concurrent use; appends
// are serialized. After one failed write or sync it refuses every later Append and Sync.
type Writer struct {
	mu          sync.Mutex
	f           file
	root        *os.File // the project directory; nil for an injected file in tests
	name        string   // the file's name in <root>/.symbiont/governed
	path        string
	key         ed25519.PrivateKey
	runID       string
	agentID     string
	now         func() time.Time
	seq         int
	durable     int             // records made durable by the last successful Sync
	durableHead string          // the hash of the last of them
	durableSize int64           // the file's length then
	keep        int64           // cutBack cuts no lower: the lines before a prepared terminated
	keepSeq     int             // the lines there
	keepHead    string          // the hash of the last of them
	waits       map[string]bool // the waits at a gate the records written leave open, by request_id ("" for the answer)
	durableWait bool            // whether the durable records leave a wait open (at the last Sync)
	machine     Machine         // the run's state after the records written
	size        int64
	prev        string
	terminated  bool
	finished    bool // session_finished is written: the rest may use ClosingReserve
	failed      error
	changed     chan struct{} // closed, and replaced, when durable changes
	closeOnce   sync.Once
	closeErr    error
}

// Create makes the run's journal <agentID>.<runID>.jsonl in the governed directory
// (O_CREAT|O_EXCL|O_NOFOLLOW, 0600) and fsyncs the file and the directory. Both ids must be
// non-empty and made of ASCII letters, digits, '-' and '_' (at most 128 bytes each).
//
// Then it appends first, the run's opening records (started first), without fsync: the
// caller syncs at its first durable point. They are checked and signed while the file is
// being created and made durable — another goroutine's work, off the run's critical path —
// and written only after, so the file holds exactly what Create followed by Append would
// have written, in the same order. If one of them cannot be written, the new file is removed
// and the error wraps ErrOpening; if the file could not be removed either, it wraps
// ErrOpeningKept instead.
func (s *Store) Create(agentID, runID string, first ...Record) (*Writer, error) {
	for _, id := range []string{agentID, runID} {
		if !ValidID(id) {
			return nil, errcode.Errorf(errcode.InvalidRequest, "journal: invalid id %q (letters, digits, '-' and '_' only)", id)
		}
	}
	name := FileName(agentID, runID)
	path := filepath.Join(s.path, name)
	var signed chan openingLines
	if len(first) > 0 {
		signed = make(chan openingLines, 1) // buffered: a creation that fails leaves no goroutine waiting
		go func() {
			defer func() {
				if v := recover(); v != nil { // not the server's end: the run's
					signed <- openingLines{err: errcode.Errorf(errcode.Internal, "journal: signing the opening records: %v", v)}
				}
			}()
			lines, err := newWriter(nil, path, s.key, agentID, runID).prepareAll(first)
			signed <- openingLines{lines, err}
		}()
	}
	// The writer keeps its own descriptor of the project, to locate its file from there;
	// taken first, so that no failure leaves a file behind it.
	rootFD, err := unix.FcntlInt(s.root.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "journal: duplicate the project descriptor: %w", err)
	}
	// The file is created and locked under the directory's scan lock, shared: a server
	// reconciling the ledger (ScanLock, exclusive) never finds it created and not yet
	// locked — an empty journal no writer holds, which it would record as abandoned.
	release, err := s.scanLock(unix.LOCK_SH)
	if err != nil {
		unix.Close(rootFD)
		return nil, err
	}
	fd, err := unix.Openat(int(s.dir.Fd()), name, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		release()
		unix.Close(rootFD)
		return nil, errcode.Errorf(errcode.AuditUnavailable, "journal: create %s: %w", path, err)
	}
	if testCreating != nil {
		testCreating()
	}
	f := os.NewFile(uintptr(fd), path)
	// undo removes the file just created, empty, when it cannot become a journal.
	undo := func(format string, a ...any) (*Writer, error) {
		f.Close()
		unix.Close(rootFD)
		unix.Unlinkat(int(s.dir.Fd()), name, 0)
		return nil, errcode.Errorf(errcode.AuditUnavailable, format, a...)
	}
	// The writer holds a lock on its file for its lifetime: another process reconciling
	// the project's ledger leaves a journal still being written alone (InProgress).
	// Blocking: the file is new, so only a passing probe (InProgress) can hold it.
	err = unix.Flock(fd, unix.LOCK_EX)
	release()
	if err != nil {
		return undo("journal: lock %s: %w", path, err)
	}
	if err := syncCreated(f); err != nil {
		return undo("journal: sync %s: %w", path, err)
	}
	if err := syncCreated(s.dir); err != nil {
		return undo("journal: sync directory %s: %w", s.path, err)
	}
	w := newWriter(f, path, s.key, agentID, runID)
	w.root = os.NewFile(uintptr(rootFD), s.root.Name())
	w.name = name
	if signed == nil {
		return w, nil
	}
	opening := <-signed
	err = opening.err
	for _, p := range opening.lines {
		if err != nil {
			break
		}
		err = w.AppendPrepared(p)
	}
	if err != nil {
		derr := w.Discard()
		w.Close()
		if derr != nil {
			return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s: the run's opening records: %w; and the file could not be removed: %v", ErrOpeningKept, path, err, derr)
		}
		return nil, fmt.Errorf("%w: %w", ErrOpening, err)
	}
	return w, nil
}

// testCreating, set by tests, runs inside Create between the file's creation and its lock.
var testCreating func()

// syncCreated is the fsync Create makes of a new journal file and then of its directory,
// before the file takes a line; tests replace it to see both made, in order, and to fail
// either.
var syncCreated = (*os.File).Sync

// scanLock takes the governed directory's scan lock (how: unix.LOCK_SH or LOCK_EX) on a
// descriptor of its own, so that concurrent holders in one process do not share it, and
// returns its release.
func (s *Store) scanLock(how int) (release func(), err error) {
	fd, err := unix.Openat(int(s.dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		if err = unix.Flock(fd, how); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "journal: lock the directory %s: %w", s.path, err)
	}
	return func() { unix.Close(fd) }, nil
}

// LockScan takes the scan lock of the governed directory dir exclusively, for a
// reconciliation deciding whether a journal no writer holds is abandoned: while it is
// held no journal is between its creation and its writer's lock (Create holds the lock
// shared there). The caller calls release.
func LockScan(dir string) (release func(), err error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		if err = unix.Flock(fd, unix.LOCK_EX); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "journal: lock the directory %s: %w", dir, err)
	}
	return func() { unix.Close(fd) }, nil
}

// ErrScanLocked is TryLockScan's error when the directory's lock stayed held by another
// process for all its wait.
var ErrScanLocked = errors.New("journal: the directory stayed locked by another process")

// TryLockScan is LockScan for a reader that must not hang on a lock others control —
// offline verification: it waits at most wait for the lock, then gives up with
// ErrScanLocked.
func TryLockScan(dir string, wait time.Duration) (release func(), err error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "journal: lock the directory %s: %w", dir, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return func() { unix.Close(fd) }, nil
		case !errors.Is(err, unix.EWOULDBLOCK):
			unix.Close(fd)
			return nil, errcode.Errorf(errcode.AuditUnavailable, "journal: lock the directory %s: %w", dir, err)
		case time.Now().After(deadline):
			unix.Close(fd)
			return nil, fmt.Errorf("%w: %s", ErrScanLocked, dir)
		}
		time.Sleep(10 * time.Millisecond) // a creation holds it for an instant
	}
}

// ErrOpening wraps the error of a run's opening records that Create could not write; the
// new file was removed.
var ErrOpening = errors.New("journal: the run's opening records could not be written, and its new file was removed")

// ErrOpeningKept wraps the error of a run's opening records that Create could not write
// when the new file could not be removed either: it is left, holding no durable record.
var ErrOpeningKept = errors.New("journal: the run's opening records could not be written, and its new file was kept")

// openingLines are the opening records of a run, prepared while its file is created.
type openingLines struct {
	lines []*Prepared
	err   error
}

// prepareAll prepares rs as the next lines, each following the one before, and advances
// the writer past them without writing anything: for a scratch writer with no file, whose
// lines another writer of the same run then writes with AppendPrepared.
func (w *Writer) prepareAll(rs []Record) ([]*Prepared, error) {
	lines := make([]*Prepared, 0, len(rs))
	for _, r := range rs {
		p, err := w.Prepare(r)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		w.advance(p)
		w.mu.Unlock()
		lines = append(lines, p)
	}
	return lines, nil
}

func newWriter(f file, path string, key ed25519.PrivateKey, agentID, runID string) *Writer {
	return &Writer{f: f, path: path, key: key, agentID: agentID, runID: runID, now: time.Now, prev: ZeroHash, changed: make(chan struct{})}
}

// ValidID reports whether s can be a run id or agent id: non-empty, at most 128 bytes of
// ASCII letters, digits, '-' and '_' (so it is safe in a file name).
func ValidID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// payload is P of the line format, members in their documented order.
type payload struct {
	V       int    `json:"v"`
	RunID   string `json:"run_id"`
	Seq     int    `json:"seq"`
	Prev    string `json:"prev"`
	Time    string `json:"time"`
	AgentID string `json:"agent_id"`
	Type    string `json:"type"`
	Data    Record `json:"data"`
}

// TimeLayout is the layout of a record's time: RFC 3339 in UTC with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// Append signs r and writes it as the next line, without fsync (call Sync at the points
// that must be durable). seq, prev, time, v, run_id and agent_id are assigned by the writer.
// The first record must be Started and nothing may follow Terminated. Before writing it
// checks that the file's length is what this writer wrote. A failed write, or a length
// mismatch, stops the writer (fail-stop); a record refused for its size or order is not
// written and does not stop it.
func (w *Writer) Append(r Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, err := w.prepareLocked(r)
	if err != nil {
		return err
	}
	return w.appendPreparedLocked(p)
}

// InProgress reports whether a writer still holds the journal at path (a run in flight
// in some process). A journal that is not there, or is a symbolic link, is not in
// progress; one that cannot be opened for another reason (no descriptor to spare) is
// taken to be: a run in flight is never taken for abandoned.
func InProgress(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	unix.Flock(fd, unix.LOCK_UN)
	return false
}

// Prepared is a record signed as the writer's next line but not yet written, and the
// receipt the journal will have once it is: another record (the project ledger's) can
// name that receipt before the line exists.
type Prepared struct {
	line    []byte
	typ     string
	machine Machine
	seq     int
	wait    waitChange
	Receipt Receipt
}

// waitChange is what a record does to the waits at a gate: approval_requested opens the
// wait of its request_id ("" for the answer); approval_decided closes it, and so does the
// permission_decided of a held request (a wait that timed out has no approval_decided).
type waitChange struct {
	opens, closes bool
	id            string
}

func waitChangeOf(r Record) waitChange { return waitChangeOfStep(stepOf(r)) }

// waitChangeOfStep is waitChangeOf for a record read back (Reopen).
func waitChangeOfStep(s Step) waitChange {
	switch s.Type {
	case TypeApprovalRequested:
		return waitChange{opens: true, id: s.RequestID}
	case TypeApprovalDecided, TypePermissionDecided:
		return waitChange{closes: true, id: s.RequestID}
	}
	return waitChange{}
}

// track records in w.waits the wait c opens or closes.
func (w *Writer) track(c waitChange) {
	switch {
	case c.opens:
		if w.waits == nil {
			w.waits = map[string]bool{}
		}
		w.waits[c.id] = true
	case c.closes:
		delete(w.waits, c.id)
	}
}

// Prepare checks r as the next record (order, the run's state machine, size limits) and
// signs it, writing nothing.
func (w *Writer) Prepare(r Record) (*Prepared, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.prepareLocked(r)
}

// prepareLocked is Prepare with w.mu held.
func (w *Writer) prepareLocked(r Record) (*Prepared, error) {
	if w.failed != nil {
		return nil, w.stoppedErr()
	}
	// A record given by pointer is checked, signed and written as its value: the
	// machine reads the value's fields.
	if v := reflect.ValueOf(r); v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, errcode.Errorf(errcode.Internal, "%w: a nil %s record", ErrOrder, v.Type())
		}
		r = v.Elem().Interface().(Record)
	}
	switch {
	case w.terminated:
		return nil, errcode.Errorf(errcode.Internal, "%w: %s after terminated", ErrOrder, r.Type())
	case w.seq == 0 && r.Type() != TypeStarted:
		return nil, errcode.Errorf(errcode.Internal, "%w: first record is %s, want started", ErrOrder, r.Type())
	case w.seq > 0 && r.Type() == TypeStarted:
		return nil, errcode.Errorf(errcode.Internal, "%w: started at seq %d", ErrOrder, w.seq)
	}
	// The same machine the verifier runs: the writer cannot write an impossible run.
	machine := w.machine
	if err := machine.Next(stepOf(r)); err != nil {
		return nil, errcode.Errorf(errcode.Internal, "%w: %w", ErrOrder, err)
	}
	line, err := w.line(r)
	if err != nil {
		return nil, err
	}
	if len(line) > MaxRecordBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "%w: %s record is %d bytes, limit %d", ErrRecordTooLarge, r.Type(), len(line), MaxRecordBytes)
	}
	limit := int64(MaxFileBytes)
	if t := r.Type(); !w.finished && t != TypeSessionFinished && t != TypeTerminated {
		limit -= ClosingReserve
	}
	if w.size+int64(len(line)) > limit {
		return nil, errcode.Errorf(errcode.LimitExceeded, "%w: %s would grow %s past %d bytes (%d kept for the records that close the run)", ErrFileTooLarge, r.Type(), w.path, limit, MaxFileBytes-limit)
	}
	if r.Type() == TypeTerminated {
		// Its receipt, and the head before it, may be recorded elsewhere before the line
		// is written (the project ledger's run entry): the lines it follows are never cut.
		w.keep, w.keepSeq, w.keepHead = w.size, w.seq, w.prev
	}
	return &Prepared{line: line, typ: r.Type(), machine: machine, seq: w.seq, wait: waitChangeOf(r), Receipt: Receipt{Records: w.seq + 1, Head: lineHash(line)}}, nil
}

// AppendPrepared writes p, which must be the next line still: nothing may have been
// appended since it was prepared.
func (w *Writer) AppendPrepared(p *Prepared) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendPreparedLocked(p)
}

// appendPreparedLocked is AppendPrepared with w.mu held.
func (w *Writer) appendPreparedLocked(p *Prepared) error {
	if w.failed != nil {
		return w.stoppedErr()
	}
	if p.seq != w.seq {
		return errcode.Errorf(errcode.Internal, "%w: a line prepared as seq %d, the journal is at %d", ErrOrder, p.seq, w.seq)
	}
	st, err := w.f.Stat()
	if err != nil {
		err = w.fail(fmt.Errorf("stat: %w", err))
		w.cutBack()
		return err
	}
	if st.Size() != w.size {
		return w.fail(fmt.Errorf("file is %d bytes, the writer wrote %d: someone else wrote to it", st.Size(), w.size))
	}
	// A file that is not exactly one name takes no more lines (its link count is in the
	// stat just made); whether it is still the file at its path is checked at each Sync,
	// the durable points: nothing is released before one, and a failed Sync cuts the
	// file back to the last.
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink != 1 {
		err := w.fail(fmt.Errorf("the journal file has %d links, want 1", sys.Nlink))
		w.cutBack()
		return err
	}
	n, err := w.f.Write(p.line)
	if err == nil && n != len(p.line) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(p.line))
	}
	if err != nil {
		err = w.fail(fmt.Errorf("write %s record: %w", p.typ, err))
		w.size += int64(n) // a torn line, which cutBack removes
		w.cutBack()
		return err
	}
	w.advance(p)
	return nil
}

// advance moves the writer's state past p, written (or, in prepareAll, counted as if).
func (w *Writer) advance(p *Prepared) {
	w.track(p.wait)
	w.size += int64(len(p.line))
	w.machine = p.machine
	w.seq++
	w.prev = p.Receipt.Head
	w.terminated = p.typ == TypeTerminated
	w.finished = w.finished || p.typ == TypeSessionFinished
}

// checkReachable refuses a journal file that is no longer exactly one name in the file
// system, or no longer the file at the writer's path (its directory was removed, renamed
// or replaced): records written there could not be found by an auditor given the path.
func (w *Writer) checkReachable(st fs.FileInfo) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return nil // an injected file in tests: no identity to compare
	case sys.Nlink == 0:
		return errors.New("the journal file was removed")
	case sys.Nlink != 1:
		return fmt.Errorf("the journal file has %d links, want 1", sys.Nlink)
	}
	if at, err := os.Lstat(w.path); err != nil || !os.SameFile(st, at) {
		return fmt.Errorf("%s is no longer this run's journal file (its directory or the project was moved or replaced)", w.path)
	}
	if w.root == nil {
		return nil
	}
	at, err := locate(w.root, w.name)
	if err != nil || at.Dev != sys.Dev || at.Ino != sys.Ino {
		detail := "another file is there"
		if err != nil {
			detail = err.Error()
		}
		return fmt.Errorf("%s is no longer this run's journal file, found from the project without following links (.symbiont or governed was moved, replaced or made a symlink): %s", w.path, detail)
	}
	return nil
}

// line builds the signed line for r.
func (w *Writer) line(r Record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	p := payload{V: Version, RunID: w.runID, Seq: w.seq, Prev: w.prev, Time: w.now().UTC().Format(TimeLayout), AgentID: w.agentID, Type: r.Type(), Data: normalize(r)}
	if err := enc.Encode(p); err != nil {
		return nil, errcode.Errorf(errcode.Internal, "journal: encode %s record: %w", r.Type(), err)
	}
	return Seal(w.key, SignatureContext, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// Seal returns the envelope line {"payload":P,"signature":"S"} and "\n" of the payload p,
// S being the padded base64 Ed25519 signature by key over context followed by p. A
// journal's lines use SignatureContext; another signed log (the project ledger) uses the
// same envelope under its own context, so a line of one is never valid in the other.
func Seal(key ed25519.PrivateKey, context string, p []byte) []byte {
	msg := make([]byte, 0, len(context)+len(p))
	sig := ed25519.Sign(key, append(append(msg, context...), p...))
	line := make([]byte, 0, len(p)+len(linePrefix)+len(sigPrefix)+base64.StdEncoding.EncodedLen(len(sig))+len(lineSuffix))
	line = append(line, linePrefix...)
	line = append(line, p...)
	line = append(line, sigPrefix...)
	line = base64.StdEncoding.AppendEncode(line, sig)
	return append(line, lineSuffix...)
}

// The fixed parts of a line.
const (
	linePrefix = `{"payload":`
	sigPrefix  = `,"signature":"`
	lineSuffix = "\"}\n"
	sigB64Len  = 88 // base64 of 64 bytes, padded
)

// Sync makes every appended line durable (fsync). A failure stops the writer.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return w.stoppedErr()
	}
	if err := w.f.Sync(); err != nil {
		err = w.fail(fmt.Errorf("fsync: %w", err))
		w.cutBack()
		return err
	}
	// What was made durable must be exactly what the writer wrote, and still reachable.
	st, err := w.f.Stat()
	if err != nil {
		err = w.fail(fmt.Errorf("stat: %w", err))
		w.cutBack() // it re-stats, and cuts only a file that holds what this writer wrote
		return err
	}
	if st.Size() != w.size {
		return w.fail(fmt.Errorf("file is %d bytes, the writer wrote %d: someone else wrote to it", st.Size(), w.size))
	}
	if err := w.checkReachable(st); err != nil {
		err = w.fail(err)
		w.cutBack()
		return err
	}
	if w.durable != w.seq {
		w.durable, w.durableHead, w.durableWait, w.durableSize = w.seq, w.prev, len(w.waits) > 0, w.size
		close(w.changed)
		w.changed = make(chan struct{})
	}
	return nil
}

// Changed returns a channel closed when Durable next changes: an observer takes it, reads
// Durable, and waits on it for more. It never closes for a writer whose records are all
// durable and that writes no more.
func (w *Writer) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// ErrDurable is returned by Discard for a journal that already holds a durable record.
var ErrDurable = errors.New("the journal holds a durable record and is kept")

// Discard removes the journal file of a run that could not make its first record durable
// (a full disk, a file size limit): such a file is debris, not evidence, and removing it
// loses nothing. It stops the writer. Once any record has been made durable it removes
// nothing and returns ErrDurable. The file is removed only if it holds exactly what this
// writer wrote (bytes someone else wrote are evidence) and the project's
// .symbiont/governed/<name>, found without following links, is still this writer's file.
func (w *Writer) Discard() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.durable > 0 {
		return ErrDurable
	}
	if w.failed == nil {
		w.failed = errors.New("discarded before its first record was durable")
	}
	if w.root == nil {
		return nil // an injected file in tests: nothing on disk to remove
	}
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: discard %s: %w", w.path, err)
	}
	if st.Size() != w.size {
		// Bytes someone else wrote are evidence, not debris: the file is kept.
		return fmt.Errorf("journal: discard %s: the file is %d bytes, the writer wrote %d: someone else wrote to it; nothing removed", w.path, st.Size(), w.size)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	gov, err := governedDir(w.root)
	if err != nil {
		return fmt.Errorf("journal: discard %s: %w", w.path, err)
	}
	defer unix.Close(gov)
	// The scan lock, shared (as Create holds it): a reconciliation deciding on this file
	// under the lock finds it in progress or gone, never gone between two of its looks.
	if err := unix.Flock(gov, unix.LOCK_SH); err != nil {
		return fmt.Errorf("journal: discard %s: lock the directory: %w", w.path, err)
	}
	var at unix.Stat_t
	if err := unix.Fstatat(gov, w.name, &at, unix.AT_SYMLINK_NOFOLLOW); err != nil || sys == nil || at.Dev != sys.Dev || at.Ino != sys.Ino {
		return fmt.Errorf("journal: discard %s: the name no longer leads to this run's file; nothing removed", w.path)
	}
	if err := unix.Unlinkat(gov, w.name, 0); err != nil {
		return fmt.Errorf("journal: discard %s: %w", w.path, err)
	}
	// The file is gone; were its removal lost to a crash, the file that came back holds
	// no durable record and is reported as such.
	unix.Fsync(gov)
	return nil
}

// cutBack, once the writer has stopped at a failed write, Sync or check, cuts its file
// back to the last durable point when the file holds exactly what this writer wrote
// (a torn line included): the lines after it were never acknowledged — a caller was told
// the run failed — and a journal that kept them would tell what did not happen (a
// terminated line saying the text was released, for a run whose text was withheld). It
// never cuts the lines before a prepared terminated record, which the project ledger's run
// entry may name already (the journal is then one line short of it, as a crash leaves
// it). Bytes someone else wrote are evidence and are left. Best effort, with w.mu held.
func (w *Writer) cutBack() {
	to, seq, head := w.durableSize, w.durable, w.durableHead
	if w.keep > to {
		to, seq, head = w.keep, w.keepSeq, w.keepHead
	}
	if w.size <= to {
		return
	}
	if st, err := w.f.Stat(); err != nil || st.Size() != w.size {
		return
	}
	if w.f.Truncate(to) == nil {
		w.size, w.seq, w.prev = to, seq, head
		w.f.Sync()
	}
}

// fail stops the writer; it is called with w.mu held.
func (w *Writer) fail(err error) error {
	w.failed = err
	return errcode.Errorf(errcode.AuditUnavailable, "journal %s: %w: %w", w.path, ErrStopped, err)
}

func (w *Writer) stoppedErr() error {
	return errcode.Errorf(errcode.AuditUnavailable, "journal %s: %w (first failure: %w)", w.path, ErrStopped, w.failed)
}

// Durable returns the receipt of what the last successful Sync made durable: the
// number of lines and the hash of the last of them. It is what a caller may be handed.
func (w *Writer) Durable() Receipt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Receipt{Records: w.durable, Head: w.durableHead}
}

// DurableWait returns the receipt of the records made durable so far and whether they
// leave a wait at a gate open (an approval_requested not yet followed by its
// approval_decided, or by the permission_decided of its request), read together.
func (w *Writer) DurableWait() (Receipt, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Receipt{Records: w.durable, Head: w.durableHead}, w.durableWait
}

// Kept returns the receipt of what the file keeps: Durable's while the writer runs;
// once it has stopped, the lines it cut back to (or, when it could not cut, those it
// wrote). It is what a failed run's caller is handed: verification with it agrees with
// the file.
func (w *Writer) Kept() Receipt {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		return Receipt{Records: w.durable, Head: w.durableHead}
	}
	return Receipt{Records: w.seq, Head: w.prev}
}

// Receipt returns the number of lines written and the hash of the last one.
func (w *Writer) Receipt() Receipt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Receipt{Records: w.seq, Head: w.prev}
}

// Path returns the absolute path of the journal.
func (w *Writer) Path() string { return w.path }

// RunID returns the run's id.
func (w *Writer) RunID() string { return w.runID }

// AgentID returns the id of the run's agent.
func (w *Writer) AgentID() string { return w.agentID }

// Close closes the journal file and releases its lock; it does not sync. Later calls
// return the first one's result.
func (w *Writer) Close() error {
	w.closeOnce.Do(func() {
		// Under w.mu, and stopping the writer: a Sync or Discard racing it never uses a
		// descriptor it closed (or one reused since for another file).
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.failed == nil {
			w.failed = ErrClosed
		}
		if w.root != nil {
			w.root.Close()
		}
		w.closeErr = w.f.Close()
	})
	return w.closeErr
}

// ErrClosed stops a writer that was closed: later appends and syncs fail with it.
var ErrClosed = errors.New("the journal writer is closed")
