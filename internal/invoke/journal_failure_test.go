package invoke

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
	"symbi/internal/proctest"
)

// linkAtReleasing runs one allowed run whose journal file gains a second hard link just
// before the run writes its terminated record (the "releasing" hook): the writer refuses
// that file (a journal that is not exactly one name), so the text is withheld. It returns
// the caller's error and the journal's path, the second name removed again. With
// ledger, the project ledger is open and the run's entry written before that record.
func linkAtReleasing(t *testing.T, ledger bool) (*Error, string) {
	t.Helper()
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	if ledger {
		withLedger(t, f)
	}
	other := filepath.Join(f.dir, "a-second-name.jsonl") // same file system, outside governed
	f.runner.hook = func(point string) {
		if point != "releasing" {
			return
		}
		files, _ := filepath.Glob(filepath.Join(f.dir, ".symbiont", "governed", "*.jsonl"))
		if len(files) != 1 {
			panic("want one journal")
		}
		if err := os.Link(files[0], other); err != nil {
			panic(err)
		}
	}
	res, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	var ie *Error
	if res != nil || !errors.As(err, &ie) || errcode.Of(err) != errcode.AuditUnavailable || ie.Audit == nil {
		t.Fatalf("a journal hard-linked before its terminated record: res %+v, err %v; want the text withheld (audit_unavailable) with the journal's reference", res, err)
	}
	// The second name goes away again: the journal at its path is what an auditor reads.
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	return ie, ie.Audit.Path
}

// TestWithheldRunJournalDoesNotClaimRelease: the caller got no text, so the journal does
// not end with a terminated record saying reason completed, released true: the writer
// refuses to write to a file with a second name, and cuts back what it wrote after its
// last durable point.
func TestWithheldRunJournalDoesNotClaimRelease(t *testing.T) {
	ie, path := linkAtReleasing(t, false)
	pub, _ := hex.DecodeString(ie.Audit.PublicKey)
	rep := journal.Verify(path, ed25519.PublicKey(pub), journal.VerifyOptions{RunID: ie.Audit.RunID})
	if rep.Released || rep.TerminalReason == "completed" {
		t.Fatalf("the caller was told %q and got no text, but the journal verifies (exit %d) with terminated reason %q, released %v: the record says the text was released",
			errcode.Of(ie), rep.ExitCode(), rep.TerminalReason, rep.Released)
	}
}

// TestFailedRunReceiptMatchesJournal: the audit reference of a failed run carries the
// receipt of what its journal holds (docs/errors.md): verify --head --records with it does
// not call the journal invalid — the lines written after the last durable point, never
// acknowledged, were cut back.
func TestFailedRunReceiptMatchesJournal(t *testing.T) {
	ie, path := linkAtReleasing(t, false)
	pub, _ := hex.DecodeString(ie.Audit.PublicKey)
	rep := journal.Verify(path, ed25519.PublicKey(pub), journal.VerifyOptions{RunID: ie.Audit.RunID, Head: ie.Audit.Head, Records: ie.Audit.Records})
	if rep.ExitCode() == 1 {
		t.Fatalf("the failed run's own receipt (records %d) makes its journal (%d records) invalid: %+v", ie.Audit.Records, rep.Records, rep.Problems)
	}
}

// TestCutBackKeepsProjectVerifiable: a run whose journal the writer stops at its
// terminated record has its run entry in the ledger already, naming that line's receipt
// and the head before it. The writer cuts back only the terminated line, never the lines
// the entry names: the journal is one line short of the entry, as a server stopped before
// its last line leaves it, and verify --project accepts it (exit 2, not invalid).
func TestCutBackKeepsProjectVerifiable(t *testing.T) {
	ie, path := linkAtReleasing(t, true)
	pub, _ := hex.DecodeString(ie.Audit.PublicKey)
	rep := ledger.VerifyProject(filepath.Dir(filepath.Dir(filepath.Dir(path))), ed25519.PublicKey(pub), nil)
	found := false
	for _, r := range rep.Runs {
		if r.RunID == ie.Audit.RunID {
			found = true
			if r.Problem != "" {
				t.Errorf("verify --project (exit %d) calls the withheld run's journal invalid: %s", rep.ExitCode(), r.Problem)
			}
		}
	}
	if !found {
		t.Errorf("verify --project does not know the withheld run: %+v %q", rep.Runs, rep.Problems)
	}
}

// TestEchoedAPIKeyNotJournaled: a provider endpoint that answers 401 and echoes the
// API key it received (as OpenAI does for a short key: "Incorrect API key provided: <key>")
// must not get the operator's key into the run's journal — read by auditors, kept for good
// — nor into the error returned to the MCP client, which security-model.md trusts with
// nothing. Expected: inference_failed with an audit reference; neither the journal file nor
// the error text contains the key. Contract: credentials (API keys) are never in the
// journal, errors or logs; docs/providers.md "Error messages never contain the key".
func TestEchoedAPIKeyNotJournaled(t *testing.T) {
	const key = "sk-review-0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided: ` + got + `.","type":"invalid_request_error","code":"invalid_api_key"}}`))
	}))
	t.Cleanup(srv.Close)
	prov, err := inference.NewOpenAI(srv.URL+"/v1", key, "test-model")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, nil, func(c *Config) { c.Provider = prov })
	_, err = f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "hi"}, nil)
	var ie *Error
	if !errors.Is(err, errcode.InferenceFailed) || !errors.As(err, &ie) || ie.Audit == nil {
		t.Fatalf("err %v, want inference_failed with an audit reference", err)
	}
	if strings.Contains(errcode.Text(err), key) {
		t.Errorf("the error returned to the MCP client holds the API key: %q", errcode.Text(err))
	}
	raw, rerr := os.ReadFile(ie.Audit.Path)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if strings.Contains(string(raw), key) {
		t.Errorf("the run's journal holds the API key (inference_finished.error / terminated.error)")
	}
}

// TestRunEntryNamesDurableJournal: a run's ledger entry names the journal's head before
// terminated (prev_head); those lines are durable before the entry is, so that a stop
// between the entry and the journal's end — a power loss included — leaves the journal
// one line short of its entry (incomplete: the ledger holds the outcome), never two
// (truncated or replaced, which verification reports as tampering). The test holds the
// ledger's flock from the "releasing" hook, so that the run waits inside the ledger
// append with its entry not yet written, and reads the journal's durable receipt there.
func TestRunEntryNamesDurableJournal(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	withLedger(t, f)
	ledgerPath := filepath.Join(f.dir, ".symbiont", ledger.FileName)
	var st unix.Stat_t
	if err := unix.Stat(ledgerPath, &st); err != nil {
		t.Fatal(err)
	}
	locked := make(chan *os.File, 1)
	f.runner.hook = func(point string) {
		if point != "releasing" {
			return
		}
		fh, err := os.Open(ledgerPath)
		if err != nil {
			panic(err)
		}
		if err := unix.Flock(int(fh.Fd()), unix.LOCK_EX); err != nil {
			panic(err)
		}
		locked <- fh
	}
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fh := <-locked
	unlock := func() { unix.Flock(int(fh.Fd()), unix.LOCK_UN); fh.Close() }
	defer func() {
		if fh != nil {
			unlock()
		}
	}()
	proctest.WaitFlockWaiter(t, st.Ino, hangGuard) // the run is in ledger.Append, its entry not yet written
	durable := run.Durable()
	unlock()
	fh = nil
	if _, err := run.Await(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries := ledgerRunEntries(t, f.dir, run.Audit().RunID)
	if len(entries) != 1 {
		t.Fatalf("%d run entries in the ledger, want 1", len(entries))
	}
	entry := entries[0]
	if int64(durable.Records) != entry.Records-1 || durable.Head != entry.PrevHead {
		t.Fatalf("when the run entry was appended the journal had %d durable records (head %s); the entry names %d records with prev_head %s: "+
			"a crash then leaves the journal %d lines short of the entry, which verify --project calls tampering (exit 1), not a crash (exit 2)",
			durable.Records, durable.Head, entry.Records, entry.PrevHead, entry.Records-int64(durable.Records))
	}
}

// TestAbandonedCallerAndJournalAgree: a caller that stopped waiting (its request
// cancelled, the terminate budget spent) before the run ended is told cancelled; the run
// then ends cancelled too — not policy_denied or inference_failed, whichever it reached
// next — so the caller's code, the journal's terminated reason, the ledger entry and
// run_status agree.
func TestAbandonedCallerAndJournalAgree(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files map[string]string
		reply loopback.Reply
	}{
		{"policy denies after the caller left", map[string]string{
			"agents/helper.symbi":    "agent helper { capabilities = [\"answer\"] }\n",
			"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n@id(\"no\") forbid (principal, action == Action::\"respond\", resource) when { context.response == \"FORBIDDEN\" };\n",
		}, loopback.Reply{Text: "FORBIDDEN"}},
		{"provider error after the caller left", nil, loopback.Reply{Status: 500, Text: "boom"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.files, nil, loopback.WithReply(tt.reply))
			withLedger(t, f)
			f.runner.terminateBudget = 0 // the 2 s budget spent: the run is slower than that to end
			held, proceed := make(chan struct{}), make(chan struct{})
			f.runner.hook = func(point string) {
				if point == "inferred" {
					close(held)
					<-proceed
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { _, err := run.Await(ctx); errc <- err }()
			<-held
			cancel()
			callerErr := <-errc
			close(proceed)
			<-run.Done()
			files, _ := filepath.Glob(filepath.Join(f.dir, ".symbiont", "governed", "*.jsonl"))
			if len(files) != 1 {
				t.Fatalf("%d journals", len(files))
			}
			recs := payloads(t, files[0])
			last := recs[len(recs)-1]
			var term struct {
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal(last.Data, &term); err != nil || last.Type != "terminated" {
				t.Fatalf("last record %s %s", last.Type, last.Data)
			}
			var ie *Error
			if !errors.As(callerErr, &ie) {
				t.Fatalf("caller error %v", callerErr)
			}
			if term.Reason != reasonCancelled || string(errcode.Of(callerErr)) != term.Reason || run.Reason() != term.Reason {
				t.Errorf("the caller was told %s (%q), the journal's terminated says %s, Run.Reason (run_status) says %s: they must agree",
					errcode.Of(callerErr), callerErr, term.Reason, run.Reason())
			}
		})
	}
}

// ledgerRunEntries returns the project ledger's run entries of runID.
func ledgerRunEntries(t *testing.T, dir, runID string) []ledger.Run {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ".symbiont", ledger.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var out []ledger.Run
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		var env struct {
			Payload struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"payload"`
		}
		if json.Unmarshal(line, &env) != nil || env.Payload.Type != ledger.TypeRun {
			continue
		}
		var e ledger.Run
		if err := json.Unmarshal(env.Payload.Data, &e); err != nil {
			t.Fatal(err)
		}
		if e.RunID == runID {
			out = append(out, e)
		}
	}
	return out
}
