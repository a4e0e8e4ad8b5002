package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/journal"
	"symbi/internal/loopback"
	"symbi/internal/runs"
)

// gateDecode decodes a tool result's structuredContent.
func gateDecode(t *testing.T, what string, structured any, v any) {
	t.Helper()
	raw, _ := json.Marshal(structured)
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, raw)
	}
}

// gateAwait long-polls run_events as s until the run's status is want.
func gateAwait(t *testing.T, s *server, runID, want string) {
	t.Helper()
	var cursor int64
	for range 200 {
		res := s.call(t, "run_events", map[string]any{"run_id": runID, "after": cursor, "wait_ms": 30000})
		if res.IsError {
			t.Fatalf("run_events: %s", text(res))
		}
		var page runs.Events
		gateDecode(t, "run_events", res.StructuredContent, &page)
		if page.Status == want {
			return
		}
		if page.Done {
			t.Fatalf("run %s ended %s, want %s", runID, page.Status, want)
		}
		cursor = page.NextCursor
	}
	t.Fatalf("run %s never reached %s", runID, want)
}

// TestHTTPGateFourEyes: over HTTP, alice's answer held by a @gate("human") forbid cannot
// be approved by alice (the four-eyes default), can be by bob; invoke_agent answers
// approval_required; the approval is in the journal and the ledger with bob's name, and
// the project verifies.
func TestHTTPGateFourEyes(t *testing.T) {
	dir := newE2EProject(t)
	writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), `@gate("human") @id("customer-names")
forbid (principal, action == Action::"respond", resource) when { context.response like "*ACME*" };
`)
	model := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "About ACME: " + r.Prompt}
	}))
	if err := model.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	tokens := filepath.Join(t.TempDir(), "tokens")
	aliceTok, bobTok := httpTokenAdd(t, tokens, "alice"), httpTokenAdd(t, tokens, "bob")
	s := httpStart(t, dir, modelEnv(model), "--auth-tokens", tokens)
	alice, bob := httpConnect(t, s, aliceTok), httpConnect(t, s, bobTok)

	// invoke_agent: held, answered at once with approval_required and the reference.
	res := alice.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "the outage"})
	if !res.IsError || !strings.HasPrefix(text(res), "approval_required: ") || !strings.Contains(text(res), "customer-names") {
		t.Fatalf("invoke_agent of a held answer: %s", text(res))
	}
	var held struct {
		Audit struct {
			RunID     string `json:"run_id"`
			Path      string `json:"path"`
			PublicKey string `json:"public_key"`
		} `json:"audit"`
	}
	gateDecode(t, "approval_required", res.StructuredContent, &held)
	id := held.Audit.RunID
	gateAwait(t, alice, id, runs.StatusAwaitingApproval)

	// alice, the requester, sees neither the held text in her status nor its line in the
	// events; bob, who may approve, reads the waiting run and the held text.
	var mine runs.Status
	res = alice.call(t, "run_status", map[string]any{"run_id": id})
	gateDecode(t, "run_status", res.StructuredContent, &mine)
	if res.IsError || mine.Approval == nil || mine.Approval.Text != nil || mine.Text != nil {
		t.Fatalf("the requester's view of her held run: %s", text(res))
	}
	res = alice.call(t, "run_events", map[string]any{"run_id": id})
	if res.IsError || strings.Contains(text(res), "About ACME") || !strings.Contains(text(res), `"withheld"`) {
		t.Fatalf("the requester's events of her held run: %s", text(res))
	}
	var theirs runs.Status
	res = bob.call(t, "run_status", map[string]any{"run_id": id})
	gateDecode(t, "run_status", res.StructuredContent, &theirs)
	if res.IsError || theirs.Approval == nil || theirs.Approval.Text == nil || *theirs.Approval.Text != "About ACME: the outage" {
		t.Fatalf("the approver's view of the held run: %s", text(res))
	}
	res = bob.call(t, "list_runs", map[string]any{"status": "awaiting_approval"})
	if res.IsError || !strings.Contains(text(res), id) {
		t.Fatalf("the approver's list of waiting runs: %s", text(res))
	}

	// The requester may not approve its own run; bob may.
	res = alice.call(t, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "checked"})
	if !res.IsError || !strings.HasPrefix(text(res), "access_denied: ") || !strings.Contains(text(res), "may not approve a run it started") {
		t.Fatalf("alice approving her own run: %s", text(res))
	}
	res = bob.call(t, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "no customer data"})
	if res.IsError {
		t.Fatalf("bob approving: %s", text(res))
	}
	var st runs.Status
	gateDecode(t, "approve_run", res.StructuredContent, &st)
	if st.Status != runs.StatusCompleted || st.Text == nil || *st.Text != "About ACME: the outage" || st.Approval == nil ||
		st.Approval.Approver != "bob" || st.Approval.ApproverAuth != "token" || st.Caller != "alice" {
		t.Fatalf("after bob's approval: %+v %+v", st, st.Approval)
	}
	// alice reads her released answer.
	res = alice.call(t, "run_status", map[string]any{"run_id": id})
	gateDecode(t, "run_status", res.StructuredContent, &st)
	if res.IsError || st.Text == nil || !st.Released {
		t.Fatalf("alice's run_status: %s", text(res))
	}

	// A rejection by bob ends alice's next held run withheld.
	res = alice.call(t, "start_run", map[string]any{"agent": "helper", "prompt": "the plan"})
	var started struct {
		RunID string `json:"run_id"`
	}
	gateDecode(t, "start_run", res.StructuredContent, &started)
	gateAwait(t, alice, started.RunID, runs.StatusAwaitingApproval)
	res = bob.call(t, "approve_run", map[string]any{"run_id": started.RunID, "decision": "reject", "reason": "names a customer"})
	var rejected runs.Status
	gateDecode(t, "approve_run", res.StructuredContent, &rejected)
	if res.IsError || rejected.Status != runs.StatusPolicyDenied || rejected.Text != nil || !strings.Contains(rejected.Reason, "rejected by bob") {
		t.Fatalf("bob rejecting: %s", text(res))
	}

	pub := pubKey(t, held.Audit.PublicKey)
	if rep := journal.Verify(held.Audit.Path, pub, journal.VerifyOptions{RunID: id}); rep.ExitCode() != 0 {
		t.Fatalf("journal: %+v", rep)
	}
	b, _ := os.ReadFile(filepath.Join(dir, ".symbiont", "ledger.jsonl"))
	if strings.Count(string(b), `"type":"approval"`) != 2 || !strings.Contains(string(b), `"approver":"bob","approver_auth":"token","via":"approve_run"`) {
		t.Fatalf("ledger lacks the approvals:\n%s", b)
	}
	if code, out := httpAuditVerify(t, dir, held.Audit.PublicKey); code != 0 {
		t.Fatalf("audit verify --project: exit %d\n%s", code, out)
	}
}

// TestGateResumeAfterKill: a server killed with SIGKILL while a run waits at a gate; the
// next server reopens the journal (verified whole), resumes the wait — the run is
// awaiting_approval again, with no recovered ledger entry — and approve_run releases the
// text; the journal and the project verify complete. In hashes-only mode the text cannot
// be released later: the run is abandoned.
func TestGateResumeAfterKill(t *testing.T) {
	for _, mode := range []string{"full", "hashes"} {
		t.Run(mode, func(t *testing.T) {
			dir := newE2EProject(t)
			writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), `@gate("human") @id("customer-names")
forbid (principal, action == Action::"respond", resource) when { context.response like "*ACME*" };
`)
			model, _ := runsModel(t)
			env := append(modelEnv(model), "SYMBI_JOURNAL_TEXT="+mode)
			s := startSymbiPatient(t, dir, env)
			st := s.startRun(t, "tell ACME")
			gateAwait(t, s, st.RunID, runs.StatusAwaitingApproval)
			killAndReap(t, s)

			s = startSymbiPatient(t, dir, env)
			status := s.runStatus(t, st.RunID)
			if mode == "hashes" {
				if status.Status != runs.StatusAbandoned {
					t.Fatalf("hashes-only held run after a restart: %+v", status)
				}
				res := s.call(t, "approve_run", map[string]any{"run_id": st.RunID, "decision": "approve", "reason": "checked"})
				if !res.IsError || !strings.HasPrefix(text(res), "invalid_transition: ") {
					t.Fatalf("approving an abandoned run: %s", text(res))
				}
				return
			}
			if status.Status != runs.StatusAwaitingApproval || status.Approval == nil || status.Approval.Gate != "customer-names" {
				t.Fatalf("held run after a restart: %+v", status)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, ".symbiont", "ledger.jsonl")); strings.Contains(string(b), st.RunID) {
				t.Fatalf("the held run is in the ledger before it ended:\n%s", b)
			}
			var done runs.Status
			s.callInto(t, "approve_run", map[string]any{"run_id": st.RunID, "decision": "approve", "reason": "after the restart"}, &done)
			if done.Status != runs.StatusCompleted || done.Text == nil || *done.Text != "echo: tell ACME" {
				t.Fatalf("approved after a restart: %+v", done)
			}
			if rep := journal.Verify(st.Audit.Path, pubKey(t, st.Audit.PublicKey), journal.VerifyOptions{RunID: st.RunID}); rep.ExitCode() != 0 || rep.Records != 7 {
				t.Fatalf("journal: %+v", rep)
			}
			if code, out := httpAuditVerify(t, dir, st.Audit.PublicKey); code != 0 {
				t.Fatalf("audit verify --project: exit %d\n%s", code, out)
			}
		})
	}
}

// gatePermissionPolicy permits answers (the project's respond.cedar) and reads, and holds
// every command a delegated agent asks to run for a person.
const gatePermissionPolicy = `@id("tools-read")
permit (principal is Agent, action == Action::"use_tool", resource == Tool::"read");

@gate("human") @id("commands-review")
forbid (principal, action == Action::"use_tool", resource == Tool::"execute");
`

// gatePermissionAgent is a fake ACP agent that says something, asks permission to run
// `go test ./...` expecting outcome, and answers.
func gatePermissionAgent(name, outcome string) delAgent {
	return delAgent{name: name, script: map[string]any{"forbid_terminal": true, "steps": []any{
		map[string]any{"message": "Running the tests. "},
		map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "execute", "title": "go test ./...", "locations": []string{"$CWD"}}, "expect": outcome},
		map[string]any{"message": "Done."},
	}}}
}

// gateWaitHeld long-polls run_events until the run awaits approval and its events hold
// every type of want; it returns the events read so far.
func gateWaitHeld(t *testing.T, s *server, runID string, want ...string) []runs.Event {
	t.Helper()
	var all []runs.Event
	deadline := time.Now().Add(hangGuard)
	for cursor := int64(0); time.Now().Before(deadline); {
		var page runs.Events
		s.callInto(t, "run_events", map[string]any{"run_id": runID, "after": cursor, "wait_ms": 30000}, &page)
		all = append(all, page.Events...)
		cursor = page.NextCursor
		if page.Done {
			t.Fatalf("run %s ended %s before it awaited approval", runID, page.Status)
		}
		seen := map[string]bool{}
		for _, ev := range all {
			seen[ev.Type] = true
		}
		if page.Status == runs.StatusAwaitingApproval && !slices.ContainsFunc(want, func(w string) bool { return !seen[w] }) {
			return all
		}
	}
	t.Fatalf("run %s never awaited approval with events %v", runID, want)
	return nil
}

// gateWaitRequest long-polls run_events until the run awaits approval of the permission
// request id; it returns the run's status then.
func gateWaitRequest(t *testing.T, s *server, runID, id string) runs.Status {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for cursor := int64(0); time.Now().Before(deadline); {
		var page runs.Events
		s.callInto(t, "run_events", map[string]any{"run_id": runID, "after": cursor, "wait_ms": 30000}, &page)
		if page.Done {
			t.Fatalf("run %s ended %s before it awaited approval of %s", runID, page.Status, id)
		}
		cursor = page.NextCursor
		if page.Status == runs.StatusAwaitingApproval {
			if st := s.runStatus(t, runID); st.Status == runs.StatusAwaitingApproval && st.Approval != nil && st.Approval.RequestID == id {
				return st
			}
		}
	}
	t.Fatalf("run %s never awaited approval of %s", runID, id)
	return runs.Status{}
}

// gateIndex returns the index of the first record of type typ with the data member
// request_id id, or -1.
func gateIndex(recs []map[string]any, typ, id string) int {
	return slices.IndexFunc(recs, func(r map[string]any) bool {
		d, _ := r["data"].(map[string]any)
		return r["type"] == typ && d["request_id"] == id
	})
}

// gateData is the data of recs[i].
func gateData(recs []map[string]any, i int) map[string]any {
	d, _ := recs[i]["data"].(map[string]any)
	return d
}

// gateLedgerApprovals returns the data of the ledger's approval entries for runID.
func gateLedgerApprovals(t *testing.T, dir, runID string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range records(t, filepath.Join(dir, ".symbiont", "ledger.jsonl")) {
		if d, _ := r["data"].(map[string]any); r["type"] == "approval" && d["run_id"] == runID {
			out = append(out, d)
		}
	}
	return out
}

// TestGatePermission: a delegated agent's permission request held by a @gate("human")
// forbid, through the real binary over stdio (the one caller approves its own runs). The
// fake ACP agent asks to run `go test ./...`: the run awaits approval with the request's
// id and title; while it waits the agent's message is withheld from run_events;
// approve_run approve naming the request (without request_id it is invalid_request) lets
// the agent hear allow (its script's expectation), and the run completes; reject lets it
// hear reject_once — the run still completes, its answer allowed; concurrent approvals
// of one held request decide it once, and none is kept back to decide the agent's next
// held request (which waits for its own decision); cancel_run while the request is held
// ends the run cancelled and the agent's process group. Each journal holds
// approval_requested, approval_decided and permission_decided in that order and verifies
// complete; each decision is in the ledger.
func TestGatePermission(t *testing.T) {
	t.Parallel() // its own project, workspace, fake agent binary and server
	e := delNewEnv(t)
	writeFile(t, filepath.Join(e.dir, "policies", "tools.cedar"), gatePermissionPolicy)
	// twice asks twice, the second request two seconds after it heard the first's answer.
	twice := delAgent{name: "twice", script: map[string]any{"forbid_terminal": true, "steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "execute", "title": "go test ./..."}, "expect": "allow"},
		map[string]any{"sleep": "2s"},
		map[string]any{"permission": map[string]any{"tool_call_id": "t2", "kind": "execute", "title": "rm -rf build"}, "expect": "reject"},
		map[string]any{"message": "Done."},
	}}}
	e.serve(gatePermissionAgent("approved", "allow"), gatePermissionAgent("rejected", "reject"), gatePermissionAgent("cancelled", "cancelled"), twice)

	for _, c := range []struct {
		name, decision, heard, permission string
	}{
		{"approved", "approve", "allow_once", "allow"},
		{"rejected", "reject", "reject_once", "deny"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := e.start(t, c.name, "run the tests")
			evs := gateWaitHeld(t, e.s, run.RunID, journal.TypeApprovalRequested, journal.TypeAgentMessage)
			// The agent's message is output: withheld while the run waits.
			for _, ev := range evs {
				if ev.Type == journal.TypeAgentMessage && (ev.Line != "" || ev.LineSHA256 == "" || ev.Withheld == "") {
					t.Fatalf("agent_message served while the run awaits approval: %+v", ev)
				}
			}
			st := e.s.runStatus(t, run.RunID)
			if a := st.Approval; st.Status != runs.StatusAwaitingApproval || a == nil || a.Gate != "commands-review" || a.RequestID != "perm-1" ||
				a.Title != "go test ./..." || a.Deadline == "" || a.Decision != "" || a.Text != nil || st.Text != nil || st.Released {
				t.Fatalf("run_status of the held permission: %+v %+v", st, st.Approval)
			}
			var waiting struct {
				Runs []runs.Status `json:"runs"`
			}
			e.s.callInto(t, "list_runs", map[string]any{"status": runs.StatusAwaitingApproval}, &waiting)
			if len(waiting.Runs) != 1 || waiting.Runs[0].RunID != run.RunID {
				t.Fatalf("list_runs awaiting_approval: %+v", waiting.Runs)
			}

			// A decision of a permission request names it: without request_id it is refused.
			if res := e.s.call(t, "approve_run", map[string]any{"run_id": run.RunID, "decision": c.decision, "reason": "checked"}); !res.IsError ||
				!strings.HasPrefix(text(res), "invalid_request: ") || !strings.Contains(text(res), `request_id "perm-1"`) {
				t.Fatalf("approve_run without request_id: %s", text(res))
			}
			var decided runs.Status
			e.s.callInto(t, "approve_run", map[string]any{"run_id": run.RunID, "request_id": "perm-1", "decision": c.decision, "reason": c.name + " by the test"}, &decided)
			// approve_run of a permission answers once the decision is durable: the run
			// goes on (running), unless it has ended already.
			if a := decided.Approval; a == nil || a.Decision != c.decision || a.Approver != "stdio" || a.ApproverAuth != "stdio" || a.Via != "approve_run" ||
				a.RequestID != "perm-1" || (decided.Status != runs.StatusCompleted && decided.Status != runs.StatusRunning) {
				t.Fatalf("approve_run %s: %+v %+v", c.decision, decided, decided.Approval)
			}
			st, recs := e.finish(t, run)
			// Either way the agent goes on and answers; its answer is allowed.
			if st.Status != runs.StatusCompleted || !st.Released || st.Text == nil || *st.Text != "Running the tests. Done." ||
				st.Approval == nil || st.Approval.Decision != c.decision {
				t.Fatalf("run_status after %s: %+v %+v", c.decision, st, st.Approval)
			}
			// Read again now that the run released its text: the message is served whole.
			for _, ev := range e.s.readRunEvents(t, run.RunID, 1000, pubKey(t, run.Audit.PublicKey)) {
				if ev.Line == "" || ev.Withheld != "" {
					t.Fatalf("event of a completed run withheld: %+v", ev)
				}
			}

			req, dec, perm := gateIndex(recs, journal.TypeApprovalRequested, "perm-1"), gateIndex(recs, journal.TypeApprovalDecided, "perm-1"),
				gateIndex(recs, journal.TypePermissionDecided, "perm-1")
			if req < 0 || dec < 0 || perm < 0 || !(req < dec && dec < perm) {
				t.Fatalf("approval_requested at %d, approval_decided at %d, permission_decided at %d: %v", req, dec, perm, types(recs))
			}
			// The wait is what is left of the run's deadline (30 minutes without a with
			// timeout), shorter than --approval-timeout's 24 h: timeout_ms says so.
			if d := gateData(recs, req); d["gate"] != "commands-review" || d["kind"] != "execute" || d["title"] != "go test ./..." {
				t.Fatalf("approval_requested %v", d)
			} else if ms, _ := d["timeout_ms"].(float64); ms > float64(30*time.Minute/time.Millisecond) || ms < float64(20*time.Minute/time.Millisecond) {
				t.Fatalf("approval_requested timeout_ms %v; want what is left of the run's 30-minute deadline", d["timeout_ms"])
			}
			if d := gateData(recs, dec); d["decision"] != c.decision || d["approver"] != "stdio" || d["approver_auth"] != "stdio" || d["via"] != "approve_run" || d["reason"] != c.name+" by the test" {
				t.Fatalf("approval_decided %v", d)
			}
			pd := gateData(recs, perm)
			ids, _ := pd["policy_ids"].([]any)
			errs, _ := pd["errors"].([]any)
			if pd["decision"] != c.permission || pd["kind"] != "execute" || pd["tool_call_id"] != "t1" || len(ids) != 1 || ids[0] != "commands-review" {
				t.Fatalf("permission_decided %v", pd)
			}
			switch c.decision {
			case "approve":
				if pd["option_id"] != "allow" || len(errs) != 0 {
					t.Fatalf("permission_decided %v", pd)
				}
			case "reject":
				if pd["option_id"] != "reject" || len(errs) != 1 || !strings.Contains(errs[0].(string), "held at gate commands-review") ||
					!strings.Contains(errs[0].(string), "rejected by stdio: rejected by the test") {
					t.Fatalf("permission_decided %v", pd)
				}
			}
			if n := len(delData(recs, journal.TypeApprovalRequested)) + len(delData(recs, journal.TypeApprovalDecided)) + len(delData(recs, journal.TypePermissionDecided)); n != 3 {
				t.Fatalf("records %v", types(recs))
			}
			// What the agent heard, by its own record (its script's expectation passed: the
			// run would otherwise have failed).
			heard := delNamed(delEvents(t, e.record(c.name)), "permission")
			if len(heard) != 1 || heard[0]["outcome"] != c.heard || heard[0]["tool_call_id"] != "t1" {
				t.Fatalf("the agent heard %v, want %s", heard, c.heard)
			}
			if la := gateLedgerApprovals(t, e.dir, run.RunID); len(la) != 1 || la[0]["gate"] != "commands-review" || la[0]["decision"] != c.decision ||
				la[0]["approver"] != "stdio" || la[0]["approver_auth"] != "stdio" || la[0]["via"] != "approve_run" || la[0]["reason"] != c.name+" by the test" {
				t.Fatalf("ledger approvals of the run: %v", la)
			}
			// Decided and ended: nothing to decide any more.
			res := e.s.call(t, "approve_run", map[string]any{"run_id": run.RunID, "decision": "approve", "reason": "checked"})
			if !res.IsError || !strings.HasPrefix(text(res), "invalid_transition: ") {
				t.Fatalf("approving a run that has ended: %s", text(res))
			}
			delGone(t, e.record(c.name))
		})
	}

	// Concurrent approvals of one held request (two approvers at once, a double click):
	// one decides it; every other is invalid_transition at once — none is kept back and
	// taken by the agent's next held request, which no approver has seen. That one waits
	// for its own decision.
	t.Run("concurrent", func(t *testing.T) {
		run := e.start(t, "twice", "run the tests")
		gateWaitRequest(t, e.s, run.RunID, "perm-1")
		const n = 8
		results := make(chan *mcp.CallToolResult, n)
		for i := range n {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				res, err := e.s.session.CallTool(ctx, &mcp.CallToolParams{Name: "approve_run",
					Arguments: map[string]any{"run_id": run.RunID, "request_id": "perm-1", "decision": "approve", "reason": fmt.Sprintf("approver %d", i)}})
				if err != nil {
					res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "CallTool: " + err.Error()}}}
				}
				results <- res
			}()
		}
		var decided []runs.Status
		for range n {
			res := <-results
			if !res.IsError {
				var st runs.Status
				gateDecode(t, "approve_run", res.StructuredContent, &st)
				decided = append(decided, st)
			} else if !strings.HasPrefix(text(res), "invalid_transition: ") {
				t.Fatalf("a concurrent approve_run: %s", text(res))
			}
		}
		if len(decided) != 1 || decided[0].Approval == nil || decided[0].Approval.RequestID != "perm-1" || decided[0].Approval.Decision != "approve" {
			t.Fatalf("%d of %d concurrent approvals decided: %+v", len(decided), n, decided)
		}
		// approve_run of a permission answers once the decision is durable: the run goes on.
		if decided[0].Status != runs.StatusRunning && decided[0].Status != runs.StatusAwaitingApproval {
			t.Fatalf("approve_run of perm-1: %+v", decided[0])
		}
		st := gateWaitRequest(t, e.s, run.RunID, "perm-2")
		if st.Approval.Title != "rm -rf build" || st.Approval.Decision != "" {
			t.Fatalf("the second held request: %+v", st.Approval)
		}
		if got := delData(records(t, run.Audit.Path), journal.TypeApprovalDecided); len(got) != 1 || got[0]["request_id"] != "perm-1" {
			t.Fatalf("approval_decided records while perm-2 waits: %v", got)
		}
		e.s.callInto(t, "approve_run", map[string]any{"run_id": run.RunID, "request_id": "perm-2", "decision": "reject", "reason": "not that"}, &st)
		st, recs := e.finish(t, run)
		if st.Status != runs.StatusCompleted || st.Text == nil || *st.Text != "Done." {
			t.Fatalf("run_status %+v", st)
		}
		var got []string
		for _, r := range recs {
			if d, _ := r["data"].(map[string]any); r["type"] == journal.TypeApprovalDecided || r["type"] == journal.TypePermissionDecided {
				got = append(got, fmt.Sprint(r["type"], ":", d["request_id"], ":", d["decision"]))
			}
		}
		if strings.Join(got, ",") != "approval_decided:perm-1:approve,permission_decided:perm-1:allow,approval_decided:perm-2:reject,permission_decided:perm-2:deny" {
			t.Fatalf("decisions %v", got)
		}
		var heard []string
		for _, ev := range delNamed(delEvents(t, e.record("twice")), "permission") {
			heard = append(heard, fmt.Sprint(ev["tool_call_id"], ":", ev["outcome"]))
		}
		if strings.Join(heard, ",") != "t1:allow_once,t2:reject_once" {
			t.Fatalf("the agent heard %v", heard)
		}
		if la := gateLedgerApprovals(t, e.dir, run.RunID); len(la) != 2 {
			t.Fatalf("ledger approvals %v", la)
		}
		delGone(t, e.record("twice"))
	})

	t.Run("cancelled", func(t *testing.T) {
		run := e.start(t, "cancelled", "run the tests")
		gateWaitHeld(t, e.s, run.RunID, journal.TypeApprovalRequested)
		delCancel(t, e.s, run.RunID)
		st, recs := e.finish(t, run)
		if st.Status != runs.StatusCancelled || st.Released || st.Text != nil || !strings.Contains(st.Reason, "cancel_run") ||
			st.Approval == nil || st.Approval.RequestID != "perm-1" || st.Approval.Decision != "" {
			t.Fatalf("run_status %+v %+v", st, st.Approval)
		}
		// Held, never decided, never answered as decided: the agent heard cancelled.
		if gateIndex(recs, journal.TypeApprovalRequested, "perm-1") < 0 || len(delData(recs, journal.TypeApprovalDecided)) != 0 ||
			len(delData(recs, journal.TypePermissionDecided)) != 0 {
			t.Fatalf("records %v", types(recs))
		}
		fins, term := delData(recs, journal.TypeSessionFinished), delData(recs, journal.TypeTerminated)
		if len(fins) != 1 || fins[0]["outcome"] != "cancelled" || len(term) != 1 || term[0]["reason"] != "cancelled" || term[0]["released"] != false {
			t.Fatalf("session_finished %v, terminated %v", fins, term)
		}
		evs := delEvents(t, e.record("cancelled"))
		if heard := delNamed(evs, "permission"); len(heard) != 1 || heard[0]["outcome"] != "cancelled" {
			t.Fatalf("the agent heard %v, want cancelled", heard)
		}
		if len(gateLedgerApprovals(t, e.dir, run.RunID)) != 0 {
			t.Fatal("the ledger has an approval for a run no one decided")
		}
		res := e.s.call(t, "approve_run", map[string]any{"run_id": run.RunID, "decision": "approve", "reason": "checked"})
		if !res.IsError || !strings.HasPrefix(text(res), "invalid_transition: ") {
			t.Fatalf("approving a cancelled run: %s", text(res))
		}
		delGone(t, e.record("cancelled"))
	})
}
