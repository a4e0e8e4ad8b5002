package ledger

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/journal"
)

// TestRecordAsFoundReplacedJournal: a run a caller heard of never vanishes from the
// ledger. A serving run's journal is replaced (renamed over) by a copy of another, recorded
// run's journal; the server records its run as found — under the ids it was given, as
// invalid, never the run the file claims (which the ledger knows, and would be passed
// over). Once the planted copy is removed, verify --project does not say the project is
// complete.
func TestRecordAsFoundReplacedJournal(t *testing.T) {
	p := newProjectRuns(t, 1) // run-0, recorded
	store := p.store(t)
	w := durableRun(t, store, "run-x", journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"})
	path := w.Path()
	w.Close()

	// The attacker renames a copy of run-0's journal over run-x's.
	other, err := os.ReadFile(p.files[0])
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(p.gov, "tmp.copy")
	if err := os.WriteFile(tmp, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}

	// The server records run-x as found, before returning its withheld result.
	if _, err := RecordAsFound(p.lw, path, "agent", "run-x"); err != nil {
		t.Fatal(err)
	}
	if !p.lw.Knows("run-x") {
		t.Errorf("RecordAsFound for run-x appended no entry for run-x: the file's copy of run-0 made it skip the run")
	}

	// The attacker removes the planted copy: nothing may say the project is whole.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r := VerifyProject(p.dir, p.pub, nil)
	if r.ExitCode() == 0 {
		t.Errorf("verify --project: exit 0 (%s), yet run-x, which ended audit_failed and whose caller was told so, is recorded nowhere: %+v", r.Status, r.Runs)
	}
}

// TestVerifyProjectDoesNotHangOnLockedDir: offline verification waits a bounded time for
// the governed directory's lock, which it takes to decide whether a writer holds a journal
// the ledger does not know (an abandoned run: what a crash leaves). Someone holding any
// lock on the directory for good cannot keep the auditor from a verdict: the first finding
// stands, exit 1, with a note saying why it was not decided further.
func TestVerifyProjectDoesNotHangOnLockedDir(t *testing.T) {
	p := newProjectRuns(t, 1)
	store := p.store(t)
	durableRun(t, store, "abandoned", journal.Started{Agent: "a"}).Close() // its server is gone: abandoned, not yet reconciled

	// Someone holds a shared lock on the governed directory, and keeps it.
	fd, err := unix.Open(p.gov, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd) // lets a hung VerifyProject go at the end

	defer func(w time.Duration) { scanLockWait = w }(scanLockWait)
	scanLockWait = 50 * time.Millisecond // the lock is held throughout: any wait gives up

	done := make(chan *ProjectReport, 1)
	go func() { done <- VerifyProject(p.dir, p.pub, nil) }()
	select {
	case r := <-done:
		if r.ExitCode() != 1 || !strings.Contains(fmt.Sprint(r.Runs), "stayed locked by another process") {
			t.Errorf("an abandoned journal the ledger does not know, the directory locked: exit %d, want 1 with a note: %+v", r.ExitCode(), r.Runs)
		}
	case <-time.After(5 * time.Minute): // a hang guard
		t.Errorf("verify --project still running: it blocks on a flock of the governed directory that another process holds")
	}
}
