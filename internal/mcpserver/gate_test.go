package mcpserver_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/runs"
)

// gatePolicies permit every answer, and hold for a person any answer naming ACME.
var gatePolicies = map[string]string{
	"policies/respond.cedar": `@id("respond") permit (principal, action == Action::"respond", resource);
@gate("human") @id("customer-names") forbid (principal, action == Action::"respond", resource) when { context.response like "*ACME*" };
@id("no-secrets") forbid (principal, action == Action::"respond", resource) when { context.response like "*SECRET*" };
`,
}

// quickAgent answers within a second: a wait at a gate is max(--approval-timeout, this).
const quickAgent = "agent quick {\n  capabilities = [\"answer\"]\n  with timeout = 1.seconds {}\n}\n"

// slowAgent's with timeout, five minutes, is longer than a provider call may take (120 s):
// a wait at a gate is still max(--approval-timeout, five minutes).
const slowAgent = "agent slow {\n  capabilities = [\"answer\"]\n  with timeout = 5.minutes {}\n}\n"

func pubOf(t *testing.T, hexKey string) ed25519.PublicKey {
	t.Helper()
	b, err := hex.DecodeString(hexKey)
	if err != nil || len(b) != ed25519.PublicKeySize {
		t.Fatalf("public key %q", hexKey)
	}
	return b
}

// awaitStatus reads run_events with a long poll until the run's status is want.
func awaitStatus(t *testing.T, call func(name string, args map[string]any, out any), runID, want string) runs.Status {
	t.Helper()
	var cursor int64
	for range 200 {
		var page runs.Events
		call("run_events", map[string]any{"run_id": runID, "after": cursor, "wait_ms": 30000}, &page)
		if page.Status == want {
			var st runs.Status
			call("run_status", map[string]any{"run_id": runID}, &st)
			return st
		}
		if page.Done {
			t.Fatalf("run %s ended %s, want %s", runID, page.Status, want)
		}
		cursor = page.NextCursor
	}
	t.Fatalf("run %s never reached %s", runID, want)
	return runs.Status{}
}

// awaitEvent reads run_events with a long poll until the run has an event of type typ.
func awaitEvent(t *testing.T, call func(name string, args map[string]any, out any), runID, typ string) {
	t.Helper()
	var cursor int64
	for range 200 {
		var page runs.Events
		call("run_events", map[string]any{"run_id": runID, "after": cursor, "wait_ms": 30000}, &page)
		for _, ev := range page.Events {
			if ev.Type == typ {
				return
			}
		}
		if page.Done {
			t.Fatalf("run %s ended %s without %s", runID, page.Status, typ)
		}
		cursor = page.NextCursor
	}
	t.Fatalf("run %s never recorded %s", runID, typ)
}

func journalTypes(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.Index(line, `"type":"`)
		types = append(types, strings.SplitN(line[i+8:], `"`, 2)[0])
	}
	return types
}

// TestGateReadForbidden: an approver may read a run awaiting its decision although no
// read_run policy permits it — but not past a read_run forbid that matches it; approving
// it blind, it is not handed the released text in approve_run's answer either.
func TestGateReadForbidden(t *testing.T) {
	model := newGatedModel(t)
	files := map[string]string{"policies/access/read.cedar": `@id("no-reading") forbid (principal == Caller::"stdio", action == Action::"read_run", resource);
@id("approve") permit (principal, action == Action::"approve_run", resource);
`}
	for k, v := range gatePolicies {
		files[k] = v
	}
	cs := serve(t, testProject(t, files), serveOpts{env: model.env()})
	res := call(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "write to ACME"})
	wantToolError(t, res, "approval_required")
	var failed struct {
		Audit struct {
			RunID string `json:"run_id"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(structuredJSON(t, res), &failed); err != nil {
		t.Fatal(err)
	}
	id := failed.Audit.RunID
	wantToolError(t, call(t, cs, "run_status", map[string]any{"run_id": id}), "access_denied", "no-reading")
	res = call(t, cs, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "checked"})
	if res.IsError {
		t.Fatalf("approve_run: %s", textOf(t, res))
	}
	if body := string(structuredJSON(t, res)); strings.Contains(body, "echo: write to ACME") {
		t.Fatalf("approve_run handed the released text to a caller a read_run forbid denies: %s", body)
	}
	if text := textOf(t, res); strings.Contains(text, "echo: write to ACME") {
		t.Fatalf("approve_run's text content carries the released text: %s", text)
	}
	wantToolError(t, call(t, cs, "run_status", map[string]any{"run_id": id}), "access_denied", "no-reading")
}

// TestGateApprove: an answer a @gate("human") forbid holds waits (awaiting_approval,
// approval_requested durable); invoke_agent answers approval_required at once with the
// run's reference; approve_run releases it; the journal verifies with the gate's records.
func TestGateApprove(t *testing.T) {
	model := newGatedModel(t)
	dir := testProject(t, gatePolicies)
	cs := serve(t, dir, serveOpts{env: model.env()})
	ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, cs, name, args, out) }

	res := call(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "write to ACME"})
	text := wantToolError(t, res, "approval_required", "customer-names", "approve_run")
	var failed struct {
		Audit struct {
			RunID     string `json:"run_id"`
			Path      string `json:"path"`
			PublicKey string `json:"public_key"`
			Records   int    `json:"records"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(structuredJSON(t, res), &failed); err != nil {
		t.Fatal(err)
	}
	id := failed.Audit.RunID
	if id == "" || failed.Audit.Records != 5 || !strings.Contains(text, id) {
		t.Fatalf("approval_required without the run's reference: %s %+v", text, failed.Audit)
	}
	st := awaitStatus(t, ok, id, runs.StatusAwaitingApproval)
	if st.Approval == nil || st.Approval.Gate != "customer-names" || st.Approval.Deadline == "" || st.Approval.Decision != "" || st.Text != nil || st.Released {
		t.Fatalf("awaiting status: %+v %+v", st, st.Approval)
	}
	// Over stdio the one caller may approve: it sees the held text, to decide on it.
	if st.Approval.Text == nil || *st.Approval.Text != "echo: write to ACME" {
		t.Fatalf("the approver does not see the held text: %+v", st.Approval)
	}
	// The events serve no line with the held text before its release, nor its digest: the
	// lines' hashes only.
	var page runs.Events
	ok("run_events", map[string]any{"run_id": id}, &page)
	carries := map[string]bool{"inference_finished": true, "policy_evaluated": true, "approval_requested": true}
	for _, ev := range page.Events {
		if strings.Contains(ev.Line, "echo: write to ACME") || carries[ev.Type] != (ev.Withheld != "") {
			t.Fatalf("held text or its digest served in the events: %+v", ev)
		}
	}
	// A resolution is for finished runs; a cancel would be allowed, but not wanted here.
	wantToolError(t, call(t, cs, "resolve_run", map[string]any{"run_id": id, "resolution": "accepted"}), "invalid_transition", "awaiting_approval")
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": id, "decision": "maybe", "reason": "checked"}), "invalid_request")

	// A decision naming a permission request does not decide the held answer.
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": id, "request_id": "perm-1", "decision": "approve", "reason": "checked"}), "invalid_transition", "request \"perm-1\" is not the one waiting")
	var done runs.Status
	ok("approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "no customer data"}, &done)
	if done.Status != runs.StatusCompleted || !done.Released || done.Text == nil || *done.Text != "echo: write to ACME" ||
		done.Approval == nil || done.Approval.Decision != "approve" || done.Approval.Approver != "stdio" || done.Approval.Via != "approve_run" || done.Approval.Reason != "no customer data" {
		t.Fatalf("after approve: %+v %+v", done, done.Approval)
	}
	if got := strings.Join(journalTypes(t, failed.Audit.Path), ","); got != "started,inference_requested,inference_finished,policy_evaluated,approval_requested,approval_decided,terminated" {
		t.Fatalf("journal %s", got)
	}
	if rep := journal.Verify(failed.Audit.Path, pubOf(t, failed.Audit.PublicKey), journal.VerifyOptions{RunID: id}); rep.ExitCode() != 0 {
		t.Fatalf("journal: %+v", rep)
	}
	ledgerText, _ := os.ReadFile(dir + "/.symbiont/ledger.jsonl")
	if !strings.Contains(string(ledgerText), `"type":"approval"`) {
		t.Fatalf("no approval entry in the ledger")
	}
	// Decided: a second decision is refused.
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": id, "decision": "reject", "reason": "checked"}), "invalid_transition", "not awaiting approval")
	// A run never held: invalid_transition too.
	var plain startContent
	ok("start_run", map[string]any{"agent": "helper", "prompt": "plain"}, &plain)
	awaitStatus(t, ok, plain.RunID, runs.StatusCompleted)
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": plain.RunID, "decision": "approve", "reason": "checked"}), "invalid_transition", "completed")
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": "01a2300f-bb1b-789d-ba46-000000000000", "decision": "approve", "reason": "checked"}), "run_not_found")
}

// TestGateReject: a rejection (naming the held answer) ends the run withheld,
// policy_denied naming the gate; an ungated forbid beside the gate denies outright.
func TestGateReject(t *testing.T) {
	model := newGatedModel(t)
	dir := testProject(t, gatePolicies)
	cs := serve(t, dir, serveOpts{env: model.env()})
	ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, cs, name, args, out) }

	var st startContent
	ok("start_run", map[string]any{"agent": "helper", "prompt": "ACME plans"}, &st)
	awaitStatus(t, ok, st.RunID, runs.StatusAwaitingApproval)
	var done runs.Status
	// A decision may name the held answer ("answer"); a model run's may also leave it out.
	ok("approve_run", map[string]any{"run_id": st.RunID, "request_id": "answer", "decision": "reject", "reason": "names a customer"}, &done)
	if done.Status != runs.StatusPolicyDenied || done.Released || done.Text != nil || !strings.Contains(done.Reason, "customer-names") || !strings.Contains(done.Reason, "names a customer") {
		t.Fatalf("after reject: %+v", done)
	}
	recs := journalTypes(t, st.Audit.Path)
	if recs[len(recs)-2] != "approval_decided" {
		t.Fatalf("journal %v", recs)
	}
	// Rejected: the text is never served, not even by the events.
	var page runs.Events
	ok("run_events", map[string]any{"run_id": st.RunID}, &page)
	for _, ev := range page.Events {
		if strings.Contains(ev.Line, "echo: ACME plans") {
			t.Fatalf("rejected text served in the events: %+v", ev)
		}
	}
	b, _ := os.ReadFile(st.Audit.Path)
	if !strings.Contains(string(b), `"reason":"policy_denied"`) || !strings.Contains(string(b), `"gate":"customer-names"`) {
		t.Fatalf("terminated lacks the gate:\n%s", b)
	}
	// ACME and SECRET: the ungated forbid decides, no wait.
	res := call(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "ACME SECRET"})
	wantToolError(t, res, "policy_denied", "no-secrets")
}

// TestGateTimeoutAndCancel: a wait that runs out ends with timeout (naming the gate); a
// held run can be cancelled.
func TestGateTimeoutAndCancel(t *testing.T) {
	model := newGatedModel(t)
	extra := map[string]string{"agents/quick.symbi": quickAgent, "agents/slow.symbi": slowAgent}
	for k, v := range gatePolicies {
		extra[k] = v
	}
	dir := testProject(t, extra)
	// --approval-timeout is shorter than the quick agent's own deadline (1 s): the wait
	// is the agent's.
	cs := serve(t, dir, serveOpts{env: model.env(), approvalTimeout: time.Millisecond})
	ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, cs, name, args, out) }
	var held startContent
	ok("start_run", map[string]any{"agent": "quick", "prompt": "ACME timing"}, &held)
	awaitStatus(t, ok, held.RunID, runs.StatusTimeout)
	b, _ := os.ReadFile(held.Audit.Path)
	if !strings.Contains(string(b), `"timeout_ms":1000`) || !strings.Contains(string(b), `"reason":"timeout"`) || !strings.Contains(string(b), `"gate":"customer-names"`) {
		t.Fatalf("timed-out gate:\n%s", b)
	}
	if rep := journal.Verify(held.Audit.Path, pubOf(t, held.Audit.PublicKey), journal.VerifyOptions{RunID: held.RunID}); rep.ExitCode() != 0 {
		t.Fatalf("journal: %+v", rep)
	}

	// The slow agent's wait, five minutes, is longer than --approval-timeout: it waits
	// until cancelled.
	var st startContent
	ok("start_run", map[string]any{"agent": "slow", "prompt": "ACME again"}, &st)
	awaitStatus(t, ok, st.RunID, runs.StatusAwaitingApproval)
	var c cancelContent
	ok("cancel_run", map[string]any{"run_id": st.RunID}, &c)
	if c.Status.Status != runs.StatusCancelled || c.Status.Approval == nil || c.Status.Approval.Decision != "" {
		t.Fatalf("cancel while held: %+v", c.Status)
	}
	if rep := journal.Verify(st.Audit.Path, pubOf(t, st.Audit.PublicKey), journal.VerifyOptions{RunID: st.RunID}); rep.ExitCode() != 0 {
		t.Fatalf("journal: %+v", rep)
	}
}

// TestGateWaitBound: a wait at a gate is the agent's `with timeout` or, when longer,
// --approval-timeout — never the provider call's deadline (at most 120 s), which an agent
// whose with timeout is longer than that would otherwise get.
func TestGateWaitBound(t *testing.T) {
	extra := map[string]string{"agents/slow.symbi": slowAgent, "agents/quick.symbi": quickAgent}
	for k, v := range gatePolicies {
		extra[k] = v
	}
	tests := []struct {
		name            string
		agent           string
		approvalTimeout time.Duration
		wantMS          int64
	}{
		{"with timeout longer than a provider call", "slow", time.Second, 300000},
		{"approval timeout longer than with timeout", "slow", time.Hour, 3600000},
		{"with timeout shorter than a provider call", "quick", time.Millisecond, 1000},
		{"no with timeout", "helper", time.Millisecond, 1},
	}
	model := newGatedModel(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := serve(t, testProject(t, extra), serveOpts{env: model.env(), approvalTimeout: tt.approvalTimeout})
			ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, cs, name, args, out) }
			var held startContent
			ok("start_run", map[string]any{"agent": tt.agent, "prompt": "ACME"}, &held)
			awaitEvent(t, ok, held.RunID, journal.TypeApprovalRequested)
			b, _ := os.ReadFile(held.Audit.Path)
			if !regexp.MustCompile(fmt.Sprintf(`"timeout_ms":%d\b`, tt.wantMS)).Match(b) {
				t.Fatalf("approval_requested does not wait %d ms:\n%s", tt.wantMS, b)
			}
			var c cancelContent // the run may have timed out already: cancel_run is idempotent
			ok("cancel_run", map[string]any{"run_id": held.RunID}, &c)
		})
	}
}

// TestApproveRunArguments: approve_run's arguments are checked before the run's state.
func TestApproveRunArguments(t *testing.T) {
	model := newGatedModel(t)
	cs := serve(t, testProject(t, gatePolicies), serveOpts{env: model.env()})
	var st startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "plain"}, &st)
	ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, cs, name, args, out) }
	awaitStatus(t, ok, st.RunID, runs.StatusCompleted)
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": st.RunID, "decision": "maybe", "reason": "checked"}), "invalid_request", "approve or reject")
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": st.RunID, "decision": "approve", "reason": strings.Repeat("x", 4097)}), "limit_exceeded", "4 KiB")
	wantToolError(t, call(t, cs, "approve_run", map[string]any{"run_id": st.RunID, "decision": "approve", "reason": "checked"}), "invalid_transition")
}
