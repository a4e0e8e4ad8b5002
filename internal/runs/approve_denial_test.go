package runs_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"symbi/internal/invoke"
	"symbi/internal/loopback"
	"symbi/internal/runs"
)

// TestApproveDenialKeepsStatus: approve_run by a caller that may not read the run
// (mallory, on alice's run: the built-in default lets her approve, not read) does not tell
// the run's status: its refusals of the run running and finished read the same.
func TestApproveDenialKeepsStatus(t *testing.T) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	model := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		if strings.Contains(r.Prompt, "hold") {
			<-gate
		}
		return loopback.Reply{Text: "fine"}
	}))
	if err := model.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { release(); model.Close() })
	s := startRestartServer(t, gateProject(t), model, 0)
	ctx := context.Background()
	st, _, err := s.m.Start(ctx, invoke.Request{Agent: "helper", Prompt: "hold", Caller: "alice", CallerAuth: "token", Async: true})
	if err != nil {
		t.Fatal(err)
	}
	mallory := runs.Caller{ID: "mallory", Auth: "token"}
	if _, err := s.m.StatusFor(mallory, st.RunID); err == nil {
		t.Fatal("mallory may read alice's run: the premise does not hold")
	}
	// A reason is given: a blank one is refused before any access decision, the same for
	// every run, and the comparison below would hold whatever the access rules do.
	_, errRunning := s.m.Approve(ctx, mallory, st.RunID, "", "approve", "checked the text")
	if errRunning == nil {
		t.Fatal("mallory approved a running run")
	}
	release()
	var cursor int64
	for {
		evs, err := s.m.Events(ctx, st.RunID, cursor, 100, runs.MaxWait)
		if err != nil {
			t.Fatal(err)
		}
		if evs.Done {
			break
		}
		cursor = evs.NextCursor
	}
	_, errEnded := s.m.Approve(ctx, mallory, st.RunID, "", "approve", "checked the text")
	if errEnded == nil {
		t.Fatal("mallory approved a finished run")
	}
	if strings.Contains(errRunning.Error(), "blank") {
		t.Fatalf("the refusal is the blank reason's, not an access decision: %v", errRunning)
	}
	if errRunning.Error() != errEnded.Error() {
		t.Fatalf("approve_run by mallory, who may not read alice's run, tells a running run from a finished one:\n  running:  %v\n  finished: %v", errRunning, errEnded)
	}
}
