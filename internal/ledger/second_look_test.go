package ledger

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"symbi/internal/journal"
)

// TestVerifyProjectFreshJournal: another server has just created a run's journal
// (store.Create holds it locked, its first line not yet written: Create makes the new file
// and the directory durable before it writes the opening records). verify --project at
// that moment says the run, named by the file's name, is in progress — it reported
// tampering (exit 1).
func TestVerifyProjectFreshJournal(t *testing.T) {
	p := newProjectRuns(t, 1)
	store := p.store(t)
	w, err := store.Create("agent", "run-new") // held by its writer, empty
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := VerifyProject(p.dir, p.pub, nil)
	for _, f := range r.Runs {
		if f.Problem != "" {
			t.Errorf("run %q (file %s, journal %s): problem %q, note %q", f.RunID, f.File, f.Journal, f.Problem, f.Note)
		}
	}
	if len(r.Runs) != 2 || r.Runs[1].RunID != "run-new" || r.Runs[1].Note != inProgressNote {
		t.Errorf("findings %+v; want run-new in progress", r.Runs)
	}
	if r.ExitCode() == 1 {
		t.Errorf("verify --project of a project with a run whose writer has just created its journal: exit 1 (%s), want 2 (in progress)", r.Status)
	}
}

// TestVerifyProjectRunEndsDuringSecondLook: a run of another server ends, as every run
// ends (its ledger entry, durable, then its terminated line, then its writer lets go),
// while verify --project looks at it a second time, after it has decided that a writer
// holds the journal: the ledger and the journal read after that decision show the run
// whole and recorded. (Read before the decision, a run ending in between was "a journal
// the ledger does not know": exit 1.) A run still held when read is in progress.
func TestVerifyProjectRunEndsDuringSecondLook(t *testing.T) {
	for _, end := range []bool{true, false} {
		t.Run(fmt.Sprintf("ends=%v", end), func(t *testing.T) {
			p := newProjectRuns(t, 1)
			store := p.store(t)
			w := durableRun(t, store, "run-x", journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"})
			defer w.Close()
			testAfterHeld = func() {
				if end {
					endRun(t, p, w, "run-x")
				}
			}
			defer func() { testAfterHeld = nil }()
			r := VerifyProject(p.dir, p.pub, nil)
			for _, f := range r.Runs {
				if f.Problem != "" {
					t.Errorf("run %q (file %s, entry %q, journal %s): problem %q", f.RunID, f.File, f.Entry, f.Journal, f.Problem)
				}
			}
			last := r.Runs[len(r.Runs)-1]
			switch {
			case end && (last.RunID != "run-x" || last.Entry != TypeRun || last.Journal != journal.StatusComplete):
				t.Errorf("the run ended during the second look: finding %+v, want it recorded and complete", last)
			case !end && (last.RunID != "run-x" || last.Note != inProgressNote):
				t.Errorf("the run still held: finding %+v, want it in progress", last)
			}
			if want := map[bool]int{true: 0, false: 2}[end]; r.ExitCode() != want {
				t.Errorf("verify --project: exit %d (%s), want %d", r.ExitCode(), r.Status, want)
			}
		})
	}
}

// endRun ends the run whose journal w writes as a server does: its terminated line, its
// run entry in the ledger, durable, and its writer lets go.
func endRun(t *testing.T, p *project, w *journal.Writer, id string) {
	t.Helper()
	if err := w.Append(journal.Terminated{Reason: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	rc := w.Durable()
	data, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	prev := journal.ZeroHash
	if i := bytes.LastIndexByte(data[:len(data)-1], '\n'); i >= 0 {
		prev = digestOf(data[:i+1][bytes.LastIndexByte(data[:i], '\n')+1:])
	}
	if _, err := p.lw.Append(Run{RunID: id, AgentID: "agent", Agent: "a", File: journal.FileName("agent", id),
		Reason: "cancelled", Records: int64(rc.Records), Head: rc.Head, PrevHead: prev, Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
}
