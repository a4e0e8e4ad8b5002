package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// heldJournal writes a run held at a human gate (its last record approval_requested) and
// returns its file name.
func heldJournal(t *testing.T, s *Store, runID string) string {
	t.Helper()
	recs := gatedRecords()
	writeRecords(t, s, "greeter", runID, recs[:5])
	return FileName(agentID("greeter"), runID)
}

// TestReopen: a held run's journal is reopened after its whole chain verifies, and the
// run continues it into a journal that verifies complete.
func TestReopen(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	name := heldJournal(t, s, "run-held")
	w, recs, err := s.Reopen(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || recs[4].Type != TypeApprovalRequested || recs[0].Type != TypeStarted || w.Durable().Records != 5 {
		t.Fatalf("records %+v, durable %+v", recs, w.Durable())
	}
	// Another reopen while this writer holds it is refused.
	if _, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) || !strings.Contains(err.Error(), "another writer") {
		t.Fatalf("second reopen: %v", err)
	}
	if !InProgress(filepath.Join(s.Dir(), name)) {
		t.Fatal("a reopened journal is not in progress")
	}
	// The state machine carried over: a release without a decision is refused.
	if err := w.Append(Terminated{Reason: "completed", Released: true}); err == nil {
		t.Fatal("released without approval_decided")
	}
	if err := w.Append(ApprovalDecided{Decision: "approve", Approver: "bob", ApproverAuth: "token", Via: "approve_run"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(Terminated{Reason: "completed", Released: true, DurationMS: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	rc := w.Receipt()
	w.Close()
	rep := Verify(filepath.Join(s.Dir(), name), s.PublicKey(), VerifyOptions{RunID: "run-held", Records: rc.Records, Head: rc.Head})
	if rep.ExitCode() != 0 || rep.Records != 7 || !rep.Released {
		t.Fatalf("continued journal: %+v", rep)
	}
	// Ended now: not resumable.
	if _, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("reopen of an ended run: %v", err)
	}
}

// TestReopenRefusals: a journal that does not verify whole is never continued, and is left
// as it was.
func TestReopenRefusals(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	mangle := map[string]func(path string){
		"torn tail": func(p string) { appendBytes(t, p, []byte(`{"payload":`)) },
		"edited byte": func(p string) {
			b, _ := os.ReadFile(p)
			i := strings.Index(string(b), "outage")
			b[i] = 'O'
			os.WriteFile(p, b, 0o600)
		},
		"hard link": func(p string) { os.Link(p, p+".bak") },
		"line removed": func(p string) {
			b, _ := os.ReadFile(p)
			lines := strings.SplitAfter(string(b), "\n")
			os.WriteFile(p, []byte(strings.Join(append(lines[:2:2], lines[3:]...), "")), 0o600)
		},
	}
	for what, f := range mangle {
		runID := "run-" + strings.ReplaceAll(what, " ", "-")
		name := heldJournal(t, s, runID)
		path := filepath.Join(s.Dir(), name)
		f(path)
		before, _ := os.ReadFile(path)
		if _, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) {
			t.Errorf("%s: reopened (%v)", what, err)
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Errorf("%s: the file changed", what)
		}
	}
	for _, bad := range []string{"x.jsonl", "../a.b.jsonl", "a.b", "a.b.c.jsonl"} {
		if _, _, err := s.Reopen(bad); !errors.Is(err, ErrNotResumable) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestReopenKeepsClosingReserve: a delegated run held at a human gate after its
// session_finished may use the closing reserve for approval_decided and what follows, on
// the server that wrote it and, resumed by Reopen, after a restart.
func TestReopenKeepsClosingReserve(t *testing.T) {
	_, root := newProject(t)
	s := openStore(t, root)
	w, err := s.Create("coder", "r1")
	if err != nil {
		t.Fatal(err)
	}
	recs := delegatedRecords()
	fin := recs[len(recs)-3].(SessionFinished)
	pe := recs[len(recs)-2].(PolicyEvaluated)
	pe.Decision, pe.Gate = "deny", "respond"
	for _, r := range append(recs[:len(recs)-3:len(recs)-3], fin, pe,
		ApprovalRequested{Gate: "respond", TextSHA256: pe.TextSHA256, TextBytes: pe.TextBytes, TimeoutMS: 86400000}) {
		if err := w.Append(r); err != nil {
			t.Fatalf("%s: %v", r.Type(), err)
		}
	}
	decided := ApprovalDecided{Decision: "approve", Approver: "bob", ApproverAuth: "token", Reason: "ok", Via: "approve_run"}
	real := w.size
	w.size = MaxFileBytes - ClosingReserve + 1 // the session filled the journal to the reserve
	if _, err := w.Prepare(decided); err != nil {
		t.Fatalf("approval_decided in the reserve, same server: %v", err)
	}
	w.size = real
	w.Close()

	r, _, err := s.Reopen(FileName("coder", "r1")) // the server restarted; the run resumes
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.size = MaxFileBytes - ClosingReserve + 1
	if _, err := r.Prepare(decided); err != nil {
		t.Fatalf("approval_decided in the reserve, after Reopen: %v (ErrFileTooLarge: %v)", err, errors.Is(err, ErrFileTooLarge))
	}
}
