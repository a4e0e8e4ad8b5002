package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// Writer appends to a project's ledger. Appends are serialized; concurrent appenders
// share fsyncs (group commit): lines written while an fsync is in flight are made
// durable together by the next one. After one failed write or fsync it refuses every
// later append.
type Writer struct {
	mu   sync.Mutex
	cond *sync.Cond
	f    *os.File
	key  ed25519.PrivateKey
	now  func() time.Time

	known   map[string]bool // run ids with a run, recovered or pruned entry
	seq     int64           // the next line's seq
	prev    string          // hash of the last line written
	synced  int64           // lines made durable
	syncing bool            // an fsync is in flight
	failed  error
}

// Entry is an appended line: its index and hash, and the tree size once it is durable.
type Entry struct {
	Seq  int64
	Hash string // lowercase hex SHA-256 of the line including "\n"
}

// Open opens (creating, 0600) <root>/.symbiont/ledger.jsonl for appending without
// following a symbolic link, checks that it is a regular file with one link owned by the
// effective user, and verifies it with key's public key: its chain must be whole to be
// continued. A torn last line — a crash mid-append, never acknowledged — is cut off. The
// caller closes the Writer. Failures carry errcode.AuditUnavailable.
func Open(root *os.File, key ed25519.PrivateKey) (*Writer, error) {
	sym, err := unix.Openat(int(root.Fd()), ".symbiont", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: open .symbiont: %w", err)
	}
	defer unix.Close(sym)
	fd, err := unix.Openat(sym, FileName, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
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
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("ledger: read: %w", err)
	}
	rep := Verify(data, key.Public().(ed25519.PublicKey))
	if len(rep.Problems) > 0 {
		return nil, fmt.Errorf("ledger: cannot continue an invalid ledger: line %d: %s", rep.Problems[0].Line, rep.Problems[0].Message)
	}
	if rep.TailBytes > 0 {
		// A line cut by a crash before its fsync: never acknowledged, so not a record.
		if err := f.Truncate(int64(len(data) - rep.TailBytes)); err != nil {
			return nil, fmt.Errorf("ledger: cut the torn last line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("ledger: sync: %w", err)
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return nil, fmt.Errorf("ledger: seek: %w", err)
	}
	w := &Writer{f: f, key: key, now: time.Now, seq: int64(len(rep.Entries)), synced: int64(len(rep.Entries)), prev: ZeroHash, known: map[string]bool{}}
	if n := len(rep.Entries); n > 0 {
		w.prev = rep.Entries[n-1].Hash
	}
	for _, l := range rep.Entries {
		if id := l.RunID(); id != "" {
			w.known[id] = true
		}
	}
	w.cond = sync.NewCond(&w.mu)
	return w, nil
}

// Append signs r as the next line, writes it and returns once it is durable. A failure
// carries errcode.AuditUnavailable and stops the writer.
func (w *Writer) Append(r Record) (Entry, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "%w (first failure: %w)", ErrStopped, w.failed)
	}
	line, err := w.line(r)
	if err != nil {
		return Entry{}, errcode.Wrap(errcode.Internal, err)
	}
	if _, err := w.f.Write(line); err != nil {
		w.failed = err
		w.cond.Broadcast()
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "ledger: write: %w", err)
	}
	e := Entry{Seq: w.seq, Hash: digest.SHA256Hex(line)}
	w.seq++
	w.prev = e.Hash
	switch r := r.(type) {
	case Run:
		w.known[r.RunID] = true
	case Recovered:
		w.known[r.RunID] = true
	case Pruned:
		w.known[r.RunID] = true
	}
	// Group commit: wait until an fsync that began after this line was written covers it.
	for w.synced <= e.Seq && w.failed == nil {
		if w.syncing {
			w.cond.Wait()
			continue
		}
		w.syncing = true
		target := w.seq
		w.mu.Unlock()
		err := w.f.Sync()
		w.mu.Lock()
		w.syncing = false
		if err != nil {
			w.failed = err
		} else if target > w.synced {
			w.synced = target
		}
		w.cond.Broadcast()
	}
	if w.synced <= e.Seq {
		return Entry{}, errcode.Errorf(errcode.AuditUnavailable, "ledger: fsync: %w", w.failed)
	}
	return e, nil
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

// Size returns the number of durable lines.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Close closes the ledger file.
func (w *Writer) Close() error { return w.f.Close() }
