package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	res = alice.call(t, "approve_run", map[string]any{"run_id": id, "decision": "approve"})
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
				res := s.call(t, "approve_run", map[string]any{"run_id": st.RunID, "decision": "approve"})
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
