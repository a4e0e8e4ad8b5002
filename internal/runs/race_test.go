package runs_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
)

// TestPerCallerSlotFreedBeforeAnswer: with --max-runs-per-caller 1, a caller whose
// invoke_agent has returned (its run ended: "busy ... until one ends", docs/http.md) starts
// its next run at once. The per-caller slot is freed before the run's end is heard
// (invoke.Request.Ended), as the server's own slot is — not by the Manager's watcher
// goroutine, which races the caller's next call.
func TestPerCallerSlotFreedBeforeAnswer(t *testing.T) {
	s := startRestartServer(t, gateProject(t), echoModel(t), 1)
	req := invoke.Request{Agent: "helper", Prompt: "plain", Caller: "alice", CallerAuth: "token"}
	for i := 0; i < 50; i++ {
		res, err := s.m.Invoke(context.Background(), req, nil)
		if errcode.Of(err) == errcode.Busy {
			t.Fatalf("sequential invoke_agent %d of one caller (--max-runs-per-caller 1) refused although its previous run had ended and been answered: %v", i, err)
		}
		if err != nil {
			t.Fatalf("invoke %d: %v", i, err)
		}
		if res.Text != "echo: plain" {
			t.Fatalf("invoke %d: %q", i, res.Text)
		}
	}
}

// TestPerCallerSlotFreedAfterCancel: the same through start_run and cancel_run: once
// cancel_run has answered (the run's terminated record written), the caller at its
// --max-runs-per-caller bound of 1 starts its next run at once. An OnChange listener slow
// to return holds the watcher through the next start_run — the interleaving in which a
// slot freed by the watcher would still be taken.
func TestPerCallerSlotFreedAfterCancel(t *testing.T) {
	s := startRestartServer(t, gateProject(t), echoModel(t), 1)
	req := invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"} // held at the gate
	st, _, err := s.m.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, s.m, st.RunID, runs.StatusAwaitingApproval)
	cancelThenStart(t, s.m, st.RunID)
}

// ---- a stress fixture: real files, the loopback model, a Runner and a Manager ----

type raceServer struct {
	runner *invoke.Runner
	m      *runs.Manager
	lw     *ledger.Writer
	pub    ed25519.PublicKey
	gov    string
}

func startRaceServer(t *testing.T, model *loopback.Server, maxRuns, perCaller int, approval time.Duration) *raceServer {
	t.Helper()
	p, err := project.Open(gateProject(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	reg, err := p.LoadRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	lw, _, err := ledger.OpenProject(p.Root(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lw.Close() })
	prov, err := inference.NewOpenAI(model.URL(), "", "test-model")
	if err != nil {
		t.Fatal(err)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Provider: prov, Ledger: lw,
		MaxRuns: maxRuns, ApprovalTimeout: approval})
	m := runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg, Ledger: lw, MaxRunsPerCaller: perCaller})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runner.Shutdown(ctx)
		m.Close()
	})
	return &raceServer{runner: runner, m: m, lw: lw, pub: lw.PublicKey(), gov: filepath.Join(p.Path(), ".symbiont", "governed")}
}

// symbiGoroutines returns the stacks of live goroutines running code of the invoke or runs
// packages (a run, a watcher, a long poll), other than the caller's.
func symbiGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "symbiGoroutines") {
			continue
		}
		if strings.Contains(g, "symbi/internal/invoke.") || strings.Contains(g, "symbi/internal/runs.") {
			out = append(out, g)
		}
	}
	return out
}

// TestRunsStress: many callers start runs (plain, held at a gate, slow) through start_run
// and invoke_agent while others cancel them, approve them twice at once, resolve them as
// they end, long-poll their events and read their status; then the server shuts down while
// runs are in flight. Checked: no data race (run with -race), every journal verifies
// complete and ends with terminated, the ledger verifies and has an entry for every run,
// what a caller was told agrees with the journal, no server slot or per-caller slot is
// leaked, and no run, watcher or long poll goroutine outlives Shutdown and Manager.Close.
func TestRunsStress(t *testing.T) {
	model := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		rep := loopback.Reply{Text: "echo: " + r.Prompt}
		if strings.Contains(r.Prompt, "slow") {
			rep.Delay = 20 * time.Millisecond
		}
		return rep
	}))
	if err := model.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	const maxRuns, callers, rounds = 12, 6, 8
	s := startRaceServer(t, model, maxRuns, 1, 300*time.Millisecond)
	m := s.m
	prompts := []string{"plain", "tell ACME", "slow plain", "slow ACME"}

	var mu sync.Mutex
	ids := map[string]bool{}
	told := map[string]string{} // run id → the text invoke_agent released to its caller
	seen := func(id string) {
		mu.Lock()
		ids[id] = true
		mu.Unlock()
	}
	guard, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()

	follow := func(id string) (*runs.Events, error) {
		var cursor int64
		for guard.Err() == nil {
			evs, err := m.Events(guard, id, cursor, 7, runs.MaxWait)
			if err != nil {
				return nil, err
			}
			cursor = evs.NextCursor
			if evs.Done {
				return evs, nil
			}
		}
		return nil, guard.Err()
	}

	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		caller := fmt.Sprintf("caller-%d", c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds && guard.Err() == nil; i++ {
				prompt := prompts[(c+i)%len(prompts)]
				req := invoke.Request{Agent: "helper", Prompt: prompt, Caller: caller, CallerAuth: "token"}
				if (c+i)%3 == 0 {
					// invoke_agent, sometimes given up by its caller.
					ctx, cancel := context.WithCancel(guard)
					if i%2 == 0 {
						go cancel()
					}
					res, err := m.Invoke(ctx, req, nil)
					cancel()
					var ie *invoke.Error
					switch {
					case err == nil:
						seen(res.Audit.RunID)
						mu.Lock()
						told[res.Audit.RunID] = res.Text
						mu.Unlock()
					case errors.As(err, &ie) && ie.Audit != nil:
						seen(ie.Audit.RunID)
						if errcode.Of(err) == errcode.ApprovalRequired {
							go m.Cancel(guard, ie.Audit.RunID)
						}
					}
					continue
				}
				st, _, err := m.Start(guard, req)
				for k := 0; k < 10000 && errcode.Of(err) == errcode.Busy; k++ {
					// The caller is at its bound: another of its runs, started concurrently,
					// is still in flight.
					runtime.Gosched()
					st, _, err = m.Start(guard, req)
				}
				if err != nil {
					if c := errcode.Of(err); c != errcode.Busy {
						t.Errorf("start_run: %v", err)
					}
					continue
				}
				id := st.RunID
				seen(id)
				var inner sync.WaitGroup
				act := func(f func()) { inner.Add(1); go func() { defer inner.Done(); f() }() }
				act(func() {
					evs, err := follow(id)
					if err != nil {
						t.Errorf("run_events %s: %v", id, err)
						return
					}
					if got, err := m.Status(id); err != nil || got.Status != evs.Status {
						t.Errorf("run %s: run_events ended %s, run_status says %+v, %v", id, evs.Status, got, err)
					}
				})
				switch i % 4 {
				case 0:
					act(func() { m.Cancel(guard, id) })
				case 1:
					for k := 0; k < 2; k++ {
						act(func() {
							for guard.Err() == nil {
								_, err := m.Approve(guard, runs.Caller{ID: "bob", Auth: "token"}, id, "", invoke.ApprovalApprove, "checked")
								if errcode.Of(err) != errcode.InvalidTransition {
									return
								}
								if got, err := m.Status(id); err != nil || got.Status != runs.StatusRunning {
									return
								}
								// Not yet awaiting: wait for its next event.
								evs, _ := m.Events(guard, id, 0, 1000, 0)
								if evs != nil {
									m.Events(guard, id, evs.NextCursor, 1, runs.MaxWait)
								}
							}
						})
					}
					act(func() { m.Cancel(guard, id) })
				case 2:
					act(func() {
						_, err := m.Approve(guard, runs.Caller{ID: "bob", Auth: "token"}, id, "", invoke.ApprovalReject, "no")
						_ = err
					})
				}
				act(func() {
					for guard.Err() == nil {
						_, err := m.Resolve(id, "accepted", "", runs.Caller{ID: caller, Auth: "token"})
						if err == nil {
							return
						}
						if errcode.Of(err) != errcode.InvalidTransition {
							t.Errorf("resolve %s: %v", id, err)
							return
						}
						evs, _ := m.Events(guard, id, 0, 1000, 0)
						if evs != nil && !evs.Done {
							m.Events(guard, id, evs.NextCursor, 1, runs.MaxWait)
						}
					}
				})
				act(func() {
					if _, err := m.List(runs.Filter{Limit: 5}); err != nil {
						t.Errorf("list_runs: %v", err)
					}
				})
				inner.Wait()
			}
		}()
	}
	wg.Wait()
	if guard.Err() != nil {
		t.Fatalf("the stress did not end within its guard")
	}

	t.Logf("%d runs", len(ids))
	// The server's slots are all free: maxRuns runs held at the gate start (each caller's
	// own), none refused busy.
	var held []string
	for k := 0; k < maxRuns; k++ {
		st, _, err := m.Start(guard, invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: fmt.Sprintf("slots-%d", k), CallerAuth: "token"})
		if err != nil {
			t.Fatalf("run %d of %d after every earlier run ended: %v (a server slot was leaked)", k+1, maxRuns, err)
		}
		held = append(held, st.RunID)
		seen(st.RunID)
	}
	// Shut down while they wait at the gate, with long polls and approvals in flight.
	var tail sync.WaitGroup
	for _, id := range held {
		tail.Add(2)
		go func() { defer tail.Done(); follow(id) }()
		go func() {
			defer tail.Done()
			m.Approve(guard, runs.Caller{ID: "bob", Auth: "token"}, id, "", invoke.ApprovalApprove, "late")
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.runner.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	tail.Wait()
	m.Close()

	// No per-caller slot leaked: each caller's next call is refused because the server is
	// shutting down, not as busy.
	for c := 0; c < callers; c++ {
		_, _, err := m.Start(guard, invoke.Request{Agent: "helper", Prompt: "plain", Caller: fmt.Sprintf("caller-%d", c), CallerAuth: "token"})
		if errcode.Of(err) == errcode.Busy {
			t.Errorf("caller-%d after every run ended: %v (a per-caller slot was leaked)", c, err)
		}
	}

	// Every run: its journal complete, the ledger knows it, the status agrees.
	for id := range ids {
		st, err := m.Status(id)
		if err != nil {
			t.Errorf("run %s: %v", id, err)
			continue
		}
		rep := journal.Verify(st.Journal, s.pub, journal.VerifyOptions{RunID: id})
		if rep.Status != journal.StatusComplete {
			t.Errorf("run %s: journal %s: %+v", id, rep.Status, rep.Problems)
		}
		if !s.lw.Knows(id) {
			t.Errorf("run %s: no ledger entry", id)
		}
		switch st.Status {
		case runs.StatusRunning, runs.StatusAwaitingApproval, runs.StatusAbandoned, runs.StatusAuditFailed:
			t.Errorf("run %s after shutdown: %s (%s)", id, st.Status, st.Reason)
		}
		if st.Status != rep.TerminalReason || st.Released != rep.Released || st.JournalProblem != "" {
			t.Errorf("run %s: status %s released %v (%s); its journal says %s released %v", id, st.Status, st.Released, st.JournalProblem, rep.TerminalReason, rep.Released)
		}
		if text, ok := told[id]; ok && (!st.Released || st.Text == nil || *st.Text != text) {
			t.Errorf("run %s: its caller was handed %q; run_status says %s released %v", id, text, st.Status, st.Released)
		}
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(s.gov), ledger.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if rep := ledger.Verify(data, s.pub); len(rep.Problems) > 0 {
		t.Errorf("ledger: %+v", rep.Problems)
	}

	// No run, watcher or long poll outlives Shutdown and Close. Those ending are waited
	// for (however slow the machine), up to the test's guard.
	left := symbiGoroutines()
	for len(left) > 0 && guard.Err() == nil {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
		left = symbiGoroutines()
	}
	if len(left) > 0 {
		t.Errorf("%d goroutines of invoke/runs outlive shutdown:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// TestApproveTimeoutCancel: a run held at the gate is approved by two approvers at once
// while its wait runs out and a third caller cancels it. Checked for each of many rounds:
// at most one approval_decided record, and it is that of the one approve_run that answered
// without error; an approve_run that answered without error has its decision in the
// journal (and the run did not end timeout); the final status is what the journal's
// terminated says; the text is released only after an approval_decided approve.
func TestApproveTimeoutCancel(t *testing.T) {
	s := startRaceServer(t, echoModel(t), 64, 0, 15*time.Millisecond)
	m := s.m
	for round := 0; round < 40; round++ {
		st, _, err := m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
		if err != nil {
			t.Fatal(err)
		}
		id := st.RunID
		// Wait for the gate (or the run's end: the wait may already have run out).
		var cursor int64
		for {
			evs, err := m.Events(context.Background(), id, cursor, 100, runs.MaxWait)
			if err != nil {
				t.Fatal(err)
			}
			cursor = evs.NextCursor
			if evs.Status == runs.StatusAwaitingApproval || evs.Done {
				break
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[k] = m.Approve(context.Background(), runs.Caller{ID: fmt.Sprintf("approver-%d", k), Auth: "token"}, id, "", invoke.ApprovalApprove, "checked")
			}()
		}
		if round%2 == 0 {
			wg.Add(1)
			go func() { defer wg.Done(); m.Cancel(context.Background(), id) }()
		}
		wg.Wait()
		// The run ends on its own when no call ended it (its wait runs out, or an
		// approval lets it finish): the final status is read once it has.
		for {
			evs, err := m.Events(context.Background(), id, cursor, 100, runs.MaxWait)
			if err != nil {
				t.Fatal(err)
			}
			cursor = evs.NextCursor
			if evs.Done {
				break
			}
		}
		final, err := m.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(final.Journal)
		if err != nil {
			t.Fatal(err)
		}
		var decided []string
		terminated := ""
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			switch {
			case strings.Contains(line, `"type":"approval_decided"`):
				for k := range errs {
					if strings.Contains(line, fmt.Sprintf(`"approver":"approver-%d"`, k)) {
						decided = append(decided, fmt.Sprintf("approver-%d", k))
					}
				}
			case strings.Contains(line, `"type":"terminated"`):
				terminated = line
			}
		}
		ok := 0
		for k, err := range errs {
			if err == nil {
				ok++
				if len(decided) != 1 || decided[0] != fmt.Sprintf("approver-%d", k) {
					t.Errorf("round %d: approve_run of approver-%d answered ok; the journal's decisions: %v", round, k, decided)
				}
			} else if c := errcode.Of(err); c != errcode.InvalidTransition {
				t.Errorf("round %d: approve_run of approver-%d: %v; want ok or invalid_transition", round, k, err)
			}
		}
		if len(decided) > 1 || len(decided) != ok {
			t.Errorf("round %d: %d approve_run calls answered ok, the journal has the decisions of %v", round, ok, decided)
		}
		if ok > 0 && final.Status == runs.StatusTimeout {
			t.Errorf("round %d: an approval was accepted, and the run ended timeout", round)
		}
		if final.Released && len(decided) == 0 {
			t.Errorf("round %d: released without a decision", round)
		}
		if terminated == "" || !strings.Contains(terminated, `"reason":"`+final.Status+`"`) {
			t.Errorf("round %d: run_status %s; the journal's end: %s", round, final.Status, terminated)
		}
	}
}

// endsAfterAuthorizing starts alice's run, held at the gate, and arranges that the next
// authorization to read it — after it read the run's journal — sees the run cancelled and
// its end recorded in the index (its watcher done) before the caller looks it up again.
func endsAfterAuthorizing(t *testing.T) (*runs.Manager, string) {
	t.Helper()
	s := startRestartServer(t, gateProject(t), echoModel(t), 0)
	st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, s.m, st.RunID, runs.StatusAwaitingApproval)
	runs.SetTestAfterRead(func() {
		runs.SetTestAfterRead(nil)
		if got, _, err := s.m.Cancel(context.Background(), st.RunID); err != nil || got.Status != runs.StatusCancelled {
			t.Errorf("cancel_run: %+v, %v", got, err)
		}
		s.m.Close() // waits for the run's watcher: its end is in the index
	})
	t.Cleanup(func() { runs.SetTestAfterRead(nil) })
	return s.m, st.RunID
}

// TestApproveAfterOwnRunEnded: approve_run authorizes on the status of a run that awaits
// approval; when this server's run ends before it is looked up again (here cancel_run, its
// end recorded by its watcher), the answer is built from the run as it now is — not that
// it "awaits approval in another server process", which is false.
func TestApproveAfterOwnRunEnded(t *testing.T) {
	m, runID := endsAfterAuthorizing(t)
	_, err := m.Approve(context.Background(), runs.Caller{ID: "bob", Auth: "token"}, runID, "", invoke.ApprovalApprove, "checked")
	if errcode.Of(err) != errcode.InvalidTransition {
		t.Fatalf("approve_run of a run that has ended: %v; want invalid_transition", err)
	}
	// bob may no longer read the run (an approver reads it only while it waits): he is told
	// it is not awaiting approval, not why — and never that another process holds it.
	if strings.Contains(err.Error(), "another server process") || !strings.Contains(err.Error(), "not awaiting approval") {
		t.Fatalf("approve_run of this server's run, cancelled: %q; want it not awaiting approval, not that it awaits approval in another process", err)
	}
}

// TestStatusForAfterOwnRunEnded: run_status authorizes an approver on a run that awaits
// approval; when this server's run ends before it is looked up again (here cancel_run, its
// end recorded by its watcher), the answer is what the approver may see of the run as it
// now is — it may no longer read it — never the held text under the stale status.
func TestStatusForAfterOwnRunEnded(t *testing.T) {
	m, runID := endsAfterAuthorizing(t)
	got, err := m.StatusFor(runs.Caller{ID: "bob", Auth: "token"}, runID)
	if err == nil && got.Approval != nil && got.Approval.Text != nil {
		t.Fatalf("run_status of a run cancelled meanwhile shows the approver its held text under status %s", got.Status)
	}
	if errcode.Of(err) != errcode.AccessDenied {
		t.Fatalf("run_status of this server's run, cancelled: %+v, %v; want access_denied (an approver reads a run only while it waits)", got, err)
	}
}

// TestResumedRunSlotFreedBeforeAnswer: a run resumed after a restart counts against its
// caller's --max-runs-per-caller, and its slot, as a fresh run's, is freed before anyone
// hears it ended (Held.Ended): once cancel_run has answered, the caller at its bound starts
// its next run at once. A slow OnChange listener holds the watcher through that start_run,
// as in TestPerCallerSlotFreedAfterCancel.
func TestResumedRunSlotFreedBeforeAnswer(t *testing.T) {
	model := echoModel(t)
	dir, runID := heldThenStopped(t, model, 1)

	s := startRestartServer(t, dir, model, 1)
	if len(s.held) != 1 || s.held[0] != runID {
		t.Fatalf("resumed %v, want [%s]", s.held, runID)
	}
	cancelThenStart(t, s.m, runID)
}

// cancelThenStart cancels alice's run id and, once cancel_run has answered, starts her
// next run at once, with an OnChange listener slow to return holding the run's watcher
// meanwhile — the interleaving in which a slot freed by the watcher would still be taken:
// with --max-runs-per-caller 1, the start must not be busy.
func cancelThenStart(t *testing.T, m *runs.Manager, id string) {
	t.Helper()
	hold := make(chan struct{})
	var armed sync.Mutex
	armedOn := false
	unregister := m.OnChange(func(string) {
		armed.Lock()
		on := armedOn
		armed.Unlock()
		if on {
			select {
			case <-hold:
			case <-time.After(30 * time.Second): // hang guard only
			}
		}
	})
	defer unregister()
	armed.Lock()
	armedOn = true
	armed.Unlock()
	got, already, err := m.Cancel(context.Background(), id)
	if err != nil || already || got.Status != runs.StatusCancelled {
		close(hold)
		t.Fatalf("cancel_run: %+v, %v, %v", got, already, err)
	}
	_, _, err = m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "plain", Caller: "alice", CallerAuth: "token"})
	armed.Lock()
	armedOn = false
	armed.Unlock()
	close(hold)
	if errcode.Of(err) == errcode.Busy {
		t.Fatalf("start_run of one caller (--max-runs-per-caller 1), right after cancel_run answered that its only run is cancelled: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
