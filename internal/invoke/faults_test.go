package invoke

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
)

// TestKeyChangedWhileServing: the project ledger is opened with the project's key when
// the server starts, and the key file is read again before each run. A key file removed
// or replaced meanwhile refuses the run (audit_unavailable) before any journal or model
// call: a run signed with another key could not be verified with the project's, and its
// ledger entry would name a journal no single key verifies. A removed key is not made
// afresh.
func TestKeyChangedWhileServing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, keyFile string)
		want   error
	}{
		{"removed", func(t *testing.T, keyFile string) {
			if err := os.Remove(keyFile); err != nil {
				t.Fatal(err)
			}
		}, journal.ErrNoKey},
		{"replaced", func(t *testing.T, keyFile string) {
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			if err := os.WriteFile(keyFile, other.Seed(), 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrKeyChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
			lw := withLedger(t, f)
			res, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Audit.PublicKey != hex.EncodeToString(lw.PublicKey()) {
				t.Fatalf("first run signed with %s, the ledger's key is %x", res.Audit.PublicKey, lw.PublicKey())
			}
			gov := filepath.Join(f.dir, ".symbiont", "governed")
			keyFile := filepath.Join(gov, journal.KeyFileName)
			tc.change(t, keyFile)
			journals, _ := filepath.Glob(filepath.Join(gov, "*.jsonl"))
			calls := len(f.model.Requests())
			_, err = f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
			if errcode.Of(err) != errcode.AuditUnavailable || !errors.Is(err, tc.want) {
				t.Fatalf("after the key file was %s: %v; want audit_unavailable, %v", tc.name, err, tc.want)
			}
			if n := len(f.model.Requests()); n != calls {
				t.Fatalf("the model was called (%d -> %d)", calls, n)
			}
			if after, _ := filepath.Glob(filepath.Join(gov, "*.jsonl")); len(after) != len(journals) {
				t.Fatalf("journals %d -> %d: a journal was created for a refused run", len(journals), len(after))
			}
			if tc.name == "removed" {
				if _, err := os.Lstat(keyFile); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a removed key file was made afresh (%v)", err)
				}
			}
		})
	}
}

// TestJournalFailureRecordedAsFound: a run whose journal fails after its first records
// are durable (here someone else writes to the file, which stops the writer) ends with
// audit_unavailable and the journal's reference — and the project ledger records the
// journal as found (a recovered entry) before that result is returned, so that
// verification of the project, while this server still serves, finds every journal known
// (incomplete, not unknown).
func TestJournalFailureRecordedAsFound(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	lw := withLedger(t, f)
	f.runner.hook = func(point string) {
		if point != "inferred" {
			return
		}
		files, _ := filepath.Glob(filepath.Join(f.dir, ".symbiont", "governed", "*.jsonl"))
		if len(files) != 1 {
			panic("want one journal")
		}
		fh, err := os.OpenFile(files[0], os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			panic(err)
		}
		fh.Write([]byte("x"))
		fh.Close()
	}
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	var ie *Error
	if !errors.As(err, &ie) || errcode.Of(err) != errcode.AuditUnavailable || ie.Audit == nil {
		t.Fatalf("err %v; want audit_unavailable with the journal's reference", err)
	}
	if !lw.Knows(ie.Audit.RunID) {
		t.Fatalf("run %s ended audit_failed and its withheld result was returned, but the project ledger has no entry for it", ie.Audit.RunID)
	}
	rep := ledger.VerifyProject(f.dir, lw.PublicKey(), nil)
	if rep.ExitCode() != 2 || len(rep.Problems) > 0 {
		t.Fatalf("verify --project: exit %d, problems %v, runs %+v; want 2 (incomplete), no problem", rep.ExitCode(), rep.Problems, rep.Runs)
	}
}

// TestPanicInARunStep: a panic in a step of a run (a bug, on input the model chose) ends
// that run — its text withheld, its journal ended with terminated audit_failed, its
// caller told internal — and not the server. The run panics in a child process, which the
// panic would otherwise end.
func TestPanicInARunStep(t *testing.T) {
	if dir := os.Getenv("SYMBI_TEST_PANIC_DIR"); dir != "" {
		panicChild(t, dir)
		return
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPanicInARunStep$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SYMBI_TEST_PANIC_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a panic in one run's step ended the process (%v):\n%.4000s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatalf("the child wrote no result: %v\n%.4000s", err, out)
	}
	var res panicResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"inferred", "releasing"} {
		got := res[p]
		if got.Code != string(errcode.Internal) || got.Last != journal.TypeTerminated || got.Reason != reasonAuditFailed || got.Released || !got.Known || !got.Next {
			t.Errorf("a panic at %s: %+v; want internal, the journal ended terminated audit_failed, nothing released, the ledger knowing the run, and the next run served", p, got)
		}
	}
}

type panicResult map[string]struct {
	Code, Last, Reason string
	Released           bool
	Known              bool // the ledger has the run's entry
	Next               bool // a run after it is served
}

func panicChild(t *testing.T, out string) {
	res := panicResult{}
	for _, at := range []string{"inferred", "releasing"} {
		f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
		lw := withLedger(t, f)
		armed := true
		f.runner.hook = func(point string) {
			if point == at && armed {
				armed = false
				panic("a bug in a step of the run")
			}
		}
		_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
		r := res[at]
		r.Code = string(errcode.Of(err))
		var ie *Error
		if errors.As(err, &ie) && ie.Audit != nil {
			recs := payloads(t, ie.Audit.Path)
			last := recs[len(recs)-1]
			r.Last = last.Type
			var term journal.Terminated
			json.Unmarshal(last.Data, &term)
			r.Reason, r.Released = term.Reason, term.Released
			r.Known = lw.Knows(ie.Audit.RunID)
		}
		_, err = f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
		r.Next = err == nil
		res[at] = r
	}
	b, _ := json.Marshal(res)
	if err := os.WriteFile(filepath.Join(out, "result.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// panickingProvider is a provider whose Prepare panics: a bug in preflight, which runs
// in Start on the caller's goroutine, before the run's goroutine and its guard exist.
type panickingProvider struct{}

func (panickingProvider) Name() string  { return "openai" }
func (panickingProvider) Model() string { return "m" }
func (panickingProvider) Prepare(inference.Conversation, int) (*inference.Call, error) {
	panic("a bug in preflight")
}

// TestPanicInPreflightFreesSlot: a panic in Start's preflight — after the run's slot was
// taken, before the run's goroutine exists — refuses that run (internal) and frees the
// slot: with --max-runs 1 the next run is not refused busy, and Shutdown does not wait for
// a run that does not exist.
func TestPanicInPreflightFreesSlot(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.Provider, c.MaxRuns = panickingProvider{}, 1 })
	r := f.runner
	if _, err := r.Start(Request{Agent: "helper", Prompt: "q"}, nil); errcode.Of(err) != errcode.Internal {
		t.Fatalf("a panic in preflight: %v; want internal", err)
	}

	// A request refused in preflight, not for a slot: invalid_request (no prompt).
	_, err := r.Start(Request{Agent: "helper"}, nil)
	if errcode.Of(err) == errcode.Busy {
		t.Errorf("after a panic in preflight, the next run is refused busy with no run in flight (--max-runs 1): the slot leaked: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only a leaked slot reaches it
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with no run in flight: %v (it waits for the leaked slot)", err)
	}
}
