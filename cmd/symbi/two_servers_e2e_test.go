package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/ledger"
	"symbi/internal/runs"
)

// Two `symbi mcp` processes on one project at once, with the CLI beside them: as
// docs/http.md gives it, they keep the evidence whole (ledger appends are serialised by a
// lock across processes, and no run gets two entries) but share nothing else — one cannot
// cancel or approve the other's runs.

const twoGatePolicy = `@gate("human") @id("customer-names")
forbid (principal, action == Action::"respond", resource) when { context.response like "*ACME*" };
`

// twoCall calls a tool without failing the test (safe from any goroutine).
func twoCall(s *server, name string, args map[string]any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	return s.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

// twoInto calls a tool that must succeed and decodes its structuredContent.
func twoInto(s *server, name string, args map[string]any, out any) error {
	res, err := twoCall(s, name, args)
	if err != nil {
		return fmt.Errorf("%s %v: %w", name, args, err)
	}
	if res.IsError {
		return fmt.Errorf("%s %v: %s", name, args, text(res))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: %s: %w", name, raw, err)
	}
	return nil
}

// twoWait long-polls run_events on s until the run is done (or has status until).
func twoWait(s *server, runID, until string) (string, error) {
	var cursor int64
	for range 400 {
		var page runs.Events
		if err := twoInto(s, "run_events", map[string]any{"run_id": runID, "after": cursor, "limit": 1000, "wait_ms": 30000}, &page); err != nil {
			return "", err
		}
		if page.Done || (until != "" && page.Status == until) {
			return page.Status, nil
		}
		cursor = page.NextCursor
	}
	return "", fmt.Errorf("run %s never ended", runID)
}

func twoStart(s *server, prompt string) (string, error) {
	var out startRunOut
	if err := twoInto(s, "start_run", map[string]any{"agent": "helper", "prompt": prompt}, &out); err != nil {
		return "", err
	}
	return out.RunID, nil
}

// twoErrs collects errors from goroutines.
type twoErrs struct {
	mu   sync.Mutex
	errs []string
}

func (e *twoErrs) add(format string, a ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, a...))
}

func (e *twoErrs) check(t *testing.T, what string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.errs) > 0 {
		n := len(e.errs)
		if n > 20 {
			e.errs = e.errs[:20]
		}
		t.Fatalf("%s: %d errors:\n%s", what, n, strings.Join(e.errs, "\n"))
	}
}

// twoExec runs the symbi binary (a separate process, as an operator would).
func twoExec(args ...string) (int, string, error) {
	cmd := exec.Command(symbiBin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out), nil
	}
	return 0, string(out), err
}

// twoStartBoth starts two servers on dir at the same moment.
func twoStartBoth(t *testing.T, dir string, env []string) (*server, *server) {
	t.Helper()
	var a, b *server
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a = startSymbiPatient(t, dir, env) }()
	go func() { defer wg.Done(); b = startSymbiPatient(t, dir, env) }()
	wg.Wait()
	if a == nil || b == nil {
		t.FailNow()
	}
	return a, b
}

// twoLedgerCheck checks every run id of ids has exactly one run or recovered entry, and
// no entry of those types names a run twice.
func twoLedgerCheck(t *testing.T, dir string, ids map[string]string) {
	t.Helper()
	ends := map[string][]string{}
	for _, p := range ledgerPayloads(t, dir) {
		typ, _ := p["type"].(string)
		if typ != ledger.TypeRun && typ != ledger.TypeRecovered {
			continue
		}
		d, _ := p["data"].(map[string]any)
		id, _ := d["run_id"].(string)
		ends[id] = append(ends[id], fmt.Sprintf("%s(%v,%v)", typ, d["reason"], d["state"]))
	}
	for id, es := range ends {
		if len(es) != 1 {
			t.Errorf("run %s (%s) has %d ending entries: %v", id, ids[id], len(es), es)
		}
	}
	for id, what := range ids {
		if len(ends[id]) == 0 {
			t.Errorf("run %s (%s) has no ledger entry", id, what)
		}
	}
}

// twoVerify runs audit verify --project --json with the checkpoints; it fails on any
// problem and returns the exit code.
func twoVerify(t *testing.T, dir, pub string, checkpoints []string) (int, ledger.ProjectReport) {
	t.Helper()
	args := []string{"audit", "verify", "--project", dir, "--public-key", pub, "--json"}
	for _, c := range checkpoints {
		args = append(args, "--checkpoint", c)
	}
	cmd := exec.Command(symbiBin, args...)
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep ledger.ProjectReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	for _, p := range rep.Problems {
		t.Errorf("verify --project problem: %s", p)
	}
	for _, r := range rep.Runs {
		if r.Problem != "" {
			t.Errorf("verify --project: run %s (%s, entry %q, journal %s): %s", r.RunID, r.File, r.Entry, r.Journal, r.Problem)
		}
	}
	for _, c := range rep.Checkpoints {
		if !strings.Contains(c, "consistent") || strings.Contains(c, "not consistent") || strings.Contains(c, "inconsistent") {
			t.Logf("checkpoint finding: %s", c)
		}
	}
	return code, rep
}

// twoProblems is the problems of a report, or out when it is not one.
func twoProblems(rep ledger.ProjectReport, out string) string {
	var b strings.Builder
	for _, p := range rep.Problems {
		fmt.Fprintf(&b, "problem: %s\n", p)
	}
	for _, r := range rep.Runs {
		if r.Problem != "" {
			fmt.Fprintf(&b, "run %s entry %q journal %s: %s (note %q)\n", r.RunID, r.Entry, r.Journal, r.Problem, r.Note)
		}
	}
	for _, c := range rep.Checkpoints {
		fmt.Fprintf(&b, "checkpoint: %s\n", c)
	}
	if b.Len() == 0 {
		return out
	}
	return b.String()
}

// TestTwoServersStress drives two servers on one project at once: many runs on each
// (start_run, invoke_agent, denied, cancelled, held at the gate), resolutions across
// servers and from the CLI, checkpoints and prunes from the CLI; one server SIGKILLed with
// runs in flight and held runs, restarted while the other keeps serving; then the other
// killed and restarted while the first holds a run at the gate. At the end both shut
// down and `symbi audit verify --project` must find no problem, every run one entry.
func TestTwoServersStress(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), twoGatePolicy)
	model, hung := runsModel(t)
	env := modelEnv(model)
	a, b := twoStartBoth(t, dir, env)

	var pub string
	{
		var out startRunOut
		if err := twoInto(a, "start_run", map[string]any{"agent": "helper", "prompt": "first"}, &out); err != nil {
			t.Fatal(err)
		}
		pub = out.Audit.PublicKey
		if _, err := twoWait(a, out.RunID, ""); err != nil {
			t.Fatal(err)
		}
	}

	var idsMu sync.Mutex
	ids := map[string]string{} // every run id a caller heard of → what it was
	addID := func(id, what string) {
		idsMu.Lock()
		ids[id] = what
		idsMu.Unlock()
	}
	finished := make(chan string, 10000) // finished runs, for the CLI to resolve or prune
	cpDir := t.TempDir()
	var cpN atomic.Int64
	var checkpoints []string
	var cpMu sync.Mutex
	errs := &twoErrs{}

	// The CLI beside the servers: checkpoints, resolutions and prunes, until stop.
	stop := make(chan struct{})
	var cliWG sync.WaitGroup
	cliWG.Add(1)
	go func() {
		defer cliWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			code, out, err := twoExec("audit", "checkpoint", "--project", dir)
			if err != nil || code != 0 {
				errs.add("audit checkpoint: exit %d %v: %s", code, err, out)
			} else {
				f := filepath.Join(cpDir, fmt.Sprintf("cp%d", cpN.Add(1)))
				os.WriteFile(f, []byte(out), 0o600)
				cpMu.Lock()
				checkpoints = append(checkpoints, f)
				cpMu.Unlock()
			}
			select {
			case id := <-finished:
				if i%3 == 0 {
					if code, out, err := twoExec("audit", "prune", "--project", dir, "--run-id", id); err != nil || code != 0 {
						errs.add("audit prune %s: exit %d %v: %s", id, code, err, out)
					}
				} else if code, out, err := twoExec("runs", "resolve", "--project", dir, "--resolution", "needs_followup", id); err != nil || code != 0 {
					errs.add("runs resolve %s: exit %d %v: %s", id, code, err, out)
				}
			default:
			}
		}
	}()

	// Load on a server: each worker runs completed, invoked, denied and cancelled runs;
	// finished runs are resolved on the other server.
	load := func(s, other *server, name string, workers, iters int, wg *sync.WaitGroup, quit <-chan struct{}, tolerate bool) {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; iters == 0 || i < iters; i++ {
					select {
					case <-quit:
						return
					default:
					}
					fail := func(format string, a ...any) {
						if !tolerate {
							errs.add(name+": "+format, a...)
						}
					}
					tag := fmt.Sprintf("%s-w%d-i%d", name, w, i)
					switch i % 4 {
					case 0: // invoke_agent
						var out invokeOut
						res, err := twoCall(s, "invoke_agent", map[string]any{"agent": "helper", "prompt": "invoke " + tag})
						if err != nil {
							fail("invoke_agent: %v", err)
							return
						}
						raw, _ := json.Marshal(res.StructuredContent)
						json.Unmarshal(raw, &out)
						if out.Audit != nil {
							addID(out.Audit.RunID, name+" invoke")
						}
						if res.IsError || text(res) != "echo: invoke "+tag {
							fail("invoke_agent %s: %v %s", tag, res.IsError, text(res))
							continue
						}
						finished <- out.Audit.RunID
					case 1, 2: // start_run, completed or denied; resolved on the other server
						prompt := "start " + tag
						want := runs.StatusCompleted
						if i%4 == 2 {
							prompt, want = "deny "+tag, runs.StatusPolicyDenied
						}
						id, err := twoStart(s, prompt)
						if err != nil {
							fail("%v", err)
							return
						}
						addID(id, name+" "+prompt)
						st, err := twoWait(s, id, "")
						if err != nil || st != want {
							fail("run %s (%s): %s %v, want %s", id, prompt, st, err, want)
							continue
						}
						var rs runs.Status
						if err := twoInto(other, "resolve_run", map[string]any{"run_id": id, "resolution": "accepted"}, &rs); err != nil {
							fail("resolve on the other server: %v", err)
						} else if rs.Status != want {
							fail("the other server's status of %s: %s, want %s", id, rs.Status, want)
						}
						finished <- id
					case 3: // a run the model holds, cancelled: not by the other server
						id, err := twoStart(s, "hang "+tag)
						if err != nil {
							fail("%v", err)
							return
						}
						addID(id, name+" hang (cancelled)")
						if _, err := twoWait(s, id, runs.StatusRunning); err != nil {
							fail("%v", err)
							continue
						}
						if other != s {
							res, err := twoCall(other, "cancel_run", map[string]any{"run_id": id})
							if err != nil {
								fail("%v", err)
								return
							}
							if !res.IsError || !strings.HasPrefix(text(res), "invalid_transition") {
								fail("cancel_run of %s on the other server: %v %s", id, res.IsError, text(res))
							}
						}
						var cs runs.Status
						if err := twoInto(s, "cancel_run", map[string]any{"run_id": id}, &cs); err != nil || cs.Status != runs.StatusCancelled {
							fail("cancel %s: %+v %v", id, cs, err)
						}
						finished <- id
					}
				}
			}()
		}
	}

	// Phase 1: both servers loaded at once.
	var wg sync.WaitGroup
	load(a, b, "A", 3, 8, &wg, nil, false)
	load(b, a, "B", 3, 8, &wg, nil, false)
	wg.Wait()
	errs.check(t, "phase 1")

	// Phase 2: runs held at the gate on each server, and runs the model holds on A.
	var heldA, heldB, hangA []string
	for i := range 3 {
		for _, c := range []struct {
			s    *server
			name string
			list *[]string
		}{{a, "A", &heldA}, {b, "B", &heldB}} {
			id, err := twoStart(c.s, fmt.Sprintf("tell ACME %s %d", c.name, i))
			if err != nil {
				t.Fatal(err)
			}
			addID(id, c.name+" held")
			*c.list = append(*c.list, id)
		}
		id, err := twoStart(a, fmt.Sprintf("hang A killed %d", i))
		if err != nil {
			t.Fatal(err)
		}
		addID(id, "A hang (killed)")
		hangA = append(hangA, id)
	}
	for _, id := range heldA {
		gateAwait(t, a, id, runs.StatusAwaitingApproval)
	}
	for _, id := range heldB {
		gateAwait(t, b, id, runs.StatusAwaitingApproval)
	}
	for _, id := range hangA {
		if _, err := twoWait(a, id, runs.StatusRunning); err != nil {
			t.Fatal(err)
		}
	}
	// B may see A's held run but not decide it.
	res := b.call(t, "approve_run", map[string]any{"run_id": heldA[0], "decision": "approve", "reason": "not mine"})
	if !res.IsError || !strings.HasPrefix(text(res), "invalid_transition") {
		t.Errorf("B approving A's held run: %v %s", res.IsError, text(res))
	}
	if st := b.runStatus(t, heldA[0]); st.Status != runs.StatusAwaitingApproval {
		t.Errorf("B's view of A's held run: %s", st.Status)
	}

	// Phase 3: A killed while B keeps serving; A restarted.
	quitB := make(chan struct{})
	var bwg sync.WaitGroup
	load(b, b, "B2", 2, 0, &bwg, quitB, false)
	killAndReap(t, a)
	a = startSymbiPatient(t, dir, env)
	for _, id := range heldA {
		if st := a.runStatus(t, id); st.Status != runs.StatusAwaitingApproval {
			t.Errorf("A's held run %s after A's restart: %s", id, st.Status)
		}
	}
	for _, id := range heldB {
		res := a.call(t, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "not mine"})
		if !res.IsError || !strings.HasPrefix(text(res), "invalid_transition") {
			t.Errorf("restarted A approving B's held run %s: %v %s", id, res.IsError, text(res))
		}
	}
	for _, id := range hangA {
		if st := a.runStatus(t, id); st.Status != runs.StatusAbandoned {
			t.Errorf("A's killed run %s after the restart: %s", id, st.Status)
		}
	}
	load(a, b, "A2", 2, 8, &wg, nil, false)
	wg.Wait()
	close(quitB)
	bwg.Wait()
	errs.check(t, "phase 3")
	for _, id := range heldB {
		var st runs.Status
		if err := twoInto(b, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "mine"}, &st); err != nil || st.Status != runs.StatusCompleted {
			t.Errorf("B approving its own held run %s: %+v %v", id, st.Status, err)
		}
	}
	for _, id := range heldA[1:] {
		var st runs.Status
		if err := twoInto(a, "approve_run", map[string]any{"run_id": id, "decision": "reject", "reason": "resumed"}, &st); err != nil || st.Status != runs.StatusPolicyDenied {
			t.Errorf("restarted A rejecting its resumed run %s: %+v %v", id, st.Status, err)
		}
	}

	// Phase 4: B killed with runs in flight while A holds a resumed run at the gate;
	// B restarted must leave A's held run to A.
	quitB = make(chan struct{})
	load(b, b, "B3", 2, 0, &bwg, quitB, true)
	var hangB []string
	for i := range 2 {
		id, err := twoStart(b, fmt.Sprintf("hang B killed %d", i))
		if err != nil {
			t.Fatal(err)
		}
		addID(id, "B hang (killed)")
		hangB = append(hangB, id)
		if _, err := twoWait(b, id, runs.StatusRunning); err != nil {
			t.Fatal(err)
		}
	}
	killAndReap(t, b)
	close(quitB)
	bwg.Wait()
	b = startSymbiPatient(t, dir, env)
	if st := b.runStatus(t, heldA[0]); st.Status != runs.StatusAwaitingApproval {
		t.Errorf("restarted B's view of A's held run: %s", st.Status)
	}
	var st runs.Status
	if err := twoInto(a, "approve_run", map[string]any{"run_id": heldA[0], "decision": "approve", "reason": "still mine"}, &st); err != nil || st.Status != runs.StatusCompleted {
		t.Errorf("A approving its held run after B's restart: %+v %v", st.Status, err)
	}
	for _, id := range hangB {
		if st := b.runStatus(t, id); st.Status != runs.StatusAbandoned {
			t.Errorf("B's killed run %s after its restart: %s", id, st.Status)
		}
	}
	close(stop)
	cliWG.Wait()
	errs.check(t, "CLI")

	// The end: both servers shut down; the evidence must be whole.
	a.session.Close()
	b.session.Close()
	for len(hung) > 0 {
		<-hung
	}
	code, out, err := twoExec("audit", "checkpoint", "--project", dir)
	if err != nil || code != 0 {
		t.Fatalf("final checkpoint: %d %v %s", code, err, out)
	}
	f := filepath.Join(cpDir, "final")
	os.WriteFile(f, []byte(out), 0o600)
	checkpoints = append(checkpoints, f)
	code, rep := twoVerify(t, dir, pub, checkpoints)
	t.Logf("verify --project: exit %d, %d runs, %d journals, ledger %d lines, %d checkpoints", code, len(rep.Runs), rep.Journals, rep.LedgerSize, len(checkpoints))
	if code == 1 {
		t.Errorf("verify --project exit 1")
	}
	twoLedgerCheck(t, dir, ids)
}

// TestTwoServersOtherServersStatus: server B follows server A's runs as they end —
// run_events long-polled to done, as a client that started a run on one server and reads
// it on another would. Every run completed and released its text; B must never say
// otherwise. (docs/runs.md: another process's run in flight shows the lines its journal
// holds; done means no more events will come.)
func TestTwoServersOtherServersStatus(t *testing.T) {
	dir := newE2EProject(t)
	model, _ := runsModel(t)
	a, b := twoStartBoth(t, dir, modelEnv(model))
	ids := make(chan string, 1000)
	errs := &twoErrs{}
	var wg, pw sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				id, err := twoStart(a, fmt.Sprintf("p %d %d", w, i))
				if err != nil {
					errs.add("%v", err)
					return
				}
				ids <- id
				if st, err := twoWait(a, id, ""); err != nil || st != runs.StatusCompleted {
					errs.add("A's own view of %s: %s %v", id, st, err)
				}
			}
		}()
	}
	var bad atomic.Int64
	for range 4 {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for id := range ids {
				// B follows the run: run_status while it runs, then run_events to done.
				for {
					var st runs.Status
					if err := twoInto(b, "run_status", map[string]any{"run_id": id}, &st); err != nil {
						errs.add("B's run_status: %v", err)
						break
					}
					if st.Status != runs.StatusRunning {
						if st.Status != runs.StatusCompleted || !st.Released || st.JournalProblem != "" {
							bad.Add(1)
							errs.add("B's run_status of A's run %s: status %s, released %v, journal_problem %q; A completed it and released its text",
								id, st.Status, st.Released, st.JournalProblem)
						}
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	close(ids)
	pw.Wait()
	errs.check(t, "B's view of A's runs")
}

// TestTwoServersVerifyWhileServing: `symbi audit verify --project` run while two
// servers serve the project. docs/ledger.md: "A project a server is serving can be
// verified as it runs ... a run in progress: ... incomplete (exit 2), not a problem." Every
// run here ends normally and is recorded; no verification may exit 1.
func TestTwoServersVerifyWhileServing(t *testing.T) {
	dir := newE2EProject(t)
	model, _ := runsModel(t)
	a, b := twoStartBoth(t, dir, modelEnv(model))
	var out startRunOut
	if err := twoInto(a, "start_run", map[string]any{"agent": "helper", "prompt": "first"}, &out); err != nil {
		t.Fatal(err)
	}
	pub := out.Audit.PublicKey
	if _, err := twoWait(a, out.RunID, ""); err != nil {
		t.Fatal(err)
	}
	errs := &twoErrs{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range []*server{a, b} {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id, err := twoStart(s, fmt.Sprintf("load %d %d", w, i))
					if err != nil {
						errs.add("%v", err)
						return
					}
					if st, err := twoWait(s, id, ""); err != nil || st != runs.StatusCompleted {
						errs.add("run %s: %s %v", id, st, err)
						return
					}
				}
			}()
		}
	}
	var fails []string
	for i := 0; i < 15; i++ {
		code, out, err := twoExec("audit", "verify", "--project", dir, "--public-key", pub, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var rep ledger.ProjectReport
		if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || code == 1 {
			fails = append(fails, fmt.Sprintf("verify %d: exit %d: %.2000s", i, code, twoProblems(rep, out)))
		}
	}
	close(stop)
	wg.Wait()
	errs.check(t, "load")
	if len(fails) > 0 {
		t.Errorf("%d of 15 verifications while serving exited 1, every run being whole and recorded:\n%s", len(fails), strings.Join(fails, "\n"))
	}
	a.session.Close()
	b.session.Close()
	if code, out, _ := twoExec("audit", "verify", "--project", dir, "--public-key", pub); code != 0 {
		t.Fatalf("verify --project once both servers stopped: exit %d\n%s", code, out)
	}
}

// TestTwoServersRestartTogether: both servers are killed with runs in flight and
// runs held at the gate, then started again at the same moment. Each killed run gets one
// recovered entry; each held run is resumed by exactly one of them, which alone may
// decide it; the project verifies.
func TestTwoServersRestartTogether(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), twoGatePolicy)
	model, _ := runsModel(t)
	env := modelEnv(model)
	a, b := twoStartBoth(t, dir, env)
	var held, killed []string
	var pub string
	for round := range 2 {
		for _, s := range []*server{a, b} {
			for i := range 3 {
				var out startRunOut
				if err := twoInto(s, "start_run", map[string]any{"agent": "helper", "prompt": fmt.Sprintf("tell ACME %d %d", round, i)}, &out); err != nil {
					t.Fatal(err)
				}
				pub = out.Audit.PublicKey
				held = append(held, out.RunID)
				gateAwait(t, s, out.RunID, runs.StatusAwaitingApproval)
				id, err := twoStart(s, fmt.Sprintf("hang %d %d", round, i))
				if err != nil {
					t.Fatal(err)
				}
				killed = append(killed, id)
				if _, err := twoWait(s, id, runs.StatusRunning); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	killAndReap(t, a)
	killAndReap(t, b)
	a, b = twoStartBoth(t, dir, env)
	for _, id := range held {
		var owners []string
		for _, c := range []struct {
			s    *server
			name string
		}{{a, "A"}, {b, "B"}} {
			res := c.s.call(t, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "after both restarted"})
			if !res.IsError {
				owners = append(owners, c.name)
			} else if !strings.HasPrefix(text(res), "invalid_transition") {
				t.Errorf("%s approving %s: %s", c.name, id, text(res))
			}
		}
		if len(owners) != 1 {
			t.Errorf("held run %s decided by %v after both restarted; want exactly one server", id, owners)
		}
	}
	for _, id := range killed {
		if st := a.runStatus(t, id); st.Status != runs.StatusAbandoned {
			t.Errorf("killed run %s: %s", id, st.Status)
		}
	}
	a.session.Close()
	b.session.Close()
	ids := map[string]string{}
	for _, id := range held {
		ids[id] = "held"
	}
	for _, id := range killed {
		ids[id] = "killed"
	}
	twoLedgerCheck(t, dir, ids)
	if code, _ := twoVerify(t, dir, pub, nil); code != 2 {
		t.Errorf("verify --project: exit %d, want 2 (the killed runs are incomplete)", code)
	}
}
