package invoke

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"symbi/internal/digest"
	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/workspace"
)

// fakeExecutor builds cmd/fake-acp-agent and registers it as the executor "fake", playing
// the script the caller writes to the returned file (writeScript).
func fakeExecutor(t *testing.T) (*executors.Registry, string) {
	t.Helper()
	aux := t.TempDir()
	fake := filepath.Join(aux, "fake-acp-agent")
	if out, err := exec.Command("go", "build", "-o", fake, "symbi/cmd/fake-acp-agent").CombinedOutput(); err != nil {
		t.Fatalf("building the fake agent: %v\n%s", err, out)
	}
	script := filepath.Join(aux, "script.json")
	execs, err := json.Marshal(map[string]any{"executors": map[string]any{"fake": map[string]any{"command": []string{fake, "--script", script}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := executors.Parse(execs, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	return reg, script
}

// writeScript writes the fake agent's steps to path.
func writeScript(t *testing.T, path string, steps ...any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// delegatedFixture is a project whose agent coder is delegated to reg's executor "fake",
// with policies (file name → Cedar) besides one permitting every answer.
func delegatedFixture(t *testing.T, reg *executors.Registry, policies map[string]string) *fixture {
	t.Helper()
	files := map[string]string{
		"agents/coder.symbi":     "metadata { executor = \"fake\" }\nagent coder {}\n",
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
	}
	for name, text := range policies {
		files["policies/"+name] = text
	}
	return newFixture(t, files, func(c *Config) {
		c.Executors = reg
		var err error
		if c.Registry, err = c.Project.LoadRegistry(nil, dsl.Options{Executors: func(n string) bool { _, ok := reg.Get(n); return ok }}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDelegatedWorkspacePlace: start_run refuses, before anything is journaled, a
// workspace in which the agent's own tools would work on the project's governance: its
// audit store (every path the agent names would be inside .symbiont, yet none would carry
// the name), its policies, or a directory holding the signing key.
func TestDelegatedWorkspacePlace(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, map[string]string{"tools.cedar": "@id(\"tools\") permit (principal, action == Action::\"use_tool\", resource);\n"})
	// One run, so that the audit store exists.
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(t.Context()); err != nil {
		t.Fatalf("a run in the project: %v", err)
	}
	before := journals(t, f)
	for _, ws := range []string{".symbiont", ".symbiont/governed", "policies"} {
		t.Run(ws, func(t *testing.T) {
			_, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true, Workspace: filepath.Join(f.dir, ws)}, nil)
			if !errors.Is(err, workspace.ErrWorkspaceGoverned) || errcode.Of(err) != errcode.ProtectedPath {
				t.Fatalf("start_run in %s: %v; want protected_path, %v", ws, err, workspace.ErrWorkspaceGoverned)
			}
			if got := journals(t, f); got != before {
				t.Fatalf("%d journals after the refusal, %d before", got, before)
			}
		})
	}
}

// journals counts the project's journal files.
func journals(t *testing.T, f *fixture) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(f.dir, ".symbiont/governed/*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// TestResumeRejudges: a run held at a gate when its server stopped is judged again, on
// resume, by the policy set the server now runs, when that set is not the one that held
// it: the gate does not outlive a change of the policies that set it. The same set, or a
// new one that holds the answer at the same gate or allows it, waits for the person as
// before; a set that denies everything, one that denies the answer another way, or an
// agent whose definition changed ends the run policy_denied, the text never released. A
// new set's decision is journaled (policy_reevaluated: its digest, decision, deciding
// policies and gate), durable before the run waits on or ends.
func TestResumeRejudges(t *testing.T) {
	const text, gate = "Dear ACME Corp, the outage is over.", "customer-names-review"
	gated := "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n" +
		"@gate(\"human\") @id(\"customer-names-review\") forbid (principal, action == Action::\"respond\", resource) when { context.response like \"*ACME*\" };\n"
	tests := []struct {
		name     string
		policies string // the set the resuming server runs
		digest   string // the started record's policy digest: "" for the set's own
		source   string // the agent's definition when resumed: "" for the one that ran
		denied   string // in the policy_denied error; "" for a run that waits and is released
		file     string // the agent's file in agents/: "" for helper.symbi
		rejudged string // the policy_reevaluated journaled: "decision/gate"; "" for none
	}{
		{"the same set", gated, "", "", "", "", ""},
		{"a new set, the same gate", gated + "// a comment\n", "an older digest", "", "", "", "deny/" + gate},
		{"a new set that allows", "@id(\"respond-v2\") permit (principal, action == Action::\"respond\", resource);\n", "an older digest", "", "", "", "allow/"},
		{"a set that cannot be used", "not cedar", "", "", "the set is unusable, and denies everything until fixed", "", ""},
		{"a new set, an ungated forbid", strings.Replace(gated, "@gate(\"human\") ", "", 1), "an older digest", "", "denied by forbid customer-names-review", "", "deny/"},
		{"a new set, the definition changed", gated, "an older digest", "agent helper { capabilities = [\"answer\", \"more\"] }\n", "the agent's definition agents/helper.symbi is gone or changed", "", ""},
		{"a new set, the same gate, a file named like two extensions", gated + "// a comment\n", "an older digest", "", "", "helper.dsl.symbi", "deny/" + gate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := tt.file
			if file == "" {
				file = "helper.symbi"
			}
			f := newFixture(t, map[string]string{
				"agents/" + file:         "agent helper { capabilities = [\"answer\"] }\n",
				"policies/respond.cedar": tt.policies,
			}, nil)
			agent, err := f.runner.cfg.Registry.Resolve(project.Stem(file))
			if err != nil {
				t.Fatal(err)
			}
			set := f.runner.cfg.Policies
			started := journal.Started{Agent: "helper", File: agent.Entry.File, SourceSHA256: agent.SourceSHA256, Surface: "mcp-server",
				PolicyMode: string(set.Mode), PolicyDigest: set.Digest}
			if tt.digest != "" {
				started.PolicyMode, started.PolicyDigest = string(policy.ModeCedar), tt.digest
			}
			if tt.source != "" {
				started.SourceSHA256 = digest.SHA256Hex([]byte(tt.source)) // the definition that ran is not the file's now
			}
			h := heldJournal(t, f, started, text, gate)
			run := f.runner.Resume(h)
			if tt.denied != "" {
				_, err := run.Wait(t.Context())
				if !errors.Is(err, errcode.PolicyDenied) || !strings.Contains(err.Error(), tt.denied) {
					t.Fatalf("resumed: %v, want policy_denied with %q", err, tt.denied)
				}
				if err := run.Approve(t.Context(), Approval{Decision: ApprovalApprove, Approver: "alice"}); !errors.Is(err, ErrNotAwaiting) {
					t.Fatalf("an approval after: %v, want ErrNotAwaiting", err)
				}
			} else {
				if err := run.Approve(t.Context(), Approval{Decision: ApprovalApprove, Approver: "alice"}); err != nil {
					t.Fatal(err)
				}
				if res, err := run.Wait(t.Context()); err != nil || res.Text != text {
					t.Fatalf("resumed and approved: %+v, %v", res, err)
				}
			}
			var got []string
			for _, p := range payloads(t, run.Audit().Path) {
				if p.Type != journal.TypePolicyReevaluated {
					continue
				}
				var pr journal.PolicyReevaluated
				if err := json.Unmarshal(p.Data, &pr); err != nil {
					t.Fatal(err)
				}
				if pr.PolicyDigest != set.Digest || pr.PolicyMode != string(set.Mode) || pr.TextSHA256 != digest.SHA256Hex([]byte(text)) || len(pr.PolicyIDs) == 0 {
					t.Errorf("policy_reevaluated %+v: want the set %s %s judging the held text", pr, set.Mode, set.Digest)
				}
				got = append(got, pr.Decision+"/"+pr.Gate)
			}
			if want := tt.rejudged; strings.Join(got, ",") != want {
				t.Errorf("policy_reevaluated records %v, want %q", got, want)
			}
			pub, _ := hex.DecodeString(run.Audit().PublicKey)
			if rep := journal.Verify(run.Audit().Path, ed25519.PublicKey(pub), journal.VerifyOptions{}); rep.ExitCode() != 0 {
				t.Errorf("the journal does not verify: %+v", rep.Problems)
			}
		})
	}
}

// TestResumeAfterRejudged: a run judged again at one resume (policy_reevaluated after its
// approval_requested) resumes again at the next, judged against that set, not started's:
// the same set journals nothing more, and the person's approval releases the text.
func TestResumeAfterRejudged(t *testing.T) {
	const text = "Dear ACME Corp, the outage is over."
	run := resumeJudged(t, "@id(\"respond-v2\") permit (principal, action == Action::\"respond\", resource);\n", "allow", text)
	if err := run.Approve(t.Context(), Approval{Decision: ApprovalApprove, Approver: "alice"}); err != nil {
		t.Fatal(err)
	}
	if res, err := run.Wait(t.Context()); err != nil || res.Text != text {
		t.Fatalf("resumed again and approved: %+v, %v", res, err)
	}
	n := 0
	for _, p := range payloads(t, run.Audit().Path) {
		if p.Type == journal.TypePolicyReevaluated {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d policy_reevaluated records, want the first resume's one", n)
	}
}

// TestResumeAfterOverruled: a resume whose policy set denied the held answer outright (at no
// gate) journals policy_reevaluated deny and ends the run policy_denied; a server stopped
// between the two leaves the journal ending with that record. The next resume ends the
// run policy_denied at once, whatever set it runs: no person may approve a text a set
// denied.
func TestResumeAfterOverruled(t *testing.T) {
	ungated := "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n" +
		"@id(\"customer-names-review\") forbid (principal, action == Action::\"respond\", resource) when { context.response like \"*ACME*\" };\n"
	// What the first resume under this set made durable before the server stopped.
	run := resumeJudged(t, ungated, "deny", "Dear ACME Corp, the outage is over.")
	ctx := t.Context()
	if err := run.Approve(ctx, Approval{Decision: ApprovalApprove, Approver: "alice"}); err == nil {
		res, werr := run.Wait(ctx)
		t.Fatalf("a held answer the running set denied (policy_reevaluated deny, no gate) waited again and was approved: %+v, %v; want policy_denied at once", res, werr)
	}
	if _, err := run.Wait(ctx); !errors.Is(err, errcode.PolicyDenied) {
		t.Fatalf("resumed: %v, want policy_denied", err)
	}
}

// resumeJudged resumes a run of helper held at the gate customer-names-review with text,
// under the set policies, whose journal ends with that set's policy_reevaluated deciding
// decision (naming no gate): what a server stopped after judging it again leaves.
func resumeJudged(t *testing.T, policies, decision, text string) *Run {
	t.Helper()
	f := newFixture(t, map[string]string{
		"agents/helper.symbi":    "agent helper { capabilities = [\"answer\"] }\n",
		"policies/respond.cedar": policies,
	}, nil)
	agent, err := f.runner.cfg.Registry.Resolve(project.Stem("helper.symbi"))
	if err != nil {
		t.Fatal(err)
	}
	set := f.runner.cfg.Policies
	started := journal.Started{Agent: "helper", File: agent.Entry.File, SourceSHA256: agent.SourceSHA256, Surface: "mcp-server",
		PolicyMode: string(policy.ModeCedar), PolicyDigest: "the set that held it"}
	h := heldJournal(t, f, started, text, "customer-names-review", journal.PolicyReevaluated{PolicyMode: string(set.Mode), PolicyDigest: set.Digest,
		Decision: decision, PolicyIDs: []string{"respond-v2"}, TextSHA256: digest.SHA256Hex([]byte(text))})
	return f.runner.Resume(h)
}

// heldJournal writes the journal of a model run held at gate with text, as its server left
// it (then the records extra), and reopens it for Resume.
func heldJournal(t *testing.T, f *fixture, started journal.Started, text, gate string, extra ...journal.Record) *Held {
	t.Helper()
	sum := digest.SHA256Hex([]byte(text))
	store, err := journal.OpenStore(f.runner.cfg.Project.Root(), journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w, err := store.Create(policy.AgentID("helper"), "held-run", started,
		journal.InferenceRequested{CallID: "c1"},
		journal.InferenceFinished{CallID: "c1", Outcome: "completed", HTTPStatus: 200, TextSHA256: sum, TextBytes: int64(len(text)), Text: text},
		journal.PolicyEvaluated{Action: "respond", Decision: "deny", PolicyIDs: []string{gate}, TextSHA256: sum, TextBytes: int64(len(text)), Gate: gate},
		journal.ApprovalRequested{Gate: gate, TextSHA256: sum, TextBytes: int64(len(text)), TimeoutMS: ms(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range extra {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	h, err := ReopenHeld(store, filepath.Base(w.Path()))
	if err != nil || h == nil {
		t.Fatalf("ReopenHeld: %v, %v", h, err)
	}
	return h
}

// TestACPPanicIsInternal: a panic in symbi's own code inside a delegated run's ACP
// callback (here the wait at the gate of a held permission request, reached from
// session/request_permission) ends the run as a panicked step does — terminated
// audit_failed, the caller told internal — and is not blamed on the agent
// (inference_failed).
func TestACPPanicIsInternal(t *testing.T) {
	reg, script := fakeExecutor(t)
	f := editHeldFixture(t, reg, script)
	f.runner.hook = func(point string) {
		if point == "awaiting approval" {
			panic("a bug in symbi's gate")
		}
	}
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Edit a.txt.", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // only a hang reaches it
	defer cancel()
	_, err = run.Wait(ctx)
	if err == nil {
		t.Fatal("the run succeeded although symbi panicked in its session")
	}
	recs := payloads(t, run.Audit().Path)
	if n := len(recs); n < 2 || recs[n-2].Type != journal.TypeSessionFinished || recs[n-1].Type != journal.TypeTerminated {
		t.Fatalf("the journal does not end session_finished, terminated")
	}
	if errcode.Of(err) != errcode.Internal || strings.Contains(err.Error(), "the delegated agent failed") {
		t.Errorf("a panic in symbi's ACP client: caller told %s: %v; want internal (docs/journal-format.md), not the agent blamed", errcode.Of(err), err)
	}
	if run.Reason() != reasonAuditFailed {
		t.Errorf("a panic in symbi's ACP client: terminated %s; want %s (docs/journal-format.md)", run.Reason(), reasonAuditFailed)
	}
}

// TestDelegatedInstructionsJournaled: a delegated run's caller instructions (system_prompt,
// and the AGENTS.md guidance) go into the agent's prompt and into started — their digest,
// their length and their text — as a model run's do.
func TestDelegatedInstructionsJournaled(t *testing.T) {
	const instr = "CALLER-INSTRUCTION-7f3a: only touch docs/"
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"message": "done"})
	f := delegatedFixture(t, reg, nil)
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "do it", SystemPrompt: instr, Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	recs := payloads(t, run.Audit().Path)
	var started struct {
		InstructionsBytes int64  `json:"instructions_bytes"`
		Instructions      string `json:"instructions"`
	}
	if err := json.Unmarshal(recs[0].Data, &started); err != nil {
		t.Fatal(err)
	}
	var session struct {
		PromptBytes int64 `json:"prompt_bytes"`
	}
	json.Unmarshal(recs[1].Data, &session)
	if started.InstructionsBytes == 0 || !strings.Contains(started.Instructions, instr) {
		t.Errorf("the agent's session prompt (%d bytes) carried the caller's system_prompt, but started says instructions_bytes %d, instructions %q",
			session.PromptBytes, started.InstructionsBytes, started.Instructions)
	}
}

// TestAgentCancelledNotBlamedOnShutdown: a delegated agent that ends its own turn with
// stop reason cancelled — no cancel_run, the server serving — ends its run cancelled, the
// terminated record and the caller's error saying the agent did it, never naming a
// shutdown that did not happen.
func TestAgentCancelledNotBlamedOnShutdown(t *testing.T) {
	reg, script := fakeExecutor(t)
	writeScript(t, script, map[string]any{"stop_reason": "cancelled"})
	f := delegatedFixture(t, reg, nil)
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "do it", Async: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err = run.Wait(ctx)
	if err == nil {
		t.Fatal("the run released an answer")
	}
	recs := payloads(t, run.Audit().Path)
	last := recs[len(recs)-1]
	if strings.Contains(err.Error(), "shutting down") || strings.Contains(string(last.Data), "shutting down") ||
		!strings.Contains(string(last.Data), "ended its turn cancelled without being asked") {
		t.Errorf("no one cancelled the run and the server is serving, yet the caller is told %q and the journal's %s says %s", err, last.Type, last.Data)
	}
}
