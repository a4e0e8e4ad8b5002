package invoke

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
)

// TestLedgerFailureNamesTheLedger: a run whose journal wrote every record — its terminated
// says audit_failed — but whose end the project ledger could not record is withheld with
// audit_unavailable naming the ledger (ErrNotRecorded), not a failed journal write.
func TestLedgerFailureNamesTheLedger(t *testing.T) {
	f := newFixture(t, nil, nil)
	lw := withLedger(t, f)
	lw.Close() // every later append fails: the ledger, not the journal
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	var ie *Error
	if !errors.As(err, &ie) || !errors.Is(err, errcode.AuditUnavailable) || ie.Audit == nil {
		t.Fatalf("with a broken ledger: %v, want audit_unavailable with the run's journal", err)
	}
	recs := payloads(t, ie.Audit.Path)
	if last := recs[len(recs)-1]; last.Type != journal.TypeTerminated || !strings.Contains(string(last.Data), `"reason":"audit_failed"`) {
		t.Fatalf("the journal's last record is %s %s, want terminated audit_failed", last.Type, last.Data)
	}
	if msg := err.Error(); !errors.Is(err, ErrNotRecorded) || strings.Contains(msg, "journal write failed") || !strings.Contains(msg, "project ledger could not record the run") {
		t.Errorf("the journal wrote every record and only the ledger failed, but the caller is told:\n  %s", msg)
	}
}

// TestStoppedLedgerRefusesRuns: once the project ledger's writer has stopped (a failed
// write, fsync or check: every later append is refused), no run can record its end, so a
// new run is refused before it starts — no journal, no model call — as one is when the
// ledger is full or was unavailable at start-up.
func TestStoppedLedgerRefusesRuns(t *testing.T) {
	f := newFixture(t, nil, nil)
	lw := withLedger(t, f)
	// The ledger moved away: the next append's check after its fsync fails and stops the
	// writer.
	path := filepath.Join(f.dir, ".symbiont", ledger.FileName)
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "first"}, nil); !errors.Is(err, errcode.AuditUnavailable) {
		t.Fatalf("the run whose ledger append failed: %v, want audit_unavailable", err)
	}
	if _, err := lw.Append(ledger.Resolution{RunID: "x", Resolution: "accepted", Caller: "stdio"}); !errors.Is(err, ledger.ErrStopped) {
		t.Fatalf("the writer is not stopped: %v", err)
	}
	before := len(f.model.Requests())
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "second"}, nil)
	if !errors.Is(err, errcode.AuditUnavailable) || !errors.Is(err, ledger.ErrStopped) {
		t.Fatalf("a run after the ledger stopped: %v, want audit_unavailable (ErrStopped)", err)
	}
	if n := len(f.model.Requests()) - before; n != 0 {
		t.Errorf("a run after the ledger stopped sent %d request(s) to the provider", n)
	}
	var ie *Error
	if errors.As(err, &ie) && ie.Audit != nil {
		t.Errorf("a run after the ledger stopped has a journal: %s", ie.Audit.Path)
	}
}
