package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"symbi/internal/digest"
	"symbi/internal/journal"
)

// project is a project with n finished runs, each journaled and in the ledger, as a
// server leaves it.
type project struct {
	dir, gov string
	pub      ed25519.PublicKey
	files    []string // journal paths, by run
	lw       *Writer
}

func newProjectRuns(t *testing.T, n int) *project { return newProjectRunsTB(t, n) }

func newProjectRunsTB(t testing.TB, n int) *project {
	t.Helper()
	dir := t.TempDir()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	store, err := journal.OpenStore(root, journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lw, err := Open(root, store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lw.Close() })
	p := &project{dir: dir, gov: store.Dir(), pub: store.PublicKey(), lw: lw}
	for i := range n {
		p.addRun(t, store, fmt.Sprintf("run-%d", i), true)
	}
	return p
}

// durableRun creates the journal of runID (agent "agent") and writes recs to it, durable;
// its writer stays open.
func durableRun(t testing.TB, store *journal.Store, runID string, recs ...journal.Record) *journal.Writer {
	t.Helper()
	w, err := store.Create("agent", runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	return w
}

// addRun writes a whole run's journal, recording it in the ledger when recorded is set.
func (p *project) addRun(t testing.TB, store *journal.Store, runID string, recorded bool) {
	t.Helper()
	w := durableRun(t, store, runID, journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"}, journal.Terminated{Reason: "cancelled"})
	defer w.Close()
	rc := w.Durable()
	data, _ := os.ReadFile(w.Path())
	prev := journal.ZeroHash
	if i := bytes.LastIndexByte(data[:len(data)-1], '\n'); i >= 0 {
		prev = digestOf(data[:i+1][bytes.LastIndexByte(data[:i], '\n')+1:])
	}
	if recorded {
		if _, err := p.lw.Append(Run{RunID: runID, AgentID: "agent", Agent: "a", File: filepath.Base(w.Path()), Reason: "cancelled", Records: int64(rc.Records), Head: rc.Head, PrevHead: prev, Caller: "stdio"}); err != nil {
			t.Fatal(err)
		}
	}
	p.files = append(p.files, w.Path())
}

// openStore opens the project's journal store as another server would, closed when
// the test ends.
func (p *project) openStore(t *testing.T) *journal.Store {
	t.Helper()
	root, err := os.Open(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	store, err := journal.OpenStore(root, journal.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func (p *project) ledgerPath() string { return filepath.Join(p.dir, ".symbiont", FileName) }

func (p *project) checkpoint(t *testing.T) []byte { return p.checkpointTB(t) }

func (p *project) checkpointTB(t testing.TB) []byte {
	t.Helper()
	data, _ := os.ReadFile(p.ledgerPath())
	return p.checkpointOf(t, data)
}

// checkpointOf signs a checkpoint of the ledger bytes data with the project key.
func (p *project) checkpointOf(t testing.TB, data []byte) []byte {
	t.Helper()
	tree, err := NewTree(Verify(data, p.pub).Entries)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := SignCheckpoint(tree, p.lw.key)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestVerifyProjectThreats: each threat of docs/ledger.md is caught, and an untouched
// project verifies.
func TestVerifyProjectThreats(t *testing.T) {
	if r := VerifyProject(newProjectRuns(t, 3).dir, newProjectRuns(t, 0).pub, nil); r.ExitCode() != 1 {
		t.Errorf("another project's key verified: %+v", r)
	}
	for _, dir := range []string{filepath.Join(t.TempDir(), "no-such-project"), t.TempDir()} {
		if r := VerifyProject(dir, newProjectRuns(t, 0).pub, nil); r.ExitCode() != 1 || len(r.Problems) != 1 {
			t.Errorf("no project at %s: exit %d, problems %q", dir, r.ExitCode(), r.Problems)
		}
	}
	tests := []struct {
		name   string
		act    func(t *testing.T, p *project)
		cp     bool   // verify with a checkpoint saved before the act
		want   string // a substring of a problem or finding
		status string
	}{
		{"untouched", func(*testing.T, *project) {}, true, "", journal.StatusComplete},
		{"whole journal deleted", func(t *testing.T, p *project) { os.Remove(p.files[1]) }, false, "the journal is missing", journal.StatusInvalid},
		{"journal replaced by another run's", func(t *testing.T, p *project) {
			b, _ := os.ReadFile(p.files[0])
			os.WriteFile(p.files[1], b, 0o600)
		}, false, "holds run run-0", journal.StatusInvalid},
		{"journal truncated at a line boundary (more than its last line)", func(t *testing.T, p *project) {
			b, _ := os.ReadFile(p.files[2])
			os.WriteFile(p.files[2], b[:bytes.IndexByte(b, '\n')+1], 0o600)
		}, false, "truncated or replaced", journal.StatusInvalid},
		{"bytes appended after the terminated line", func(t *testing.T, p *project) {
			b, _ := os.ReadFile(p.files[1])
			os.WriteFile(p.files[1], append(b, `{"payload":{}`...), 0o600)
		}, false, "bytes after the terminated line", journal.StatusInvalid},
		{"ledger line deleted", func(t *testing.T, p *project) {
			editLedger(t, p, func(ls [][]byte) [][]byte { return append(ls[:1], ls[2:]...) })
		}, false, "ledger line 2", journal.StatusInvalid},
		{"ledger line edited", func(t *testing.T, p *project) {
			editLedger(t, p, func(ls [][]byte) [][]byte {
				ls[1] = bytes.Replace(ls[1], []byte("run-1"), []byte("run-7"), 1)
				return ls
			})
		}, false, "ledger line 2", journal.StatusInvalid},
		{"ledger lines reordered", func(t *testing.T, p *project) {
			editLedger(t, p, func(ls [][]byte) [][]byte { ls[0], ls[1] = ls[1], ls[0]; return ls })
		}, false, "ledger line 1", journal.StatusInvalid},
		{"ledger truncated, caught by a saved checkpoint", func(t *testing.T, p *project) {
			editLedger(t, p, func(ls [][]byte) [][]byte { return ls[:2] })
			os.Remove(p.files[2])
		}, true, "truncated or rolled back", journal.StatusInvalid},
		{"ledger rewritten with the project key, caught by a saved checkpoint", func(t *testing.T, p *project) {
			rewriteLedger(t, p)
		}, true, "rewritten", journal.StatusInvalid},
		{"a pruned entry for a run never recorded", func(t *testing.T, p *project) {
			// The writer refuses it (ErrNotRecorded): signed by hand.
			appendSigned(t, p, TypePruned, `{"run_id":"ghost","file":"agent.ghost.jsonl","records":3,"head":"`+strings.Repeat("a", 64)+`"}`)
		}, false, "run ghost is pruned but was never recorded", journal.StatusInvalid},
		{"ledger file deleted", func(t *testing.T, p *project) { os.Remove(p.ledgerPath()) }, false, "no project ledger at", journal.StatusInvalid},
		{".symbiont deleted", func(t *testing.T, p *project) { os.RemoveAll(filepath.Join(p.dir, ".symbiont")) }, false, "has no .symbiont directory", journal.StatusInvalid},
		{".symbiont a symbolic link to a copy", func(t *testing.T, p *project) {
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			os.Rename(filepath.Join(p.dir, ".symbiont"), elsewhere)
			os.Symlink(elsewhere, filepath.Join(p.dir, ".symbiont"))
		}, false, ".symbiont is a symbolic link", journal.StatusInvalid},
		{"governed a symbolic link to a copy", func(t *testing.T, p *project) {
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			os.Rename(p.gov, elsewhere)
			os.Symlink(elsewhere, p.gov)
		}, false, ".symbiont/governed is a symbolic link", journal.StatusInvalid},
		{"a journal the ledger never saw", func(t *testing.T, p *project) {
			root, _ := os.Open(p.dir)
			defer root.Close()
			store, _ := journal.OpenStore(root, journal.StoreOptions{})
			defer store.Close()
			p.addRun(t, store, "stranger", false)
		}, false, "a journal the ledger does not know", journal.StatusInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProjectRuns(t, 3)
			var cps [][]byte
			if tt.cp {
				cps = append(cps, p.checkpoint(t))
			}
			p.lw.Close()
			tt.act(t, p)
			r := VerifyProject(p.dir, p.pub, cps)
			all := strings.Join(r.Problems, "\n") + "\n" + fmt.Sprint(r.Runs)
			if r.Status != tt.status || (tt.want != "" && !strings.Contains(all, tt.want)) {
				t.Fatalf("status %s, want %s with %q:\n%s", r.Status, tt.status, tt.want, all)
			}
		})
	}
}

func editLedger(t *testing.T, p *project, f func([][]byte) [][]byte) {
	t.Helper()
	data, _ := os.ReadFile(p.ledgerPath())
	ls := bytes.SplitAfter(data, []byte("\n"))
	ls = ls[:len(ls)-1] // the empty tail after the last "\n"
	if err := os.WriteFile(p.ledgerPath(), bytes.Join(f(ls), nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rewriteLedger replaces the ledger with a fresh one signed by the project key that
// records the same runs: valid on its own, other lines than a checkpoint signed.
func rewriteLedger(t *testing.T, p *project) {
	t.Helper()
	data, _ := os.ReadFile(p.ledgerPath())
	old := Verify(data, p.pub).Entries
	os.Remove(p.ledgerPath())
	root, _ := os.Open(p.dir)
	defer root.Close()
	w, err := Open(root, p.lw.key)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Append(Resolution{RunID: "run-0", Resolution: "accepted", Caller: "stdio"}) // the rewrite's own history
	for _, l := range old {
		var run Run
		if err := jsonUnmarshal(l.Data, &run); err != nil {
			t.Fatal(err)
		}
		w.Append(run)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestStopBetweenLedgerAndJournal: the server stopped after a run's entry was durable and
// before its journal's last line. The project verifies as consistent with a crash
// remaining (exit 2), not as tampered; two lines short is tampering (exit 1).
func TestStopBetweenLedgerAndJournal(t *testing.T) {
	p := newProjectRuns(t, 2)
	b, _ := os.ReadFile(p.files[1])
	lastStart := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1
	os.WriteFile(p.files[1], b[:lastStart], 0o600) // the terminated line never written
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 2 {
		t.Fatalf("one line short: exit %d, want 2: %v %v", r.ExitCode(), r.Problems, r.Runs)
	}
	if rec, _ := Reconcile(p.lw, p.gov, p.pub); len(rec) != 0 {
		t.Errorf("reconciliation appended %+v for a run the ledger knows", rec)
	}
	os.WriteFile(p.files[1], nil, 0o600)
	if r := VerifyProject(p.dir, p.pub, nil); r.ExitCode() != 1 {
		t.Fatalf("emptied: exit %d, want 1", r.ExitCode())
	}
}

func digestOf(b []byte) string { return digest.SHA256Hex(b) }

// TestReconcileLeavesRunsInFlight: a journal another server is still writing is not
// recovered (its run entry comes when it ends); once its writer is gone, it is.
func TestReconcileLeavesRunsInFlight(t *testing.T) {
	p := newProjectRuns(t, 1)
	store := p.openStore(t)
	w, err := store.Create("agent", "in-flight")
	if err != nil {
		t.Fatal(err)
	}
	w.Append(journal.Started{Agent: "a"})
	w.Sync()
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 0 {
		t.Fatalf("reconciled a run in flight: %+v, %v", rec, err)
	}
	w.Close()
	if rec, err := Reconcile(p.lw, p.gov, p.pub); err != nil || len(rec) != 1 || rec[0].RunID != "in-flight" || rec[0].State != journal.StatusIncomplete {
		t.Fatalf("an abandoned run: %+v, %v", rec, err)
	}
}

// BenchmarkVerifyProject measures symbi audit verify --project on a project of 10,000
// finished runs (each a three-record journal and its ledger entry), with a checkpoint,
// and side by side in each iteration raw ed25519.Verify of the same signed messages (every
// ledger and journal line) one at a time, spread over GOMAXPROCS goroutines as the
// journals are; x-raw-verify is verification's rate over the raw rate.
func BenchmarkVerifyProject(b *testing.B) {
	const runs = 10000
	p := newProjectRunsTB(b, runs)
	cp := p.checkpointTB(b)
	var msgs, sigs [][]byte
	files, _ := filepath.Glob(filepath.Join(p.gov, "*.jsonl"))
	for _, f := range append([]string{p.ledgerPath()}, files...) {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		context := journal.SignatureContext
		if f == p.ledgerPath() {
			context = Context
		}
		for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			m, s := signedParts(b, l, context)
			msgs, sigs = append(msgs, m), append(sigs, s)
		}
	}
	workers := runtime.GOMAXPROCS(0)
	var tv, tr time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if r := VerifyProject(p.dir, p.pub, [][]byte{cp}); r.ExitCode() != 0 {
			b.Fatalf("exit %d: %v", r.ExitCode(), r.Problems)
		}
		t1 := time.Now()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for j := w; j < len(msgs); j += workers {
					if !ed25519.Verify(p.pub, msgs[j], sigs[j]) {
						b.Error("raw verify failed")
					}
				}
			})
		}
		wg.Wait()
		tv, tr = tv+t1.Sub(t0), tr+time.Since(t1)
	}
	b.ReportMetric(float64(tv.Milliseconds())/float64(b.N), "ms/verify")
	b.ReportMetric(float64(runs)*float64(b.N)/tv.Seconds(), "runs/s")
	b.ReportMetric(float64(len(msgs)), "signatures")
	b.ReportMetric(float64(tr)/float64(tv), "x-raw-verify")
}

// signedParts returns the signed message (context and P) and the signature of one
// envelope line {"payload":P,"signature":"S"} (without its "\n").
func signedParts(t testing.TB, line []byte, context string) (msg, sig []byte) {
	t.Helper()
	const prefix, sigPrefix = `{"payload":`, `,"signature":"`
	i := bytes.LastIndex(line, []byte(sigPrefix))
	if !bytes.HasPrefix(line, []byte(prefix)) || i < 0 {
		t.Fatalf("not an envelope line: %q", line)
	}
	sig, err := base64.StdEncoding.DecodeString(string(bytes.TrimSuffix(line[i+len(sigPrefix):], []byte(`"}`))))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(context), line[len(prefix):i]...), sig
}

// TestVerifyLiveProject: a project a server serves is verified as it changes. A run in
// flight — its journal without terminated, held by its writer, not yet in the ledger — is
// reported in progress (incomplete, exit 2), not as a journal the ledger does not know;
// once its writer is gone without ending it, it is one (exit 1). A run that ends while
// the project is verified — recorded in the ledger after the ledger was read — is judged
// again against the ledger read anew: consistent. And one stopped just before its
// terminated line, which is then written, is complete.
func TestVerifyLiveProject(t *testing.T) {
	p := newProjectRuns(t, 2)
	store := p.openStore(t)

	t.Run("in flight", func(t *testing.T) {
		w, err := store.Create("agent", "in-flight")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.Append(journal.Started{Agent: "a"}); err != nil {
			t.Fatal(err)
		}
		w.Sync()
		r := VerifyProject(p.dir, p.pub, nil)
		f := findingOf(r, "in-flight")
		if r.ExitCode() != 2 || f == nil || f.Problem != "" || f.Note != inProgressNote || f.Journal != journal.StatusIncomplete {
			t.Fatalf("a run in flight: exit %d, finding %+v, problems %v", r.ExitCode(), f, r.Problems)
		}
		w.Close() // its server is gone: the run was abandoned
		r = VerifyProject(p.dir, p.pub, nil)
		if f := findingOf(r, "in-flight"); r.ExitCode() != 1 || f == nil || f.Problem != "a journal the ledger does not know" {
			t.Fatalf("an abandoned journal the ledger does not know: exit %d, finding %+v", r.ExitCode(), f)
		}
		os.Remove(w.Path())
	})

	t.Run("ends while verified", func(t *testing.T) {
		p.addRun(t, store, "ending", false) // its journal whole, its ledger entry not yet written
		journalPath := p.files[len(p.files)-1]
		data, _ := os.ReadFile(journalPath)
		rc := journal.Receipt{Records: bytes.Count(data, []byte("\n"))}
		lines := bytes.SplitAfter(data, []byte("\n"))
		rc.Head = digestOf(lines[len(lines)-2])
		prev := digestOf(lines[len(lines)-3])
		testBeforeSecondLook = func() {
			if _, err := p.lw.Append(Run{RunID: "ending", AgentID: "agent", Agent: "a", File: filepath.Base(journalPath), Reason: "cancelled",
				Records: int64(rc.Records), Head: rc.Head, PrevHead: prev, Caller: "stdio"}); err != nil {
				t.Error(err)
			}
		}
		defer func() { testBeforeSecondLook = nil }()
		r := VerifyProject(p.dir, p.pub, nil)
		if f := findingOf(r, "ending"); r.ExitCode() != 0 || f == nil || f.Problem != "" || f.Entry != TypeRun {
			t.Fatalf("a run that ended while verified: exit %d, finding %+v, problems %v", r.ExitCode(), f, r.Problems)
		}
	})

	t.Run("terminated written while verified", func(t *testing.T) {
		b, _ := os.ReadFile(p.files[1])
		lastStart := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1
		os.WriteFile(p.files[1], b[:lastStart], 0o600) // the terminated line not yet written
		testBeforeSecondLook = func() { os.WriteFile(p.files[1], b, 0o600) }
		defer func() { testBeforeSecondLook = nil }()
		r := VerifyProject(p.dir, p.pub, nil)
		if f := findingOf(r, "run-1"); r.ExitCode() != 0 || f == nil || f.Problem != "" || f.Note != "" {
			t.Fatalf("a terminated line written while verified: exit %d, finding %+v", r.ExitCode(), f)
		}
	})
}

func findingOf(r *ProjectReport, runID string) *RunFinding {
	for i := range r.Runs {
		if r.Runs[i].RunID == runID {
			return &r.Runs[i]
		}
	}
	return nil
}

// TestVerifyProjectMoreThreats: the two threats of docs/ledger.md TestVerifyProjectThreats
// leaves out — a run recorded twice, a torn last ledger line — are caught too.
func TestVerifyProjectMoreThreats(t *testing.T) {
	for _, tt := range []struct {
		name string
		act  func(t *testing.T, p *project)
		want string
	}{
		{"a run recorded twice", func(t *testing.T, p *project) {
			data := Verify(ledgerFile(t, p), p.pub).Entries[1].Data
			appendSigned(t, p, TypeRun, string(data))
		}, "appears twice"},
		{"a torn last ledger line", func(t *testing.T, p *project) {
			f, err := os.OpenFile(p.ledgerPath(), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString(`{"payload":{"v":1,"seq":3,`); err != nil {
				t.Fatal(err)
			}
		}, "not a whole line"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := newProjectRuns(t, 3)
			p.lw.Close()
			tt.act(t, p)
			r := VerifyProject(p.dir, p.pub, nil)
			all := strings.Join(r.Problems, "\n")
			if r.Status != journal.StatusInvalid || !strings.Contains(all, tt.want) {
				t.Fatalf("status %s, problems:\n%s\nwant invalid with %q", r.Status, all, tt.want)
			}
		})
	}
}
