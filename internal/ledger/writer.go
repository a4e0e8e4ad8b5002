package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// Writer appends to a project's ledger. Appends are serialized — within the process by a
// mutex, across processes (two servers on one project, symbi audit prune) by an exclusive
// flock held while a line is written, the writer first taking in, verified, the lines
// others appended since. Concurrent appenders share fsyncs (group commit): lines written
// while an fsync is in flight are made durable together by the next one. After each fsync
// it checks that its file is still the project's ledger (one link, the file at
// .symbiont/ledger.jsonl found from the project without following links). After one
// failed write, fsync or check it refuses every later append; after a failed fsync it
// also removes, where it can, its lines no fsync covered (retract).
type Writer struct {
	mu   sync.Mutex
	cond *sync.Cond
	f    *os.File
	root *os.File // the project, to find the ledger from at each check; nil in unit tests
	key  ed25519.PrivateKey
	now  func() time.Time
	sync func() error // f.Sync; a test makes it fail

	known   map[string]bool // run ids with a run, recovered or pruned entry
	pruned  map[string]bool // run ids with a pruned entry
	settled map[string]bool // run ids with a resolution entry
	size    int64           // bytes of the ledger taken in (verified or written)
	max     int64           // the most bytes the ledger may hold: MaxLedgerBytes
	seq     int64           // the next line's seq
	prev    string          // hash of the last line written
	synced  int64           // lines made durable
	syncing bool            // an fsync is in flight
	floor   int64           // bytes durable or another process's: retract cuts no lower
	failed  error           // the first failure: every later append is refused
	syncErr error           // a failed fsync or check: lines it did not cover never will be
	// held: this writer keeps the flock from a line's write until an fsync has covered
	// it or it is retracted, so that another process (a checkpoint: ReadDurable) reads
	// only lines whose fsync this writer has seen succeed. lock and unlock do nothing
	// while it is set.
	held bool

	opening  bool   // catchUp is reading the ledger for Open
	opened   []Line // the lines verified at Open, until TakeOpened
	openedID [2]uint64
}

// Entry is an appended line: its index and hash, and the tree size once it is durable.
type Entry struct {
	Seq  int64
	Hash string // lowercase hex SHA-256 of the line including "\n"
}

// Open opens (creating, 0600) <root>/.symbiont/ledger.jsonl for appending without
// following a symbolic link (in a .symbiont that journal.CheckDir accepts), checks that it
// is a regular file with one link owned by the effective user, and verifies it with key's public key: its chain must be whole to be
// continued. A torn last line — a crash mid-append, never acknowledged — is cut off. The
// caller closes the Writer. Failures carry errcode.AuditUnavailable.
func Open(root *os.File, key ed25519.PrivateKey) (*Writer, error) {
	sym, err := unix.Openat(int(root.Fd()), ".symbiont", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: open .symbiont: %w", err)
	}
	defer unix.Close(sym)
	if err := journal.CheckDir(sym, filepath.Join(root.Name(), ".symbiont")); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(sym, FileName, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: open %s: %w", FileName, err)
	}
	f := os.NewFile(uintptr(fd), FileName)
	w, err := resume(f, key)
	if err != nil {
		f.Close()
		return nil, errcode.Wrap(errcode.AuditUnavailable, err)
	}
	if err := unix.Fsync(sym); err != nil { // the file's name is durable too
		f.Close()
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: sync .symbiont: %w", err)
	}
	rootFD, err := unix.FcntlInt(root.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		f.Close()
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: duplicate the project descriptor: %w", err)
	}
	w.root = os.NewFile(uintptr(rootFD), root.Name())
	return w, nil
}

// resume checks f and reads its lines to continue the chain.
func resume(f *os.File, key ed25519.PrivateKey) (*Writer, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("ledger: stat: %w", err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, errors.New("ledger: not a regular file")
	case st.Nlink != 1:
		return nil, fmt.Errorf("ledger: the file has %d links, want 1", st.Nlink)
	case int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("ledger: owned by uid %d, not the effective user %d", st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("ledger: mode %04o; group and other must have no permissions", st.Mode&0o7777)
	}
	w := &Writer{f: f, key: key, now: time.Now, sync: f.Sync, prev: ZeroHash, max: MaxLedgerBytes, known: map[string]bool{}, pruned: map[string]bool{}, settled: map[string]bool{}, openedID: [2]uint64{uint64(st.Dev), st.Ino}}
	w.cond = sync.NewCond(&w.mu)
	if err := w.lock(); err != nil {
		return nil, err
	}
	defer w.unlock()
	w.opening = true
	err := w.catchUp()
	w.opening = false
	if err != nil {
		return nil, err
	}
	w.synced, w.floor = w.seq, w.size
	return w, nil
}

func (w *Writer) lock() error {
	if w.held {
		return nil
	}
	if err := unix.Flock(int(w.f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("ledger: lock: %w", err)
	}
	return nil
}

func (w *Writer) unlock() {
	if !w.held {
		unix.Flock(int(w.f.Fd()), unix.LOCK_UN)
	}
}

// release lets the flock go once every line written is covered by an fsync or
// retracted (with w.mu held).
func (w *Writer) release() {
	if w.held && (w.synced == w.seq || w.syncErr != nil) {
		w.held = false
		w.unlock()
	}
}

// catchUp takes in, with the flock held, the lines appended since w.size — by this
// writer at Open, or by another process since — verifying each as the chain continues.
// A torn last line, which only a writer that failed or crashed mid-append leaves (lines
// are written whole under the lock), was never acknowledged and is cut off.
func (w *Writer) catchUp() error {
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("ledger: stat: %w", err)
	}
	switch {
	case st.Size() < w.size:
		return fmt.Errorf("ledger: the file shrank from %d to %d bytes behind this writer", w.size, st.Size())
	case st.Size() == w.size:
		return nil
	case st.Size() > MaxLedgerBytes:
		return fmt.Errorf("ledger: the file has %d bytes, more than the %d a ledger may hold: %w", st.Size(), int64(MaxLedgerBytes), ErrFull)
	}
	data := make([]byte, st.Size()-w.size)
	if _, err := w.f.ReadAt(data, w.size); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("ledger: read: %w", err)
	}
	// The whole lines are verified in order, their signatures in batches; a torn last
	// line is cut off.
	rd := &Reader{pub: w.PublicKey(), seq: w.seq, prev: w.prev}
	_, err = rd.NextIn(data, func(verified []Line) {
		for _, l := range verified {
			if id := l.RunID(); id != "" {
				w.known[id] = true
				w.pruned[id] = w.pruned[id] || l.Type == TypePruned
			}
			if l.resolves != "" {
				w.settled[l.resolves] = true
			}
			w.size += int64(len(l.Leaf)) + 1
		}
		if w.opening {
			w.opened = append(w.opened, verified...)
		}
	})
	w.seq, w.prev = rd.seq, rd.prev
	if err != nil {
		return fmt.Errorf("ledger: cannot continue an invalid ledger: line %d: %v", w.seq+1, err)
	}
	if w.size < st.Size() {
		if err := w.f.Truncate(w.size); err != nil {
			return fmt.Errorf("ledger: cut the torn last line: %w", err)
		}
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("ledger: sync: %w", err)
		}
	}
	return nil
}

// Opened is what a Writer verified of the ledger when it opened: its lines in order, the
// file they were read from, and a Reader that continues the chain after them. A reader
// that follows the ledger (the run index) starts from it instead of verifying the same
// lines again.
type Opened struct {
	Lines  []Line
	Size   int64     // bytes of the file the lines take
	FileID [2]uint64 // device and inode of the file
	Reader *Reader   // expects the line after Lines
}

// PublicKey is the key the Writer signs with and verified the ledger with.
func (w *Writer) PublicKey() ed25519.PublicKey { return w.key.Public().(ed25519.PublicKey) }

// TakeOpened returns what the Writer verified at Open and forgets it (nil the second
// time). Until then the Writer holds those lines: a long-lived caller that does not
// follow the ledger takes them to free them. Lines appended since, by this Writer or another process, follow Size.
func (w *Writer) TakeOpened() *Opened {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opened == nil && w.openedID == ([2]uint64{}) {
		return nil
	}
	o := &Opened{Lines: w.opened, FileID: w.openedID}
	for _, l := range o.Lines {
		o.Size += int64(len(l.Leaf)) + 1
	}
	o.Reader = &Reader{pub: w.PublicKey(), seq: int64(len(o.Lines)), prev: ZeroHash}
	if n := len(o.Lines); n > 0 {
		o.Reader.prev = o.Lines[n-1].Hash
	}
	w.opened, w.openedID = nil, [2]uint64{}
	return o
}

// entryValue is r as one of the ledger's entry types, by value: a pointer to one is taken
// as what it points to (the checks Append makes of a pruned or recovered entry, and the
// runs it records as known, go by the value types), and anything else is refused.
func entryValue(r Record) (Record, error) {
	switch v := r.(type) {
	case Run, Resolution, Approval, Recovered, Pruned:
		return r, nil
	case *Run:
		if v != nil {
			return *v, nil
		}
	case *Resolution:
		if v != nil {
			return *v, nil
		}
	case *Approval:
		if v != nil {
			return *v, nil
		}
	case *Recovered:
		if v != nil {
			return *v, nil
		}
	case *Pruned:
		if v != nil {
			return *v, nil
		}
	}
	return nil, fmt.Errorf("ledger: %T is not an entry the ledger records", r)
}

// Append signs r as the next line, writes it and returns once it is durable. A failure
// carries errcode.AuditUnavailable and stops the writer.
func (w *Writer) Append(r Record) (Entry, error) {
	r, err := entryValue(r)
	if err != nil {
		return Entry{}, errcode.Wrap(errcode.Internal, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "%w (first failure: %w)", ErrStopped, w.failed)
	}
	if err := w.lock(); err != nil {
		return Entry{}, errcode.Wrap(errcode.AuditUnavailable, err)
	}
	if err := w.takeIn(); err != nil {
		w.unlock()
		return Entry{}, err
	}
	// Reconciliation decided on a recovered entry from what this writer had read; another
	// server may have recorded the run since (taken in just now).
	if rec, ok := r.(Recovered); ok && w.known[rec.RunID] {
		w.unlock()
		return Entry{}, fmt.Errorf("ledger: recovered %s: %w", rec.RunID, ErrKnown)
	}
	// Prune decided on a run from what it had read; another prune may have recorded it
	// since (taken in just now): a run is pruned once.
	if p, ok := r.(Pruned); ok && w.pruned[p.RunID] {
		w.unlock()
		return Entry{}, fmt.Errorf("ledger: pruned %s: %w", p.RunID, ErrPruned)
	} else if ok && !w.known[p.RunID] {
		w.unlock()
		return Entry{}, fmt.Errorf("ledger: pruned %s: %w", p.RunID, ErrNotRecorded)
	}
	line, err := w.line(r)
	if err != nil {
		w.unlock()
		return Entry{}, errcode.Wrap(errcode.Internal, err)
	}
	if w.size+int64(len(line)) > w.max {
		w.unlock()
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "ledger: %d bytes, and a %s entry of %d would pass the %d a ledger may hold (a verifier reads no more): %w",
			w.size, r.Type(), len(line), w.max, ErrFull)
	}
	if !endsRun(r) && w.size+int64(len(line))+RunRoom > w.max {
		// The last RunRoom bytes are the room Room promised the runs in flight: a run
		// that started must be able to record its end, whatever else is appended.
		w.unlock()
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "ledger: %d bytes, and a %s entry of %d would take from the last %d of the %d a ledger may hold, kept for the entries of runs in flight: %w",
			w.size, r.Type(), len(line), RunRoom, w.max, ErrFull)
	}
	if _, err := w.f.Write(line); err != nil {
		w.unlock()
		w.failed = err
		w.cond.Broadcast()
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "ledger: write: %w", err)
	}
	w.held = true // until an fsync covers the line, or it is retracted
	e := Entry{Seq: w.seq, Hash: digest.SHA256Hex(line)}
	w.seq++
	w.prev = e.Hash
	w.size += int64(len(line))
	switch r := r.(type) {
	case Run:
		w.known[r.RunID] = true
	case Recovered:
		w.known[r.RunID] = true
	case Pruned:
		w.known[r.RunID] = true
		w.pruned[r.RunID] = true
	case Resolution:
		w.settled[r.RunID] = true
	}
	// Group commit: wait until an fsync that began after this line was written covers it.
	// A failure other than an fsync's (another append's) does not stop this line's fsync:
	// it is written, and its run is told whether it is durable.
	for w.synced <= e.Seq && w.syncErr == nil {
		if w.syncing {
			w.cond.Wait()
			continue
		}
		w.syncing = true
		target, targetSize := w.seq, w.size
		w.mu.Unlock()
		err := w.sync()
		synced := err == nil
		if !synced {
			err = fmt.Errorf("fsync: %w", err)
		} else {
			err = w.checkReachable()
		}
		w.mu.Lock()
		w.syncing = false
		if err != nil {
			w.syncErr = err
			if w.failed == nil {
				w.failed = err
			}
			if !synced {
				// Lines an fsync made durable are never cut (a checkpoint may have
				// signed them); lines whose fsync failed are not, and their runs are
				// told so.
				w.retract()
			}
		} else if target > w.synced {
			w.synced, w.floor = target, max(w.floor, targetSize)
		}
		w.release()
		w.cond.Broadcast()
	}
	if w.synced <= e.Seq {
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "ledger: %w", w.syncErr)
	}
	return e, nil
}

// retract, after a failed fsync, cuts off this writer's lines no fsync covered,
// when no other process has appended after them: their runs are told the ledger failed
// and their journals end audit_failed, so the lines must not stay as if recorded — a run
// without an entry gets a recovered one, as found, at the next start-up. Best effort,
// with w.mu held: lines it cannot cut stay, and verification reports each such entry
// against its journal.
func (w *Writer) retract() {
	if w.size <= w.floor || w.lock() != nil {
		return
	}
	defer w.unlock()
	if st, err := w.f.Stat(); err != nil || st.Size() != w.size {
		return
	}
	if w.f.Truncate(w.floor) == nil && w.sync() == nil {
		w.size = w.floor
	}
}

// checkReachable refuses a ledger file that is no longer exactly one name in the file
// system, or no longer the file at .symbiont/ledger.jsonl found from the project without
// following links: lines appended there could not be found by an auditor.
func (w *Writer) checkReachable() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(w.f.Fd()), &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if st.Nlink != 1 {
		return fmt.Errorf("the ledger file has %d links, want 1 (it was removed or linked elsewhere)", st.Nlink)
	}
	if w.root == nil {
		return nil
	}
	sym, err := unix.Openat(int(w.root.Fd()), ".symbiont", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		var at unix.Stat_t
		err = unix.Fstatat(sym, FileName, &at, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(sym)
		if err == nil && (at.Dev != st.Dev || at.Ino != st.Ino) {
			err = errors.New("another file is there")
		}
	}
	if err != nil {
		return fmt.Errorf(".symbiont/%s is no longer this writer's ledger (it or .symbiont was moved, removed or replaced): %w", FileName, err)
	}
	return nil
}

// Refresh takes in, verified, the lines other processes appended since this writer last
// read the ledger (Knows then answers for them too). A failure stops the writer.
func (w *Writer) Refresh() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "%w (first failure: %w)", ErrStopped, w.failed)
	}
	if err := w.lock(); err != nil {
		return errcode.Wrap(errcode.AuditUnavailable, err)
	}
	defer w.unlock()
	return w.takeIn()
}

// takeIn is catchUp for a writer in use, with w.mu and the flock held: a failure stops
// the writer, and lines another process appended raise the floor retract cuts to (they
// follow this writer's own lines, which can then no longer be cut).
func (w *Writer) takeIn() error {
	before := w.size
	if err := w.catchUp(); err != nil {
		w.failed = err
		w.cond.Broadcast()
		return errcode.Wrap(errcode.AuditUnavailable, err)
	}
	if w.size != before {
		w.floor = w.size
	}
	return nil
}

// line signs r as the next line.
func (w *Writer) line(r Record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	p := payload{V: Version, Seq: w.seq, Prev: w.prev, Time: formatTime(w.now()), Type: r.Type(), Data: r}
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("ledger: encode %s: %w", r.Type(), err)
	}
	return journal.Seal(w.key, Context, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// Knows reports whether the ledger has a run, recovered or pruned entry for runID.
func (w *Writer) Knows(runID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.known[runID]
}

// endsRun reports whether r records a run's end (run, recovered): the entries the room
// Room keeps is for.
func endsRun(r Record) bool {
	switch r.(type) {
	case Run, Recovered:
		return true
	}
	return false
}

// Room refuses (audit_unavailable) when the ledger could record no run: its writer has
// stopped at a failure (ErrStopped: every later append is refused), or it has less than
// need bytes left before MaxLedgerBytes (ErrFull). A run is refused before it starts,
// rather than ending unrecorded once its journal is written and its model called. Append
// keeps the last RunRoom bytes for the entries that end runs, so that what Room found is
// not taken by other entries meanwhile.
func (w *Writer) Room(need int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "%w (first failure: %w), so no run can be recorded until the server is restarted", ErrStopped, w.failed)
	}
	if w.size+need > w.max {
		return errcode.Errorf(errcode.AuditUnavailable, "ledger: %d bytes, within %d of the %d a ledger may hold (a verifier reads no more), so no run can be recorded: %w (start a new project ledger)",
			w.size, need, w.max, ErrFull)
	}
	return nil
}

// Resolved reports whether the ledger has a resolution entry for runID: someone
// concluded about the run as finished.
func (w *Writer) Resolved(runID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.settled[runID]
}

// Size returns the number of durable lines.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Close closes the ledger file.
func (w *Writer) Close() error {
	if w.root != nil {
		w.root.Close()
	}
	return w.f.Close()
}
