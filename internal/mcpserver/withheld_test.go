package mcpserver_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/loopback"
	"symbi/internal/mcpserver"
	"symbi/internal/runs"
)

// secretModel is a loopback model whose every answer is secret: a four-digit PIN the
// caller does not know.
func secretModel(t *testing.T, answer string) map[string]string {
	t.Helper()
	m := loopback.New(loopback.WithResponder(func(loopback.Request) loopback.Reply { return loopback.Reply{Text: answer} }))
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return map[string]string{"OPENAI_BASE_URL": m.URL(), "CHAT_MODEL": "loopback-test"}
}

// servedDigests returns every text_sha256 the served (not withheld) events of a run
// carry, with its text_bytes.
func servedDigests(t *testing.T, evs []runs.Event) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, ev := range evs {
		if ev.Line == "" {
			continue
		}
		var env struct {
			Payload struct {
				Type string `json:"type"`
				Data struct {
					TextSHA256 string `json:"text_sha256"`
					TextBytes  int    `json:"text_bytes"`
				} `json:"data"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(ev.Line), &env); err != nil {
			t.Fatalf("event %d: %v", ev.Seq, err)
		}
		if d := env.Payload.Data; d.TextSHA256 != "" {
			out[d.TextSHA256] = d.TextBytes
			t.Logf("served %s record carries text_sha256 %s, text_bytes %d", env.Payload.Type, d.TextSHA256, d.TextBytes)
		}
	}
	return out
}

// guessPIN tries every "PIN dddd" against the digests.
func guessPIN(digests map[string]int) string {
	for i := 0; i < 10000; i++ {
		guess := fmt.Sprintf("PIN %04d", i)
		sum := sha256.Sum256([]byte(guess))
		if n, ok := digests[hex.EncodeToString(sum[:])]; ok && n == len(guess) {
			return guess
		}
	}
	return ""
}

// TestDeniedTextDigestWithheld: the text the respond gate denied does not reach the
// caller through run_events, in clear or by digest. policy_evaluated carries text_sha256
// and text_bytes of the judged text; served whole, a short answer (a PIN, yes or no) is
// had back by hashing guesses — here at most 10,000. Every record carrying a digest of
// an unreleased text is withheld, as inference_finished is (docs/runs.md).
func TestDeniedTextDigestWithheld(t *testing.T) {
	const secret = "PIN 4821"
	env := secretModel(t, secret)
	s := serveStackTLS(t, testProject(t, map[string]string{"policies/respond.cedar": `@id("respond") permit (principal, action == Action::"respond", resource);
@id("no-pins") forbid (principal, action == Action::"respond", resource) when { context.response like "*PIN*" };
`}), env)
	alice := s.connect(t, "alice", nil, true)
	res := call(t, alice, "invoke_agent", map[string]any{"agent": "helper", "prompt": "What is the vault PIN?"})
	wantToolError(t, res, "policy_denied", "no-pins")
	var failed struct {
		Audit struct {
			RunID string `json:"run_id"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(structuredJSON(t, res), &failed); err != nil || failed.Audit.RunID == "" {
		t.Fatalf("no run id: %v", err)
	}
	var page runs.Events
	callOK(t, alice, "run_events", map[string]any{"run_id": failed.Audit.RunID}, &page)
	for _, ev := range page.Events {
		if strings.Contains(ev.Line, secret) {
			t.Fatalf("the denied text is served in clear: %+v", ev)
		}
	}
	if got := guessPIN(servedDigests(t, page.Events)); got != "" {
		t.Fatalf("the denied answer %q was recovered from the digests run_events serves to the caller; the policy gate withheld it", got)
	}
}

// TestHeldTextDigestWithheldFromRequester: under four eyes the requester of a run held at
// a @gate("human") is shown the held text neither in run_status nor through run_events —
// not by the digests policy_evaluated and approval_requested carry (docs/runs.md, human
// approval gates).
func TestHeldTextDigestWithheldFromRequester(t *testing.T) {
	const secret = "PIN 4821"
	env := secretModel(t, secret)
	s := serveStackTLS(t, testProject(t, map[string]string{"policies/respond.cedar": `@id("respond") permit (principal, action == Action::"respond", resource);
@gate("human") @id("pins-need-a-person") forbid (principal, action == Action::"respond", resource) when { context.response like "*PIN*" };
`}), env)
	alice := s.connect(t, "alice", nil, true)
	ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, alice, name, args, out) }
	var st startContent
	ok("start_run", map[string]any{"agent": "helper", "prompt": "What is the vault PIN?"}, &st)
	held := awaitStatus(t, ok, st.RunID, runs.StatusAwaitingApproval)
	if held.Approval == nil || held.Approval.Text != nil {
		t.Fatalf("the requester's run_status: approval %+v (four eyes: no held text for her)", held.Approval)
	}
	var page runs.Events
	ok("run_events", map[string]any{"run_id": st.RunID}, &page)
	for _, ev := range page.Events {
		if strings.Contains(ev.Line, secret) {
			t.Fatalf("the held text is served in clear: %+v", ev)
		}
	}
	got := guessPIN(servedDigests(t, page.Events))
	var c cancelContent
	ok("cancel_run", map[string]any{"run_id": st.RunID}, &c)
	if got != "" {
		t.Fatalf("the requester recovered the held answer %q from the digests run_events serves her while the run waits for another caller's approval", got)
	}
}

// TestRunResourceCachePrivate: reading symbi://runs/{run_id} is one caller's view of a run
// (decided by its access, with the released text): the result says cacheScope "private",
// never the default "public", under which any client or intermediary may cache it and
// serve it to another caller.
func TestRunResourceCachePrivate(t *testing.T) {
	model := newGatedModel(t)
	model.open()
	cs := serve(t, testProject(t, nil), serveOpts{env: model.env(), version: "2026-07-28"})
	ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, cs, name, args, out) }
	var st startContent
	ok("start_run", map[string]any{"agent": "helper", "prompt": "a private answer"}, &st)
	awaitStatus(t, ok, st.RunID, runs.StatusCompleted)
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: mcpserver.RunURIPrefix + st.RunID})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, "echo: a private answer") {
		t.Fatalf("contents %+v", res.Contents)
	}
	if res.CacheScope != "private" {
		t.Fatalf("the run resource (caller-specific, with the released text) is read with cacheScope %q, ttlMs %d: any client or intermediary may cache and serve it to another caller", res.CacheScope, res.TTLMs)
	}
}

// TestApproveRunRequiresReason: approve_run takes a reason (runs.md: "approve_run {run_id,
// decision: approve|reject, reason}"; the journal's approval_decided and the ledger's
// approval entry record it): a decision without one, or with a blank one, is refused with
// invalid_request naming it, and the run still waits.
func TestApproveRunRequiresReason(t *testing.T) {
	model := newGatedModel(t)
	model.open()
	cs := serve(t, testProject(t, gatePolicies), serveOpts{env: model.env()})
	ok := func(name string, args map[string]any, out any) { t.Helper(); callOK(t, cs, name, args, out) }
	var st startContent
	ok("start_run", map[string]any{"agent": "helper", "prompt": "ACME plans"}, &st)
	awaitStatus(t, ok, st.RunID, runs.StatusAwaitingApproval)
	defer call(t, cs, "cancel_run", map[string]any{"run_id": st.RunID})
	for _, args := range []map[string]any{
		{"run_id": st.RunID, "decision": "approve"},
		{"run_id": st.RunID, "decision": "approve", "reason": " \t\n"},
		{"run_id": st.RunID, "decision": "approve", "reason": "\u200b\u200e\x00"},
	} {
		res := call(t, cs, "approve_run", args)
		if !res.IsError {
			t.Fatalf("approve_run %v decided the held answer: %.300s", args, structuredJSON(t, res))
		}
		wantToolError(t, res, "invalid_request", "reason")
	}
	awaitStatus(t, ok, st.RunID, runs.StatusAwaitingApproval)
}
