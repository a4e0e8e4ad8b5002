package acp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"symbi/internal/journal"
)

// chunkLine is a raw script step: a session/update notification of the kind ("agent_
// message_chunk", "agent_thought_chunk") whose line on the agent's stdout, "\n" included,
// is exactly n bytes.
func chunkLine(t *testing.T, kind string, n int) any {
	t.Helper()
	msg := func(text string) map[string]any {
		return map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
			"sessionId": "fake-session-1",
			"update":    map[string]any{"sessionUpdate": kind, "content": map[string]any{"type": "text", "text": text}}}}
	}
	empty, err := json.Marshal(msg(""))
	if err != nil {
		t.Fatal(err)
	}
	m := msg(strings.Repeat("x", n-len(empty)-1))
	if b, _ := json.Marshal(m); len(b)+1 != n {
		t.Fatalf("line of %d bytes, want %d", len(b)+1, n)
	}
	return map[string]any{"raw": m}
}

// TestLongLine: a line of the agent of more than maxLineBytes bytes ("\n" included) ends
// the run as malformed ACP naming the limit, whichever piece of the line its "\n" falls
// in — not as the SDK's own failure on it, its connection closed; a line of exactly
// maxLineBytes bytes is taken.
func TestLongLine(t *testing.T) {
	for _, n := range []int{maxLineBytes + 1, maxLineBytes + 64<<10, 11 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{chunkLine(t, "agent_message_chunk", n), map[string]any{"hang": true}}})
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			want := fmt.Sprintf("a line of more than %d bytes", maxLineBytes)
			if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), want) {
				t.Fatalf("err %.300v, want malformed ACP: %s", res.Err, want)
			}
			es := e.entries()
			if fin := data[journal.SessionFinished](t, es[len(es)-1]); fin.Outcome != OutcomeError || !strings.Contains(fin.Error, want) {
				t.Fatalf("session_finished %.300v", fin)
			}
			e.finishAndVerify(res)
		})
	}
	// A thought, not part of the answer (whose bound is far below a line's), so that
	// the run completes.
	t.Run(fmt.Sprint(maxLineBytes), func(t *testing.T) {
		e := newEnv(t, map[string]any{"steps": []any{chunkLine(t, "agent_thought_chunk", maxLineBytes), map[string]any{"message": "done"}}})
		res := e.run(nil)
		mustOutcome(t, res, OutcomeCompleted)
		if res.Text != "done" {
			t.Fatalf("text %q", res.Text)
		}
		var thought int64
		for _, x := range ofType(e.entries(), journal.TypeAgentThought) {
			thought += data[journal.AgentThought](t, x).Bytes
		}
		if thought < maxLineBytes-1024 {
			t.Fatalf("%d bytes of thought journaled, want the line's text", thought)
		}
		e.finishAndVerify(res)
	})
}
