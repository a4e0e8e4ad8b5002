package invoke

// Security checks of the governed run: preflight refusals, the order in which the run's
// journal writes become durable, its limits, its fail-closed paths, the human gate and the
// resume of a held run. hangGuard bounds only hangs; no test expects a speed.

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/digest"
	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/inference"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
	"symbi/internal/policy"
	"symbi/internal/proctest"
)

// gatedProject is a project whose every answer is held at a human gate (the one its
// policy names).
var gatedProject = map[string]string{
	"agents/helper.symbi":    "agent helper {}\n",
	"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n@gate(\"human\") @id(\"review\")\nforbid (principal, action == Action::\"respond\", resource);\n",
}

// waitEnd waits (bounded) for run to end and returns its outcome.
func waitEnd(t *testing.T, run *Run) (*Result, error) {
	t.Helper()
	select {
	case <-run.Done():
	case <-time.After(hangGuard):
		t.Fatal("the run did not end")
	}
	return run.Wait(context.Background())
}

// linkSecondName gives the single journal of dir a second hard link: the writer refuses the
// next append to it (a journal is exactly one name).
func linkSecondName(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, ".symbiont", "governed", "*.jsonl"))
	if len(files) != 1 {
		panic("want one journal")
	}
	if err := os.Link(files[0], filepath.Join(dir, "second-name.jsonl")); err != nil {
		panic(err)
	}
}

// lastTerminated returns the journal's last record, which must be terminated.
func lastTerminated(t *testing.T, path string) journal.Terminated {
	t.Helper()
	recs := payloads(t, path)
	last := recs[len(recs)-1]
	var term journal.Terminated
	if last.Type != journal.TypeTerminated || json.Unmarshal(last.Data, &term) != nil {
		t.Fatalf("the journal's last record is %s %s, want terminated", last.Type, last.Data)
	}
	return term
}

// product.md, invoke_agent preflight: "no journal is written, no model call". An empty
// prompt is invalid_request before anything is journaled or sent to the provider.
func TestEmptyPromptRefused(t *testing.T) {
	f := newFixture(t, nil, nil)
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper"}, nil)
	if errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("empty prompt: %v; want invalid_request", err)
	}
	if n := len(journalFiles(t, f.dir)); n != 0 || len(f.model.Requests()) != 0 {
		t.Fatalf("empty prompt: %d journals, %d provider requests; want none", n, len(f.model.Requests()))
	}
}

// A workspace is for delegated agents; a model agent given one is refused in preflight,
// not run as if it had none.
func TestWorkspaceOnModelAgentRefused(t *testing.T) {
	f := newFixture(t, nil, nil)
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q", Workspace: f.dir}, nil)
	if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "workspace") {
		t.Fatalf("workspace for a model agent: %v; want invalid_request naming the workspace", err)
	}
	if n := len(journalFiles(t, f.dir)); n != 0 || len(f.model.Requests()) != 0 {
		t.Fatalf("%d journals, %d provider requests; want none", n, len(f.model.Requests()))
	}
}

// Config.ProviderErr "says why Provider is nil ...; it is the no_provider error clients
// see": the client learns why no provider is configured.
func TestNoProviderSaysWhy(t *testing.T) {
	why := errors.New("SYMBI_PROVIDER names \"bogus-provider\", which is not a provider")
	f := newFixture(t, nil, func(c *Config) { c.Provider, c.ProviderErr = nil, why })
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	if errcode.Of(err) != errcode.NoProvider || !strings.Contains(err.Error(), "bogus-provider") {
		t.Fatalf("no provider: %v; want no_provider carrying %q", err, why)
	}
}

// runs.md: "busy (the server's limit of runs in flight is reached)". With --max-runs 1 and
// one run in flight, the next is busy; once it has ended, a run is admitted again.
func TestMaxRunsBound(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.MaxRuns = 1 }, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	held, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.runner.hook = func(point string) {
		if point == "inferred" {
			once.Do(func() { close(held) })
			<-proceed
		}
	}
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	if _, err := f.runner.Start(Request{Agent: "helper", Prompt: "q2"}, nil); errcode.Of(err) != errcode.Busy {
		t.Errorf("a second run with --max-runs 1 and one in flight: %v; want busy", err)
	}
	close(proceed)
	if _, err := waitEnd(t, run); err != nil {
		t.Fatal(err)
	}
	run2, err := f.runner.Start(Request{Agent: "helper", Prompt: "q3"}, nil)
	if err != nil {
		t.Fatalf("a run after the first ended: %v", err)
	}
	waitEnd(t, run2)
}

// Stop "refuses new ones": a runner shutting down starts no run, journals nothing and
// calls no model.
func TestStoppedRunnerRefusesNewRuns(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.runner.Stop()
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q"}, nil)
	if run != nil || errcode.Of(err) != errcode.Cancelled {
		t.Fatalf("a run started after Stop: %v, %v; want cancelled (shutting down)", run, err)
	}
	if n := len(journalFiles(t, f.dir)); n != 0 || len(f.model.Requests()) != 0 {
		t.Fatalf("%d journals, %d provider requests after Stop", n, len(f.model.Requests()))
	}
}

// docs/errors.md audit_unavailable: "the free space of the journal file system is below
// the floor (--min-free-space ...; checked before the run's journal file is created)".
// Below the floor, no journal is created and no model is called.
func TestFreeSpaceFloor(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.MinFreeBytes = 1 << 62 })
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	if errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "min-free-space") {
		t.Fatalf("below the free-space floor: %v; want audit_unavailable naming --min-free-space", err)
	}
	if n := len(journalFiles(t, f.dir)); n != 0 || len(f.model.Requests()) != 0 {
		t.Fatalf("%d journals, %d provider requests below the floor; want none", n, len(f.model.Requests()))
	}
}

// Run.Wait: "what the caller is told and what the journal says always agree". A call
// that stops waiting (told cancelled) before the run reaches its release leaves a run
// whose outcome — for anyone who asks later — is cancelled, no text.
func TestCallerLeftBeforeReleaseNoText(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	f.runner.terminateBudget = 0
	held, proceed := make(chan struct{}), make(chan struct{})
	f.runner.hook = func(point string) {
		if point == "inferred" {
			close(held)
			<-proceed
		}
	}
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := run.Wait(gone); errcode.Of(err) != errcode.Cancelled {
		t.Fatalf("the call that stopped waiting: %v; want cancelled", err)
	}
	close(proceed)
	wantEndedCancelled(t, run, "after its caller was told cancelled, the run's outcome")
}

// docs/errors.md: a run whose journal failed ends audit_unavailable ("any later journal
// append or fsync failed during the run"). A provider error whose terminated record cannot
// be written is not reported as a plain inference_failed: the caller is told the run is
// not recorded.
func TestUnrecordedEndIsAuditUnavailable(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Status: 500, Text: "boom"}))
	f.runner.hook = func(point string) {
		if point == "inferred" {
			linkSecondName(f.dir)
		}
	}
	_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	var ie *Error
	if errcode.Of(err) != errcode.AuditUnavailable || !errors.As(err, &ie) || ie.Audit == nil {
		t.Fatalf("a provider error whose terminated could not be written: %v; want audit_unavailable with the audit reference", err)
	}
}

// product.md step 11-12: "Write policy_evaluated and terminated; fsync — before the result
// is returned"; "Return the text (only if allowed and every write succeeded)". A journal
// that is no longer at its path when terminated is made durable withholds the text.
func TestReleaseWaitsForDurableTerminated(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	f.runner.hook = func(point string) {
		if point != "releasing" {
			return
		}
		files, _ := filepath.Glob(filepath.Join(f.dir, ".symbiont", "governed", "*.jsonl"))
		if len(files) != 1 {
			panic("want one journal")
		}
		// Still one name, so the append is accepted; the fsync's check finds it moved.
		if err := os.Rename(files[0], files[0]+".moved"); err != nil {
			panic(err)
		}
	}
	res, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	if res != nil || errcode.Of(err) != errcode.AuditUnavailable {
		var text string
		if res != nil {
			text = res.Text
		}
		t.Fatalf("terminated could not be made durable, yet the caller got text %q, err %v; want audit_unavailable, no text", text, err)
	}
}

// runs.md: status audit_failed. A run whose ledger cannot record its end has a journal
// ending audit_failed; Run.Reason (run_status) says the same, not completed.
func TestReasonOnLedgerFailure(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	lw := withLedger(t, f)
	lw.Close()
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitEnd(t, run)
	if res != nil || errcode.Of(err) != errcode.AuditUnavailable {
		t.Fatalf("with a broken ledger: %+v, %v", res, err)
	}
	term := lastTerminated(t, run.Audit().Path)
	if term.Reason != reasonAuditFailed || run.Reason() != term.Reason {
		t.Errorf("the journal's terminated says %q, Run.Reason (run_status) says %q; want both audit_failed", term.Reason, run.Reason())
	}
}

// product.md steps 7 and 9: started and inference_requested are durable before the
// provider is called; inference_finished is durable before the policy is evaluated.
func TestDurablePointsOfAModelRun(t *testing.T) {
	f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	var run *Run
	ready := make(chan struct{})
	atRequest, atInferred := make(chan journal.Receipt, 1), make(chan journal.Receipt, 1)
	f.model.OnRequest(func(loopback.Request) {
		<-ready
		atRequest <- run.Durable()
	})
	f.runner.hook = func(point string) {
		if point == "inferred" {
			<-ready
			atInferred <- run.Durable()
		}
	}
	var err error
	if run, err = f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil); err != nil {
		t.Fatal(err)
	}
	close(ready)
	if _, err := waitEnd(t, run); err != nil {
		t.Fatal(err)
	}
	if rc := <-atRequest; rc.Records != 2 {
		t.Errorf("when the provider was called, %d records were durable; want 2 (started, inference_requested)", rc.Records)
	}
	if rc := <-atInferred; rc.Records != 3 {
		t.Errorf("after inference, before the policy, %d records were durable; want 3 (… inference_finished)", rc.Records)
	}
}

// A journal write that fails is the run's end: no later stage is reported as reached
// (the answer as received, the policy as decided) — the writer's fail-stop keeps the text
// withheld either way, but the stages say what was journaled.
func TestNoStageAfterJournalFailure(t *testing.T) {
	for _, tc := range []struct {
		name      string
		atRequest bool   // link while the provider answers: inference_finished fails
		hook      string // else link at this hook: policy_evaluated fails
		notAfter  Stage
	}{
		{"inference_finished", true, "", StageResponseReceived},
		{"policy_evaluated", false, "inferred", StagePolicyDecided},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
			if tc.atRequest {
				f.model.OnRequest(func(loopback.Request) { linkSecondName(f.dir) })
			} else {
				f.runner.hook = func(point string) {
					if point == tc.hook {
						linkSecondName(f.dir)
					}
				}
			}
			var mu sync.Mutex
			var stages []Stage
			_, err := f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, func(s Stage) {
				mu.Lock()
				stages = append(stages, s)
				mu.Unlock()
			})
			if errcode.Of(err) != errcode.AuditUnavailable {
				t.Fatalf("%s write failed: %v; want audit_unavailable", tc.name, err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, s := range stages {
				if s == tc.notAfter || s == StagePolicyDecided {
					t.Errorf("stages %v: %q reported although %s was never written", stages, s, tc.name)
				}
			}
		})
	}
}

// product.md step 8: "deadline = min(120 s, the agent's `with timeout`)"; "a deadline is
// `timeout`". A provider that never answers ends the run timeout at the agent's 1 s, and
// inference_finished records the timeout.
func TestAgentTimeoutBoundsProviderCall(t *testing.T) {
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper {\n  with timeout = 1.seconds {}\n}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
	}, nil, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitEnd(t, run)
	var ie *Error
	if errcode.Of(err) != errcode.Timeout || !errors.As(err, &ie) || ie.Audit == nil {
		t.Fatalf("a hanging provider past the agent's timeout: %v; want timeout with an audit reference", err)
	}
	if term := lastTerminated(t, ie.Audit.Path); term.Reason != reasonTimeout {
		t.Errorf("terminated reason %q; want timeout", term.Reason)
	}
	var fin journal.InferenceFinished
	if err := json.Unmarshal(payloads(t, ie.Audit.Path)[2].Data, &fin); err != nil || fin.Outcome != "timeout" {
		t.Errorf("inference_finished outcome %q (%v); want timeout", fin.Outcome, err)
	}
}

// maxRecordError: the provider error an inference_finished record carries is cut at 4 KiB,
// so that the record always fits. A connection error quoting a long base URL is cut.
func TestProviderErrorClampedInJournal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connection refused
	prov, err := inference.NewOpenAI("http://"+addr+"/"+strings.Repeat("v", 3*maxRecordError), "", "m")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, nil, func(c *Config) { c.Provider = prov })
	_, err = f.runner.Invoke(context.Background(), Request{Agent: "helper", Prompt: "q"}, nil)
	var ie *Error
	if errcode.Of(err) != errcode.InferenceFailed || !errors.As(err, &ie) || ie.Audit == nil {
		t.Fatalf("connection refused: %v; want inference_failed with an audit reference", err)
	}
	var fin journal.InferenceFinished
	if err := json.Unmarshal(payloads(t, ie.Audit.Path)[2].Data, &fin); err != nil {
		t.Fatal(err)
	}
	if len(fin.Error) > maxRecordError+len(" …(truncated)") {
		t.Errorf("inference_finished.error is %d bytes; want at most %d and the truncation mark", len(fin.Error), maxRecordError)
	}
}

// Approve's own checks (runs.md approve_run {run_id, decision: approve|reject, reason};
// reason ≤ 4 KiB; an approver is named): a decision that fails one is refused and the run
// still waits; a reason of exactly the limit is taken.
func TestApproveValidates(t *testing.T) {
	f := newFixture(t, gatedProject, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-run.awaiting()
	for _, tc := range []struct {
		name string
		a    Approval
		code errcode.Code
	}{
		{"unknown decision", Approval{Decision: "approved", Approver: "alice"}, errcode.InvalidRequest},
		{"empty decision", Approval{Approver: "alice"}, errcode.InvalidRequest},
		{"reason one byte over", Approval{Decision: ApprovalApprove, Approver: "alice", Reason: strings.Repeat("r", journal.MaxApprovalReasonBytes+1)}, errcode.LimitExceeded},
		{"no approver", Approval{Decision: ApprovalApprove}, errcode.InvalidRequest},
	} {
		if err := run.Approve(context.Background(), tc.a); errcode.Of(err) != tc.code {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.code)
		}
		if run.Pending() == nil {
			t.Fatalf("after the refused decision (%s) the run no longer waits", tc.name)
		}
	}
	if err := run.Approve(context.Background(), Approval{Decision: ApprovalApprove, Approver: "alice", Reason: strings.Repeat("r", journal.MaxApprovalReasonBytes)}); err != nil {
		t.Fatalf("a reason of exactly the limit: %v", err)
	}
	if res, err := waitEnd(t, run); err != nil || res.Text != "the answer" {
		t.Fatalf("approved: %+v, %v", res, err)
	}
}

// runs.md: "reject → policy_denied, naming the gate" — the text stays withheld, and the
// rejecting approver's call returns once the decision is durable.
func TestRejectWithholds(t *testing.T) {
	f := newFixture(t, gatedProject, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-run.awaiting()
	approved := make(chan error, 1)
	go func() {
		approved <- run.Approve(context.Background(), Approval{Decision: ApprovalReject, Approver: "bob", Reason: "not this"})
	}()
	select {
	case err := <-approved:
		if err != nil {
			t.Fatalf("reject: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("approve_run reject never returned")
	}
	res, err := waitEnd(t, run)
	if res != nil || errcode.Of(err) != errcode.PolicyDenied {
		var text string
		if res != nil {
			text = res.Text
		}
		t.Fatalf("rejected: text %q, err %v; want policy_denied, no text", text, err)
	}
	term := lastTerminated(t, run.Audit().Path)
	if term.Reason != reasonPolicyDenied || term.Released || term.Gate != "review" {
		t.Errorf("terminated %+v; want policy_denied, not released, gate review", term)
	}
}

// runs.md: the journal records approval_requested "and the status is awaiting_approval";
// docs/errors.md: a failed journal write ends the run audit_unavailable. An
// approval_requested that cannot be written ends the run, not a wait for a person.
func TestApprovalRequestedWriteFails(t *testing.T) {
	f := newFixture(t, gatedProject, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
	f.runner.hook = func(point string) {
		if point == "holding" {
			linkSecondName(f.dir)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err := f.runner.Invoke(ctx, Request{Agent: "helper", Prompt: "q"}, nil)
	if errcode.Of(err) != errcode.AuditUnavailable {
		t.Fatalf("approval_requested could not be written: %v; want audit_unavailable (the run ended), not a wait", err)
	}
}

// runs.md: approval_decided and the ledger's approval entry are "both durable before the
// text is released"; Approve "returns once the decision is durable". An approval_decided
// that cannot be written fails the approver's call, as a ledger that cannot record the
// approval does; nothing is released.
func TestApprovalNotRecorded(t *testing.T) {
	for _, tc := range []string{"journal", "ledger"} {
		t.Run(tc, func(t *testing.T) {
			f := newFixture(t, gatedProject, nil, loopback.WithReply(loopback.Reply{Text: "the answer"}))
			var lw *ledger.Writer
			if tc == "ledger" {
				lw = withLedger(t, f)
			}
			linked := make(chan struct{})
			f.runner.hook = func(point string) {
				if point == "awaiting approval" {
					if tc == "journal" {
						linkSecondName(f.dir)
					}
					close(linked)
				}
			}
			run, err := f.runner.Start(Request{Agent: "helper", Prompt: "q", Async: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-linked
			if lw != nil {
				lw.Close()
			}
			if err := run.Approve(context.Background(), Approval{Decision: ApprovalApprove, Approver: "alice"}); errcode.Of(err) != errcode.AuditUnavailable {
				t.Errorf("approve_run whose decision the %s could not record: %v; want audit_unavailable", tc, err)
			}
			if res, err := waitEnd(t, run); res != nil || errcode.Of(err) != errcode.AuditUnavailable {
				t.Errorf("the run: %+v, %v; want audit_unavailable, nothing released", res, err)
			}
		})
	}
}

// Approve on a run that has ended while its (resumed) wait was still set is
// invalid_transition at once, not a call that blocks until its own context ends.
func TestApproveEndedResumedRun(t *testing.T) {
	p := &prepared{}
	p.gate.init()
	p.gate.pending.Store(&Pending{Gate: "g"}) // a resumed wait: no channel of its own
	run := &Run{p: p, done: make(chan struct{})}
	close(run.done)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	err := run.Approve(ctx, Approval{Decision: ApprovalApprove, Approver: "alice"})
	if !errors.Is(err, ErrNotAwaiting) || errcode.Of(err) != errcode.InvalidTransition {
		t.Fatalf("approve_run on an ended run: %v; want invalid_transition (%v)", err, ErrNotAwaiting)
	}
}

// heldAtGate is a project with helper's answer held at the human gate of gatedACME (its
// journal as a stopped server left it), under the current set policies. A non-empty
// startedDigest makes the journal name another (older) Cedar set; withLedgerToo opens the
// ledger.
func heldAtGate(t *testing.T, policies, startedDigest string, withLedgerToo bool) (*fixture, *Held) {
	t.Helper()
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper { capabilities = [\"answer\"] }\n",
		"policies/respond.cedar": policies,
	}, nil)
	if withLedgerToo {
		withLedger(t, f)
	}
	agent, err := f.runner.cfg.Registry.Resolve("helper")
	if err != nil {
		t.Fatal(err)
	}
	set := f.runner.cfg.Policies
	started := journal.Started{Agent: "helper", File: agent.Entry.File, SourceSHA256: agent.SourceSHA256, Surface: "mcp-server",
		PolicyMode: string(set.Mode), PolicyDigest: set.Digest}
	if startedDigest != "" {
		started.PolicyMode, started.PolicyDigest = string(policy.ModeCedar), startedDigest
	}
	return f, heldJournal(t, f, started, "Dear ACME Corp, the outage is over.", "customer-names-review")
}

// gatedACME permits every answer, but holds at a human gate one that names ACME.
const gatedACME = "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n" +
	"@gate(\"human\") @id(\"customer-names-review\") forbid (principal, action == Action::\"respond\", resource) when { context.response like \"*ACME*\" };\n"

// runs.md / resume.go rejudge: a new set may keep the wait only when it "holds the answer
// at the same gate or allows it". A new set that holds it at another gate — one no person
// was asked about — ends the run policy_denied.
func TestResumeOtherGateDenied(t *testing.T) {
	other := strings.Replace(gatedACME, "customer-names-review", "legal-review", 1)
	f, h := heldAtGate(t, other, "an older digest", false)
	run := f.runner.Resume(h)
	if run.Pending() != nil {
		t.Fatalf("resumed under a set that gates the answer at another gate, the run waits (%+v); want policy_denied", run.Pending())
	}
	if res, err := waitEnd(t, run); res != nil || errcode.Of(err) != errcode.PolicyDenied {
		t.Fatalf("resumed: %+v, %v; want policy_denied", res, err)
	}
}

// resume.go: the new set's decision (policy_reevaluated) is "durable before the run waits
// on or ends by it". If it cannot be written, the run ends audit_unavailable at once, and
// does not wait for a person on an unrecorded judgement.
func TestResumeRejudgeWriteFails(t *testing.T) {
	f, h := heldAtGate(t, gatedACME+"// edited\n", "an older digest", false)
	if err := os.Link(h.w.Path(), filepath.Join(f.dir, "second-name.jsonl")); err != nil {
		t.Fatal(err)
	}
	run := f.runner.Resume(h)
	if res, err := waitEnd(t, run); res != nil || errcode.Of(err) != errcode.AuditUnavailable {
		t.Fatalf("policy_reevaluated could not be written: %+v, %v; want audit_unavailable", res, err)
	}
}

// runs.md: cancel_run is complete when terminated (cancelled) is in the journal; a resumed
// run approved, then cancelled while the approval's ledger entry is appended, releases
// nothing (the resumed counterpart of TestCancelBetweenApprovalAndRelease).
func TestResumeCancelBeforeRelease(t *testing.T) {
	f, h := heldAtGate(t, gatedACME, "", true)
	run := f.runner.Resume(h)
	if run.Pending() == nil {
		t.Fatal("the resumed run does not wait")
	}
	ledgerPath := filepath.Join(f.dir, ".symbiont", ledger.FileName)
	var st unix.Stat_t
	if err := unix.Stat(ledgerPath, &st); err != nil {
		t.Fatal(err)
	}
	unlock := proctest.LockFile(t, ledgerPath)
	defer unlock()
	approved := make(chan error, 1)
	go func() {
		approved <- run.Approve(context.Background(), Approval{Decision: ApprovalApprove, Approver: "bob"})
	}()
	proctest.WaitFlockWaiter(t, st.Ino, hangGuard)
	run.Cancel(ErrCancelRequested)
	unlock()
	if err := <-approved; err != nil {
		t.Fatalf("approve_run: %v", err)
	}
	wantEndedCancelled(t, run, "cancelled before release")
}

// ReopenHeld resumes only a run whose journal "holds the clear text" of the answer the
// gate held: a clear text whose digest is not the held one is not resumed.
func TestResumeTextMustMatchDigest(t *testing.T) {
	const text, other, gate = "the held answer", "another text", "review"
	sum := digest.SHA256Hex([]byte(text))
	store := tempStore(t)
	w, err := store.Create("agent", "run",
		journal.Started{Agent: "helper", Mode: policy.ResponseMode},
		journal.InferenceRequested{CallID: "c1", RequestSHA256: digest.SHA256Hex(nil)},
		journal.InferenceFinished{CallID: "c1", Outcome: "completed", ResponseSHA256: digest.SHA256Hex(nil), TextSHA256: sum, TextBytes: int64(len(text)), Text: other},
		journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{gate}, TextSHA256: sum, TextBytes: int64(len(text)), Gate: gate},
		journal.ApprovalRequested{Gate: gate, TextSHA256: sum, TextBytes: int64(len(text)), TimeoutMS: ms(time.Hour)})
	if err != nil {
		t.Skipf("the writer refuses a clear text that is not its digest's (%v): nothing to resume", err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	h, err := ReopenHeld(store, filepath.Base(w.Path()))
	if h != nil {
		defer h.Close()
		t.Fatalf("a journal whose clear text (%q) is not the held digest's was resumed, holding %q (err %v)", other, h.text, err)
	}
}

// progressSeen holds what a progress callback saw, reading run once it is known.
type progressSeen struct {
	mu     sync.Mutex
	ready  chan struct{}
	run    *Run
	atSent journal.Receipt
}

// docs (package comment): "durable — started + the executor's request record, one fsync —
// only then does the executor act". A delegated run's started is durable before the agent
// is started.
func TestDelegatedStartedDurableBeforeAgent(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, nil)
	s := &progressSeen{ready: make(chan struct{})}
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "do it", Async: true}, func(st Stage) {
		if st == StageRequestSent {
			<-s.ready
			s.mu.Lock()
			s.atSent = s.run.Durable()
			s.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.run = run
	s.mu.Unlock()
	close(s.ready)
	if _, err := waitEnd(t, run); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.atSent.Records < 1 {
		t.Errorf("when the delegated agent was started, %d records were durable; want started", s.atSent.Records)
	}
}

// docs/executors.md: "The run's deadline is the definition's `with timeout`". An agent
// that never ends its turn ends the run timeout at its 5 s (long enough for the session to
// open first on a busy machine: a deadline in the handshake is a failed session, above).
func TestDelegatedDeadlineApplied(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"hang": true})
	f := delegatedFixture(t, reg, nil)
	delegatedAgent(t, f, reg, "slow", "5.seconds")
	run, err := f.runner.Start(Request{Agent: "slow", Prompt: "do it", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitEnd(t, run)
	if errcode.Of(err) != errcode.Timeout || run.Reason() != reasonTimeout {
		t.Fatalf("a delegated agent past its 5 s timeout: %v (reason %q); want timeout", err, run.Reason())
	}
}

// TestDelegatedDeadlineInHandshake: the run's deadline (the agent's with timeout) that
// passes before the agent opens its session — it never answers the handshake — ends the
// session in error, naming the request left unanswered, and the run inference_failed: a
// journal's timeout is a session's (journal-format.md: session_finished timeout only after
// session_started), and the agent never opened one (executors.md).
func TestDelegatedDeadlineInHandshake(t *testing.T) {
	reg, script := fakeExecutor(t)
	if err := os.WriteFile(script, []byte(`{"stall_at": "initialize", "steps": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f := delegatedFixture(t, reg, nil)
	delegatedAgent(t, f, reg, "slow", "1.seconds")
	run, err := f.runner.Start(Request{Agent: "slow", Prompt: "do it", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = waitEnd(t, run)
	if errcode.Of(err) != errcode.InferenceFailed || run.Reason() != reasonInferenceFailed || !strings.Contains(err.Error(), "context deadline exceeded before the session opened (no answer to ") {
		t.Fatalf("a delegated agent silent in the handshake past its 1 s timeout: %v (reason %q); want inference_failed, naming the deadline and the request unanswered", err, run.Reason())
	}
}

// product.md: guidance from AGENTS.md reaches the agent; an AGENTS.md whose markers are
// malformed refuses the run before any journal — for a delegated agent as for a model
// one.
func TestDelegatedGuidanceUnreadable(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, nil)
	if err := os.WriteFile(filepath.Join(f.dir, "AGENTS.md"), []byte("# Guide\n<!-- agents-md:auto-end -->\nrules\n<!-- agents-md:auto-start -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "do it", Async: true}, nil)
	if err == nil {
		waitEnd(t, run)
		t.Fatal("a delegated run started although AGENTS.md's generated section cannot be found")
	}
	if errcode.Of(err) != errcode.InvalidRequest || journals(t, f) != 0 {
		t.Fatalf("%v (%d journals); want invalid_request before any journal", err, journals(t, f))
	}
}

// runs.md: the approval's journal record and ledger entry are durable "before the agent
// hears the answer". A ledger that cannot record a held permission's approval ends the run
// audit_failed; the agent is not told a decision no one recorded.
func TestHeldPermissionLedgerFailure(t *testing.T) {
	reg, script := fakeExecutor(t)
	f := editHeldFixture(t, reg, script)
	lw := withLedger(t, f)
	run := startAtGate(t, f, Request{Agent: "coder", Prompt: "Edit a.txt.", Async: true})
	lw.Close()
	if err := run.Approve(context.Background(), Approval{RequestID: "perm-1", Decision: ApprovalApprove, Approver: "alice"}); errcode.Of(err) != errcode.AuditUnavailable {
		t.Errorf("approve_run whose ledger entry failed: %v; want audit_unavailable", err)
	}
	if _, err := waitEnd(t, run); errcode.Of(err) != errcode.AuditUnavailable {
		t.Errorf("the run: %v; want audit_unavailable", err)
	}
	var types []string
	for _, r := range payloads(t, run.Audit().Path) {
		types = append(types, r.Type)
		if r.Type == journal.TypePermissionDecided && strings.Contains(string(r.Data), `"perm-1"`) {
			t.Errorf("the agent was answered on perm-1 (%s) although the approval was never recorded in the ledger", r.Data)
		}
	}
	t.Logf("records: %v", types)
}

// dslOptions admits the executors of reg.
func dslOptions(reg *executors.Registry) dsl.Options {
	return dsl.Options{Executors: func(n string) bool { _, ok := reg.Get(n); return ok }}
}

// product.md / docs/executors.md: a delegated agent "runs only through start_run";
// invoke_agent (a call that waits) refuses it before any journal.
func TestDelegatedOnlyThroughStartRun(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	res, err := f.runner.Invoke(ctx, Request{Agent: "coder", Prompt: "do it"}, nil)
	if res != nil || errcode.Of(err) != errcode.RefusedDefinition || journals(t, f) != 0 {
		t.Fatalf("invoke_agent on a delegated agent: %+v, %v (%d journals); want refused_definition before any journal", res, err, journals(t, f))
	}
}

// An empty prompt (task) of a delegated agent is invalid_request before any journal or
// agent process starts. Here preflight alone refuses it: no provider request is built
// (for a model agent, inference.Prepare refuses an empty prompt as well).
func TestDelegatedEmptyPromptRefused(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, nil)
	run, err := f.runner.Start(Request{Agent: "coder", Async: true}, nil)
	if err == nil {
		waitEnd(t, run)
	}
	if errcode.Of(err) != errcode.InvalidRequest || journals(t, f) != 0 {
		t.Fatalf("start_run of a delegated agent with no prompt: %v (%d journals); want invalid_request before any journal", err, journals(t, f))
	}
}

// startAtGate starts req's run on f and returns it once a request of its waits at the
// human gate (the hook's "awaiting approval").
func startAtGate(t *testing.T, f *fixture, req Request) *Run {
	t.Helper()
	atGate := make(chan struct{})
	var once sync.Once
	f.runner.hook = func(point string) {
		if point == "awaiting approval" {
			once.Do(func() { close(atGate) })
		}
	}
	run, err := f.runner.Start(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-atGate:
	case <-time.After(hangGuard):
		t.Fatal("no request held at the gate")
	}
	return run
}

// wantEndedCancelled waits for run's end and requires it cancelled, with no text, its
// journal's terminated saying cancelled and not released; when names the moment.
func wantEndedCancelled(t *testing.T, run *Run, when string) {
	t.Helper()
	res, err := waitEnd(t, run)
	if res != nil || errcode.Of(err) != errcode.Cancelled {
		var text string
		if res != nil {
			text = res.Text
		}
		t.Errorf("%s: text %q, err %v; want cancelled, no text", when, text, err)
	}
	if term := lastTerminated(t, run.Audit().Path); term.Reason != reasonCancelled || term.Released {
		t.Errorf("terminated %+v; want cancelled, not released", term)
	}
}

// delegatedAgent (re)defines f's agent name as delegated to reg's executor "fake" with the
// given with timeout (a DSL duration, "5.seconds"), and reloads f's registry.
func delegatedAgent(t *testing.T, f *fixture, reg *executors.Registry, name, timeout string) {
	t.Helper()
	src := "metadata { executor = \"fake\" }\nagent " + name + " {\n  with timeout = " + timeout + " {}\n}\n"
	if err := os.WriteFile(filepath.Join(f.dir, "agents", name+".symbi"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	reg2, err := f.runner.cfg.Project.LoadRegistry(nil, dslOptions(reg))
	if err != nil {
		t.Fatal(err)
	}
	f.runner.cfg.Registry = reg2
}

// editHeldFixture is a delegated project whose agent coder asks permission to edit a.txt
// (tool call p1, request perm-1) and then answers "ok", under a policy that holds every
// edit at the human gate edits-review.
func editHeldFixture(t *testing.T, reg *executors.Registry, script string) *fixture {
	t.Helper()
	writeScript(t, script,
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/a.txt"}}},
		map[string]any{"message": "ok"},
	)
	return delegatedFixture(t, reg, map[string]string{
		"tools.cedar": "@gate(\"human\") @id(\"edits-review\")\nforbid (principal, action == Action::\"use_tool\", resource == Tool::\"edit\");\n",
	})
}
