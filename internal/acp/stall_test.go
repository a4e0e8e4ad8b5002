package acp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/proctest"
)

// durableJournal closes durable once a record of type typ has been synced.
type durableJournal struct {
	*journal.Writer
	typ     string
	mu      sync.Mutex
	seen    bool
	once    sync.Once
	durable chan struct{}
}

func (j *durableJournal) Append(r journal.Record) error {
	err := j.Writer.Append(r)
	if err == nil && r.Type() == j.typ {
		j.mu.Lock()
		j.seen = true
		j.mu.Unlock()
	}
	return err
}

func (j *durableJournal) Sync() error {
	err := j.Writer.Sync()
	j.mu.Lock()
	seen := j.seen
	j.mu.Unlock()
	if err == nil && seen {
		j.once.Do(func() { close(j.durable) })
	}
	return err
}

// TestStalledAgent: an agent that stops reading its stdin — its pipe full, so that every
// write symbi makes to it blocks: session/cancel, the answers to the requests it floods,
// the prompt, a handshake request — never holds a cancelled run. The run ends by the
// grace period, SIGTERM (ignored here) and SIGKILL, and the agent's whole process group is
// dead when Run returns. One that floods more requests than can wait for their answers
// ends the run by itself, as malformed ACP, the same way. A run cancelled in the handshake
// names the request the agent left unanswered.
func TestStalledAgent(t *testing.T) {
	tests := []struct {
		name    string
		script  map[string]any
		started bool // the session opened: wait for session_started before the cancel
		flood   bool // the requests it sends pass maxUnanswered: the run ends malformed
	}{
		{"in the turn, with requests", map[string]any{"steps": []any{map[string]any{"message": "working"}, map[string]any{"stall": maxRequests / 2}}}, true, false},
		{"in the turn, flooding requests", map[string]any{"steps": []any{map[string]any{"message": "working"}, map[string]any{"stall": 200}}}, true, true},
		{"before the prompt is written", map[string]any{"stall_at": "session_new", "steps": []any{map[string]any{"message": "never"}}}, true, false},
		{"in the handshake", map[string]any{"stall_at": "initialize", "steps": []any{}}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.script["ignore_sigterm"] = true
			e := newEnv(t, tt.script)
			e.cfg.Grace = 100 * time.Millisecond // configuration, not an expectation
			dj := &durableJournal{Writer: e.w, typ: journal.TypeSessionStarted, durable: make(chan struct{})}
			e.cfg.Journal = dj
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := startRun(ctx, e.cfg)
			if tt.flood {
				// The run may end, and the agent be killed, before the agent has written
				// all its requests and recorded "stall".
				e.waitEvent("start")
			} else {
				e.waitEvent("stall")
			}
			pid := int(e.eventsNamed("start")[0]["pid"].(float64))
			t.Cleanup(func() {
				if t.Failed() {
					_ = syscall.Kill(-pid, syscall.SIGKILL) // a hung run leaves no agent behind
				}
			})
			if tt.started {
				select {
				case <-dj.durable:
				case <-time.After(guard):
					t.Fatal("no session_started")
				}
			}
			want := OutcomeCancelled
			if tt.flood {
				want = OutcomeError
			} else {
				cancel()
			}
			res := wait(t)
			mustOutcome(t, res, want)
			switch {
			case tt.flood:
				if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), fmt.Sprintf("the agent floods requests: more than %d read and not yet answered", maxUnanswered)) {
					t.Fatalf("err %v, want the flood named", res.Err)
				}
			case !errors.Is(res.Err, context.Canceled):
				t.Fatalf("err %v", res.Err)
			}
			if tt.started && !tt.flood && !strings.Contains(res.Err.Error(), "nor exit on SIGTERM") {
				t.Fatalf("err %v, want the grace period's note", res.Err)
			}
			// The agent stalls while it answers initialize: the run is cancelled waiting for
			// that answer, or for session/new's when the answer was read first.
			if msg := res.Err.Error(); !tt.started && !strings.Contains(msg, "before the session opened (no answer to initialize)") &&
				!strings.Contains(msg, "before the session opened (no answer to session/new)") {
				t.Fatalf("err %v, want the handshake request left unanswered named", res.Err)
			}
			if proctest.Alive(pid) {
				t.Fatalf("the agent %d is alive", pid)
			}
			if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("the agent's process group %d: %v, want none left", pid, err)
			}
			es := e.entries()
			if fin := data[journal.SessionFinished](t, es[len(es)-1]); fin.Outcome != want {
				t.Fatalf("session_finished %+v", fin)
			}
			e.finishAndVerify(res)
		})
	}
}

// fullJournal refuses, as a journal with no room left for it would, every record of type
// typ; the rest it appends.
type fullJournal struct {
	*journal.Writer
	typ string
}

func (j *fullJournal) Append(r journal.Record) error {
	if r.Type() == j.typ {
		return fmt.Errorf("%w: pretend", journal.ErrFileTooLarge)
	}
	return j.Writer.Append(r)
}

// TestJournalFull: a session record refused because the journal is full (its last
// journal.ClosingReserve bytes are kept for closing the run) ends the session as a
// journal failure, and session_finished is still written: the writer is not stopped.
func TestJournalFull(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "t", "locations": []string{"a.go"}}},
		map[string]any{"message": "never journaled"},
	}})
	e.cfg.Journal = &fullJournal{Writer: e.w, typ: journal.TypeToolCall}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !errors.Is(res.Err, ErrJournal) || !errors.Is(res.Err, journal.ErrFileTooLarge) {
		t.Fatalf("err %v", res.Err)
	}
	es := e.entries()
	if fin := data[journal.SessionFinished](t, es[len(es)-1]); fin.Outcome != OutcomeError || !strings.Contains(fin.Error, "tool_call") {
		t.Fatalf("last record %s %+v, want session_finished naming the refused record", es[len(es)-1].Type, fin)
	}
	e.finishAndVerify(res)
}
