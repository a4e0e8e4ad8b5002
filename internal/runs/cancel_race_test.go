package runs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/invoke"
	"symbi/internal/ledger"
	"symbi/internal/proctest"
	"symbi/internal/runs"
)

// TestCancelRunAfterApproval: through the Manager (as symbi mcp wires it),
// a start_run run held at a gate is approved by bob; while the run appends the approval's
// ledger entry (past the gate's wait), cancel_run reaches it. Every view of the run must
// then agree that it ended cancelled with nothing released: cancel_run's and approve_run's
// answers, run_status (no text), run_events (terminated last, done) and the ledger.
func TestCancelRunAfterApproval(t *testing.T) {
	dir := gateProject(t)
	s := startRestartServer(t, dir, echoModel(t), 0)
	st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	id := st.RunID
	awaitStatus(t, s.m, id, runs.StatusAwaitingApproval)

	ledgerPath := filepath.Join(dir, ".symbiont", ledger.FileName)
	var lst unix.Stat_t
	if err := unix.Stat(ledgerPath, &lst); err != nil {
		t.Fatal(err)
	}
	unlock := proctest.LockFile(t, ledgerPath)
	defer unlock()

	type answer struct {
		st  *runs.Status
		err error
	}
	approved := make(chan answer, 1)
	go func() {
		st, err := s.m.Approve(context.Background(), runs.Caller{ID: "bob", Auth: "token"}, id, "", invoke.ApprovalApprove, "checked")
		approved <- answer{st, err}
	}()
	proctest.WaitFlockWaiter(t, lst.Ino, 5*time.Minute) // the run took bob's decision and appends its approval entry
	// cancel_run: its request's context already done, so that it answers at once, after
	// having cancelled the run (it does not wait for the ledger we hold).
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.m.Cancel(done, id); err != nil {
		t.Fatalf("cancel_run: %v", err)
	}
	unlock()

	a := <-approved
	if a.err != nil {
		t.Fatalf("approve_run: %v", a.err)
	}
	if a.st.Status != runs.StatusCancelled || a.st.Released || a.st.Text != nil {
		t.Errorf("approve_run answered status %s released=%v text=%v; want cancelled, nothing released", a.st.Status, a.st.Released, a.st.Text != nil)
	}
	got, already, err := s.m.Cancel(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !already || got.Status != runs.StatusCancelled || got.Released {
		t.Errorf("cancel_run after the end: status %s released=%v already_finished=%v; want cancelled, not released, already finished", got.Status, got.Released, already)
	}
	final, err := s.m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != runs.StatusCancelled || final.Released || final.Text != nil {
		t.Errorf("run_status: %s released=%v text=%v; want cancelled with no text", final.Status, final.Released, final.Text != nil)
	}
	evs, err := s.m.Events(context.Background(), id, 0, runs.MaxLimit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !evs.Done || evs.Status != runs.StatusCancelled || len(evs.Events) == 0 || evs.Events[len(evs.Events)-1].Type != "terminated" {
		t.Errorf("run_events: status %s done=%v; want cancelled, done, terminated last", evs.Status, evs.Done)
	}
	for _, ev := range evs.Events {
		if ev.Type == "inference_finished" && ev.Line != "" {
			t.Errorf("run_events serves the unreleased answer's line: %s", ev.Line)
		}
	}
	data, err := os.ReadFile(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	entries := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"type":"run"`) && strings.Contains(line, id) {
			entries++
			if !strings.Contains(line, `"reason":"cancelled"`) || strings.Contains(line, `"released":true`) {
				t.Errorf("the ledger's run entry: %s; want reason cancelled, not released", line)
			}
		}
	}
	if entries != 1 {
		t.Errorf("%d ledger run entries for the run; want 1", entries)
	}
}

// TestConsumersAndResolversRaceCancel: long-poll run_events consumers follow a run by
// cursor while it is cancelled (cancel_run racing its end); each must see every record
// once, in order, terminated last, and stop only with done and the final status. Then two
// resolvers resolve the finished run at once: both are recorded, and run_status shows the
// ledger's latest with two revisions.
func TestConsumersAndResolversRaceCancel(t *testing.T) {
	dir := gateProject(t)
	s := startRestartServer(t, dir, echoModel(t), 0)
	for round := 0; round < 10; round++ {
		st, _, err := s.m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
		if err != nil {
			t.Fatal(err)
		}
		id := st.RunID
		const consumers = 4
		type seen struct {
			types  []string
			status string
			err    error
		}
		results := make(chan seen, consumers)
		for range consumers {
			go func() {
				var out seen
				var cursor int64
				for range 10000 {
					evs, err := s.m.Events(context.Background(), id, cursor, 2, runs.MaxWait)
					if err != nil {
						out.err = err
						break
					}
					for i, ev := range evs.Events {
						if ev.Seq != cursor+int64(i) {
							out.err = fmt.Errorf("event seq %d at cursor %d+%d", ev.Seq, cursor, i)
						}
						out.types = append(out.types, ev.Type)
					}
					cursor = evs.NextCursor
					if evs.Done {
						out.status = evs.Status
						break
					}
				}
				results <- out
			}()
		}
		if round%2 == 0 {
			awaitStatus(t, s.m, id, runs.StatusAwaitingApproval)
		}
		got, _, err := s.m.Cancel(context.Background(), id)
		if err != nil || got.Status != runs.StatusCancelled {
			t.Fatalf("cancel_run: %+v %v", got, err)
		}
		for range consumers {
			r := <-results
			if r.err != nil {
				t.Fatalf("round %d: consumer: %v", round, r.err)
			}
			if r.status != runs.StatusCancelled || len(r.types) == 0 || r.types[len(r.types)-1] != "terminated" {
				t.Fatalf("round %d: consumer ended with status %q, events %v; want cancelled, terminated last", round, r.status, r.types)
			}
		}
		errs := make(chan error, 2)
		for k, v := range []string{"accepted", "rejected"} {
			go func() {
				_, err := s.m.Resolve(id, v, "", runs.Caller{ID: fmt.Sprintf("r%d", k), Auth: "token"})
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("resolve: %v", err)
			}
		}
		final, err := s.m.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		if final.Resolution == nil || final.Resolution.Revisions != 2 || final.Status != runs.StatusCancelled {
			t.Fatalf("round %d: run_status %+v resolution %+v; want cancelled with 2 revisions", round, final, final.Resolution)
		}
		data, _ := os.ReadFile(filepath.Join(dir, ".symbiont", ledger.FileName))
		last := ""
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"type":"resolution"`) && strings.Contains(line, id) {
				if strings.Contains(line, `"resolution":"accepted"`) {
					last = "accepted"
				} else {
					last = "rejected"
				}
			}
		}
		if final.Resolution.Value != last {
			t.Fatalf("round %d: run_status says %s; the ledger's latest resolution is %s", round, final.Resolution.Value, last)
		}
	}
}
