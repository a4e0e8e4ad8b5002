package journal

import (
	"errors"
	"os"
	"testing"

	"symbi/internal/errcode"
)

// TestSyncChecksLength: a journal file whose length changed behind the writer's back stops
// the writer, checked before every append and after every fsync: a line another process
// appends after the run's last append (its terminated record) fails the Sync that precedes
// the release.
func TestSyncChecksLength(t *testing.T) {
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
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
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
