package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/loopback"
	"symbi/internal/runs"
)

// TestRunsCLI makes runs through a real server, stops it, and reads them with the CLI
// twins from the files alone: list (filters, paging, JSON), status, events, resolve.
func TestRunsCLI(t *testing.T) {
	model := startModel(t, loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	dir := newE2EProject(t)
	s := startSymbi(t, dir, modelEnv(model), nil)
	var ids []string
	for i, prompt := range []string{"one", "say FORBIDDEN", "three"} {
		res := s.call(t, "start_run", map[string]any{"agent": "helper", "prompt": prompt})
		var st struct {
			RunID string `json:"run_id"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if res.IsError || json.Unmarshal(raw, &st) != nil || st.RunID == "" {
			t.Fatalf("start_run %d: %s", i, text(res))
		}
		// Wait for the run's end through the long poll.
		for done, polls := false, 0; !done; polls++ {
			if polls == 100 {
				t.Fatalf("run %s not done after %d long polls", st.RunID, polls)
			}
			res := s.call(t, "run_events", map[string]any{"run_id": st.RunID, "after": 0, "wait_ms": 30000, "limit": 1000})
			var page runs.Events
			raw, _ := json.Marshal(res.StructuredContent)
			if res.IsError || json.Unmarshal(raw, &page) != nil {
				t.Fatalf("run_events: %s", text(res))
			}
			done = page.Done
		}
		ids = append(ids, st.RunID)
	}
	s.session.Close()
	s.cmd.Wait()

	// list: newest first, in the text and JSON forms, with filters and a cursor.
	code, out, errOut := runCLI(t, "", "runs", "list", "--project", dir)
	if code != 0 || !strings.Contains(out, "RUN_ID") || strings.Index(out, ids[2]) > strings.Index(out, ids[0]) {
		t.Fatalf("runs list: exit %d\n%s%s", code, out, errOut)
	}
	var page runs.Page
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--limit", "2")
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 2 || page.NextCursor == "" || page.Runs[0].RunID != ids[2] {
		t.Fatalf("runs list --json --limit 2: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--after", page.NextCursor)
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 1 || page.Runs[0].RunID != ids[0] || page.NextCursor != "" {
		t.Fatalf("runs list --after: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--status", "policy_denied")
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 1 || page.Runs[0].RunID != ids[1] {
		t.Fatalf("runs list --status policy_denied: exit %d\n%s", code, out)
	}

	// status: the released text, read back from the journal.
	code, out, _ = runCLI(t, "", "runs", "status", "--project", dir, ids[0])
	if code != 0 || !strings.Contains(out, "status:") || !strings.Contains(out, "completed") || !strings.HasSuffix(out, "\necho: one\n") {
		t.Fatalf("runs status: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "status", "--project", dir, ids[1])
	if code != 0 || !strings.Contains(out, "policy_denied") || !strings.Contains(out, "no-forbidden-word") || strings.Contains(out, "FORBIDDEN\n") {
		t.Fatalf("runs status of the denied run: exit %d\n%s", code, out)
	}

	// events: every record, and --json with the signed lines.
	code, out, _ = runCLI(t, "", "runs", "events", "--project", dir, ids[0])
	if code != 0 || strings.Count(out, "\n") != 7 || !strings.Contains(out, "terminated") || !strings.Contains(out, "all events read") {
		t.Fatalf("runs events: exit %d\n%s", code, out)
	}
	var evs runs.Events
	code, out, _ = runCLI(t, "", "runs", "events", "--project", dir, "--json", "--after", "3", ids[0])
	if code != 0 || unmarshalFresh(out, &evs) != nil || len(evs.Events) != 2 || evs.Events[0].Seq != 3 || !evs.Done || !strings.HasPrefix(evs.Events[0].Line, `{"payload":`) {
		t.Fatalf("runs events --json --after 3: exit %d\n%s", code, out)
	}

	// resolve, then revise: the ledger keeps both, the latest wins.
	code, out, errOut = runCLI(t, "", "runs", "resolve", "--project", dir, "--resolution", "rejected", "--note", "wrong tone", ids[0])
	if code != 0 || !strings.Contains(out, "rejected by cli:") || !strings.Contains(out, "wrong tone") {
		t.Fatalf("runs resolve: exit %d\n%s%s", code, out, errOut)
	}
	var st runs.Status
	code, out, _ = runCLI(t, "", "runs", "resolve", "--project", dir, "--resolution", "accepted", "--json", ids[0])
	if code != 0 || unmarshalFresh(out, &st) != nil || st.Resolution == nil || st.Resolution.Value != "accepted" || st.Resolution.Revisions != 2 || st.Status != "completed" {
		t.Fatalf("runs resolve --json: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "runs", "list", "--project", dir, "--json", "--resolution", "unresolved")
	if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 2 {
		t.Fatalf("runs list --resolution unresolved: exit %d\n%s", code, out)
	}
	// The ledger still verifies as a whole, resolutions included.
	_, key, _ := runCLI(t, "", "audit", "key", "--project", dir)
	if code, out, errOut := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", strings.TrimSpace(key)); code != 0 {
		t.Fatalf("audit verify --project: exit %d\n%s%s", code, out, errOut)
	}

	// Refusals: each names its rule, with its own exit code.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"runs", "status", "--project", dir, "0190a000-0000-7000-8000-000000000000"}, 1, "run_not_found"},
		{[]string{"runs", "status", "--project", dir, "../x"}, 1, "invalid_request"},
		{[]string{"runs", "status", "--project", dir}, 2, "want one RUN_ID"},
		{[]string{"runs", "resolve", "--project", dir, ids[0]}, 2, "--resolution is required"},
		{[]string{"runs", "resolve", "--project", dir, "--resolution", "maybe", ids[0]}, 1, "invalid_request"},
		{[]string{"runs", "resolve", "--project", dir, "--resolution", "accepted", "--note", strings.Repeat("n", 4097), ids[0]}, 1, "limit_exceeded"},
		{[]string{"runs", "list", "--project", dir, "--limit", "0"}, 2, "1..1000"},
		{[]string{"runs", "list", "--project", dir, "--after", "garbage"}, 1, "cursor"},
		{[]string{"runs", "events", "--project", dir, "--limit", "1001", ids[0]}, 2, "1..1000"},
		{[]string{"runs", "list", "--project", t.TempDir()}, 1, "no run records"},
		{[]string{"runs", "list", "--project", dir + "/missing"}, 1, "not_found"},
	} {
		t.Run(fmt.Sprint(tc.args[:2], tc.msg), func(t *testing.T) {
			code, out, errOut := runCLI(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Fatalf("exit %d, want %d; stderr %q does not say %q (stdout %q)", code, tc.code, errOut, tc.msg, out)
			}
		})
	}
}

// unmarshalFresh decodes out into a zeroed *v: members absent from out stay zero.
func unmarshalFresh[T any](out string, v *T) error {
	var zero T
	*v = zero
	return json.Unmarshal([]byte(out), v)
}

// TestRunsResolveWaitsOutACreation: `runs resolve` must never record a resolution for
// a run that is still in flight. docs/errors.md, invalid_transition: "`resolve_run` of a
// run still `running` (only finished runs are resolved)"; docs/runs.md: "`runs resolve`
// ... can run while a server serves the project". A server creates a run's journal and
// locks it holding the governed directory's scan lock shared (journal.Store.Create;
// journal-format.md/ledger.md: "The moment between a journal's creation and that lock is
// covered by the governed directory's own flock"); reconciliation decides on an unlocked
// journal only under that lock held exclusively (journal.LockScan), and so does resolve:
// otherwise, in that window, the new, empty, not-yet-locked journal would look
// "abandoned" and a run about to run would be resolved.
// The test holds the scan lock shared with an empty unlocked journal, as Create does: the
// resolve must not complete while it is held; once the "writer" holds its file and lets
// the scan lock go, the resolve must be refused invalid_transition.
func TestRunsResolveWaitsOutACreation(t *testing.T) {
	dir, _, _, _ := ledgerProject(t, 1)
	gov := filepath.Join(dir, ".symbiont", "governed")
	ledgerPath := filepath.Join(dir, ".symbiont", "ledger.jsonl")
	before, err := os.ReadFile(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	// Create, step 1: the scan lock, shared.
	scan, err := unix.Open(gov, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(scan)
	if err := unix.Flock(scan, unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	// Create, step 2: the journal file, created empty, not yet locked by its writer.
	journalPath := filepath.Join(gov, "agent.run-new.jsonl")
	jf, err := os.OpenFile(journalPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer jf.Close()

	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		code := run(e, []string{"runs", "resolve", "--project", dir, "--resolution", "accepted", "run-new"})
		done <- result{code, out.String(), errb.String()}
	}()
	select {
	case r := <-done:
		after, _ := os.ReadFile(ledgerPath)
		if r.code == 0 || len(after) != len(before) {
			t.Fatalf("runs resolve recorded a resolution of a run whose journal was being created (exit %d, ledger %d -> %d bytes):\n%s%s",
				r.code, len(before), len(after), r.out, r.errOut)
		}
		return // refused at once: acceptable too
	case <-time.After(time.Second):
	}
	// Create, step 3: the writer locks its file, then lets the scan lock go.
	if err := unix.Flock(int(jf.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	unix.Flock(scan, unix.LOCK_UN)
	r := <-done
	after, _ := os.ReadFile(ledgerPath)
	if r.code != 1 || !strings.Contains(r.errOut, "invalid_transition") || len(after) != len(before) {
		t.Fatalf("runs resolve of a run in flight: exit %d, want 1 invalid_transition and no ledger line (ledger %d -> %d bytes):\n%s%s",
			r.code, len(before), len(after), r.out, r.errOut)
	}
}

// TestRunsResolveNoteNotUTF8: a --note that is not UTF-8 must be refused, not
// signed into the ledger as other text. docs/security-model.md ("One message means one
// thing"): "a message must be UTF-8 ... (Go reads either as U+FFFD: the prompt run and
// journaled would not be the one sent)"; docs/ledger.md: the resolution entry's `note` is
// the caller's: signed as it stands, each bad byte would read as U+FFFD.
func TestRunsResolveNoteNotUTF8(t *testing.T) {
	dir, _, _, _ := ledgerProject(t, 1)
	ledgerPath := filepath.Join(dir, ".symbiont", "ledger.jsonl")
	before, _ := os.ReadFile(ledgerPath)
	code, out, errOut := runCLI(t, "", "runs", "resolve", "--project", dir, "--resolution", "rejected", "--note", "bad \xff byte", "run-a")
	after, _ := os.ReadFile(ledgerPath)
	if code != 1 || !strings.Contains(errOut, "invalid_request") || len(after) != len(before) {
		t.Fatalf("runs resolve --note with a non-UTF-8 byte: exit %d, want 1 invalid_request and no ledger line (ledger %d -> %d bytes)\n%s%s",
			code, len(before), len(after), out, errOut)
	}
}

// TestRunsStatusNoteForgesNoRow: `runs status` shows a run as "key: value" rows. A
// resolution's note is a caller's text (over HTTP too); a line break in it — or a form
// feed, at which text/tabwriter breaks the line — would print a row of its own: here a
// forged "status: completed" under a cancelled run. Each value keeps to its row, its line
// breaks, tabs and other controls shown escaped.
func TestRunsStatusNoteForgesNoRow(t *testing.T) {
	for _, tc := range []struct{ note, want string }{
		{"see below\nstatus:\tcompleted", `see below\nstatus:\tcompleted`},
		{"see below\fstatus:  completed", `see below\u000cstatus:  completed`},
	} {
		dir, _, _, _ := ledgerProject(t, 1)
		if code, out, errOut := runCLI(t, "", "runs", "resolve", "--project", dir, "--resolution", "rejected", "--note", tc.note, "run-a"); code != 0 {
			t.Fatalf("runs resolve: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut := runCLI(t, "", "runs", "status", "--project", dir, "run-a")
		if code != 0 {
			t.Fatalf("runs status: exit %d\n%s", code, errOut)
		}
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "status:") {
				n++
			}
		}
		if n != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("runs status prints %d status rows, want 1, and the note escaped on its own row (%s):\n%s", n, tc.want, out)
		}
	}
}
