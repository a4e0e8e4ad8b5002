package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"symbi/internal/journal"
)

// heldLog holds the ACP SDK's notification goroutine while it logs an unknown
// notification ("failed to handle notification") until release is closed — a server log
// slow to take a line, and what makes the order of these tests certain: the SDK hands
// notifications over one at a time, on that one goroutine. It calls onClosed (once) when
// the SDK logs that its connection closed: it has read the agent's output to its end (or
// given up on it), and the turn has failed.
type heldLog struct {
	release  <-chan struct{}
	onClosed func()
	once     *sync.Once
}

func (h heldLog) Enabled(context.Context, slog.Level) bool { return true }

func (h heldLog) Handle(_ context.Context, rec slog.Record) error {
	switch rec.Message {
	case "failed to handle notification":
		<-h.release
	case "connection closed":
		h.once.Do(h.onClosed)
	}
	return nil
}
func (h heldLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h heldLog) WithGroup(string) slog.Handler      { return h }

// handoverSteps are n tool calls the SDK reads while its notification goroutine is held
// by an unknown notification sent before them, then last.
func handoverSteps(n int, last ...any) []any {
	steps := []any{map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "method": "x/unknown", "params": map[string]any{}}}}
	for i := range n {
		steps = append(steps, map[string]any{"tool_call": map[string]any{"id": fmt.Sprintf("t%d", i), "kind": "read", "title": "look"}})
	}
	return append(steps, last...)
}

// TestUpdatesReadBeforeTheTurnFailedAreJournaled: tool calls the agent reported before
// it exited mid-turn, or before it wrote a malformed line, are journaled, although the
// SDK hands them over only after the turn has failed ("peer disconnected", or the line
// check's abort): the session waits for the SDK to hand over what it read before it
// closes. (They were dropped, the run's error saying nothing of it.)
func TestUpdatesReadBeforeTheTurnFailedAreJournaled(t *testing.T) {
	const n = 5
	for _, c := range []struct {
		name string
		last []any
		want string // in the run's error
	}{
		{"the agent exits mid-turn", []any{map[string]any{"crash": 0}}, "the agent exited"},
		{"a malformed line", []any{map[string]any{"garbage": "this is not json"}, map[string]any{"hang": true}}, "not JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": handoverSteps(n, c.last...)})
			release := make(chan struct{})
			e.cfg.Log = slog.New(heldLog{release: release, onClosed: func() { close(release) }, once: new(sync.Once)})
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			if !strings.Contains(res.Err.Error(), c.want) || strings.Contains(res.Err.Error(), "could not all be journaled") {
				t.Errorf("err %v; want %q, and no update missing", res.Err, c.want)
			}
			if got := len(ofType(e.entries(), journal.TypeToolCall)); got != n {
				t.Fatalf("the agent sent %d tool calls before the turn failed; the journal holds %d", n, got)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestUpdatesNotHandedOverAreNamed: when the SDK does not hand over, within the grace
// period, what it read before the turn failed (here its notification goroutine is held
// until the session closes), the run's error says its journal lacks updates.
func TestUpdatesNotHandedOverAreNamed(t *testing.T) {
	for _, c := range []struct {
		name string
		last []any
	}{
		{"the agent exits mid-turn", []any{map[string]any{"crash": 0}}},
		{"a malformed line", []any{map[string]any{"garbage": "this is not json"}, map[string]any{"hang": true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": handoverSteps(5, c.last...)})
			e.cfg.Grace = 100 * time.Millisecond // configuration, not an expectation
			release := make(chan struct{})
			e.cfg.Log = slog.New(heldLog{release: release, onClosed: func() {}, once: new(sync.Once)})
			r := newRunner(e.cfg)
			go func() { <-r.ended; close(release) }()
			res := r.run(context.Background())
			mustOutcome(t, res, OutcomeError)
			got := len(ofType(e.entries(), journal.TypeToolCall))
			if got != 5 && !strings.Contains(res.Err.Error(), "could not all be journaled") {
				t.Fatalf("the journal holds %d of the 5 tool calls the agent sent, and the run's error does not say so: %v", got, res.Err)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestFloodEndsTheLineReader: when the SDK's notification queue overflows it stops
// reading the agent's output; the line check, writing the next line to it, ends too
// (it stayed blocked for ever, holding the runner, after Run returned).
func TestFloodEndsTheLineReader(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": handoverSteps(0, map[string]any{"flood": 3000, "text": "x"}, map[string]any{"hang": true})})
	e.cfg.Grace = 200 * time.Millisecond // configuration, not an expectation
	release := make(chan struct{})
	e.cfg.Log = slog.New(heldLog{release: release, onClosed: func() {}, once: new(sync.Once)})
	r := newRunner(e.cfg)
	go func() { <-r.ended; close(release) }()
	res := r.run(context.Background())
	mustOutcome(t, res, OutcomeError)
	if !strings.Contains(res.Err.Error(), "floods updates") {
		t.Fatalf("err %v, want the flood named", res.Err)
	}
	e.finishAndVerify(res)
	// Wait for the line reader to end (an event, looked for until a hang guard).
	for deadline := time.Now().Add(guard); ; time.Sleep(20 * time.Millisecond) {
		buf := make([]byte, 4<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "acp.(*runner).checkLines") {
			return
		}
		if time.Now().After(deadline) {
			for _, g := range strings.Split(stacks, "\n\n") {
				if strings.Contains(g, "acp.(*runner).checkLines") {
					t.Fatalf("after Run returned, the goroutine reading the agent's output is still blocked:\n%s", g)
				}
			}
		}
	}
}

// TestRequestSentAsNotificationIsMalformed: a session/request_permission (or an fs
// request) sent without an id cannot be answered: it is malformed ACP, and no decision
// is journaled as answered to an agent that heard nothing.
func TestRequestSentAsNotificationIsMalformed(t *testing.T) {
	for _, raw := range []map[string]any{
		{"jsonrpc": "2.0", "method": "session/request_permission", "params": map[string]any{
			"sessionId": "fake-session-1", "toolCall": map[string]any{"toolCallId": "p1", "kind": "read", "title": "read notes"},
			"options": []any{map[string]any{"optionId": "allow", "kind": "allow_once", "name": "Allow"},
				map[string]any{"optionId": "reject", "kind": "reject_once", "name": "Reject"}}}},
		{"jsonrpc": "2.0", "method": "fs/read_text_file", "params": map[string]any{"sessionId": "fake-session-1", "path": "/etc/hostname"}},
		{"jsonrpc": "2.0", "id": nil, "method": "fs/write_text_file", "params": map[string]any{"sessionId": "fake-session-1", "path": "/tmp/x", "content": "x"}},
	} {
		t.Run(raw["method"].(string), func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{map[string]any{"raw": raw}, map[string]any{"message": "done"}}})
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			if !strings.Contains(res.Err.Error(), "sent as a notification") {
				t.Errorf("err %v; want the request sent as a notification named", res.Err)
			}
			for _, typ := range []string{journal.TypePermissionDecided, journal.TypeFSRead, journal.TypeFSWrite} {
				if x := ofType(e.entries(), typ); len(x) > 0 {
					t.Errorf("%s journaled for a request that was never answered: %s", typ, x[0].Data)
				}
			}
			e.finishAndVerify(res)
		})
	}
}

// TestAnnouncedLocationsBounded: one tool call's announced locations are bounded like
// those of one request (maxLocationBytes of paths): tool_call_update messages each under
// the bound, adding to one call's list, are malformed ACP once they pass it — kept, they
// grew without end, each new one scanned against all on the goroutine reading the agent.
func TestAnnouncedLocationsBounded(t *testing.T) {
	r := newRunner(Config{})
	for m := range 8 {
		var locs []map[string]string
		for i := range 3000 {
			locs = append(locs, map[string]string{"path": fmt.Sprintf("/w/src/dir%04d/file%06d.go", m, i)})
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "s1",
			"update": map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": "t1", "locations": locs}}})
		if len(b) > maxLocationBytes {
			t.Fatalf("message %d is %d bytes: over the per-request bound by itself", m, len(b))
		}
		_, _, msg := notMessage(b)
		n := notification(msg)
		if n == nil {
			t.Fatalf("message %d is no session/update the SDK reads", m)
		}
		if err := r.announce(n); err != nil {
			if !strings.Contains(err.Error(), "malformed ACP") || !strings.Contains(err.Error(), fmt.Sprint(maxLocationBytes)) {
				t.Fatalf("refused with %v; want malformed ACP naming the bound", err)
			}
			return
		}
	}
	t.Fatalf("one tool call announced with %d bytes of paths, more than the %d a request may name, and the session goes on", 8*3000*27, maxLocationBytes)
}
