package acp

import (
	"log/slog"
	"strings"
	"testing"

	"symbi/internal/journal"
	"symbi/internal/syncbuf"
)

// TestAgentWordsStayOutOfErrors: what a delegated agent says outside its answer — its
// stderr, a JSON-RPC error's message, a line that is not ACP, the modes it offers — does
// not enter the run's error. That error is journaled (session_finished, terminated) and
// served to the run's callers whether or not the answer is released: an agent whose
// answer the respond gate would withhold could hand it on through it, and its stderr may
// hold what it read of the server's environment. The words go to the server's log, under
// the executor's name; the error says how many bytes and where they are.
func TestAgentWordsStayOutOfErrors(t *testing.T) {
	const secret = "SECRET-7f3a9c-the-withheld-answer"
	for name, tc := range map[string]struct {
		script map[string]any
		pin    string
		says   string // what the error says in its place
	}{
		"stderr": {
			script: map[string]any{"expect_prompt_contains": []string{secret}, "steps": []any{}},
			says:   "the agent's stderr",
		},
		"rpc error message": {
			script: map[string]any{"steps": []any{map[string]any{"message": "hi"},
				map[string]any{"error": map[string]any{"code": 1, "message": secret}}}},
			says: "JSON-RPC error 1",
		},
		"line not ACP": {
			script: map[string]any{"steps": []any{map[string]any{"garbage": secret}, map[string]any{"sleep": "1h"}}},
			says:   "not JSON",
		},
		"mode switched to": {
			script: map[string]any{"modes": []string{"read-only", secret},
				"steps": []any{map[string]any{"mode_update": secret}, map[string]any{"sleep": "1h"}}},
			pin:  "read-only",
			says: `left the pinned mode "read-only"`,
		},
		"offered modes": {
			script: map[string]any{"modes": []string{secret}, "steps": []any{}},
			pin:    "read-only",
			says:   `pinned mode "read-only"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, tc.script)
			var log syncbuf.Buffer
			e.cfg.Log = slog.New(slog.NewTextHandler(&log, nil))
			if tc.pin != "" {
				e.cfg.Executor.PinMode = tc.pin
			}
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			t.Logf("error: %v", res.Err)
			if strings.Contains(res.Err.Error(), secret) {
				t.Errorf("the run's error holds the agent's words: %v", res.Err)
			}
			if !strings.Contains(res.Err.Error(), tc.says) {
				t.Errorf("the run's error %q does not say %q", res.Err, tc.says)
			}
			es := e.entries()
			fin := data[journal.SessionFinished](t, es[len(es)-1])
			if fin.Outcome != OutcomeError || fin.Error == "" {
				t.Fatalf("session_finished %+v", fin)
			}
			if strings.Contains(fin.Error, secret) {
				t.Errorf("session_finished's error holds the agent's words: %q", fin.Error)
			}
			if l := log.String(); !strings.Contains(l, secret) || !strings.Contains(l, "executor=fake") {
				t.Errorf("the server's log lacks the agent's words or the executor's name:\n%s", l)
			}
			e.finishAndVerify(res)
		})
	}
}
