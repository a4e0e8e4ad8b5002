package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// store opens the project's store (for its key) for the rest of the test.
func (p *project) store(t testing.TB) *journal.Store {
	t.Helper()
	root := p.root(t)
	s, err := journal.OpenStore(root, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (p *project) root(t testing.TB) *os.File {
	t.Helper()
	root, err := os.Open(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestReconcileAfterAnotherServer: a server opens the ledger; another server's run ends
// (its run entry appended) before the first reconciles. The first must not append a
// recovered entry for that run: the run id would appear twice.
func TestReconcileAfterAnotherServer(t *testing.T) {
	p := newProjectRuns(t, 0) // p.lw is the other server
	store := p.store(t)
	b, err := Open(p.root(t), store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p.addRun(t, store, "run-a", true)
	if rec, err := Reconcile(b, p.gov, p.pub); err != nil || len(rec) != 0 {
		t.Fatalf("reconciled %+v, %v; want nothing: the run has its entry", rec, err)
	}
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 0 {
		t.Fatalf("exit %d: %v %+v", r.ExitCode(), r.Problems, r.Runs)
	}
	// A recovered entry for a run the ledger knows is refused with ErrKnown, which
	// stops nothing.
	if _, err := b.Append(Recovered{RunID: "run-a", AgentID: "agent", File: "agent.run-a.jsonl", State: journal.StatusComplete}); !errors.Is(err, ErrKnown) {
		t.Fatalf("recovered for a known run: %v, want ErrKnown", err)
	}
	if _, err := b.Append(Resolution{RunID: "run-a", Resolution: "accepted", Caller: "stdio"}); err != nil {
		t.Fatalf("an append after ErrKnown: %v", err)
	}
}

// TestCheckpointOfEmptyLedger: a checkpoint signed before the first run stays
// consistent with the ledger as it grows; one with a wrong root does not.
func TestCheckpointOfEmptyLedger(t *testing.T) {
	p := newProjectRuns(t, 0)
	cp := p.checkpoint(t)
	if r := VerifyProject(p.dir, p.pub, [][]byte{cp}); r.ExitCode() != 0 {
		t.Fatalf("empty: exit %d: %v", r.ExitCode(), r.Problems)
	}
	p.addRun(t, p.store(t), "run-1", true)
	if r := VerifyProject(p.dir, p.pub, [][]byte{cp}); r.ExitCode() != 0 {
		t.Fatalf("after one run: exit %d: %v", r.ExitCode(), r.Problems)
	}
	tree, err := NewTree(nil)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := tree.Root(0)
	if err != nil {
		t.Fatal(err)
	}
	c := Checkpoint{Size: 0, Root: empty}
	c.Root[0] ^= 1
	if err := CheckConsistent(tree, c); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("size 0 with another root: %v, want ErrCheckpoint", err)
	}
}

// TestPruneKeepsEvidence: prune never removes a journal that does not verify — even one
// whose tampering came before its recovered entry, so that entry matches it.
func TestPruneKeepsEvidence(t *testing.T) {
	p := newProjectRuns(t, 1)
	p.addRun(t, p.store(t), "orphan", false) // a crash between journal and ledger
	b, _ := os.ReadFile(p.files[1])
	b[40] ^= 1
	os.WriteFile(p.files[1], b, 0o600)
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 1 || rec[0].State != journal.StatusInvalid {
		t.Fatalf("reconciled %+v, %v; want orphan recovered invalid", rec, err)
	}
	p.lw.Close()
	before := fileSize(t, p.ledgerPath())
	pr, _, err := Prune(p.root(t), "", func(id string, _ time.Time) bool { return id == "orphan" }, false)
	if !errors.Is(err, ErrEvidence) || len(pr) != 0 {
		t.Fatalf("pruned %+v, %v; want ErrEvidence", pr, err)
	}
	if _, err := os.Stat(p.files[1]); err != nil {
		t.Fatalf("the tampered journal is gone: %v", err)
	}
	if fileSize(t, p.ledgerPath()) != before {
		t.Fatal("the ledger changed")
	}
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 1 {
		t.Fatalf("exit %d, want 1", r.ExitCode())
	}
	// The intact run is still prunable.
	if pr, _, err := Prune(p.root(t), "", func(id string, _ time.Time) bool { return id == "run-0" }, false); err != nil || len(pr) != 1 {
		t.Fatalf("pruning an intact run: %+v, %v", pr, err)
	}
}

// TestPruneDryRunChangesNothing: --dry-run does not open the ledger for writing, so a
// torn last line stays, and a project without a ledger gets none.
func TestPruneDryRunChangesNothing(t *testing.T) {
	p := newProjectRuns(t, 1)
	p.lw.Close()
	f, err := os.OpenFile(p.ledgerPath(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(`{"payload":{"v":1`))
	f.Close()
	before, _ := os.ReadFile(p.ledgerPath())
	pr, _, err := Prune(p.root(t), "", func(string, time.Time) bool { return true }, true)
	if err != nil || len(pr) != 1 || pr[0].RunID != "run-0" {
		t.Fatalf("dry run: %+v, %v; want run-0 listed", pr, err)
	}
	if after, _ := os.ReadFile(p.ledgerPath()); !bytes.Equal(before, after) {
		t.Fatalf("the dry run changed the ledger: %d bytes, then %d", len(before), len(after))
	}
	if _, err := os.Stat(p.files[0]); err != nil {
		t.Fatalf("the dry run removed the journal: %v", err)
	}
	// Without a ledger no run is recorded: a prune, dry or not, is refused (not_found)
	// and creates none.
	os.Remove(p.ledgerPath())
	for _, dry := range []bool{true, false} {
		if _, _, err := Prune(p.root(t), "", func(string, time.Time) bool { return true }, dry); errcode.Of(err) != errcode.NotFound {
			t.Fatalf("prune (dry run %v) without a ledger: %v, want not_found", dry, err)
		}
		if _, err := os.Lstat(p.ledgerPath()); !os.IsNotExist(err) {
			t.Fatalf("prune (dry run %v) created a ledger: %v", dry, err)
		}
	}
	if _, err := os.Stat(p.files[0]); err != nil {
		t.Fatalf("prune without a ledger removed the journal: %v", err)
	}
}

// TestWriterStopsWhenUnreachable: once the ledger file is no longer the project's
// ledger — moved away, removed, linked elsewhere, replaced — the writer's next append
// fails (its run is told so) and every later one is refused.
func TestWriterStopsWhenUnreachable(t *testing.T) {
	tests := []struct {
		name string
		act  func(t *testing.T, p *project)
	}{
		{"moved away", func(t *testing.T, p *project) {
			if err := os.Rename(p.ledgerPath(), filepath.Join(p.dir, "moved.jsonl")); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, p *project) { os.Remove(p.ledgerPath()) }},
		{"hard-linked", func(t *testing.T, p *project) {
			if err := os.Link(p.ledgerPath(), filepath.Join(p.dir, "copy.jsonl")); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced", func(t *testing.T, p *project) {
			data, _ := os.ReadFile(p.ledgerPath())
			os.Rename(p.ledgerPath(), filepath.Join(p.dir, "moved.jsonl"))
			os.WriteFile(p.ledgerPath(), data, 0o600)
		}},
		{".symbiont replaced by a symlink", func(t *testing.T, p *project) {
			sym := filepath.Join(p.dir, ".symbiont")
			os.Rename(sym, filepath.Join(p.dir, "elsewhere"))
			os.Symlink(filepath.Join(p.dir, "elsewhere"), sym)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProjectRuns(t, 1)
			tt.act(t, p)
			if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); err == nil {
				t.Fatal("an append to a ledger no auditor can find succeeded")
			}
			if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); !errors.Is(err, ErrStopped) {
				t.Fatalf("the next append: %v, want ErrStopped", err)
			}
		})
	}
}

// TestWriterFsyncFails: a line whose fsync failed is cut off again, so the run that was
// told the ledger failed — its journal ending audit_failed — is found at the next
// start-up without an entry and recovered as it is; the project then verifies.
func TestWriterFsyncFails(t *testing.T) {
	p := newProjectRuns(t, 1)
	store := p.store(t)
	w := durableRun(t, store, "run-f", journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"})
	prev := w.Durable()
	prep, err := w.Prepare(journal.Terminated{Reason: "cancelled"})
	if err != nil {
		t.Fatal(err)
	}
	before := fileSize(t, p.ledgerPath())
	fail := errors.New("injected EIO")
	p.lw.sync = func() error { return fail }
	_, err = p.lw.Append(Run{RunID: "run-f", AgentID: "agent", Agent: "a", File: filepath.Base(w.Path()), Reason: "cancelled",
		Records: int64(prep.Receipt.Records), Head: prep.Receipt.Head, PrevHead: prev.Head, Caller: "stdio"})
	if !errors.Is(err, fail) {
		t.Fatalf("append with a failing fsync: %v", err)
	}
	if got := fileSize(t, p.ledgerPath()); got != before {
		t.Fatalf("the unacknowledged line stayed: %d bytes, was %d", got, before)
	}
	// The run ends as the invoke package ends it when the ledger fails.
	if err := w.Append(journal.Terminated{Reason: "audit_failed", Error: "the project ledger could not record the run"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p.lw.Close()
	lw, err := Open(p.root(t), store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Close()
	if rec, err := Reconcile(lw, p.gov, p.pub); err != nil || len(rec) != 1 || rec[0].RunID != "run-f" || rec[0].State != journal.StatusComplete {
		t.Fatalf("reconciled %+v, %v; want run-f recovered complete", rec, err)
	}
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 0 {
		t.Fatalf("exit %d: %v %+v", r.ExitCode(), r.Problems, r.Runs)
	}
}

// TestGroupCommitWaiterOutlivesAnotherFailure: an append whose line is written while
// another append fails (here: it cannot take in a line another process corrupted) still
// waits for its fsync and succeeds: its line is durable, so its run is recorded.
func TestGroupCommitWaiterOutlivesAnotherFailure(t *testing.T) {
	p := newProjectRuns(t, 1)
	release, done := twoAppendsOneFsync(t, p, p.lw.f.Sync)
	f, err := os.OpenFile(p.ledgerPath(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("{\"payload\":{}}\n")) // another process's corrupt line
	f.Close()
	if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); err == nil {
		t.Fatal("an append after a corrupt line succeeded")
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("an append whose line was written before the failure: %v", err)
		}
	}
	if got := len(Verify(ledgerFile(t, p), p.pub).Entries); got != 3 {
		t.Fatalf("%d valid entries, want 3", got)
	}
}

func ledgerFile(t testing.TB, p *project) []byte {
	t.Helper()
	b, err := os.ReadFile(p.ledgerPath())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRecoveredJournalChanged: a journal recovered as complete that no longer is (bytes
// appended after its last line) is reported, though its records and head still match.
func TestRecoveredJournalChanged(t *testing.T) {
	p := newProjectRuns(t, 0)
	p.addRun(t, p.store(t), "orphan", false)
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 1 || rec[0].State != journal.StatusComplete {
		t.Fatalf("reconciled %+v, %v", rec, err)
	}
	b, _ := os.ReadFile(p.files[0])
	os.WriteFile(p.files[0], append(b, `{"payload":`...), 0o600)
	r := VerifyProject(p.dir, p.pub, nil)
	if r.ExitCode() != 1 || len(r.Runs) != 1 || r.Runs[0].Problem != "the journal was recovered as complete and is now incomplete" {
		t.Fatalf("exit %d, runs %+v", r.ExitCode(), r.Runs)
	}
}

// TestReadDurable: the ledger read for a checkpoint is the file at .symbiont/ledger.jsonl,
// never one a symlink leads to; a missing ledger is fs.ErrNotExist.
func TestReadDurable(t *testing.T) {
	p := newProjectRuns(t, 2)
	data, err := ReadDurable(p.root(t))
	if err != nil || !bytes.Equal(data, ledgerFile(t, p)) {
		t.Fatalf("read %d bytes, %v", len(data), err)
	}
	aside := filepath.Join(p.dir, "aside.jsonl")
	os.Rename(p.ledgerPath(), aside)
	if _, err := ReadDurable(p.root(t)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v, want fs.ErrNotExist", err)
	}
	os.Symlink(aside, p.ledgerPath())
	if _, err := ReadDurable(p.root(t)); err == nil {
		t.Fatal("read the ledger through a symlink")
	}
}

// TestRecoveredNamesCaller: a recovered entry names the run's caller as its journal's
// started record does — only when that line verifies.
func TestRecoveredNamesCaller(t *testing.T) {
	p := newProjectRuns(t, 0)
	store := p.store(t)
	for _, id := range []string{"kept", "tampered"} {
		w, err := store.Create("agent", id)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Append(journal.Started{Agent: "a", Caller: "alice", CallerAuth: "token"}); err != nil {
			t.Fatal(err)
		}
		w.Sync()
		w.Close()
	}
	path := filepath.Join(p.gov, journal.FileName("agent", "tampered"))
	b, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(b, []byte(`"alice"`), []byte(`"mallory"`), 1), 0o600)
	rec, err := Reconcile(p.lw, p.gov, p.pub)
	if err != nil || len(rec) != 2 {
		t.Fatalf("reconciled %+v, %v", rec, err)
	}
	got := map[string]Recovered{}
	for _, r := range rec {
		got[r.RunID] = r
	}
	if r := got["kept"]; r.Caller != "alice" || r.CallerAuth != "token" {
		t.Errorf("kept: %+v, want caller alice (token)", r)
	}
	if r := got["tampered"]; r.Caller != "" || r.State != journal.StatusInvalid {
		t.Errorf("tampered: %+v, want no caller, invalid", r)
	}
}

// TestReconcileHoldsScanLock: reconciliation decides on a journal no writer holds under
// the governed directory's scan lock, exclusively: no journal can then be between its
// creation and its writer's lock (journal.Store.Create holds the lock shared there).
func TestReconcileHoldsScanLock(t *testing.T) {
	p := newProjectRuns(t, 0)
	p.addRun(t, p.store(t), "orphan", false)
	var probed error
	testRecovering = func() {
		fd, err := unix.Open(p.gov, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			probed = err
			return
		}
		defer unix.Close(fd)
		probed = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
	}
	defer func() { testRecovering = nil }()
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 1 {
		t.Fatalf("reconciled %+v, %v", rec, err)
	}
	if !errors.Is(probed, unix.EWOULDBLOCK) {
		t.Fatalf("a shared scan lock while reconciliation decides: %v, want EWOULDBLOCK", probed)
	}
	// Released: a run can be created.
	w, err := p.store(t).Create("agent", "after")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// TestOfferAfterAnotherServer: a server that opened the ledger before another recorded an
// orphan journal does not resume that journal's run: it takes in the other's lines first.
func TestOfferAfterAnotherServer(t *testing.T) {
	p := newProjectRuns(t, 0) // p.lw is the other server
	store := p.store(t)
	p.addRun(t, store, "orphan", false)
	a, err := Open(p.root(t), store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 1 {
		t.Fatalf("the other server reconciled %+v, %v", rec, err)
	}
	var offered []string
	if err := offer(a, store, func(_ *journal.Store, name string) { offered = append(offered, name) }); err != nil {
		t.Fatal(err)
	}
	if len(offered) != 0 {
		t.Fatalf("offered %v for resuming, which the other server recorded", offered)
	}
	if !a.Knows("orphan") {
		t.Fatal("the writer does not know the run after taking in the other's lines")
	}
}

// TestWriterFsyncFailsGroup: lines of several appends waiting on one fsync that fails are
// all cut off again — each append's catch-up raises the floor only past another
// process's lines, never past this writer's own.
func TestWriterFsyncFailsGroup(t *testing.T) {
	p := newProjectRuns(t, 1)
	before := fileSize(t, p.ledgerPath())
	fail := errors.New("injected EIO")
	release, done := twoAppendsOneFsync(t, p, func() error { return fail })
	close(release)
	for range 2 {
		if err := <-done; !errors.Is(err, fail) {
			t.Errorf("an append whose fsync failed: %v", err)
		}
	}
	if got := fileSize(t, p.ledgerPath()); got != before {
		t.Fatalf("the ledger is %d bytes, was %d: lines whose fsync failed stayed", got, before)
	}
}

// TestWriterKeepsDurableLines: a line whose fsync succeeded stays when the check after it
// fails (the ledger hard-linked elsewhere): a checkpoint may have signed it.
func TestWriterKeepsDurableLines(t *testing.T) {
	p := newProjectRuns(t, 1)
	if err := os.Link(p.ledgerPath(), filepath.Join(p.dir, "copy.jsonl")); err != nil {
		t.Fatal(err)
	}
	before := fileSize(t, p.ledgerPath())
	if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); err == nil {
		t.Fatal("an append to a hard-linked ledger succeeded")
	}
	if got := fileSize(t, p.ledgerPath()); got <= before {
		t.Fatalf("the durable line was cut: %d bytes, was %d", got, before)
	}
}

// twoAppendsOneFsync starts two appends to p's ledger, each on its goroutine, such that
// the second line is written while the first append's fsync is in flight — held until
// release is closed, then done by sync, as is every later one. done gets the appends'
// errors.
func twoAppendsOneFsync(t *testing.T, p *project, sync func() error) (release chan struct{}, done chan error) {
	t.Helper()
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	p.lw.sync = func() error {
		select {
		case entered <- struct{}{}: // the first fsync waits until the second line is written
			<-release
		default:
		}
		return sync()
	}
	done = make(chan error, 2)
	appendOne := func(resolution string) {
		_, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: resolution, Caller: "stdio"})
		done <- err
	}
	go appendOne("accepted")
	<-entered
	size := fileSize(t, p.ledgerPath())
	go appendOne("rejected")
	for fileSize(t, p.ledgerPath()) == size { // the second line written: it waits on the fsync
		time.Sleep(time.Millisecond)
	}
	return release, done
}

// TestPruneOthersAfterEvidence: a journal kept as evidence does not stop the prune of the
// other runs chosen, and a journal one line short of what its entry recorded — a server
// stopped before the journal's last line, which verify --project accepts with exit 2 — is
// pruned like a complete one; the project still verifies.
func TestPruneOthersAfterEvidence(t *testing.T) {
	p := newProjectRuns(t, 3)
	p.lw.Close()
	b, _ := os.ReadFile(p.files[0])
	os.WriteFile(p.files[0], b[:bytes.LastIndexByte(b[:len(b)-1], '\n')+1], 0o600) // stopped short
	b, _ = os.ReadFile(p.files[1])
	b[40] ^= 1
	os.WriteFile(p.files[1], b, 0o600) // tampered: evidence
	pruned, _, err := Prune(p.root(t), "", func(string, time.Time) bool { return true }, false)
	if !errors.Is(err, ErrEvidence) || !strings.Contains(err.Error(), filepath.Base(p.files[1])) || len(pruned) != 2 || pruned[0].RunID != "run-0" || pruned[1].RunID != "run-2" {
		t.Fatalf("pruned %+v, %v; want run-0 and run-2, run-1 kept as evidence", pruned, err)
	}
	if _, err := os.Stat(p.files[1]); err != nil {
		t.Fatalf("the tampered journal is gone: %v", err)
	}
	if r := VerifyProject(p.dir, p.pub, nil); !slices.ContainsFunc(r.Runs, func(f RunFinding) bool { return f.RunID == "run-1" && f.Problem != "" }) || len(r.Problems) != 0 {
		t.Fatalf("after the prune: problems %q, runs %+v; want only run-1's tampering", r.Problems, r.Runs)
	}
}

// TestConcurrentPrune: two prunes choose the same run, the other one between this one's
// reading of the ledger and its append — before or after removing the file. This prune's
// writer takes in the other's pruned entry under the lock and records nothing more for
// the run (ErrPruned inside Prune), nor reports it as evidence: a run is pruned once, and
// the ledger stays valid.
func TestConcurrentPrune(t *testing.T) {
	for _, removed := range []bool{false, true} {
		t.Run(fmt.Sprintf("file removed %v", removed), func(t *testing.T) {
			p := newProjectRuns(t, 2)
			other, err := Open(p.root(t), p.lw.key) // the other prune's writer
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			p.lw.Close()
			rep := journal.Verify(p.files[0], p.pub, journal.VerifyOptions{})
			pruned := Pruned{RunID: "run-0", File: filepath.Base(p.files[0]), Records: int64(rep.Records), Head: rep.Head}
			out, _, err := Prune(p.root(t), "", func(id string, _ time.Time) bool {
				if id != "run-0" {
					return false
				}
				if _, err := other.Append(pruned); err != nil { // the other prune's entry
					t.Fatal(err)
				}
				if removed { // and its removal of the file
					if err := os.Remove(p.files[0]); err != nil {
						t.Fatal(err)
					}
				}
				return true
			}, false)
			if err != nil || len(out) != 0 {
				t.Fatalf("the second prune: %+v, %v; want nothing pruned, no error", out, err)
			}
			os.Remove(p.files[0]) // the other prune ends
			if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 0 {
				t.Fatalf("exit %d, problems %q", r.ExitCode(), r.Problems)
			}
			if _, err := other.Append(pruned); !errors.Is(err, ErrPruned) {
				t.Fatalf("a second pruned entry: %v, want ErrPruned", err)
			}
		})
	}
}

// TestCheckpointWaitsForFsync: a writer keeps the ledger's lock from a line's write until
// its fsync's verdict (and the retraction of the line when it failed), so a checkpoint —
// another process's ReadDurable, which takes the lock shared — never signs a line that is
// then cut, which would later read as a ledger rolled back.
func TestCheckpointWaitsForFsync(t *testing.T) {
	p := newProjectRuns(t, 1)
	fail := errors.New("injected EIO")
	calls := 0
	read := make(chan []byte, 1)
	p.lw.sync = func() error {
		if calls++; calls > 1 {
			return nil // retract's own fsync, after the cut
		}
		// symbi audit checkpoint in another process, meanwhile: it cannot take the lock.
		f, err := os.Open(p.ledgerPath())
		if err != nil {
			t.Error(err)
			return fail
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			t.Errorf("a shared lock during the writer's fsync: %v, want EWOULDBLOCK", err)
		}
		f.Close()
		go func() { // and waits for it
			data, err := ReadDurable(p.root(t))
			if err != nil {
				t.Error(err)
			}
			read <- data
		}()
		return fail
	}
	if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); !errors.Is(err, fail) {
		t.Fatalf("append: %v", err)
	}
	cp := p.checkpointOf(t, <-read)
	p.lw.Close()
	if r := VerifyProject(p.dir, p.pub, [][]byte{cp}); r.ExitCode() != 0 {
		t.Fatalf("a checkpoint taken during the failed fsync: exit %d, %q", r.ExitCode(), r.Problems)
	}
}

// TestHeldLockReleased: concurrent appenders sharing fsyncs, with a second writer (as
// another process) and checkpoints (ReadDurable) interleaved: no deadlock, and once
// every append has returned the flock is free.
func TestHeldLockReleased(t *testing.T) {
	p := newProjectRuns(t, 1)
	other, err := Open(p.root(t), p.lw.key)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	done := make(chan error, 64)
	for g := range 6 {
		w := p.lw
		if g%2 == 1 {
			w = other
		}
		go func() {
			for i := range 30 {
				if _, err := w.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: fmt.Sprintf("c%d-%d", g, i)}); err != nil {
					done <- err
					return
				}
				if i%5 == 0 {
					if _, err := ReadDurable(p.root(t)); err != nil {
						done <- err
						return
					}
				}
			}
			done <- nil
		}()
	}
	for range 6 { // a deadlock is the test's timeout
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(p.ledgerPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("the flock after every append returned: %v", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 0 {
		t.Fatalf("exit %d %q", r.ExitCode(), r.Problems)
	}
}
