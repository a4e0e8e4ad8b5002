package ledger

import (
	"os"
	"path/filepath"
	"testing"

	"symbi/internal/journal"
)

// TestReconcileMisnamedJournal: a journal the ledger does not know, under a name that is
// not <agent_id>.<run_id>.jsonl of its records (renamed after a crash, or copied under
// another run's name), is never recorded under its contents' ids — an entry naming a file
// that is not its run's journal is refused by every reader of the ledger, and would
// stand for the misnamed file at verification. Under no journal's name it is passed over
// and stays "a journal the ledger does not know"; under another run's name it is
// recorded under that name's ids, as invalid. Verification fails (exit 1) before start-up
// and after it.
func TestReconcileMisnamedJournal(t *testing.T) {
	for _, tc := range []struct {
		name      string
		to        string
		recovered bool
	}{
		{"no journal's name", "x.jsonl", false},
		{"a name of three parts", "agent.run-0.extra.jsonl", false},
		{"another run's name", journal.FileName("agent", "run-9"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProjectRuns(t, 1)
			p.addRun(t, p.store(t), "orphan", false)
			if err := os.Rename(p.files[1], filepath.Join(p.gov, tc.to)); err != nil {
				t.Fatal(err)
			}
			if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 1 {
				t.Fatalf("before start-up: exit %d, runs %+v", r.ExitCode(), r.Runs)
			}
			rec, err := Reconcile(p.lw, p.gov, p.pub)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !tc.recovered && len(rec) != 0:
				t.Fatalf("recovered %+v, want nothing", rec)
			case tc.recovered && (len(rec) != 1 || rec[0].RunID != "run-9" || rec[0].File != tc.to || rec[0].State != journal.StatusInvalid):
				t.Fatalf("recovered %+v, want run-9 under its own name, invalid", rec)
			}
			for _, l := range Verify(mustRead(t, p.ledgerPath()), p.pub).Entries {
				if l.runID == "orphan" {
					t.Fatalf("an entry for run orphan, whose journal is misnamed: %+v", l)
				}
			}
			if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 1 {
				t.Fatalf("after start-up: a journal whose name does not match its contents verifies: exit %d, runs %+v, problems %q", r.ExitCode(), r.Runs, r.Problems)
			}
		})
	}
}

// TestVerifyMisnamedEntry: an entry naming a file that is not <agent_id>.<run_id>.jsonl of
// its run — which no writer appends — is a problem at verification even when the file
// holds that run's journal, records and head as recorded.
func TestVerifyMisnamedEntry(t *testing.T) {
	p := newProjectRuns(t, 1)
	p.addRun(t, p.store(t), "orphan", false)
	misnamed := filepath.Join(p.gov, "x.jsonl")
	if err := os.Rename(p.files[1], misnamed); err != nil {
		t.Fatal(err)
	}
	jr := journal.Verify(misnamed, p.pub, journal.VerifyOptions{})
	if _, err := p.lw.Append(Recovered{RunID: "orphan", AgentID: "agent", File: "x.jsonl", State: jr.Status, Records: int64(jr.Records), Head: jr.Head}); err != nil {
		t.Fatal(err)
	}
	r := VerifyProject(p.dir, p.pub, nil)
	want := `the recovered entry names the file "x.jsonl", not its journal "agent.orphan.jsonl"`
	for _, f := range r.Runs {
		if f.RunID == "orphan" && f.Problem == want && r.ExitCode() == 1 {
			return
		}
	}
	t.Fatalf("exit %d, runs %+v; want run orphan's problem %q", r.ExitCode(), r.Runs, want)
}
