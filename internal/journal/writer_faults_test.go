package journal

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"testing"
)

// TestDiscardKeepsForeignBytes: Discard removes no journal that holds bytes someone else
// wrote (which the writer's own length check detected): they are evidence, not debris.
func TestDiscardKeepsForeignBytes(t *testing.T) {
	_, w := createJournal(t, "r-foreign")
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	appendBytes(t, w.Path(), []byte("{\"forged\":true}\n"))
	if err := w.Sync(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Sync after a foreign write: %v, want ErrStopped", err)
	}
	derr := w.Discard()
	data, rerr := os.ReadFile(w.Path())
	if rerr != nil {
		t.Fatalf("Discard (err %v) removed a journal holding bytes someone else wrote: %v", derr, rerr)
	}
	if !bytes.Contains(data, []byte("forged")) {
		t.Fatalf("the foreign bytes are gone: %q", data)
	}
	if derr == nil {
		t.Error("Discard kept the file but reported success")
	}
}

// TestCreateOpeningKeepsForeignBytes: the same through Create's opening records: bytes
// another process writes into the new journal before they are written stop the writer,
// and Create keeps the file (ErrOpeningKept), the evidence with it.
func TestCreateOpeningKeepsForeignBytes(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	name := FileName("agent", "r-foreign-open")
	testCreating = func() {
		f, err := os.OpenFile(s.Dir()+"/"+name, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
			return
		}
		f.WriteString("{\"forged\":true}\n")
		f.Close()
	}
	defer func() { testCreating = nil }()
	w, err := s.Create("agent", "r-foreign-open", Started{Agent: "a"})
	if err == nil {
		w.Close()
		t.Fatal("Create wrote its opening record after a foreign write")
	}
	data, rerr := os.ReadFile(s.Dir() + "/" + name)
	if rerr != nil || !bytes.Contains(data, []byte("forged")) {
		t.Fatalf("Create (%v) removed the journal holding bytes someone else wrote (read: %v, %q)", err, rerr, data)
	}
}

// TestCloseRacesSync (meaningful with -race): Close takes the writer's lock and stops it,
// so a Sync or Discard racing it never uses a descriptor Close freed (or one the process
// reused since for another file). acp syncs a record after releasing its own lock, so a
// Sync can run while a run's deferred Close does.
func TestCloseRacesSync(t *testing.T) {
	for i := 0; i < 200; i++ {
		_, w := createJournal(t, fmt.Sprintf("r-close-%d", i))
		if err := w.Append(Started{Agent: "a"}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); w.Sync() }()
		go func() { defer wg.Done(); w.Close() }()
		wg.Wait()
	}
}

// statFailFile is an *os.File whose next Stat after a successful Sync fails once, as a
// getattr error of a network or FUSE file system leaves it.
type statFailFile struct {
	*os.File
	armed, synced bool
}

func (f *statFailFile) Sync() error {
	err := f.File.Sync()
	f.synced = err == nil
	return err
}

func (f *statFailFile) Stat() (fs.FileInfo, error) {
	if f.armed && f.synced {
		f.armed = false
		return nil, syscall.EIO
	}
	return f.File.Stat()
}

// TestSyncStatFailureCutsBack: a Sync whose fsync succeeded but whose check after it (the
// Stat for the length) fails stops the writer and cuts the file back to the last durable
// point, as a failed write or fsync does: a journal keeping the lines after it would tell
// what did not happen (a terminated saying a text was released that was withheld).
func TestSyncStatFailureCutsBack(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	real, err := s.Create("a", "r")
	if err != nil {
		t.Fatal(err)
	}
	ff := &statFailFile{File: real.f.(*os.File)}
	w := newWriter(ff, real.Path(), s.key, "a", "r")
	t.Cleanup(func() { w.Close() })
	recs := run{agent: "greeter", prompt: "p", text: "the answer", allow: true}.records()
	for _, r := range recs[:4] {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(recs[4]); err != nil { // terminated completed, released
		t.Fatal(err)
	}
	ff.armed = true
	if err := w.Sync(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Sync with a failing check: %v, want ErrStopped", err)
	}
	// The caller was told the journal failed: the text is withheld, the run audit_failed.
	rep := Verify(w.Path(), s.PublicKey(), VerifyOptions{})
	if rep.Released || rep.Complete {
		t.Fatalf("after a failed Sync (text withheld) the journal keeps its unacknowledged terminated: verifies %s, released %v, %d records (Kept %+v); want it cut back to the %d durable records",
			rep.Status, rep.Released, rep.Records, w.Kept(), 4)
	}
}
