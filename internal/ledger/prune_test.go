package ledger

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"symbi/internal/journal"
)

// TestPruneFinishesInterrupted: a prune stopped after its pruned entry was durable and
// before it removed the journal leaves a project verify --project refuses ("pruned, but
// the journal is still on disk", naming the way out). The next prune removes the journal
// without a second entry, whatever it was asked to choose, and the project verifies.
func TestPruneFinishesInterrupted(t *testing.T) {
	p := newProjectRuns(t, 2)
	rep := journal.Verify(p.files[0], p.pub, journal.VerifyOptions{})
	if _, err := p.lw.Append(Pruned{RunID: "run-0", File: filepath.Base(p.files[0]), Records: int64(rep.Records), Head: rep.Head}); err != nil {
		t.Fatal(err)
	}
	p.lw.Close()
	r := VerifyProject(p.dir, p.pub, nil)
	if r.ExitCode() != 1 || !strings.Contains(r.Runs[0].Problem, "a prune stopped before removing it (symbi audit prune removes it)") {
		t.Fatalf("an interrupted prune: exit %d, runs %+v", r.ExitCode(), r.Runs)
	}
	before := len(ledgerFile(t, p))
	for _, dry := range []bool{true, false} {
		pr, _, err := Prune(p.root(t), "", func(string, time.Time) bool { return false }, dry)
		if err != nil || len(pr) != 1 || pr[0].RunID != "run-0" {
			t.Fatalf("prune (dry run %v) of an interrupted prune: %+v, %v", dry, pr, err)
		}
	}
	if _, err := os.Lstat(p.files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the interrupted prune's journal is still there: %v", err)
	}
	if after := len(ledgerFile(t, p)); after != before {
		t.Errorf("finishing the prune appended to the ledger (%d bytes, then %d)", before, after)
	}
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 0 {
		t.Errorf("after the prune was finished: exit %d, problems %q, runs %+v", r.ExitCode(), r.Problems, r.Runs)
	}
}

// TestPruneLeavesJournalInProgress: a run whose entry is durable and whose writer still
// holds its journal, about to write its terminated line, is the writer's: prune leaves it,
// says so (held) and records nothing. Once the writer lets go without that line (its
// server stopped), prune takes it and records the journal as it removes it — one line
// short of the run entry, with no ending — and verification says so of the pruned run.
func TestPruneLeavesJournalInProgress(t *testing.T) {
	p := newProjectRuns(t, 0)
	store := p.store(t)
	w, err := store.Create("agent", "live")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, r := range []journal.Record{journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"}} {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	// The run's end: terminated prepared, the run entry durable, the line not yet written.
	prep, err := w.Prepare(journal.Terminated{Reason: "cancelled"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.lw.Append(Run{RunID: "live", AgentID: "agent", Agent: "a", File: filepath.Base(w.Path()), Reason: "cancelled",
		Records: int64(prep.Receipt.Records), Head: prep.Receipt.Head, PrevHead: w.Receipt().Head, Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
	if !journal.InProgress(w.Path()) {
		t.Fatal("the journal's writer does not hold it")
	}
	all := func(string, time.Time) bool { return true }
	pr, held, err := Prune(p.root(t), "", all, false)
	if _, serr := os.Lstat(w.Path()); serr != nil || len(pr) != 0 || err != nil || len(held) != 1 || held[0] != "live" {
		t.Fatalf("prune of a journal its writer holds: pruned %+v, held %v, %v; the file: %v", pr, held, err, serr)
	}
	if err := w.Close(); err != nil { // the server stopped before the last line
		t.Fatal(err)
	}
	pr, _, err = Prune(p.root(t), "", all, false)
	if err != nil || len(pr) != 1 {
		t.Fatalf("prune once the writer let go: %+v, %v", pr, err)
	}
	if want := (Pruned{RunID: "live", File: filepath.Base(w.Path()), Records: int64(prep.Receipt.Records) - 1, Head: w.Receipt().Head}); pr[0] != want {
		t.Errorf("the pruned entry of a journal one line short of its run entry: %+v, want %+v (the journal as removed, no ending)", pr[0], want)
	}
	r := VerifyProject(p.dir, p.pub, nil)
	if r.ExitCode() != 0 || len(r.Runs) != 1 || !strings.Contains(r.Runs[0].Note, "pruned; it had stopped before its terminated line") {
		t.Errorf("verify --project after the prune: exit %d, problems %q, runs %+v", r.ExitCode(), r.Problems, r.Runs)
	}
}

// TestPrunedEntryChecks: verification takes a pruned entry for the journal the run was
// recorded with (its receipt, and the ending its run entry names), or for one one line
// short of a run entry that never got its terminated line (no ending); any other is a
// problem.
func TestPrunedEntryChecks(t *testing.T) {
	tests := []struct {
		name   string
		pruned func(run Run) Pruned
		want   string // "" when verification accepts it
	}{
		{"the recorded journal", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records, Head: r.Head, Reason: r.Reason, Released: r.Released}
		}, ""},
		{"one line short, no ending", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records - 1, Head: r.PrevHead}
		}, ""},
		{"one line short, with an ending", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records - 1, Head: r.PrevHead, Reason: r.Reason}
		}, "pruned with another receipt"},
		{"another ending", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records, Head: r.Head, Reason: "completed", Released: true}
		}, "pruned as having ended completed (released true); it was recorded as cancelled (released false)"},
		{"two lines short", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records - 2, Head: r.PrevHead}
		}, "pruned with another receipt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProjectRuns(t, 1)
			run := p.runEntry(t, "run-0")
			if _, err := p.lw.Append(tt.pruned(run)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p.files[0]); err != nil {
				t.Fatal(err)
			}
			r := VerifyProject(p.dir, p.pub, nil)
			got := strings.Join(r.Problems, "; ")
			switch {
			case tt.want == "" && r.ExitCode() != 0:
				t.Errorf("exit %d, problems %q, runs %+v; want accepted", r.ExitCode(), r.Problems, r.Runs)
			case tt.want != "" && (r.ExitCode() != 1 || !strings.Contains(got, tt.want)):
				t.Errorf("exit %d, problems %q; want 1 and %q", r.ExitCode(), got, tt.want)
			}
		})
	}
}

// TestPruneKeepsWhatVerifyRefuses: prune removes only what verify --project accepts. Bytes
// after the terminated line a run entry recorded, and a journal recovered as complete that
// is now incomplete, are evidence: left in place, ErrEvidence.
func TestPruneKeepsWhatVerifyRefuses(t *testing.T) {
	p := newProjectRuns(t, 1)
	p.addRun(t, p.store(t), "orphan", false) // no entry: recovered below, as complete
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 1 || rec[0].State != journal.StatusComplete {
		t.Fatalf("reconciled %+v, %v", rec, err)
	}
	p.lw.Close()
	for _, path := range p.files {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(`{"payload":{"v":1,"injected`) // bytes no run writes after terminated
		f.Close()
	}
	r := VerifyProject(p.dir, p.pub, nil)
	if r.ExitCode() != 1 {
		t.Fatalf("verify --project: exit %d, want 1", r.ExitCode())
	}
	for _, f := range r.Runs {
		if f.Problem == "" {
			t.Fatalf("run %s has no problem: %+v", f.RunID, f)
		}
	}
	pr, _, err := Prune(p.root(t), "", func(string, time.Time) bool { return true }, false)
	if len(pr) != 0 || !errors.Is(err, ErrEvidence) {
		t.Errorf("pruned %+v (err %v): want ErrEvidence and none pruned", pr, err)
	}
	for _, want := range []string{"bytes after the terminated line", "recovered as complete and is now incomplete"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %v does not say %q", err, want)
		}
	}
	for _, path := range p.files {
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s: the evidence is gone: %v", filepath.Base(path), err)
		}
	}
}

// TestPrunedNeedsAnEntry: the writer refuses a pruned entry for a run the ledger has no
// entry for (verification would call it pruned but never recorded), and takes one for a
// recorded run.
func TestPrunedNeedsAnEntry(t *testing.T) {
	_, root := newRoot(t)
	w := openWriter(t, root)
	if _, err := w.Append(runEntry(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(Pruned{RunID: "never-recorded", File: "agent.never-recorded.jsonl", Records: 3, Head: strings.Repeat("b", 64)}); !errors.Is(err, ErrNotRecorded) {
		t.Errorf("a pruned entry for a run never recorded: %v", err)
	}
	if _, err := w.Append(Pruned{RunID: "run-0", File: "agent.run-0.jsonl", Records: 5, Head: strings.Repeat("a", 64)}); err != nil {
		t.Errorf("pruning a recorded run: %v", err)
	}
}

// TestReconcileSkipsDiscardedJournal: a journal reconciliation listed and whose writer then
// removed it as debris (Discard: nothing durable, nothing sent) is passed over, not
// recorded as found — verify --project would call it missing for good. RecordAsFound, a
// server recording its own failed run a caller has heard of, records it all the same.
func TestReconcileSkipsDiscardedJournal(t *testing.T) {
	p := newProjectRuns(t, 0)
	store := p.store(t)
	w, err := store.Create("agent", "discarded", journal.Started{Agent: "a"}) // written, not durable
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Base(w.Path())
	if err := w.Discard(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// Reconcile listed the file before it went: it decides on it under the scan lock.
	if rec, err := recoverJournal(p.lw, p.gov, base, "agent", "discarded", p.pub, false); rec != nil || err != nil || p.lw.Knows("discarded") {
		t.Fatalf("reconciliation recorded a discarded journal: %+v, %v", rec, err)
	}
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 0 {
		t.Fatalf("verify --project: exit %d, %q %+v", r.ExitCode(), r.Problems, r.Runs)
	}
	if rec, err := RecordAsFound(p.lw, w.Path(), "agent", "discarded"); rec == nil || err != nil || rec.State != journal.StatusInvalid {
		t.Errorf("RecordAsFound of a run's journal gone: %+v, %v; want it recorded, invalid", rec, err)
	}
}

// runEntry returns the run entry the project's ledger holds of runID.
func (p *project) runEntry(t *testing.T, runID string) Run {
	t.Helper()
	for _, l := range Verify(ledgerFile(t, p), p.pub).Entries {
		var r Run
		if l.Type == TypeRun && l.RunID() == runID && json.Unmarshal(l.Data, &r) == nil {
			return r
		}
	}
	t.Fatalf("no run entry of %s", runID)
	return Run{}
}
