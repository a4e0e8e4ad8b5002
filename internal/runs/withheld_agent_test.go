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
		delegatedStarted(),
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
	for _, typ := range inClear(t, m, id, "BEGIN PRIVATE KEY") {
		t.Errorf("run_events serves, for a run whose answer the respond gate denied, a %s record holding the withheld text in clear", typ)
	}
}

// TestHeldPermissionTitleWithheld: the title of a delegated agent's held permission
// request is text the agent chose. run_events withholds its approval_requested line until
// the run released its text; run_status and list_runs hold back approval.title alike —
// here for a run whose answer the gate denied, its wait long over.
func TestHeldPermissionTitleWithheld(t *testing.T) {
	const secret = "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
	p := newTestProject(t, nil)
	m := p.open(t)
	id := newRunID(t)
	answer := "the denied answer " + secret
	recs := []journal.Record{
		delegatedStarted(),
		journal.SessionStarted{Executor: "fake", Command: []string{"/bin/fake"}, Workspace: "/ws", ProtocolVersion: 1,
			SessionID: "s1", PromptSHA256: sum("p"), PromptBytes: 1},
		journal.ApprovalRequested{Gate: "commands-review", RequestID: "perm-1", TimeoutMS: 60000, Kind: "execute", Title: secret},
		journal.ApprovalDecided{RequestID: "perm-1", Decision: "reject", Approver: "bob", ApproverAuth: "token", Reason: "no", Via: "approve_run"},
		journal.PermissionDecided{RequestID: "perm-1", Kind: "execute", Title: secret, Paths: []string{}, Outside: []string{}, Decision: "deny",
			PolicyIDs: []string{"commands-review"}, Errors: []string{}},
		journal.SessionFinished{Outcome: "completed", StopReason: "end_turn", TextSHA256: sum(answer), TextBytes: int64(len(answer)), Text: answer},
		journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{"no-private-keys"}, Errors: []string{},
			TextSHA256: sum(answer), TextBytes: int64(len(answer))},
		journal.Terminated{Reason: runs.StatusPolicyDenied, DurationMS: 42, Error: "denied by policy no-private-keys"},
	}
	p.journalRun(t, "coder", id, recs, false)
	p.recordRun(t, "coder", id, runs.StatusPolicyDenied)

	// run_events withholds every line holding the agent's words.
	if typs := inClear(t, m, id, "BEGIN PRIVATE KEY"); len(typs) > 0 {
		t.Fatalf("precondition: run_events serves %v records in clear", typs)
	}
	// run_status, as the run's own caller (who may read it), must not serve it either.
	st, err := m.StatusFor(runs.Caller{ID: "stdio", Auth: "stdio"}, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runs.StatusPolicyDenied || st.Released {
		t.Fatalf("status %s released %v; want policy_denied, not released", st.Status, st.Released)
	}
	if st.Approval != nil && strings.Contains(st.Approval.Title, "BEGIN PRIVATE KEY") {
		t.Errorf("run_status of a run that ended withheld (policy_denied) serves its held permission request's title in clear (approval.title %q), the text run_events withholds", st.Approval.Title)
	}
	page, err := m.List(runs.Filter{Reader: &runs.Caller{ID: "stdio", Auth: "stdio"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Runs {
		if r.Approval != nil && strings.Contains(r.Approval.Title, "BEGIN PRIVATE KEY") {
			t.Errorf("list_runs serves the withheld permission title of run %s in clear", r.RunID)
		}
	}
}

// inClear returns the types of the run's events whose served line holds marker.
func inClear(t *testing.T, m *runs.Manager, id, marker string) []string {
	t.Helper()
	evs, err := events(t, m, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var typs []string
	for _, ev := range evs.Events {
		if strings.Contains(ev.Line, marker) {
			typs = append(typs, ev.Type)
		}
	}
	return typs
}

// TestDelegatedStopReasonWithheld: a session_finished whose stop_reason is not one of
// ACP's is the agent's words (internal/acp journals such a reason as "other"): withheld
// from run_events while the run has released nothing, though its answer is empty and its
// digest that of no text.
func TestDelegatedStopReasonWithheld(t *testing.T) {
	const secret = "BEGIN-PRIVATE-KEY-MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
	p := newTestProject(t, nil)
	m := p.open(t)
	id := newRunID(t)
	recs := []journal.Record{
		delegatedStarted(),
		journal.SessionStarted{Executor: "fake", Command: []string{"/bin/fake"}, Workspace: "/ws", ProtocolVersion: 1,
			SessionID: "s1", PromptSHA256: sum("p"), PromptBytes: 1},
		// The agent sent no message chunk: its final answer is "", its words are in stopReason.
		journal.SessionFinished{Outcome: "completed", StopReason: secret, TextSHA256: sum(""), TextBytes: 0},
		journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{"coder-needs-output"}, Errors: []string{}, TextSHA256: sum(""), TextBytes: 0},
		journal.Terminated{Reason: runs.StatusPolicyDenied, DurationMS: 42, Error: "denied by policy coder-needs-output"},
	}
	p.journalRun(t, "coder", id, recs, false)
	p.recordRun(t, "coder", id, runs.StatusPolicyDenied)
	for _, typ := range inClear(t, m, id, secret) {
		t.Errorf("run_events serves, for a run that released nothing (policy_denied), a %s record holding text the delegated agent chose (its stop_reason) in clear", typ)
	}
}

// delegatedStarted is the started record of a delegated run of agent coder.
func delegatedStarted() journal.Started {
	return journal.Started{Agent: "coder", File: "agents/coder.symbi", SourceSHA256: sum("source"), DeclarationSHA256: sum("decl"),
		Mode: "delegated", Surface: "mcp-server", Caller: "stdio", ServerVersion: "test", DeadlineMS: 120000,
		Provider: "acp", Model: "fake", PolicyMode: "cedar", PromptSHA256: sum("p"), PromptBytes: 1, InstructionsSHA256: sum("")}
}
