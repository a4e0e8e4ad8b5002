package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/journal"
	"symbi/internal/loopback"
	"symbi/internal/runs"
)

// The end-to-end tests of the run tools (start_run, run_events, run_status, cancel_run,
// list_runs, resolve_run) drive the real symbi binary over real stdio with the go-sdk
// client: runs outlive the request that started them, the process that ran them (killed,
// or shut down), and are read back after a restart from the journals and the ledger.

// startRunOut is start_run's structuredContent.
type startRunOut struct {
	RunID   string    `json:"run_id"`
	Agent   string    `json:"agent"`
	AgentID string    `json:"agent_id"`
	Status  string    `json:"status"`
	Audit   *auditRef `json:"audit"`
}

// startSymbiPatient runs symbi mcp on dir with extra flags and connects the go-sdk
// client. Unlike startSymbi, closing the session closes stdin and then waits (up to
// hangGuard) for the process to exit by itself: the SDK's default sends SIGTERM after 5 s,
// which would make a slow shutdown under -race look like a signalled one.
func startSymbiPatient(t *testing.T, dir string, env []string, flags ...string) *server {
	t.Helper()
	cmd := exec.Command(symbiBin, append([]string{"mcp", "--project", dir, "--log-level", "debug"}, flags...)...)
	cmd.Env = env
	return connectSymbiTerminate(t, cmd, nil, hangGuard)
}

// runsModel is a loopback model for runs: prompts containing "hang" are never answered
// (each arrival is reported on hung), prompts containing "deny" get an answer the
// project's policy forbids, and every other prompt is echoed.
func runsModel(t *testing.T) (*loopback.Server, <-chan string) {
	t.Helper()
	hung := make(chan string, 1000)
	m := startModel(t, loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		switch {
		case strings.Contains(r.Prompt, "hang"):
			hung <- r.Prompt
			return loopback.Reply{Fault: loopback.FaultHang}
		case strings.Contains(r.Prompt, "deny"):
			return loopback.Reply{Text: "this is FORBIDDEN text"}
		}
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	return m, hung
}

// callInto calls a tool that must succeed and decodes its structuredContent into out.
func (s *server) callInto(t *testing.T, name string, args map[string]any, out any) {
	t.Helper()
	res := s.call(t, name, args)
	if res.IsError {
		t.Fatalf("%s %v: %s", name, args, text(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s structuredContent %s: %v", name, raw, err)
	}
}

func (s *server) startRun(t *testing.T, prompt string) startRunOut {
	t.Helper()
	var out startRunOut
	s.callInto(t, "start_run", map[string]any{"agent": "helper", "prompt": prompt}, &out)
	if out.RunID == "" || out.Agent != "helper" || out.Audit == nil || out.Audit.RunID != out.RunID || out.Audit.Records < 1 {
		t.Fatalf("start_run %q: %+v", prompt, out)
	}
	return out
}

func (s *server) runStatus(t *testing.T, runID string) runs.Status {
	t.Helper()
	var st runs.Status
	s.callInto(t, "run_status", map[string]any{"run_id": runID}, &st)
	if st.RunID != runID {
		t.Fatalf("run_status %s answered for run %s", runID, st.RunID)
	}
	return st
}

// checkEventLine checks that an event's line is a journal line signed by pub carrying the
// event's seq, type and time.
func checkEventLine(t *testing.T, pub ed25519.PublicKey, runID string, ev runs.Event) {
	t.Helper()
	if ev.Withheld != "" {
		// A record carrying the run's output in clear or its digest, or a delegated agent's
		// words, read before the run released its text: its hash only.
		switch ev.Type {
		case journal.TypeInferenceFinished, journal.TypeSessionFinished, journal.TypeAgentMessage, journal.TypeAgentThought, journal.TypeToolCallUpdate, journal.TypePlan,
			journal.TypeSessionStarted, journal.TypeToolCall, journal.TypePermissionDecided, journal.TypeFSRead, journal.TypeFSWrite, journal.TypeApprovalRequested,
			journal.TypePolicyEvaluated, journal.TypePolicyReevaluated:
		default:
			t.Fatalf("run %s event %d: a %s record withheld", runID, ev.Seq, ev.Type)
		}
		if ev.Line != "" || len(ev.LineSHA256) != 64 {
			t.Fatalf("run %s: withheld event %+v", runID, ev)
		}
		return
	}
	p, err := journal.Open([]byte(ev.Line+"\n"), pub, journal.SignatureContext, new([]byte))
	if err != nil {
		t.Fatalf("run %s event %d: the line does not verify: %v", runID, ev.Seq, err)
	}
	var payload struct {
		RunID string `json:"run_id"`
		Seq   int64  `json:"seq"`
		Type  string `json:"type"`
		Time  string `json:"time"`
	}
	if err := json.Unmarshal(p, &payload); err != nil || payload.RunID != runID || payload.Seq != ev.Seq || payload.Type != ev.Type || payload.Time != ev.Time {
		t.Fatalf("event %+v does not match its signed line %s (%v)", ev, p, err)
	}
}

// readRunEvents reads every event of a run that will end, in pages of limit, with the
// long poll: each page must start at the cursor (no gap, no repeat), next_cursor must
// count exactly the events returned, and every line must verify. It returns once
// run_events says done.
func (s *server) readRunEvents(t *testing.T, runID string, limit int, pub ed25519.PublicKey) []runs.Event {
	t.Helper()
	var all []runs.Event
	var cursor int64
	deadline := time.Now().Add(hangGuard)
	for time.Now().Before(deadline) {
		var page runs.Events
		s.callInto(t, "run_events", map[string]any{"run_id": runID, "after": cursor, "limit": limit, "wait_ms": 30000}, &page)
		if len(page.Events) > limit {
			t.Fatalf("run %s: %d events in a page of limit %d", runID, len(page.Events), limit)
		}
		for i, ev := range page.Events {
			if ev.Seq != cursor+int64(i) {
				t.Fatalf("run %s: event seq %d at cursor %d+%d: a gap or a repeat", runID, ev.Seq, cursor, i)
			}
			checkEventLine(t, pub, runID, ev)
		}
		if page.NextCursor != cursor+int64(len(page.Events)) {
			t.Fatalf("run %s: next_cursor %d after %d events from cursor %d", runID, page.NextCursor, len(page.Events), cursor)
		}
		all = append(all, page.Events...)
		cursor = page.NextCursor
		if page.Done {
			if page.Status == runs.StatusRunning || page.Status == runs.StatusAwaitingApproval {
				t.Fatalf("run %s: done with status %s", runID, page.Status)
			}
			return all
		}
	}
	t.Fatalf("run %s: run_events never said done", runID)
	return nil
}

// listAllRuns pages through list_runs with limit: every page but the last is full, and
// the runs come newest first (descending run id), each once.
func (s *server) listAllRuns(t *testing.T, limit int, filter map[string]any) []runs.Status {
	t.Helper()
	var all []runs.Status
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("list_runs never ended")
		}
		args := map[string]any{"limit": limit}
		for k, v := range filter {
			args[k] = v
		}
		if cursor != "" {
			args["after"] = cursor
		}
		var page runs.Page
		s.callInto(t, "list_runs", args, &page)
		if len(page.Runs) > limit {
			t.Fatalf("list_runs: %d runs in a page of limit %d", len(page.Runs), limit)
		}
		for _, r := range page.Runs {
			if seen[r.RunID] {
				t.Fatalf("list_runs: run %s listed twice", r.RunID)
			}
			if n := len(all); n > 0 && r.RunID >= all[n-1].RunID {
				t.Fatalf("list_runs: run %s listed after %s: not newest first", r.RunID, all[n-1].RunID)
			}
			if r.Text != nil {
				t.Fatalf("list_runs carries a run's text: %+v", r)
			}
			seen[r.RunID] = true
			all = append(all, r)
		}
		if page.NextCursor == "" {
			return all
		}
		if len(page.Runs) != limit {
			t.Fatalf("list_runs: a page of %d runs (limit %d) before the last", len(page.Runs), limit)
		}
		cursor = page.NextCursor
	}
}

// ledgerPayloads returns the payloads of the project ledger's lines.
func ledgerPayloads(t *testing.T, dir string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ".symbiont", "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var l struct {
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("ledger line %q: %v", line, err)
		}
		out = append(out, l.Payload)
	}
	return out
}

// ledgerEntries returns the data of the ledger's entries of type typ, by run id.
func ledgerEntries(t *testing.T, dir, typ string) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for _, p := range ledgerPayloads(t, dir) {
		if p["type"] != typ {
			continue
		}
		d, _ := p["data"].(map[string]any)
		id, _ := d["run_id"].(string)
		out[id] = append(out[id], d)
	}
	return out
}

// killAndReap sends SIGKILL to the server and waits until the process is reaped (so the
// kernel has released everything it held, its journal locks included).
func killAndReap(t *testing.T, s *server) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.session.Close() // closes stdin and waits for the process
	st := s.cmd.ProcessState
	if st == nil {
		t.Fatal("the killed server was not reaped")
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the server ended with %v, want killed by SIGKILL", st)
	}
}

// TestE2ERunsSurviveKill starts runs that complete, one the policy denies, and runs the
// model holds; resolves one; kills the server with SIGKILL; and serves the project again.
// Every earlier run answers: list_runs lists each once, run_status tells how it ended
// (the held runs abandoned), run_events serves every event, the ledger has a recovered
// entry for each abandoned run, and symbi audit verify --project says consistent but
// incomplete (exit 2). In hashes-only mode the released text is not retained.
func TestE2ERunsSurviveKill(t *testing.T) {
	for _, mode := range []string{"full", "hashes"} {
		t.Run(mode, func(t *testing.T) { testRunsSurviveKill(t, mode) })
	}
}

func testRunsSurviveKill(t *testing.T, mode string) {
	dir := newE2EProject(t)
	model, hung := runsModel(t)
	env := modelEnv(model)
	if mode == "hashes" {
		env = append(env, "SYMBI_JOURNAL_TEXT=hashes")
	}
	s := startSymbiPatient(t, dir, env)

	completedPrompts := []string{"alpha", "beta", "gamma"}
	var completed, held []startRunOut
	for _, p := range completedPrompts {
		completed = append(completed, s.startRun(t, p))
	}
	denied := s.startRun(t, "deny this")
	for _, p := range []string{"hang one", "hang two"} {
		held = append(held, s.startRun(t, p))
	}
	pub := pubKey(t, denied.Audit.PublicKey)

	// The finished runs: every event until done; the held runs: the model has their
	// requests, so inference_requested is durable.
	before := map[string][]runs.Event{}
	for _, r := range append(slices.Clone(completed), denied) {
		before[r.RunID] = s.readRunEvents(t, r.RunID, 100, pub)
	}
	for range held {
		select {
		case <-hung:
		case <-time.After(hangGuard):
			t.Fatal("the model did not receive the held runs' requests")
		}
	}
	for _, r := range held {
		var page runs.Events
		s.callInto(t, "run_events", map[string]any{"run_id": r.RunID}, &page)
		if page.Done || page.Status != runs.StatusRunning || len(page.Events) != 2 || page.Events[0].Type != "started" || page.Events[1].Type != "inference_requested" {
			t.Fatalf("held run %s before the kill: %+v", r.RunID, page)
		}
		before[r.RunID] = page.Events
	}
	statusBefore := map[string]runs.Status{}
	for id := range before {
		statusBefore[id] = s.runStatus(t, id)
	}
	var resolved runs.Status
	s.callInto(t, "resolve_run", map[string]any{"run_id": completed[1].RunID, "resolution": "accepted", "note": "checked by hand"}, &resolved)
	if resolved.Resolution == nil || resolved.Resolution.Value != "accepted" {
		t.Fatalf("resolve_run: %+v", resolved)
	}

	killAndReap(t, s)
	for _, r := range held {
		if last := lastRecordType(t, r.Audit.Path); last != "inference_requested" {
			t.Fatalf("held run %s: journal ends with %q after the kill, want inference_requested (left as the crash left it)", r.RunID, last)
		}
	}
	if rec := ledgerEntries(t, dir, "recovered"); len(rec) != 0 {
		t.Fatalf("recovered entries before any restart: %v", rec)
	}

	s = startSymbiPatient(t, dir, env)

	// list_runs: every earlier run exactly once, newest first.
	all := append(append(slices.Clone(completed), denied), held...)
	listed := s.listAllRuns(t, 2, nil)
	var got, want []string
	for _, r := range listed {
		got = append(got, r.RunID)
	}
	for _, r := range all {
		want = append(want, r.RunID)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(want)))
	if !slices.Equal(got, want) {
		t.Fatalf("list_runs after the restart: %v\nwant every run once, newest first: %v", got, want)
	}

	// run_status of each.
	for i, r := range completed {
		st := s.runStatus(t, r.RunID)
		b := statusBefore[r.RunID]
		if st.Status != runs.StatusCompleted || !st.Released || st.Records != 5 || st.Head != b.Head || st.StartedAt != b.StartedAt ||
			st.EndedAt == "" || st.Agent != "helper" || st.AgentID != r.AgentID || st.Caller != "stdio" || st.Reason != "" || st.JournalProblem != "" {
			t.Errorf("completed run %s after the restart: %+v (before: %+v)", r.RunID, st, b)
		}
		switch mode {
		case "full":
			if st.Text == nil || *st.Text != "echo: "+completedPrompts[i] || st.TextRetained == nil || !*st.TextRetained {
				t.Errorf("completed run %s: text %v, text_retained %v; want %q read back from the journal", r.RunID, st.Text, st.TextRetained, "echo: "+completedPrompts[i])
			}
		case "hashes":
			if st.Text != nil || st.TextRetained == nil || *st.TextRetained {
				t.Errorf("completed run %s in hashes-only mode: text %v, text_retained %v; want no text and text_retained false", r.RunID, st.Text, st.TextRetained)
			}
		}
		if r.RunID == completed[1].RunID {
			if res := st.Resolution; res == nil || res.Value != "accepted" || res.Note != "checked by hand" || res.Revisions != 1 || res.Caller != "stdio" {
				t.Errorf("resolved run %s after the restart: resolution %+v", r.RunID, st.Resolution)
			}
		} else if st.Resolution != nil {
			t.Errorf("unresolved run %s has resolution %+v", r.RunID, st.Resolution)
		}
	}
	if st := s.runStatus(t, denied.RunID); st.Status != runs.StatusPolicyDenied || st.Released || st.Text != nil || st.TextRetained != nil ||
		!strings.Contains(st.Reason, "no-forbidden-word") || st.EndedAt == "" || st.Resolution != nil || st.Head != statusBefore[denied.RunID].Head {
		t.Errorf("denied run after the restart: %+v", st)
	}
	for _, r := range held {
		st := s.runStatus(t, r.RunID)
		if st.Status != runs.StatusAbandoned || st.Released || st.Text != nil || st.Records != 2 || st.Reason == "" ||
			st.StartedAt != statusBefore[r.RunID].StartedAt || st.Agent != "helper" || st.Caller != "stdio" || st.JournalProblem != "" {
			t.Errorf("held run %s after the kill and restart: %+v, want abandoned with its 2 records", r.RunID, st)
		}
	}

	// run_events of each: every event, in pages, done; the same events as before the kill.
	for _, r := range all {
		for _, limit := range []int{1, 2, 1000} {
			evs := s.readRunEvents(t, r.RunID, limit, pub)
			if !slices.Equal(evs, before[r.RunID]) {
				t.Errorf("run %s (limit %d): events after the restart\n%+v\nbefore the kill\n%+v", r.RunID, limit, evs, before[r.RunID])
			}
		}
	}

	// The ledger: a recovered entry (incomplete, as found) for each abandoned run, and
	// for no other.
	recovered := ledgerEntries(t, dir, "recovered")
	if len(recovered) != len(held) {
		t.Errorf("recovered entries %v, want one for each of the %d held runs", recovered, len(held))
	}
	for _, r := range held {
		e := recovered[r.RunID]
		if len(e) != 1 || e[0]["state"] != "incomplete" || e[0]["records"] != float64(2) || e[0]["head"] != statusBefore[r.RunID].Head ||
			e[0]["file"] != filepath.Base(r.Audit.Path) {
			t.Errorf("recovered entries of held run %s: %v", r.RunID, e)
		}
	}
	ended := ledgerEntries(t, dir, "run")
	for _, r := range append(slices.Clone(completed), denied) {
		if len(ended[r.RunID]) != 1 {
			t.Errorf("run %s has %d run entries in the ledger, want 1", r.RunID, len(ended[r.RunID]))
		}
	}

	// A second restart recovers nothing more, and still lists each run once.
	s.session.Close()
	s = startSymbiPatient(t, dir, env)
	if again := ledgerEntries(t, dir, "recovered"); len(again) != len(held) {
		t.Errorf("after a second restart, recovered entries %v", again)
	}
	for _, r := range held {
		if n := len(ledgerEntries(t, dir, "recovered")[r.RunID]); n != 1 {
			t.Errorf("run %s has %d recovered entries after a second restart, want 1", r.RunID, n)
		}
	}
	if n := len(s.listAllRuns(t, 3, nil)); n != len(all) {
		t.Errorf("after a second restart list_runs lists %d runs, want %d", n, len(all))
	}
	abandoned := s.listAllRuns(t, 100, map[string]any{"status": "abandoned"})
	if len(abandoned) != len(held) {
		t.Errorf("list_runs status=abandoned: %d runs, want %d", len(abandoned), len(held))
	}
	if got := s.listAllRuns(t, 100, map[string]any{"resolution": "accepted"}); len(got) != 1 || got[0].RunID != completed[1].RunID {
		t.Errorf("list_runs resolution=accepted: %+v, want only run %s", got, completed[1].RunID)
	}
	if got := s.listAllRuns(t, 100, map[string]any{"resolution": "unresolved"}); len(got) != len(all)-1 {
		t.Errorf("list_runs resolution=unresolved: %d runs, want %d", len(got), len(all)-1)
	}
	if got := s.listAllRuns(t, 4, map[string]any{"agent": "helper"}); len(got) != len(all) {
		t.Errorf("list_runs agent=helper: %d runs, want %d", len(got), len(all))
	}

	// An abandoned run has ended: cancelling it is answered, not refused, and it can be
	// resolved.
	var c struct {
		runs.Status
		AlreadyFinished bool `json:"already_finished"`
	}
	s.callInto(t, "cancel_run", map[string]any{"run_id": held[0].RunID}, &c)
	if !c.AlreadyFinished || c.Status.Status != runs.StatusAbandoned {
		t.Errorf("cancel_run of an abandoned run: %+v, want already_finished with status abandoned", c)
	}
	s.callInto(t, "resolve_run", map[string]any{"run_id": held[0].RunID, "resolution": "superseded"}, &resolved)
	if resolved.Status != runs.StatusAbandoned || resolved.Resolution == nil || resolved.Resolution.Value != "superseded" {
		t.Errorf("resolve_run of an abandoned run: %+v", resolved)
	}

	// The auditor's check of the whole project: consistent, but some journals are
	// incomplete (the crash remains): exit 2.
	out, err := exec.Command(symbiBin, "audit", "verify", "--project", dir, "--public-key", denied.Audit.PublicKey).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 2 {
		t.Errorf("symbi audit verify --project: exit %d, want 2 (consistent, some journals incomplete)\n%s", code, out)
	}
	for _, r := range held {
		if !strings.Contains(string(out), r.RunID) {
			t.Errorf("symbi audit verify --project does not name the incomplete run %s:\n%s", r.RunID, out)
		}
	}
}

// TestE2EEventLinesVerify rebuilds a run's journal from the lines run_events serves and
// checks it with the journal verifier: complete, with the receipt run_status gives.
func TestE2EEventLinesVerify(t *testing.T) {
	dir := newE2EProject(t)
	model, _ := runsModel(t)
	s := startSymbiPatient(t, dir, modelEnv(model))
	r := s.startRun(t, "verify me")
	pub := pubKey(t, r.Audit.PublicKey)
	s.readRunEvents(t, r.RunID, 2, pub) // while it runs: its answer's line is withheld
	// Released: read again from the start, every line is served whole.
	evs := s.readRunEvents(t, r.RunID, 2, pub)
	st := s.runStatus(t, r.RunID)
	if st.Status != runs.StatusCompleted || int64(len(evs)) != st.Records {
		t.Fatalf("run_status %+v with %d events", st, len(evs))
	}
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString(ev.Line + "\n")
	}
	path := filepath.Join(t.TempDir(), r.AgentID+"."+r.RunID+".jsonl")
	writeFile(t, path, b.String())
	rep := journal.Verify(path, pub, journal.VerifyOptions{RunID: r.RunID, Head: st.Head, Records: int(st.Records)})
	if rep.Status != journal.StatusComplete || !rep.Complete || int64(rep.Records) != st.Records || rep.Head != st.Head ||
		rep.RunID != r.RunID || rep.AgentID != r.AgentID || rep.TerminalReason != "completed" || !rep.Released || len(rep.Problems) != 0 {
		t.Fatalf("the journal rebuilt from run_events: %+v; run_status: records %d head %s", rep, st.Records, st.Head)
	}
	disk, err := os.ReadFile(r.Audit.Path)
	if err != nil {
		t.Fatal(err)
	}
	if string(disk) != b.String() {
		t.Fatalf("the lines run_events serves differ from the journal on disk:\nserved:\n%s\ndisk:\n%s", b.String(), disk)
	}
}

// TestE2EManyStartRuns starts 200 runs at once on a server allowing 200 in flight: none is
// refused, list_runs pages through them (limit 37) newest first, each once, and every run
// completes with its own answer.
func TestE2EManyStartRuns(t *testing.T) {
	const n = 200
	dir := newE2EProject(t)
	model, _ := runsModel(t)
	s := startSymbiPatient(t, dir, modelEnv(model), "--max-runs", fmt.Sprint(n))
	started := make([]startRunOut, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: "start_run", Arguments: map[string]any{"agent": "helper", "prompt": fmt.Sprint("run ", i)}})
			if err != nil {
				t.Errorf("start_run %d: %v", i, err)
				return
			}
			if res.IsError {
				t.Errorf("start_run %d: %s", i, text(res))
				return
			}
			raw, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(raw, &started[i]); err != nil || started[i].RunID == "" {
				t.Errorf("start_run %d: %s", i, raw)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ids := map[string]int{}
	for i, r := range started {
		if _, dup := ids[r.RunID]; dup {
			t.Fatalf("run id %s given twice", r.RunID)
		}
		ids[r.RunID] = i
	}

	listed := s.listAllRuns(t, 37, nil)
	if len(listed) != n {
		t.Fatalf("list_runs listed %d runs, want %d", len(listed), n)
	}
	for _, r := range listed {
		if _, ok := ids[r.RunID]; !ok {
			t.Fatalf("list_runs listed run %s, which was never started", r.RunID)
		}
	}

	pub := pubKey(t, started[0].Audit.PublicKey)
	for _, r := range started {
		evs := s.readRunEvents(t, r.RunID, 1000, pub)
		if len(evs) != 5 || evs[len(evs)-1].Type != "terminated" {
			t.Fatalf("run %s: events %+v", r.RunID, evs)
		}
	}
	for _, r := range started {
		st := s.runStatus(t, r.RunID)
		want := fmt.Sprint("echo: run ", ids[r.RunID])
		if st.Status != runs.StatusCompleted || st.Text == nil || *st.Text != want {
			t.Fatalf("run %s: %+v, want completed with %q", r.RunID, st, want)
		}
	}
	done := s.listAllRuns(t, 37, map[string]any{"status": "completed"})
	if len(done) != n {
		t.Fatalf("list_runs status=completed: %d runs, want %d", len(done), n)
	}
	if files := journals(t, dir); len(files) != n {
		t.Fatalf("%d journals, want %d", len(files), n)
	}
}

// TestE2EShutdownCancelsAsyncRuns: runs started with start_run and held by the model are
// cancelled when the server shuts down — its client closes stdin, or SIGTERM arrives —
// and each journal ends with terminated (cancelled) before the process exits 0. After a
// restart, run_status says cancelled for each.
func TestE2EShutdownCancelsAsyncRuns(t *testing.T) {
	for _, how := range []string{"stdin closed", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			const n = 3
			dir := newE2EProject(t)
			model, hung := runsModel(t)
			s := startSymbiPatient(t, dir, modelEnv(model))
			var started []startRunOut
			for i := range n {
				started = append(started, s.startRun(t, fmt.Sprint("hang ", i)))
			}
			for range n {
				select {
				case <-hung:
				case <-time.After(hangGuard):
					t.Fatal("the model did not receive every request")
				}
			}
			if how == "SIGTERM" {
				if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				go func() { exited <- s.session.Wait() }() // ends when the server closes stdout
				select {
				case <-exited:
				case <-time.After(hangGuard):
					t.Fatal("symbi mcp did not exit after SIGTERM")
				}
			}
			s.session.Close() // closes stdin, and waits for the process to exit by itself
			st := s.cmd.ProcessState
			if st == nil || !st.Exited() || st.ExitCode() != 0 {
				t.Fatalf("symbi mcp ended with %v, want exit 0", st)
			}
			files := journals(t, dir)
			if len(files) != n {
				t.Fatalf("%d journals, want %d", len(files), n)
			}
			pub := pubKey(t, started[0].Audit.PublicKey)
			for _, r := range started {
				recs := records(t, r.Audit.Path)
				last := recs[len(recs)-1]
				data, _ := last["data"].(map[string]any)
				if last["type"] != "terminated" || data["reason"] != "cancelled" || data["released"] != false {
					t.Errorf("run %s: journal %v ends with %v, want terminated (cancelled)", r.RunID, types(recs), last)
				}
				if rep := journal.Verify(r.Audit.Path, pub, journal.VerifyOptions{RunID: r.RunID}); rep.Status != journal.StatusComplete {
					t.Errorf("run %s: journal %+v", r.RunID, rep)
				}
			}

			s = startSymbiPatient(t, dir, modelEnv(model))
			for _, r := range started {
				if st := s.runStatus(t, r.RunID); st.Status != runs.StatusCancelled || st.Released || st.EndedAt == "" {
					t.Errorf("run %s after the restart: %+v, want cancelled", r.RunID, st)
				}
			}
			if rec := ledgerEntries(t, dir, "recovered"); len(rec) != 0 {
				t.Errorf("a clean shutdown left journals to recover: %v", rec)
			}
			if got := s.listAllRuns(t, 100, map[string]any{"status": "cancelled"}); len(got) != n {
				t.Errorf("list_runs status=cancelled: %d runs, want %d", len(got), n)
			}
		})
	}
}

// TestE2ELongPollWakes: a run_events long poll waiting on a run the model holds returns
// the next events once the model answers, not when its wait_ms (30 s) runs out: a poll
// that ran out would return no events.
func TestE2ELongPollWakes(t *testing.T) {
	dir := newE2EProject(t)
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	model := startModel(t, loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		arrived <- struct{}{}
		<-release
		return loopback.Reply{Text: "released answer"}
	}))
	t.Cleanup(open) // before the model's Close (cleanups run last first)
	s := startSymbiPatient(t, dir, modelEnv(model))
	r := s.startRun(t, "hold the answer")
	pub := pubKey(t, r.Audit.PublicKey)
	select {
	case <-arrived:
	case <-time.After(hangGuard):
		t.Fatal("the model never received the request")
	}
	var first runs.Events
	s.callInto(t, "run_events", map[string]any{"run_id": r.RunID}, &first)
	if len(first.Events) != 2 || first.Events[1].Type != "inference_requested" || first.Done || first.Status != runs.StatusRunning {
		t.Fatalf("events while the model holds the answer: %+v", first)
	}

	type polled struct {
		page runs.Events
		err  error
	}
	pollc := make(chan polled, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		var p polled
		res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: "run_events", Arguments: map[string]any{"run_id": r.RunID, "after": first.NextCursor, "wait_ms": 30000}})
		switch {
		case err != nil:
			p.err = err
		case res.IsError:
			p.err = fmt.Errorf("run_events: %s", text(res))
		default:
			raw, _ := json.Marshal(res.StructuredContent)
			p.err = json.Unmarshal(raw, &p.page)
		}
		pollc <- p
	}()
	// A round trip after the poll was sent: the server has read it; the run still waits.
	if st := s.runStatus(t, r.RunID); st.Status != runs.StatusRunning {
		t.Fatalf("run_status before the release: %+v", st)
	}
	open()
	var p polled
	select {
	case p = <-pollc:
	case <-time.After(hangGuard):
		t.Fatal("the long poll did not return")
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	if len(p.page.Events) == 0 {
		t.Fatalf("the long poll returned no events: %+v; the model's answer did not wake it", p.page)
	}
	if p.page.Events[0].Seq != first.NextCursor || p.page.Events[0].Type != "inference_finished" {
		t.Fatalf("the long poll returned %+v, want the events from cursor %d, inference_finished first", p.page.Events, first.NextCursor)
	}
	for _, ev := range p.page.Events {
		checkEventLine(t, pub, r.RunID, ev)
	}
	all := s.readRunEvents(t, r.RunID, 100, pub)
	if len(all) != 5 || all[4].Type != "terminated" {
		t.Fatalf("events of the released run: %+v", all)
	}
	if st := s.runStatus(t, r.RunID); st.Status != runs.StatusCompleted || st.Text == nil || *st.Text != "released answer" {
		t.Fatalf("run_status after the release: %+v", st)
	}
}
