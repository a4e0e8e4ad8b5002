package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// TestCreateOpening: the opening records given to Create are written after the file, in
// order, not yet durable; the journal then holds what Create followed by Append writes.
func TestCreateOpening(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	recs := run{agent: "helper", prompt: "hi", text: "hello", allow: true}.records()
	w, err := s.Create(agentID("helper"), "opening", recs[0], recs[1])
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Receipt().Records; got != 2 {
		t.Fatalf("after Create: %d records appended, want 2", got)
	}
	if got := w.Durable().Records; got != 0 {
		t.Fatalf("after Create: %d records durable, want 0 (the caller syncs)", got)
	}
	if lines := bytes.Count(mustRead(t, w.Path()), []byte("\n")); lines != 2 {
		t.Fatalf("after Create: the file holds %d lines, want 2", lines)
	}
	for _, r := range recs[2:] {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	rep := Verify(w.Path(), s.PublicKey(), VerifyOptions{RunID: "opening"})
	if rep.Status != StatusComplete || rep.Records != len(recs) {
		t.Fatalf("verify: %s", reportJSON(rep))
	}
	// The same records through Create and Append: the same lines but for time, prev and
	// signature.
	other := openStore(t, openRoot(t, t.TempDir()))
	ref := writeRecords(t, other, "helper", "opening", recs)
	got, want := payloads(t, w.Path()), payloads(t, ref.Path())
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range got {
		for _, k := range []string{"time", "prev"} {
			delete(got[i], k)
			delete(want[i], k)
		}
		g, _ := json.Marshal(got[i])
		x, _ := json.Marshal(want[i])
		if !bytes.Equal(g, x) {
			t.Errorf("line %d: %s\nwant %s", i, g, x)
		}
	}
}

// payloads returns the payload of each line of the journal at path.
func payloads(t *testing.T, path string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range bytes.Lines(mustRead(t, path)) {
		var l struct{ Payload map[string]any }
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Payload)
	}
	return out
}

// TestCreateOpeningRefused: an opening record that cannot be written fails Create with
// ErrOpening and the reason, and leaves no file behind.
func TestCreateOpeningRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first []Record
		want  error
	}{
		{"not started first", []Record{InferenceRequested{CallID: "c"}}, ErrOrder},
		{"started twice", []Record{Started{Agent: "a"}, Started{Agent: "a"}}, ErrOrder},
		{"record too large", []Record{Started{Agent: "a", Prompt: strings.Repeat("p", MaxRecordBytes)}}, ErrRecordTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, root := newProject(t)
			s := openStore(t, root)
			w, err := s.Create("a", "r", tc.first...)
			if w != nil || !errors.Is(err, ErrOpening) || !errors.Is(err, tc.want) {
				t.Fatalf("Create: %v, %v; want ErrOpening and %v", w, err, tc.want)
			}
			checkNoJournals(t, dir)
			// The name is free again: the run can be created.
			if w, err := s.Create("a", "r", Started{Agent: "a"}); err != nil {
				t.Fatalf("Create after the refusal: %v", err)
			} else {
				w.Close()
			}
		})
	}
}

// TestCreateOpeningWriteFails: an opening record whose write fails (a file size limit,
// in a child process) fails Create with ErrOpening, and the new file is removed.
func TestCreateOpeningWriteFails(t *testing.T) {
	dir, _ := newProject(t)
	var res struct {
		Opening, Kept bool
		Err           string
	}
	runChild(t, "opening", dir, &res)
	if !res.Opening || res.Kept || !strings.Contains(res.Err, "write started record") {
		t.Fatalf("child result %+v; want ErrOpening after a failed write", res)
	}
	checkNoJournals(t, dir)
}

// checkNoJournals fails t if the project dir's governed directory holds anything but
// the key.
func checkNoJournals(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, ".symbiont", "governed"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != KeyFileName {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// childOpening creates a journal whose started record is larger than the file size
// limit allows, and prints what Create returned.
func childOpening(dir string) int {
	s, err := childStore(dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := limitFileSize(1000); err != nil {
		fmt.Println(err)
		return 1
	}
	w, err := s.Create("a", "r", Started{Agent: "a", Prompt: strings.Repeat("p", 2000)})
	if w != nil {
		fmt.Println("Create succeeded")
		return 1
	}
	out, _ := json.Marshal(map[string]any{"Opening": errors.Is(err, ErrOpening), "Kept": errors.Is(err, ErrOpeningKept), "Err": err.Error()})
	fmt.Println(string(out))
	return 0
}

// TestCreateHoldsScanLock: between creating a journal and locking it, Create holds the
// governed directory's scan lock, so a reconciliation (LockScan, exclusive) never sees a
// journal created but not yet held by its writer; the lock is released when Create
// returns.
func TestCreateHoldsScanLock(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	var probed error
	testCreating = func() {
		fd, err := unix.Open(s.Dir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			probed = err
			return
		}
		defer unix.Close(fd)
		probed = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	}
	defer func() { testCreating = nil }()
	w, err := s.Create(agentID("helper"), "scan-locked")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !errors.Is(probed, unix.EWOULDBLOCK) {
		t.Fatalf("an exclusive scan lock inside Create's window: %v, want EWOULDBLOCK", probed)
	}
	release, err := LockScan(s.Dir())
	if err != nil {
		t.Fatalf("the scan lock after Create: %v", err)
	}
	release()
}

// TestCreateSyncsFileThenDirectory: Create fsyncs the new journal file and then its
// directory before the file takes any line (journal.md: the file created, "then the file
// and the directory fsynced"); either fsync failing refuses the run with
// audit_unavailable and leaves no file behind.
func TestCreateSyncsFileThenDirectory(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	defer func() { syncCreated = (*os.File).Sync }()
	recs := run{agent: "helper", prompt: "hi", text: "hello", allow: true}.records()
	path := filepath.Join(s.Dir(), FileName(agentID("helper"), "synced"))

	var synced []string
	syncCreated = func(f *os.File) error {
		if st, err := os.Stat(path); err != nil || st.Size() != 0 {
			t.Errorf("fsync of %s with the journal %v (size %v), want it created and empty", f.Name(), err, st)
		}
		synced = append(synced, f.Name())
		return f.Sync()
	}
	w, err := s.Create(agentID("helper"), "synced", recs[0], recs[1])
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if want := []string{path, s.Dir()}; !slices.Equal(synced, want) {
		t.Fatalf("Create fsynced %q, want %q", synced, want)
	}

	for i, which := range []string{"the file", "the directory"} {
		t.Run(which, func(t *testing.T) {
			calls := 0
			syncCreated = func(f *os.File) error {
				calls++
				if calls == i+1 {
					return unix.EIO
				}
				return f.Sync()
			}
			run := "sync-fails-" + strconv.Itoa(i)
			w, err := s.Create(agentID("helper"), run, recs[0], recs[1])
			if w != nil || errcode.Of(err) != errcode.AuditUnavailable || !errors.Is(err, unix.EIO) {
				t.Fatalf("Create with the fsync of %s failing: %v, %v; want audit_unavailable", which, w, err)
			}
			if _, err := os.Lstat(filepath.Join(s.Dir(), FileName(agentID("helper"), run))); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the file of a refused creation: %v, want it removed", err)
			}
		})
	}
}
