package runs_test

import (
	"context"
	"testing"

	"symbi/internal/journal"
	"symbi/internal/runs"
)

// Two servers on one project. Another server ends its run — its ledger entry durable,
// then its journal's terminated line, then its writer lets go — at any moment of this
// server's look at the run. The run completed and released its text: this server may say
// it is still running, or completed; never audit_failed ("the end was never written") nor
// a finished run the ledger has no entry for, and run_events never says done before its
// terminated event. (With real processes, run_status of one server polling the other's
// runs as they end hit both.)

// endAtRead makes the other server end its run the first time build reads the journal.
func endAtRead(t *testing.T, w *journal.Writer, prep *journal.Prepared) {
	t.Helper()
	done := false
	runs.SetTestAfterRead(func() {
		if done {
			return
		}
		done = true
		if err := w.AppendPrepared(prep); err != nil {
			t.Error(err)
		}
		if err := w.Sync(); err != nil {
			t.Error(err)
		}
		w.Close() // the other server's writer lets go
	})
	t.Cleanup(func() { runs.SetTestAfterRead(nil) })
}

func TestOtherServerEndsDuringStatus(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	w, prep := p.endingExternalRun(t, id)
	m := p.open(t)
	endAtRead(t, w, prep)
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusRunning && st.Status != runs.StatusCompleted {
		t.Errorf("run_status of another server's run that completed as it was read: status %s, released %v, journal_problem %q; want running or completed",
			st.Status, st.Released, st.JournalProblem)
	}
}

func TestOtherServerEndsDuringEvents(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	w, prep := p.endingExternalRun(t, id)
	m := p.open(t)
	endAtRead(t, w, prep)
	evs, err := m.Events(context.Background(), id, 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	if n := len(evs.Events); n > 0 {
		last = evs.Events[n-1].Type
	}
	if evs.Done && last != journal.TypeTerminated {
		t.Errorf("run_events of another server's run that completed as it was read: done with status %s after %d events (last %s): no more events would come, yet its terminated record is in the journal",
			evs.Status, len(evs.Events), last)
	}
	if evs.Status == runs.StatusAuditFailed {
		t.Errorf("run_events page: status %s, done %v, %d events (last %s), for a run that completed and released its text", evs.Status, evs.Done, len(evs.Events), last)
	}
	st, err := m.Status(id)
	if err != nil || st.Status != runs.StatusCompleted || !st.Released {
		t.Fatalf("afterwards: %+v %v", st, err)
	}
}

// TestOtherServerEndsAfterLookup: this server looked the run up while the ledger had no
// entry for it yet (another process's run in flight), and the run ends — entry, then
// terminated line, then its writer lets go — before its status is built: the status is
// built from the ledger read on, completed and released, not "a finished run the ledger
// has no entry for".
func TestOtherServerEndsAfterLookup(t *testing.T) {
	p := newTestProject(t, nil)
	id := newRunID(t)
	w, prep, entry := p.externalRunInFlight(t, id)
	m := p.open(t)
	ended := false
	runs.SetTestBeforeBuild(func() {
		if ended {
			return
		}
		ended = true
		if _, err := p.lw.Append(entry); err != nil {
			t.Error(err)
		}
		if err := w.AppendPrepared(prep); err != nil {
			t.Error(err)
		}
		if err := w.Sync(); err != nil {
			t.Error(err)
		}
		w.Close()
	})
	t.Cleanup(func() { runs.SetTestBeforeBuild(nil) })
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if !ended {
		t.Fatal("the hook did not run")
	}
	if st.Status != runs.StatusCompleted || !st.Released || st.JournalProblem != "" {
		t.Errorf("run_status of another server's run that ended after it was looked up: status %s, released %v, journal_problem %q; want completed, released",
			st.Status, st.Released, st.JournalProblem)
	}
}
