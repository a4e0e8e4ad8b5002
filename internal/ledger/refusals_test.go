package ledger

// Security checks of the ledger: refusals of signed lines and checkpoints that break the
// format's rules, proofs checked against the checkpoint's root, the ledger's bounds at the
// byte, fail-stop after a failed write, fsync or refresh, retractions that cut only the
// writer's own bytes, the callers recorded for reconciled runs (the owners of every later
// access decision), and the receipts verify_project judges journals by. Each test names
// the check it holds to.

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// signedLine returns one ledger line signed with testKey over payload.
func signedLine(payload string) []byte { return sealLine(testKey(), payload) }

// sealLine returns one ledger line signed with key over payload.
func sealLine(key ed25519.PrivateKey, payload string) []byte {
	return journal.Seal(key, Context, []byte(payload))
}

// entryPayload is the payload of a ledger entry of version v and type typ, with data, at
// seq with prev.
func entryPayload(v, seq, prev, typ, data string) string {
	return `{"v":` + v + `,"seq":` + seq + `,"prev":"` + prev + `","time":"2026-01-02T03:04:05.000Z","type":"` + typ + `","data":` + data + `}`
}

// resolutionData is the data of a resolution entry.
const resolutionData = `{"run_id":"r1","resolution":"accepted","note":"","caller":"stdio"}`

// TestVerifyRefusesSignedLineFields: a line signed with the project key is still
// refused when its payload is not the next line of a version-1 chain. Each rule is
// checked alone: a v that is not 1; a seq that is not the line's index while its prev is
// right (the prev chain does not cover the seq); a prev that is not the previous line's
// hash while its seq is right (a line spliced from another ledger signed with the same
// key — SYMBI_AUDIT_KEY_FILE may serve two projects); and a data member that is not an
// object, for a type this verifier does not know.
func TestVerifyRefusesSignedLineFields(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	first := signedLine(entryPayload("1", "0", ZeroHash, "resolution", resolutionData))
	if rep := Verify(first, pub); len(rep.Problems) != 0 || len(rep.Entries) != 1 {
		t.Fatalf("the well-formed line: %+v", rep.Problems)
	}
	h := digestOf(first)
	for _, tc := range []struct{ name, second, want string }{
		{"version 2", entryPayload("2", "1", h, "resolution", resolutionData), "unknown version"},
		{"seq skips ahead, prev right", entryPayload("1", "2", h, "resolution", resolutionData), "seq is 2, want 1"},
		{"seq repeats, prev right", entryPayload("1", "0", h, "resolution", resolutionData), "seq is 0, want 1"},
		{"prev of another ledger, seq right", entryPayload("1", "1", strings.Repeat("b", 64), "resolution", resolutionData), "the chain is broken"},
		{"prev zero on seq 1", entryPayload("1", "1", ZeroHash, "resolution", resolutionData), "the chain is broken"},
		{"data an array, unknown type", entryPayload("1", "1", h, "future_type", `[1,2]`), `"data" is not an object`},
		{"data a string, unknown type", entryPayload("1", "1", h, "future_type", `"x"`), `"data" is not an object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := append(append([]byte{}, first...), signedLine(tc.second)...)
			rep := Verify(data, pub)
			if len(rep.Entries) != 1 || len(rep.Problems) != 1 || rep.Problems[0].Line != 2 || !strings.Contains(rep.Problems[0].Message, tc.want) {
				t.Fatalf("entries %d, problems %+v; want line 2 refused with %q", len(rep.Entries), rep.Problems, tc.want)
			}
		})
	}
	// A later version's type with object data is accepted (the positive twin of the
	// data-object rule), so the refusals above are for the rule, not the type.
	ok := append(append([]byte{}, first...), signedLine(entryPayload("1", "1", h, "future_type", `{"x":1}`))...)
	if rep := Verify(ok, pub); len(rep.Problems) != 0 || len(rep.Entries) != 2 {
		t.Fatalf("a later version's entry with object data: %+v", rep.Problems)
	}
}

// signNote signs a checkpoint body with key as a note.
func signNote(t *testing.T, key ed25519.PrivateKey, body string) []byte {
	t.Helper()
	s, err := signer(key)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := note.Sign(&note.Note{Text: body}, s)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestCheckpointNegativeSize: OpenCheckpoint refuses a signed checkpoint whose size is
// negative ("-1", which is canonical decimal) as not a count: a checkpoint's size is a
// number of ledger lines, and no negative size may be vouched for.
func TestCheckpointNegativeSize(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	empty, err := (&Tree{}).Root(0)
	if err != nil {
		t.Fatal(err)
	}
	root := Checkpoint{Origin: Origin(pub), Size: 0, Root: empty}.Body()
	if _, err := OpenCheckpoint(signNote(t, key, root), pub); err != nil {
		t.Fatalf("the size-0 checkpoint: %v", err)
	}
	body := strings.Replace(root, "\n0\n", "\n-1\n", 1)
	if _, err := OpenCheckpoint(signNote(t, key, body), pub); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "not a decimal count") {
		t.Fatalf("a checkpoint of size -1: %v, want refused as not a decimal count", err)
	}
}

// TestProofFromAnotherTreeOfSameSize: an inclusion proof is checked against the
// checkpoint's root, not only its size. A tree of the attacker's own with the same size
// and a genuine ledger line at the same index gives a proof that leads to its own root;
// the project's checkpoint of that size must refuse it.
func TestProofFromAnotherTreeOfSameSize(t *testing.T) {
	key := testKey()
	pub := key.Public().(ed25519.PublicKey)
	good := Verify(sample(t, 4), pub)
	real, err := NewTree(good.Entries)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := SignCheckpoint(real, key)
	if err != nil {
		t.Fatal(err)
	}
	// The honest proof verifies.
	p, err := Prove(real, good.Entries, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckProof(p, cp, pub); err != nil {
		t.Fatalf("the honest proof: %v", err)
	}
	// The forged tree: line 1 genuine, the others junk of the attacker's choosing.
	forged := append([]Line{}, good.Entries...)
	for _, i := range []int{0, 2, 3} {
		forged[i] = Line{Leaf: []byte("junk " + itoa(i))}
	}
	ft, err := NewTree(forged)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := Prove(ft, forged, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if fp.Size != 4 || fp.Root == p.Root {
		t.Fatalf("forged tree: size %d, same root %v", fp.Size, fp.Root == p.Root)
	}
	if err := CheckProof(fp, cp, pub); !errors.Is(err, ErrProof) {
		t.Fatalf("a proof from another tree of the same size: %v, want ErrProof", err)
	}
}

// TestRefreshShrunkLedger: Refresh refuses a ledger that shrank behind a writer (another
// process cut it) with audit_unavailable naming the shrink — not a crash — since lines
// the writer took in as durable are gone.
func TestRefreshShrunkLedger(t *testing.T) {
	p := newProjectRuns(t, 2)
	if err := os.Truncate(p.ledgerPath(), 0); err != nil {
		t.Fatal(err)
	}
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Refresh on a shrunk ledger panicked: %v", r)
			}
		}()
		err = p.lw.Refresh()
	}()
	if err == nil || errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "shrank") {
		t.Fatalf("Refresh on a shrunk ledger: %v, want audit_unavailable naming the shrink", err)
	}
}

// TestRefreshFailureStopsWriter: a line another process appended that does not verify
// stops the writer, as Refresh's doc says ("A failure stops the writer"): Room then
// refuses every run with ErrStopped, so no run starts on a ledger that does not verify.
func TestRefreshFailureStopsWriter(t *testing.T) {
	p := newProjectRuns(t, 1)
	if err := p.lw.Room(RunRoom); err != nil {
		t.Fatalf("room before: %v", err)
	}
	f, err := os.OpenFile(p.ledgerPath(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("{\"payload\":{}}\n"))
	f.Close()
	if err := p.lw.Refresh(); err == nil {
		t.Fatal("Refresh took in a line that does not verify")
	}
	if err := p.lw.Room(RunRoom); !errors.Is(err, ErrStopped) {
		t.Fatalf("Room after the writer failed: %v, want ErrStopped", err)
	}
}

// TestWriteFailureStopsWriter: a failed write is not acknowledged and stops the writer:
// Room then refuses with ErrStopped, so no run starts that could not record its end.
func TestWriteFailureStopsWriter(t *testing.T) {
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
	if err := p.lw.Room(RunRoom); !errors.Is(err, ErrStopped) {
		t.Fatalf("Room after a failed write: %v, want ErrStopped", err)
	}
}

// TestFsyncFailureStopsRoom: after a failed fsync, Room refuses every run with
// ErrStopped (audit_unavailable): a run that started could never record its end.
func TestFsyncFailureStopsRoom(t *testing.T) {
	p := newProjectRuns(t, 1)
	p.lw.sync = func() error { return errors.New("injected EIO") }
	if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); err == nil {
		t.Fatal("an append whose fsync failed was acknowledged")
	}
	if err := p.lw.Room(RunRoom); !errors.Is(err, ErrStopped) || errcode.Of(err) != errcode.AuditUnavailable {
		t.Fatalf("Room after a failed fsync: %v, want audit_unavailable ErrStopped", err)
	}
}

// lineLen is the length of the line the writer would append for r now.
func lineLen(t *testing.T, w *Writer, r Record) int64 {
	t.Helper()
	w.now = fixedNow
	l, err := w.line(r)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(l))
}

// TestLedgerBoundsExact: the ledger's bounds, at the byte. A line that would end one
// byte past MaxLedgerBytes is refused, one that ends at it is taken; an entry other than
// run/recovered that would take one byte of the last RunRoom is refused, while a
// recovered entry is not (it ends a run, which the reserve is kept for); Room(need)
// refuses exactly when need passes what is left.
func TestLedgerBoundsExact(t *testing.T) {
	res := Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}
	rec := Recovered{RunID: "run-x", AgentID: "agent", File: "agent.run-x.jsonl", State: "incomplete", Records: 1, Head: strings.Repeat("a", 64)}

	t.Run("run entry one byte past the end", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		r := runEntry(7)
		p.lw.max = p.lw.size + lineLen(t, p.lw, r) - 1
		if _, err := p.lw.Append(r); !errors.Is(err, ErrFull) {
			t.Fatalf("a run entry one byte past the bound: %v, want ErrFull", err)
		}
	})
	t.Run("run entry ending at the bound", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		r := runEntry(7)
		p.lw.max = p.lw.size + lineLen(t, p.lw, r)
		if _, err := p.lw.Append(r); err != nil {
			t.Fatalf("a run entry ending at the bound: %v", err)
		}
	})
	t.Run("resolution one byte into the reserve", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		p.lw.max = p.lw.size + lineLen(t, p.lw, res) + RunRoom - 1
		if _, err := p.lw.Append(res); !errors.Is(err, ErrFull) {
			t.Fatalf("a resolution taking one byte of the reserve: %v, want ErrFull", err)
		}
	})
	t.Run("resolution just outside the reserve", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		p.lw.max = p.lw.size + lineLen(t, p.lw, res) + RunRoom
		if _, err := p.lw.Append(res); err != nil {
			t.Fatalf("a resolution leaving the reserve whole: %v", err)
		}
	})
	t.Run("recovered entry in the reserve", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		p.lw.max = p.lw.size + lineLen(t, p.lw, rec)
		if _, err := p.lw.Append(rec); err != nil {
			t.Fatalf("a recovered entry (it ends a run) in the last RunRoom bytes: %v", err)
		}
	})
	t.Run("Room at the byte", func(t *testing.T) {
		p := newProjectRuns(t, 1)
		left := p.lw.max - p.lw.size
		if err := p.lw.Room(left); err != nil {
			t.Fatalf("Room(all that is left): %v", err)
		}
		if err := p.lw.Room(left + 1); !errors.Is(err, ErrFull) {
			t.Fatalf("Room(one more than is left): %v, want ErrFull", err)
		}
	})
}

// TestRetractSparesOthersBytes: after a failed fsync the writer cuts its own unsynced
// line only when the file is exactly as it left it: bytes someone else appended after
// that line are not cut away with it.
func TestRetractSparesOthersBytes(t *testing.T) {
	p := newProjectRuns(t, 1)
	extra := []byte("someone else's bytes\n")
	calls := 0
	p.lw.sync = func() error {
		if calls++; calls > 1 {
			return nil // the retraction's own fsync
		}
		f, err := os.OpenFile(p.ledgerPath(), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return err
		}
		f.Write(extra)
		f.Close()
		return errors.New("injected EIO")
	}
	if _, err := p.lw.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}); err == nil {
		t.Fatal("an append whose fsync failed was acknowledged")
	}
	if data := ledgerFile(t, p); !strings.HasSuffix(string(data), string(extra)) {
		t.Fatalf("the bytes appended after the writer's line were cut: ledger ends %q", data[max(0, len(data)-40):])
	}
}

// orphanWithCaller journals a whole run "orphan" (not in the ledger) whose started
// record names caller alice, and returns its path.
func orphanWithCaller(t *testing.T, p *project) string {
	t.Helper()
	w := durableRun(t, p.store(t), "orphan", journal.Started{Agent: "a", Caller: "alice", CallerAuth: "token"},
		journal.InferenceRequested{CallID: "c1"}, journal.Terminated{Reason: "cancelled"})
	w.Close()
	return w.Path()
}

// TestMisnamedJournalNamesNoCaller: a journal reconciled under another run's name is
// recorded under that name's ids as invalid — and without the caller its records name,
// who is not that run's caller. The recovered entry's caller is the run's owner for
// every later access decision.
func TestMisnamedJournalNamesNoCaller(t *testing.T) {
	p := newProjectRuns(t, 0)
	path := orphanWithCaller(t, p)
	to := filepath.Join(p.gov, journal.FileName("agent", "run-9"))
	if err := os.Rename(path, to); err != nil {
		t.Fatal(err)
	}
	rec, err := Reconcile(p.lw, p.gov, p.pub)
	if err != nil || len(rec) != 1 {
		t.Fatalf("reconciled %+v, %v", rec, err)
	}
	if r := rec[0]; r.RunID != "run-9" || r.State != journal.StatusInvalid || r.Caller != "" || r.CallerAuth != "" {
		t.Fatalf("recovered %+v; want run-9 invalid with no caller (alice started run orphan, not run-9)", r)
	}
}

// TestRecordAsFoundOtherRunsJournal: a server's own run whose file now holds another
// run's journal is recorded under its own ids as invalid, with no caller: never with the
// other run's caller, who would then own the run for every later access decision.
func TestRecordAsFoundOtherRunsJournal(t *testing.T) {
	p := newProjectRuns(t, 0)
	other := orphanWithCaller(t, p)
	own := filepath.Join(p.gov, journal.FileName("agent", "mine"))
	data, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := RecordAsFound(p.lw, own, "agent", "mine")
	if err != nil || rec == nil {
		t.Fatalf("RecordAsFound: %+v, %v", rec, err)
	}
	if rec.RunID != "mine" || rec.State != journal.StatusInvalid || rec.Caller != "" || rec.CallerAuth != "" {
		t.Fatalf("recorded %+v; want run mine, invalid, no caller", *rec)
	}
}

// TestPruneDryRunInvalidLedger: a dry run refuses a ledger that does not verify with
// audit_unavailable, as a real prune does, rather than listing what it would remove from
// its valid prefix.
func TestPruneDryRunInvalidLedger(t *testing.T) {
	p := newProjectRuns(t, 2)
	p.lw.Close()
	data := ledgerFile(t, p)
	ls := lines(data)
	bad := append(append([]byte{}, ls[0]...), flipLast(ls[1])...)
	if err := os.WriteFile(p.ledgerPath(), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	pruned, _, err := Prune(p.root(t), "", func(string, time.Time) bool { return true }, true)
	if err == nil || errcode.Of(err) != errcode.AuditUnavailable {
		t.Fatalf("dry-run prune of an invalid ledger: pruned %+v, err %v; want audit_unavailable", pruned, err)
	}
}

// flipLast changes a character inside the line's signature.
func flipLast(l []byte) []byte {
	out := append([]byte{}, l...)
	i := bytes.Index(out, []byte(`"signature":"`)) + len(`"signature":"`) + 10
	if out[i] == 'A' {
		out[i] = 'B'
	} else {
		out[i] = 'A'
	}
	return out
}

// TestOfferSkipsResolvedAndHeld: start-up offers for resuming neither a journal whose
// run someone resolved (it was concluded about as finished) nor one another process's
// writer holds: only a free, unresolved journal is offered.
func TestOfferSkipsResolvedAndHeld(t *testing.T) {
	p := newProjectRuns(t, 0)
	store := p.store(t)
	p.addRun(t, store, "resolved", false)
	p.addRun(t, store, "free", false)
	held := durableRun(t, store, "held", journal.Started{Agent: "a"})
	defer held.Close()
	if _, err := p.lw.Append(Resolution{RunID: "resolved", Resolution: "accepted", Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
	var offered []string
	if err := offer(p.lw, store, func(_ *journal.Store, name string) { offered = append(offered, name) }); err != nil {
		t.Fatal(err)
	}
	if len(offered) != 1 || offered[0] != journal.FileName("agent", "free") {
		t.Fatalf("offered %v; want only %s (not the resolved run, not the held journal)", offered, journal.FileName("agent", "free"))
	}
}

// TestPrunedReceiptEveryField: a pruned entry must name the receipt and ending the run
// was recorded with — each field is checked on its own: a different head with the same
// records, a different released with the same reason, and one line short but ending at
// another head than the run entry's prev_head are each a problem.
func TestPrunedReceiptEveryField(t *testing.T) {
	other := strings.Repeat("c", 64)
	for _, tc := range []struct {
		name   string
		pruned func(r Run) Pruned
		want   string
	}{
		{"another head", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records, Head: other, Reason: r.Reason, Released: r.Released}
		}, "pruned with another receipt"},
		{"another released", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records, Head: r.Head, Reason: r.Reason, Released: !r.Released}
		}, "pruned as having ended cancelled (released true); it was recorded as cancelled (released false)"},
		{"one line short at another head", func(r Run) Pruned {
			return Pruned{RunID: r.RunID, File: r.File, Records: r.Records - 1, Head: other}
		}, "pruned with another receipt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProjectRuns(t, 1)
			run := p.runEntry(t, "run-0")
			if _, err := p.lw.Append(tc.pruned(run)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p.files[0]); err != nil {
				t.Fatal(err)
			}
			r := VerifyProject(p.dir, p.pub, nil)
			if got := strings.Join(r.Problems, "; "); r.ExitCode() != 1 || !strings.Contains(got, tc.want) {
				t.Fatalf("exit %d, problems %q; want 1 and %q", r.ExitCode(), got, tc.want)
			}
		})
	}
}

// TestRunEntryReceiptEveryField: a journal is judged against its run entry by records
// and head each: the same number of records with another head is a problem, and so is a
// journal one line short whose head is not the entry's prev_head.
func TestRunEntryReceiptEveryField(t *testing.T) {
	other := strings.Repeat("d", 64)
	for _, tc := range []struct {
		name string
		edit func(r Run) Run
	}{
		{"same records, another head", func(r Run) Run { r.Head = other; return r }},
		{"one line short, another prev_head", func(r Run) Run { r.Records++; r.PrevHead = other; return r }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProjectRuns(t, 0)
			store := p.store(t)
			// A journal without its terminated line, as a server that stopped between its
			// run entry and that line leaves it.
			w := durableRun(t, store, "run-0", journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"})
			w.Close()
			p.files = append(p.files, w.Path())
			jr := journal.Verify(p.files[0], p.pub, journal.VerifyOptions{})
			run := Run{RunID: "run-0", AgentID: "agent", Agent: "a", File: filepath.Base(p.files[0]), Reason: "cancelled",
				Records: int64(jr.Records), Head: jr.Head, PrevHead: ZeroHash, Caller: "stdio"}
			if _, err := p.lw.Append(tc.edit(run)); err != nil {
				t.Fatal(err)
			}
			r := VerifyProject(p.dir, p.pub, nil)
			f := findingOf(r, "run-0")
			if r.ExitCode() != 1 || f == nil || !strings.Contains(f.Problem, "truncated or replaced") {
				t.Fatalf("exit %d, finding %+v; want the journal refused as truncated or replaced", r.ExitCode(), f)
			}
		})
	}
}

// TestHeldInvalidJournalStaysProblem: a journal the ledger does not know whose writer
// holds it counts as a run in progress only while it verifies: held and invalid, it
// stays a problem.
func TestHeldInvalidJournalStaysProblem(t *testing.T) {
	p := newProjectRuns(t, 1)
	w := durableRun(t, p.store(t), "in-flight", journal.Started{Agent: "a"})
	defer w.Close()
	data, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	// Corrupt the signature of its only line in place (its writer still holds it).
	if err := os.WriteFile(w.Path(), flipLast(bytes.TrimSuffix(data, []byte("\n"))), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(w.Path(), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("\n"))
	f.Close()
	if !journal.InProgress(w.Path()) {
		t.Fatal("the journal is not held")
	}
	r := VerifyProject(p.dir, p.pub, nil)
	var found *RunFinding
	for i := range r.Runs {
		if r.Runs[i].File == filepath.Base(w.Path()) {
			found = &r.Runs[i]
		}
	}
	if r.ExitCode() != 1 || found == nil || found.Problem == "" || found.Journal != journal.StatusInvalid {
		t.Fatalf("a held journal that does not verify: exit %d, finding %+v; want exit 1 and a problem", r.ExitCode(), found)
	}
}

// TestSecondLookLedgerGoesBad: when the ledger read again at the second look is the
// first reading plus lines one of which does not verify, the first findings stand:
// lines read after a bad one — or beside it — do not clear a problem.
func TestSecondLookLedgerGoesBad(t *testing.T) {
	p := newProjectRuns(t, 1)
	store := p.store(t)
	p.addRun(t, store, "ending", false)
	path := p.files[1]
	jr := journal.Verify(path, p.pub, journal.VerifyOptions{})
	testBeforeSecondLook = func() {
		if _, err := p.lw.Append(Run{RunID: "ending", AgentID: "agent", Agent: "a", File: filepath.Base(path), Reason: "cancelled",
			Records: int64(jr.Records), Head: jr.Head, Caller: "stdio"}); err != nil {
			t.Error(err)
		}
		f, _ := os.OpenFile(p.ledgerPath(), os.O_APPEND|os.O_WRONLY, 0)
		f.Write([]byte("{\"payload\":{},\"signature\":\"\"}\n"))
		f.Close()
	}
	defer func() { testBeforeSecondLook = nil }()
	r := VerifyProject(p.dir, p.pub, nil)
	if f := findingOf(r, "ending"); r.ExitCode() != 1 || f == nil || f.Problem == "" {
		t.Fatalf("exit %d, finding %+v; want the first finding (a journal the ledger does not know) to stand", r.ExitCode(), f)
	}
}

// TestRetractSparesOtherWritersLines: a writer whose fsync fails cuts only its own
// lines: lines another writer appended before them — taken in, durable, perhaps signed by
// a checkpoint — stay.
func TestRetractSparesOtherWritersLines(t *testing.T) {
	dir, root := newRoot(t)
	a, b := openWriter(t, root), openWriter(t, root)
	if _, err := b.Append(runEntry(0)); err != nil {
		t.Fatal(err)
	}
	a.sync = func() error { return errors.New("injected EIO") }
	if _, err := a.Append(runEntry(1)); err == nil {
		t.Fatal("an append whose fsync failed was acknowledged")
	}
	rep := Verify(ledgerBytes(t, dir), testKey().Public().(ed25519.PublicKey))
	if len(rep.Problems) != 0 || len(rep.Entries) != 1 || rep.Entries[0].RunID() != "run-0" {
		t.Fatalf("after the other writer's failed fsync: %d entries, problems %v; want run-0, the first writer's durable line, kept", len(rep.Entries), rep.Problems)
	}
}

// TestSecondLookLedgerShrank: a ledger that shrinks between the first reading and the
// second look leaves the first findings standing — no crash.
func TestSecondLookLedgerShrank(t *testing.T) {
	p := newProjectRuns(t, 2)
	p.addRun(t, p.store(t), "orphan", false) // a problem: the second look reads again
	testBeforeSecondLook = func() {
		if err := os.Truncate(p.ledgerPath(), 10); err != nil {
			t.Error(err)
		}
	}
	defer func() { testBeforeSecondLook = nil }()
	var r *ProjectReport
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("VerifyProject panicked when the ledger shrank during the second look: %v", v)
			}
		}()
		r = VerifyProject(p.dir, p.pub, nil)
	}()
	if f := findingOf(r, "orphan"); r.ExitCode() != 1 || f == nil || f.Problem == "" {
		t.Fatalf("exit %d, finding %+v; want the first finding to stand", r.ExitCode(), f)
	}
}

// TestBadlyNamedHeldFileNotInProgress: a held, empty .jsonl file whose name is not of
// the writer's form (ids the writer never makes) is never taken for a run in progress:
// it stays a journal the ledger does not know, and a problem.
func TestBadlyNamedHeldFileNotInProgress(t *testing.T) {
	p := newProjectRuns(t, 1)
	path := filepath.Join(p.gov, "ag!nt.run~1.jsonl")
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
		if r.Runs[i].File == filepath.Base(path) {
			found = &r.Runs[i]
		}
	}
	if found == nil {
		t.Skipf("the file is not listed by journal.VerifyDir (runs %+v)", r.Runs)
	}
	if r.ExitCode() != 1 || found.Problem == "" || found.Note == inProgressNote {
		t.Fatalf("exit %d, finding %+v; want a problem, not a run in progress", r.ExitCode(), *found)
	}
}
