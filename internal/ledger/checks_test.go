package ledger

// Checks of the ledger's rules at their edges: checkpoints and proofs refused for every
// byte and index that is not the ledger's own, the writer's refusals of a ledger file
// that is not the server's own regular file (or one byte too large), the writers' lock
// kept until every written line is durable, verification verdicts that one run's
// problem is never softened by another's, and the second look's limits.

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// ledgerOfTest returns the bytes of a fresh ledger holding recs, signed with testKey.
func ledgerOfTest(t *testing.T, recs ...Record) []byte {
	t.Helper()
	dir, root := newRoot(t)
	w := openWriter(t, root)
	for _, r := range recs {
		if _, err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	return ledgerBytes(t, dir)
}

// TestCheckpointRootCanonical: a checkpoint's root hash must be canonical base64. A
// root whose last character before "=" differs only in the bits base64 leaves spare
// decodes, leniently, to the same hash; signed, it is still refused — every byte of a
// checkpoint counts.
func TestCheckpointRootCanonical(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	tree, err := NewTree(Verify(sample(t, 3), pub).Entries)
	if err != nil {
		t.Fatal(err)
	}
	root, err := tree.Root(3)
	if err != nil {
		t.Fatal(err)
	}
	body := Checkpoint{Origin: Origin(pub), Size: 3, Root: root}.Body()
	if _, err := OpenCheckpoint(signNote(t, key, body), pub); err != nil {
		t.Fatalf("the canonical checkpoint: %v", err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	b64 := base64.StdEncoding.EncodeToString(root[:]) // 43 characters and "="
	last := strings.IndexByte(alphabet, b64[42])
	lenient := b64[:42] + string(alphabet[last^1]) + "="
	if got, err := base64.StdEncoding.DecodeString(lenient); err != nil || !bytes.Equal(got, root[:]) {
		t.Fatalf("the lenient root %q does not decode to the same hash: %v", lenient, err)
	}
	mangled := strings.Replace(body, "\n"+b64+"\n", "\n"+lenient+"\n", 1)
	if _, err := OpenCheckpoint(signNote(t, key, mangled), pub); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("a signed checkpoint whose root is not canonical base64: %v, want ErrCheckpoint", err)
	}
}

// TestProofLeafSeqIsIndex: an inclusion proof's leaf must be a ledger line whose seq
// is its index, even when the proof hashes and a checkpoint signed with the project key
// agree: a tree whose leaves are genuine lines in another order is not a ledger.
func TestProofLeafSeqIsIndex(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	entries := Verify(sample(t, 2), pub).Entries
	swapped := []Line{entries[1], entries[0]}
	tree, err := NewTree(swapped)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := SignCheckpoint(tree, key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Prove(tree, swapped, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckProof(p, cp, pub); !errors.Is(err, ErrProof) {
		t.Fatalf("line seq 1 proven at index 0: %v, want ErrProof", err)
	}
}

// TestProofHashesChecked: an inclusion proof is checked hash by hash up to the
// checkpoint's root. A line of another ledger signed with the same key, at the same seq,
// given with this ledger's size and root (a rolled-back or rewritten history's line
// claimed to be in this one), is refused; so is an honest proof with one hash changed.
func TestProofHashesChecked(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	entries := Verify(ledgerOfTest(t, runEntry(0), runEntry(1), runEntry(2), runEntry(3)), pub).Entries
	others := Verify(ledgerOfTest(t, runEntry(10), runEntry(11), runEntry(12), runEntry(13)), pub).Entries
	tree, err := NewTree(entries)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := SignCheckpoint(tree, key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Prove(tree, entries, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckProof(p, cp, pub); err != nil {
		t.Fatalf("the honest proof: %v", err)
	}
	foreign := *p
	foreign.Leaf = string(others[2].Leaf)
	if err := CheckProof(&foreign, cp, pub); !errors.Is(err, ErrProof) {
		t.Errorf("another ledger's line at the same seq: %v, want ErrProof", err)
	}
	if len(p.Hashes) == 0 {
		t.Fatal("a proof in a tree of 4 has no hashes")
	}
	bent := *p
	bent.Hashes = append(bent.Hashes[:0:0], p.Hashes...)
	bent.Hashes[0][0] ^= 1
	if err := CheckProof(&bent, cp, pub); !errors.Is(err, ErrProof) {
		t.Errorf("a proof with a changed hash: %v, want ErrProof", err)
	}
}

// TestTreeRootPastSize: the root of more leaves than a tree holds is an error, never
// a crash.
func TestTreeRootPastSize(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	tree, err := NewTree(Verify(sample(t, 2), pub).Entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{3, 4} {
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Fatalf("Root(%d) of a tree of 2 panicked: %v", n, v)
				}
			}()
			if _, err := tree.Root(n); err == nil {
				t.Errorf("Root(%d) of a tree of 2 succeeded", n)
			}
		}()
	}
}

// TestOpenRefusesFIFO: the writer continues only a regular file: a FIFO at
// .symbiont/ledger.jsonl is refused (audit_unavailable), not taken for an empty ledger.
func TestOpenRefusesFIFO(t *testing.T) {
	dir, root := newRoot(t)
	if err := unix.Mkfifo(filepath.Join(dir, ".symbiont", FileName), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	w, err := Open(root, testKey())
	if err == nil {
		w.Close()
		t.Fatal("a FIFO was opened as the ledger")
	}
	if errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "regular") {
		t.Fatalf("a FIFO ledger: %v, want audit_unavailable naming a regular file", err)
	}
}

// TestOpenRefusesForeignOwner: a ledger owned by another user than the server's is
// not continued (audit_unavailable): someone else could rewrite it.
func TestOpenRefusesForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	dir, root := newRoot(t)
	w := openWriter(t, root)
	if _, err := w.Append(runEntry(0)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := os.Chown(filepath.Join(dir, ".symbiont", FileName), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	w2, err := Open(root, testKey())
	if err == nil {
		w2.Close()
		t.Fatal("a ledger owned by uid 4242 was opened")
	}
	if errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "owned by uid 4242") {
		t.Fatalf("a ledger of another owner: %v, want audit_unavailable naming the owner", err)
	}
}

// TestOpenRefusesOneByteOver: a ledger one byte larger than MaxLedgerBytes is not
// opened (ErrFull), before it is read: no verifier reads it whole.
func TestOpenRefusesOneByteOver(t *testing.T) {
	dir, root := newRoot(t)
	path := filepath.Join(dir, ".symbiont", FileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxLedgerBytes + 1); err != nil { // sparse
		f.Close()
		t.Skipf("cannot make a sparse file here: %v", err)
	}
	f.Close()
	w, err := Open(root, testKey())
	if err == nil {
		w.Close()
		t.Fatal("a ledger of MaxLedgerBytes+1 bytes was opened")
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("a ledger of MaxLedgerBytes+1 bytes: %v, want ErrFull", err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != MaxLedgerBytes+1 {
		t.Fatalf("the refused ledger changed: %v, %v", st, err)
	}
}

// TestLockHeldUntilEveryLineSynced: a writer keeps the ledger's lock while any line it
// wrote is not yet covered by an fsync — also when an earlier fsync has just covered the
// lines before it — so that another process (a checkpoint) never reads a line that a
// failing fsync could still cut.
func TestLockHeldUntilEveryLineSynced(t *testing.T) {
	p := newProjectRuns(t, 1)
	calls := 0
	probe := errors.New("not probed")
	release, done := twoAppendsOneFsync(t, p, func() error {
		// Called with w.mu released, by one appender at a time (syncing).
		if calls++; calls == 2 { // the fsync of the second line, the first one durable
			f, err := os.Open(p.ledgerPath())
			if err != nil {
				probe = err
				return nil
			}
			probe = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
			f.Close()
		}
		return nil
	})
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(probe, unix.EWOULDBLOCK) {
		t.Fatalf("a shared lock while the writer's second line awaited its fsync: %v, want EWOULDBLOCK", probe)
	}
}

// TestRefreshRefusedWhenStopped: once a write or an fsync failed, the writer refuses
// to take in more lines too (ErrStopped, audit_unavailable) — even when the file is as it
// was — so start-up, which refreshes before offering journals for resuming, fails closed.
func TestRefreshRefusedWhenStopped(t *testing.T) {
	t.Run("after a failed write", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		ro, err := os.Open(p.ledgerPath()) // flock and read work; write fails (EBADF)
		if err != nil {
			t.Fatal(err)
		}
		orig := p.lw.f
		p.lw.f = ro
		t.Cleanup(func() { orig.Close() })
		if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); err == nil {
			t.Fatal("a write that failed was acknowledged")
		}
		if err := p.lw.Refresh(); !errors.Is(err, ErrStopped) || errcode.Of(err) != errcode.AuditUnavailable {
			t.Fatalf("Refresh of a stopped writer: %v, want audit_unavailable ErrStopped", err)
		}
	})
	t.Run("after a failed fsync", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		p.lw.sync = func() error { return errors.New("injected EIO") }
		if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); err == nil {
			t.Fatal("an append whose fsync failed was acknowledged")
		}
		if err := p.lw.Refresh(); !errors.Is(err, ErrStopped) || errcode.Of(err) != errcode.AuditUnavailable {
			t.Fatalf("Refresh of a stopped writer: %v, want audit_unavailable ErrStopped", err)
		}
	})
}

// TestPrunedStaysPruned: a run the ledger records as pruned is pruned once: a writer
// that reads a ledger where an entry of the run follows its pruned entry still refuses a
// second pruned entry (ErrPruned).
func TestPrunedStaysPruned(t *testing.T) {
	_, root := newRoot(t)
	w := openWriter(t, root)
	r := runEntry(0)
	pr := Pruned{RunID: r.RunID, File: r.File, Records: r.Records, Head: r.Head, Reason: r.Reason, Released: r.Released}
	for _, rec := range []Record{r, pr, r} {
		if _, err := w.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	b := openWriter(t, root)
	if _, err := b.Append(pr); !errors.Is(err, ErrPruned) {
		t.Fatalf("a second pruned entry after the ledger was reopened: %v, want ErrPruned", err)
	}
}

// TestEntryTimeIsADate: a ledger line's time must be a real time, not only of the
// right shape: month 13 or February 30, signed, is refused.
func TestEntryTimeIsADate(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	for _, tm := range []string{"2026-13-02T03:04:05.000Z", "2026-02-30T03:04:05.000Z", "2026-01-02T24:04:05.000Z"} {
		line := journal.Seal(key, Context, []byte(`{"v":1,"seq":0,"prev":"`+ZeroHash+`","time":"`+tm+`","type":"resolution","data":`+resolutionData+`}`))
		if rep := Verify(line, pub); len(rep.Problems) != 1 || len(rep.Entries) != 0 {
			t.Errorf("time %s: %d entries, problems %v; want the line refused", tm, len(rep.Entries), rep.Problems)
		}
	}
}

// TestRecordAsFoundOtherAgentsJournal: a server's own run whose file now holds a
// journal of the same run id but another agent is recorded as invalid with no caller —
// never with the caller that other journal names, who would then own the run.
func TestRecordAsFoundOtherAgentsJournal(t *testing.T) {
	p := newProjectRuns(t, 0)
	store := p.store(t)
	w, err := store.Create("other", "mine")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []journal.Record{journal.Started{Agent: "a", Caller: "alice", CallerAuth: "token"}, journal.InferenceRequested{CallID: "c1"}, journal.Terminated{Reason: "cancelled"}} {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	data, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(p.gov, journal.FileName("agent", "mine"))
	if err := os.WriteFile(own, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := RecordAsFound(p.lw, own, "agent", "mine")
	if err != nil || rec == nil {
		t.Fatalf("RecordAsFound: %+v, %v", rec, err)
	}
	if rec.RunID != "mine" || rec.AgentID != "agent" || rec.State != journal.StatusInvalid || rec.Caller != "" || rec.CallerAuth != "" {
		t.Fatalf("recorded %+v; want run mine of agent agent, invalid, no caller", *rec)
	}
}

// TestReconcileSkipsInvalidAgentName: start-up never records a journal under a name
// whose agent part is not an id the writer makes: the file is passed over, and
// verification reports it as a journal the ledger does not know.
func TestReconcileSkipsInvalidAgentName(t *testing.T) {
	p := newProjectRuns(t, 1)
	name := "ag!nt.run-9.jsonl"
	if err := os.WriteFile(filepath.Join(p.gov, name), []byte("not a journal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := Reconcile(p.lw, p.gov, p.pub)
	if err != nil || len(rec) != 0 {
		t.Fatalf("reconciled %+v, %v; want nothing", rec, err)
	}
	if p.lw.Knows("run-9") {
		t.Fatal("the ledger has an entry for run-9")
	}
	r := VerifyProject(p.dir, p.pub, nil)
	for _, f := range r.Runs {
		if f.File == name && f.Problem == "a journal the ledger does not know" && r.ExitCode() == 1 {
			return
		}
	}
	t.Fatalf("exit %d, runs %+v; want %s reported as unknown", r.ExitCode(), r.Runs, name)
}

// TestProblemNotSoftenedByIncomplete: a project with a run whose journal is missing
// exits 1 even when a run recorded after it is merely incomplete (a crash recorded as
// found): an incomplete run never turns an inconsistency into exit 2.
func TestProblemNotSoftenedByIncomplete(t *testing.T) {
	p := newProjectRuns(t, 1)
	if err := os.Remove(p.files[0]); err != nil {
		t.Fatal(err)
	}
	w := durableRun(t, p.store(t), "orphan", journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"})
	w.Close()
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 1 || rec[0].State != journal.StatusIncomplete {
		t.Fatalf("reconciled %+v, %v; want orphan recovered incomplete", rec, err)
	}
	r := VerifyProject(p.dir, p.pub, nil)
	if f := findingOf(r, "run-0"); r.ExitCode() != 1 || r.Status != journal.StatusInvalid || f == nil || f.Problem == "" {
		t.Fatalf("exit %d (%s), run-0 %+v; want exit 1 for the missing journal", r.ExitCode(), r.Status, f)
	}
}

// TestPrunedRecoveredOneShort: only a run entry's journal may be pruned one line short
// of its receipt (a server stopped before the terminated line). A recovered run was
// recorded as found: a pruned entry with one record fewer is another receipt.
func TestPrunedRecoveredOneShort(t *testing.T) {
	p := newProjectRuns(t, 0)
	p.addRun(t, p.store(t), "orphan", false)
	rec, err := Reconcile(p.lw, p.gov, p.pub)
	if err != nil || len(rec) != 1 {
		t.Fatalf("reconciled %+v, %v", rec, err)
	}
	if _, err := p.lw.Append(Pruned{RunID: "orphan", File: rec[0].File, Records: rec[0].Records - 1, Head: ""}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.files[0]); err != nil {
		t.Fatal(err)
	}
	r := VerifyProject(p.dir, p.pub, nil)
	if got := strings.Join(r.Problems, "; "); r.ExitCode() != 1 || !strings.Contains(got, "pruned with another receipt") {
		t.Fatalf("exit %d, problems %q; want 1 and another receipt", r.ExitCode(), got)
	}
}

// TestPrunedOtherFile: a pruned entry must name the file the run was recorded with:
// the same records and head under another file name is another receipt.
func TestPrunedOtherFile(t *testing.T) {
	p := newProjectRuns(t, 1)
	run := p.runEntry(t, "run-0")
	if _, err := p.lw.Append(Pruned{RunID: run.RunID, File: journal.FileName("agent", "run-9"), Records: run.Records, Head: run.Head, Reason: run.Reason, Released: run.Released}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.files[0]); err != nil {
		t.Fatal(err)
	}
	r := VerifyProject(p.dir, p.pub, nil)
	if got := strings.Join(r.Problems, "; "); r.ExitCode() != 1 || !strings.Contains(got, "pruned with another receipt") {
		t.Fatalf("exit %d, problems %q; want 1 and another receipt", r.ExitCode(), got)
	}
}

// TestPrunedTwice: a run is pruned once: a second pruned entry for it, even with the
// same receipt, is a run id with two entries.
func TestPrunedTwice(t *testing.T) {
	p := newProjectRuns(t, 1)
	run := p.runEntry(t, "run-0")
	pr := Pruned{RunID: run.RunID, File: run.File, Records: run.Records, Head: run.Head, Reason: run.Reason, Released: run.Released}
	if _, err := p.lw.Append(pr); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.files[0]); err != nil {
		t.Fatal(err)
	}
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 0 {
		t.Fatalf("the pruned run: exit %d, problems %q", r.ExitCode(), r.Problems)
	}
	data, err := json.Marshal(pr)
	if err != nil {
		t.Fatal(err)
	}
	appendSigned(t, p, TypePruned, string(data))
	r := VerifyProject(p.dir, p.pub, nil)
	if got := strings.Join(r.Problems, "; "); r.ExitCode() != 1 || !strings.Contains(got, "appears twice") {
		t.Fatalf("exit %d, problems %q; want 1 and the run appearing twice", r.ExitCode(), got)
	}
}

// TestTamperedJournalOneShort: a journal one line short of its run entry's receipt,
// at its prev_head, is accepted as a server stopped before the terminated line only while
// it verifies. With an earlier line tampered (same count, same last line) it is a
// problem, and prune keeps it as evidence.
func TestTamperedJournalOneShort(t *testing.T) {
	p := newProjectRuns(t, 2)
	data := mustRead(t, p.files[0])
	ls := lines(data)
	if len(ls) != 3 {
		t.Fatalf("the journal has %d lines, want 3", len(ls))
	}
	first := append(flipLast(bytes.TrimSuffix(ls[0], []byte("\n"))), '\n')
	if err := os.WriteFile(p.files[0], append(first, ls[1]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if jr := journal.Verify(p.files[0], p.pub, journal.VerifyOptions{}); jr.Status != journal.StatusInvalid || jr.Records != 2 {
		t.Fatalf("the tampered journal: %s with %d records; want invalid with 2", jr.Status, jr.Records)
	}
	r := VerifyProject(p.dir, p.pub, nil)
	if f := findingOf(r, "run-0"); r.ExitCode() != 1 || f == nil || f.Problem == "" {
		t.Fatalf("exit %d, finding %+v; want the tampered journal a problem", r.ExitCode(), f)
	}
	p.lw.Close()
	pruned, _, err := Prune(p.root(t), "", func(string, time.Time) bool { return true }, false)
	if !errors.Is(err, ErrEvidence) || len(pruned) != 1 || pruned[0].RunID != "run-1" {
		t.Fatalf("pruned %+v, %v; want run-1 only, run-0 kept as evidence", pruned, err)
	}
	if _, err := os.Stat(p.files[0]); err != nil {
		t.Fatalf("the tampered journal is gone: %v", err)
	}
}

// locksBlocked reports whether /proc/locks lists a process waiting for a lock on the
// inode ino.
func locksBlocked(t *testing.T, ino uint64) bool {
	t.Helper()
	f, err := os.Open("/proc/locks")
	if err != nil {
		t.Skipf("no /proc/locks: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	suffix := fmt.Sprintf(":%d", ino)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "->") {
			continue
		}
		for _, field := range strings.Fields(sc.Text()) {
			if strings.HasSuffix(field, suffix) && strings.Count(field, ":") == 2 {
				return true
			}
		}
	}
	return false
}

// TestReadDurableWaitsForWriter: a checkpoint's reading of the ledger (ReadDurable)
// waits for the writers' lock: while a writer holds it — a line written, its fsync's
// verdict not yet known — nothing is read.
func TestReadDurableWaitsForWriter(t *testing.T) {
	p := newProjectRuns(t, 1)
	f, err := os.OpenFile(p.ledgerPath(), os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	type result struct {
		data []byte
		err  error
	}
	read := make(chan result, 1)
	go func() {
		data, err := ReadDurable(p.root(t))
		read <- result{data, err}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for !locksBlocked(t, st.Ino) {
		select {
		case r := <-read:
			t.Fatalf("ReadDurable read %d bytes (%v) while a writer held the lock", len(r.data), r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("ReadDurable neither waited for the lock nor returned")
		}
		time.Sleep(time.Millisecond)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if r := <-read; r.err != nil || !bytes.Equal(r.data, ledgerFile(t, p)) {
		t.Fatalf("ReadDurable after the lock was let go: %d bytes, %v", len(r.data), r.err)
	}
}

// TestBadlyNamedHeldFilesNotInProgress: a held, empty .jsonl file whose name has only
// one part the writer never makes — the agent's or the run's — is never taken for a run
// in progress: it stays a journal the ledger does not know.
func TestBadlyNamedHeldFilesNotInProgress(t *testing.T) {
	for _, name := range []string{"ag!nt.run-1.jsonl", "agent.run~1.jsonl"} {
		t.Run(name, func(t *testing.T) {
			p := newProjectRuns(t, 1)
			path := filepath.Join(p.gov, name)
			f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			r := VerifyProject(p.dir, p.pub, nil)
			var found *RunFinding
			for i := range r.Runs {
				if r.Runs[i].File == name {
					found = &r.Runs[i]
				}
			}
			if found == nil || r.ExitCode() != 1 || found.Problem == "" || found.Note == inProgressNote {
				t.Fatalf("exit %d, finding %+v; want a problem, not a run in progress", r.ExitCode(), found)
			}
		})
	}
}

// TestSecondLookLedgerEdited: when the ledger read again at the second look does not
// begin with the bytes first read — a line edited meanwhile, in place — the first
// findings stand: lines appended after an edited ledger do not clear a problem.
func TestSecondLookLedgerEdited(t *testing.T) {
	p := newProjectRuns(t, 1)
	w := durableRun(t, p.store(t), "ending", journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"})
	testBeforeSecondLook = func() {
		endRun(t, p, w, "ending")
		f, err := os.OpenFile(p.ledgerPath(), os.O_RDWR, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, 40); err != nil {
			t.Error(err)
			return
		}
		b[0] ^= 1
		if _, err := f.WriteAt(b, 40); err != nil {
			t.Error(err)
		}
	}
	defer func() { testBeforeSecondLook = nil }()
	r := VerifyProject(p.dir, p.pub, nil)
	if f := findingOf(r, "ending"); r.ExitCode() != 1 || f == nil || f.Problem == "" {
		t.Fatalf("exit %d, finding %+v; want the first finding (a journal the ledger does not know) to stand", r.ExitCode(), f)
	}
}

// TestSecondLookCopyStaysUnknown: a copy of a run's journal under another name stays a
// journal the ledger does not know when the run ends during verification: the run's
// entry names its own file, and is judged against that file only.
func TestSecondLookCopyStaysUnknown(t *testing.T) {
	p := newProjectRuns(t, 1)
	w := durableRun(t, p.store(t), "ending", journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"})
	if err := w.Append(journal.Terminated{Reason: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.gov, "copy.jsonl"), mustRead(t, w.Path()), 0o600); err != nil {
		t.Fatal(err)
	}
	testBeforeSecondLook = func() {
		rc := w.Durable()
		run := Run{RunID: "ending", AgentID: "agent", Agent: "a", File: filepath.Base(w.Path()), Reason: "cancelled", Records: int64(rc.Records), Head: rc.Head, Caller: "stdio"}
		if _, err := p.lw.Append(run); err != nil {
			t.Error(err)
		}
		w.Close()
	}
	defer func() { testBeforeSecondLook = nil }()
	r := VerifyProject(p.dir, p.pub, nil)
	var cp *RunFinding
	for i := range r.Runs {
		if r.Runs[i].File == "copy.jsonl" {
			cp = &r.Runs[i]
		}
	}
	if r.ExitCode() != 1 || cp == nil || cp.Problem != "a journal the ledger does not know" {
		t.Fatalf("exit %d, copy %+v, runs %+v; want the copy a journal the ledger does not know", r.ExitCode(), cp, r.Runs)
	}
}

// otherRecord is a Record that is none of the ledger's entry types.
type otherRecord struct{}

func (otherRecord) Type() string { return TypeRun }

// TestAppendTakesPointersAsValues: an entry given by pointer is checked as the entry it
// points to — a second pruned entry for a run is ErrPruned, a pruned entry for a run the
// ledger does not know ErrNotRecorded, a recovered entry for a known run ErrKnown — and
// a nil pointer or a Record of another type is refused, nothing written.
func TestAppendTakesPointersAsValues(t *testing.T) {
	p := newProjectRuns(t, 1)
	run := p.runEntry(t, "run-0")
	pr := Pruned{RunID: run.RunID, File: run.File, Records: run.Records, Head: run.Head, Reason: run.Reason, Released: run.Released}
	if _, err := p.lw.Append(&pr); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, filepath.Join(p.dir, ".symbiont", "ledger.jsonl"))
	if _, err := p.lw.Append(&pr); !errors.Is(err, ErrPruned) {
		t.Errorf("a second pruned entry by pointer: %v, want ErrPruned", err)
	}
	unknown := pr
	unknown.RunID = "never-recorded"
	if _, err := p.lw.Append(&unknown); !errors.Is(err, ErrNotRecorded) {
		t.Errorf("a pruned entry by pointer for an unknown run: %v, want ErrNotRecorded", err)
	}
	if _, err := p.lw.Append(&Recovered{RunID: run.RunID, File: run.File}); !errors.Is(err, ErrKnown) {
		t.Errorf("a recovered entry by pointer for a known run: %v, want ErrKnown", err)
	}
	for _, r := range []Record{(*Pruned)(nil), (*Run)(nil), otherRecord{}, nil} {
		if _, err := p.lw.Append(r); err == nil || !strings.Contains(err.Error(), "not an entry the ledger records") {
			t.Errorf("Append(%#v): %v, want refused as not an entry", r, err)
		}
	}
	if after := mustRead(t, filepath.Join(p.dir, ".symbiont", "ledger.jsonl")); !bytes.Equal(after, before) {
		t.Errorf("the refused appends changed the ledger (%d bytes, then %d)", len(before), len(after))
	}
}
