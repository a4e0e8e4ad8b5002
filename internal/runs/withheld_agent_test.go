package runs_test

import (
	"strings"
	"testing"

	"symbi/internal/journal"
	"symbi/internal/runs"
)

// TestDelegatedAgentTextWithheld: the respond gate denied a delegated agent's answer.
// run_events withholds, with the records that carry the run's output, every record holding
// text the agent chose — a tool call's title, status and paths, a permission's title, its
// name and version — in clear even in a hashes-only journal: an agent whose answer the gate
// withholds cannot hand the same text on through them.
func TestDelegatedAgentTextWithheld(t *testing.T) {
	const secret = "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
	p := newTestProject(t, nil)
	m := p.open(t)
	id := newRunID(t)
	recs := []journal.Record{
		journal.Started{Agent: "coder", File: "agents/coder.symbi", SourceSHA256: sum("source"), DeclarationSHA256: sum("decl"),
			Mode: "delegated", Surface: "mcp-server", Caller: "stdio", ServerVersion: "test", DeadlineMS: 120000,
			Provider: "acp", Model: "fake", PolicyMode: "cedar", PromptSHA256: sum("p"), PromptBytes: 1, InstructionsSHA256: sum("")},
		journal.SessionStarted{Executor: "fake", Command: []string{"/bin/fake"}, Workspace: "/ws", ProtocolVersion: 1,
			AgentName: "fake", AgentVersion: "1", SessionID: "s1", PromptSHA256: sum("p"), PromptBytes: 1},
		// hashes-only: no clear text of messages or of the answer
		journal.AgentMessage{TextSHA256: sum(secret), Bytes: int64(len(secret)), Chunks: 1},
		journal.ToolCall{ToolCallID: "c1", Kind: "other", Title: secret, Status: "pending", Paths: []string{secret}},
		journal.SessionFinished{Outcome: "completed", StopReason: "end_turn", TextSHA256: sum(secret), TextBytes: int64(len(secret))},
		journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{"no-private-keys"}, Errors: []string{}, TextSHA256: sum(secret), TextBytes: int64(len(secret))},
		journal.Terminated{Reason: runs.StatusPolicyDenied, DurationMS: 42, Error: "denied by policy no-private-keys"},
	}
	p.journalRun(t, "coder", id, recs, false)
	p.recordRun(t, "coder", id, runs.StatusPolicyDenied)
	evs, err := events(t, m, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Events {
		if strings.Contains(ev.Line, "BEGIN PRIVATE KEY") {
			t.Errorf("run_events serves, for a run whose answer the respond gate denied, a %s record holding the withheld text in clear", ev.Type)
		}
	}
}
