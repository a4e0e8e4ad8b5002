package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"symbi/internal/errcode"
)

func TestWriterRoundTrip(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	w := writeRun(t, s, allowedRunDef, allowedRun, -1)
	st, err := os.Lstat(w.Path())
	if err != nil || st.Mode() != 0o600 {
		t.Fatalf("journal mode %v, err %v", st.Mode(), err)
	}
	data := mustRead(t, w.Path())
	rc := w.Receipt()
	lines := splitLines(data)
	if rc.Records != 5 || len(lines) != 5 || rc.Head != lineHash(lines[4]) {
		t.Fatalf("receipt %+v for %d lines", rc, len(lines))
	}
	if bytes.Contains(data, []byte(`\u003c`)) || !bytes.Contains(data, []byte(`<Ada> & \"friends\"`)) {
		t.Error("payload is HTML-escaped or lacks the clear-text prompt")
	}
	r := Verify(w.Path(), s.PublicKey(), VerifyOptions{RunID: allowedRun, Head: rc.Head, Records: rc.Records})
	if r.ExitCode() != 0 || r.TerminalReason != "completed" || !r.Released || r.RunID != allowedRun || r.AgentID != agentID("greeter") {
		t.Fatalf("report %s", reportJSON(r))
	}
	if _, err := s.Create(agentID("greeter"), allowedRun); !errors.Is(err, errcode.AuditUnavailable) {
		t.Errorf("second Create of the same run: %v", err)
	}
	for _, id := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("a", 129)} {
		if _, err := s.Create(id, "r"); !errors.Is(err, errcode.InvalidRequest) {
			t.Errorf("Create(%q): %v", id, err)
		}
	}
}

func TestWriterOrderAndLimits(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	w, err := s.Create("a", "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(Terminated{Reason: "completed"}); !errors.Is(err, ErrOrder) {
		t.Errorf("terminated first: %v", err)
	}
	big := Started{Prompt: strings.Repeat("x", MaxRecordBytes)}
	if err := w.Append(big); !errors.Is(err, ErrRecordTooLarge) || !errors.Is(err, errcode.LimitExceeded) {
		t.Errorf("oversized record: %v", err)
	}
	// Neither refusal wrote anything or stopped the writer.
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(Started{Agent: "a"}); !errors.Is(err, ErrOrder) {
		t.Errorf("second started: %v", err)
	}
	w.size = MaxFileBytes - 100 // pretend the file is nearly full
	if err := w.Append(Terminated{Reason: "cancelled"}); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("file limit: %v", err)
	}
	w.size = int64(len(mustRead(t, w.Path())))
	if err := w.Append(Terminated{Reason: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(PolicyEvaluated{}); !errors.Is(err, ErrOrder) {
		t.Errorf("after terminated: %v", err)
	}
	if got := Verify(w.Path(), s.PublicKey(), VerifyOptions{}); got.ExitCode() != 0 {
		t.Errorf("report %s", reportJSON(got))
	}
}

// faultyFile is an *os.File whose writes or syncs can be made to fail.
type faultyFile struct {
	*os.File
	failWrite, failSync bool
}

func (f *faultyFile) Write(b []byte) (int, error) {
	if f.failWrite {
		n, _ := f.File.Write(b[:len(b)/2]) // a partial write, as a full disk leaves
		return n, syscall.ENOSPC
	}
	return f.File.Write(b)
}

func (f *faultyFile) Sync() error {
	if f.failSync {
		return syscall.EIO
	}
	return f.File.Sync()
}

func (f *faultyFile) Stat() (fs.FileInfo, error) { return f.File.Stat() }

// faultyWriter returns a store and a writer of the run "r" in it whose file is a
// faultyFile; the writer is closed at the test's end.
func faultyWriter(t *testing.T) (*Store, *faultyFile, *Writer) {
	t.Helper()
	_, root := newProject(t)
	s := openStore(t, root)
	real, err := s.Create("a", "r")
	if err != nil {
		t.Fatal(err)
	}
	ff := &faultyFile{File: real.f.(*os.File)}
	w := newWriter(ff, real.Path(), s.key, "a", "r")
	t.Cleanup(func() { w.Close() })
	return s, ff, w
}

func TestFailStop(t *testing.T) {
	tests := []struct {
		name   string
		inject func(f *faultyFile, path string) // called after the first record
		op     func(w *Writer) error            // the operation that fails
	}{
		{"write", func(f *faultyFile, _ string) { f.failWrite = true }, func(w *Writer) error { return w.Append(InferenceRequested{CallID: "c"}) }},
		{"fsync", func(f *faultyFile, _ string) { f.failSync = true }, func(w *Writer) error { return w.Sync() }},
		{"foreign write", func(_ *faultyFile, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				panic(err)
			}
			f.WriteString("{}\n")
			f.Close()
		}, func(w *Writer) error { return w.Append(InferenceRequested{CallID: "c"}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ff, w := faultyWriter(t)
			if err := w.Append(Started{Agent: "a"}); err != nil {
				t.Fatal(err)
			}
			tt.inject(ff, w.Path())
			err := tt.op(w)
			if !errors.Is(err, ErrStopped) || !errors.Is(err, errcode.AuditUnavailable) {
				t.Fatalf("failing operation: %v", err)
			}
			ff.failWrite, ff.failSync = false, false // the fault is gone; the writer stays stopped
			if err := w.Append(Terminated{Reason: "audit_failed"}); !errors.Is(err, ErrStopped) {
				t.Errorf("later append: %v", err)
			}
			if err := w.Sync(); !errors.Is(err, ErrStopped) {
				t.Errorf("later sync: %v", err)
			}
			// A writer stopped at its own failure cuts back to its last durable point (none
			// here); bytes someone else wrote are left, and so are the writer's lines.
			want := 0
			if tt.name == "foreign write" {
				want = 1
			}
			if rc := w.Kept(); rc.Records != want {
				t.Errorf("the file keeps %d records, want %d", rc.Records, want)
			}
			if r := Verify(w.Path(), s.PublicKey(), VerifyOptions{}); r.ExitCode() == 0 {
				t.Errorf("stopped journal verifies complete: %s", reportJSON(r))
			}
		})
	}
}

// childFsize appends to a journal under a low RLIMIT_FSIZE (with SIGXFSZ ignored, so the
// write fails with EFBIG instead of killing the process) and reports what happened.
func childFsize(dir string) int {
	s, err := childStore(dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	w, err := s.Create("a", "r")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := limitFileSize(2000); err != nil {
		fmt.Println(err)
		return 1
	}
	res := struct {
		Appended          int
		FirstErr, Later   string
		Stopped, LaterErr bool
	}{}
	var ferr error
	if ferr = w.Append(Started{Agent: "a", Prompt: strings.Repeat("p", 500)}); ferr == nil {
		res.Appended++
		for i := 0; i < 10; i++ {
			if ferr = w.Append(InferenceRequested{CallID: strings.Repeat("c", 500)}); ferr != nil {
				break
			}
			res.Appended++
		}
	}
	if ferr != nil {
		res.FirstErr = ferr.Error()
		res.Stopped = errors.Is(ferr, ErrStopped) && errors.Is(ferr, syscall.EFBIG)
	}
	lerr := w.Append(Terminated{Reason: "audit_failed"})
	res.LaterErr = errors.Is(lerr, ErrStopped)
	if lerr != nil {
		res.Later = lerr.Error()
	}
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

func TestFailStopRealFsizeLimit(t *testing.T) {
	dir, _ := newProject(t)
	var res struct {
		Appended          int
		FirstErr, Later   string
		Stopped, LaterErr bool
	}
	runChild(t, "fsize", dir, &res)
	if res.Appended < 1 || !res.Stopped || !res.LaterErr {
		t.Fatalf("child result %+v", res)
	}
}

// A journal file removed (or linked elsewhere) behind the writer stops it: records written
// to an unreachable file would prove nothing.
func TestFailStopUnlinked(t *testing.T) {
	for _, tt := range []struct {
		name string
		act  func(t *testing.T, path string) error
	}{
		{"removed", func(_ *testing.T, path string) error { return os.Remove(path) }},
		{"hard-linked", func(_ *testing.T, path string) error { return os.Link(path, path+".copy") }},
		{"directory renamed", func(_ *testing.T, path string) error {
			return os.Rename(filepath.Dir(path), filepath.Dir(path)+".moved")
		}},
		// The directories moved out of the project and symlinks left in their place: the
		// absolute path still leads to the file, but not from the project without links.
		{".symbiont swapped for a symlink", func(t *testing.T, path string) error {
			return swapForSymlink(t, filepath.Dir(filepath.Dir(path)))
		}},
		{"governed swapped for a symlink", func(t *testing.T, path string) error {
			return swapForSymlink(t, filepath.Dir(path))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, root := newProject(t)
			s := openStore(t, root)
			w, err := s.Create("agent", "run")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Append(Started{Agent: "a"}); err != nil {
				t.Fatal(err)
			}
			if err := tt.act(t, w.Path()); err != nil {
				t.Fatal(err)
			}
			if err := w.Sync(); !errors.Is(err, errcode.AuditUnavailable) {
				t.Fatalf("Sync after %s: %v, want audit_unavailable", tt.name, err)
			}
			if err := w.Append(Terminated{Reason: "completed", Released: true}); !errors.Is(err, ErrStopped) {
				t.Fatalf("Append after %s: %v, want ErrStopped", tt.name, err)
			}
		})
	}
}

// swapForSymlink moves dir to a fresh place outside its parent and leaves a symlink to it
// where it was.
func swapForSymlink(t *testing.T, dir string) error {
	dst := filepath.Join(t.TempDir(), filepath.Base(dir))
	if err := os.Rename(dir, dst); err != nil {
		return err
	}
	return os.Symlink(dst, dir)
}

// Discard removes a journal that holds no durable record, and keeps one that does.
func TestDiscard(t *testing.T) {
	s, w := createJournal(t, "empty")
	if err := w.Append(Started{Agent: "a"}); err != nil { // written, never synced
		t.Fatal(err)
	}
	if err := w.Discard(); err != nil {
		t.Fatalf("Discard: %v", err)
	}
	if _, err := os.Lstat(w.Path()); !os.IsNotExist(err) {
		t.Errorf("the discarded journal is still there: %v", err)
	}
	if err := w.Append(Terminated{Reason: "completed"}); !errors.Is(err, ErrStopped) {
		t.Errorf("Append after Discard: %v, want ErrStopped", err)
	}

	kept := startedRun(t, s, "durable")
	if err := kept.Discard(); !errors.Is(err, ErrDurable) {
		t.Errorf("Discard of a durable journal: %v, want ErrDurable", err)
	}
	if _, err := os.Lstat(kept.Path()); err != nil {
		t.Errorf("the durable journal was removed: %v", err)
	}
}

// TestDurableWait: the durable records leave a wait at a gate open from its
// approval_requested (durable) until its approval_decided — or, for a held permission
// request that timed out, its permission_decided — is durable; a written line not yet
// synced changes nothing.
func TestDurableWait(t *testing.T) {
	recs := delegatedRecords()
	_, w := createJournal(t, "run-wait")
	step := func(r Record, sync bool, want bool) {
		t.Helper()
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		rc, wait := w.DurableWait()
		if wait != want || rc != w.Durable() {
			t.Fatalf("after %s (synced %v): wait %v at %+v, want %v at %+v", r.Type(), sync, wait, rc, want, w.Durable())
		}
	}
	step(recs[0], true, false) // started
	step(recs[1], true, false) // session_started
	held := ApprovalRequested{Gate: "edits-review", RequestID: "perm-1", Kind: "edit", Title: "edit src/a.go", TimeoutMS: 300}
	step(held, false, false) // written, not durable
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, wait := w.DurableWait(); !wait {
		t.Fatal("no wait once approval_requested is durable")
	}
	// The wait timed out: the request is denied, with no approval_decided.
	step(PermissionDecided{RequestID: "perm-1", Kind: "edit", Title: "edit src/a.go", Paths: []string{"src/a.go"}, Decision: "deny", PolicyIDs: []string{"edits-review"}, OptionID: "reject-once"}, false, true)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, wait := w.DurableWait(); wait {
		t.Fatal("a wait still open after its permission_decided is durable")
	}
}

// TestClosingReserve: the records of a delegated session may not take a journal into its
// last ClosingReserve bytes, which session_finished, what follows it and terminated may
// use: a session that fills its journal still ends with a complete journal.
func TestClosingReserve(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	w, err := s.Create("coder", "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	recs := delegatedRecords()
	for _, r := range recs[:2] { // started, session_started
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	real := w.size
	w.size = MaxFileBytes - ClosingReserve - 100 // pretend the session nearly filled it
	if err := w.Append(recs[2]); !errors.Is(err, ErrFileTooLarge) || !strings.Contains(err.Error(), "kept for the records that close the run") {
		t.Fatalf("a session record into the reserve: %v", err)
	}
	// The reserve holds what closes the run (prepared only: the file is not that large).
	fin, closing := recs[len(recs)-3], []Record{recs[len(recs)-2], Terminated{Reason: "audit_failed"}}
	w.size = MaxFileBytes - ClosingReserve + 1
	if _, err := w.Prepare(fin); err != nil {
		t.Fatalf("session_finished in the reserve: %v", err)
	}
	w.size = real
	if err := w.Append(fin); err != nil {
		t.Fatal(err)
	}
	real = w.size
	w.size = MaxFileBytes - 2*MaxRecordBytes
	for _, r := range closing {
		if _, err := w.Prepare(r); err != nil {
			t.Fatalf("%s in the reserve: %v", r.Type(), err)
		}
	}
	w.size = real
}

// TestSyncChecksLength: a journal file whose length changed behind the writer's back stops
// the writer, checked before every append and after every fsync: a line another process
// appends after the run's last append (its terminated record) fails the Sync that precedes
// the release.
func TestSyncChecksLength(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	w := startedRun(t, s, "run")
	if err := w.Append(Terminated{Reason: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	// Another writer appends behind the run's back, after its last Append.
	f, err := os.OpenFile(w.Path(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("{}\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := w.Sync(); !errors.Is(err, ErrStopped) || !errors.Is(err, errcode.AuditUnavailable) {
		t.Fatalf("Sync after a foreign write: %v, want the writer stopped (audit_unavailable)", err)
	}
}

// startedRun creates the journal of run in s with its started record durable; it is
// closed when the test ends.
func startedRun(t *testing.T, s *Store, run string) *Writer {
	t.Helper()
	w, err := s.Create("agent", run)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	return w
}
