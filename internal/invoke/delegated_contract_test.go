package invoke

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/digest"
	"symbi/internal/dsl"
	"symbi/internal/journal"
)

// contractFixture is delegatedFixture with the given files (no respond policy added) and,
// when root is set, that directory as the one workspace root.
func contractFixture(t *testing.T, script string, steps []any, files map[string]string, root string) *fixture {
	t.Helper()
	reg, sp := fakeExecutor(t)
	b, err := json.Marshal(map[string]any{"steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	if script != "" {
		b = []byte(script)
	}
	if err := os.WriteFile(sp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := files["agents/coder.symbi"]; !ok {
		files["agents/coder.symbi"] = "metadata { executor = \"fake\" }\nagent coder {}\n"
	}
	return newFixture(t, files, func(c *Config) {
		c.Executors = reg
		if root != "" {
			c.WorkspaceRoots = []string{root}
		}
		var err error
		if c.Registry, err = c.Project.LoadRegistry(nil, dsl.Options{Executors: func(n string) bool { _, ok := reg.Get(n); return ok }}); err != nil {
			t.Fatal(err)
		}
	})
}

type contractRec struct {
	Type string
	Data json.RawMessage
}

func contractRun(t *testing.T, f *fixture, ws string) (*Run, []contractRec, error) {
	t.Helper()
	run, err := f.runner.Start(Request{Agent: "coder", Prompt: "Work.", Async: true, Workspace: ws}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err = run.Wait(ctx)
	var out []contractRec
	for _, p := range payloads(t, run.Audit().Path) {
		out = append(out, contractRec{p.Type, p.Data})
	}
	return run, out, err
}

func contractDecisions(recs []contractRec) []journal.PermissionDecided {
	var out []journal.PermissionDecided
	for _, r := range recs {
		if r.Type == journal.TypePermissionDecided {
			var d journal.PermissionDecided
			_ = json.Unmarshal(r.Data, &d)
			out = append(out, d)
		}
	}
	return out
}

// TestContractUseToolContext: the delegation contract, Permissions are Cedar decisions: each request is
// evaluated as principal Agent::"<name>", action Action::"use_tool", resource
// Tool::"<kind>", context title, paths (relative to the workspace), workspace, caller,
// raw_input_sha256. A policy that permits only on every one of those permits the request
// that carries them, and denies the one whose raw input differs.
func TestContractUseToolContext(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	rawSHA := digest.SHA256Hex([]byte(`{"x":1}`))
	pol := fmt.Sprintf(`@id("ctx") permit (principal == Agent::"coder", action == Action::"use_tool", resource == Tool::"edit") when {
  context.caller == "stdio" && context.title == "Edit a" && context.paths == ["src/a.txt"] &&
  context.workspace == %q && context.raw_input_sha256 == %q && context.run_id != "" };
`, ws, rawSHA)
	f := contractFixture(t, "", []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/src/a.txt"},
			"raw_input": map[string]any{"x": 1}}, "expect": "allow"},
		map[string]any{"permission": map[string]any{"tool_call_id": "p2", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/src/a.txt"},
			"raw_input": map[string]any{"x": 2}}, "expect": "reject"},
		map[string]any{"message": "done"},
	}, map[string]string{
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
		"policies/tools.cedar":   pol,
	}, root)
	_, recs, err := contractRun(t, f, ws)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	ds := contractDecisions(recs)
	if len(ds) != 2 || ds[0].Decision != "allow" || len(ds[0].PolicyIDs) != 1 || ds[0].PolicyIDs[0] != "ctx" || ds[1].Decision != "deny" {
		t.Fatalf("decisions %+v", ds)
	}
}

// TestContractUseToolDefaultDeny: the delegation contract: "Default when no policy mentions use_tool:
// deny (symbi never widens an agent's permissions)" — with policies that decide only
// respond, and with no policy files at all. A permission request is answered reject-once,
// an fs read fails, and both are journaled denies; the answer is still released.
func TestContractUseToolDefaultDeny(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"respond only":   {"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n"},
		"no policy file": {},
	} {
		t.Run(name, func(t *testing.T) {
			files["a.txt"] = "secret\n"
			f := contractFixture(t, "", []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "read", "title": "Read a", "locations": []string{"$CWD/a.txt"}}, "expect": "reject"},
				map[string]any{"read": "$CWD/a.txt", "expect_error": true},
				map[string]any{"message": "done"},
			}, files, "")
			_, recs, err := contractRun(t, f, "")
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			ds := contractDecisions(recs)
			if len(ds) != 2 || ds[0].Decision != "deny" || ds[1].Decision != "deny" {
				t.Fatalf("decisions %+v, want two denies", ds)
			}
			for _, r := range recs {
				if r.Type == journal.TypeFSRead {
					t.Fatalf("a file was read without an allow: %s", r.Data)
				}
			}
		})
	}
}

// TestContractJournalFullEndsAuditFailed: the delegation contract: "Journal size stays within its
// limit: past it, the run ends audit_failed rather than dropping records." A real
// journal, filled by an agent that thinks out loud (about 70 MB of thought text): the run
// ends audit_failed, nothing released, the journal verifies complete with
// session_finished and terminated.
func TestContractJournalFullEndsAuditFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 64 MiB journal")
	}
	thought := strings.Repeat("t", 1_000_000)
	f := contractFixture(t, "", []any{
		map[string]any{"thought": thought, "repeat": 70},
		map[string]any{"message": "done"},
	}, map[string]string{"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n"}, "")
	run, recs, err := contractRun(t, f, "")
	if err == nil {
		t.Fatal("the run released an answer although its journal filled")
	}
	if run.Reason() != reasonAuditFailed {
		t.Fatalf("reason %s (err %v), want audit_failed", run.Reason(), err)
	}
	n := len(recs)
	if n < 3 || recs[n-2].Type != journal.TypeSessionFinished || recs[n-1].Type != journal.TypeTerminated {
		t.Fatalf("journal ends %s, %s; want session_finished, terminated", recs[n-2].Type, recs[n-1].Type)
	}
	st, err := os.Stat(run.Audit().Path)
	if err != nil || st.Size() > journal.MaxFileBytes {
		t.Fatalf("journal size %v (%v)", st.Size(), err)
	}
	a := run.Audit()
	pub, err := hex.DecodeString(a.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if rep := journal.Verify(a.Path, ed25519.PublicKey(pub), journal.VerifyOptions{RunID: a.RunID}); !rep.Complete {
		t.Fatalf("journal %s: %+v", rep.Status, rep.Problems)
	}
}

// TestContractDelegatedDeadline: docs/executors.md: "The run's deadline is the
// definition's `with timeout`, or 30 minutes", and started says so (mode delegated, the
// executor named).
func TestContractDelegatedDeadline(t *testing.T) {
	for _, tt := range []struct {
		agent string
		want  int64
	}{
		{"metadata { executor = \"fake\" }\nagent coder {}\n", 30 * 60 * 1000},
		{"metadata { executor = \"fake\" }\nagent coder {\n  with timeout = 5.minutes {}\n}\n", 5 * 60 * 1000},
	} {
		f := contractFixture(t, "", []any{map[string]any{"message": "done"}}, map[string]string{
			"agents/coder.symbi":     tt.agent,
			"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
		}, "")
		_, recs, err := contractRun(t, f, "")
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		var st journal.Started
		if err := json.Unmarshal(recs[0].Data, &st); err != nil {
			t.Fatal(err)
		}
		if st.DeadlineMS != tt.want || st.Mode != ModeDelegated || st.Provider != "acp" || st.Model != "fake" {
			t.Errorf("%q: started deadline_ms %d mode %q provider %q model %q; want %d, delegated, acp, fake", tt.agent, st.DeadlineMS, st.Mode, st.Provider, st.Model, tt.want)
		}
	}
}

// TestContractEveryKindIsItsTool: the delegation contract: each session/request_permission is
// evaluated on resource Tool::"<kind>" (ACP kinds: read, edit, delete, move, search,
// execute, think, fetch, other). A permission of every kind, each permitted only by the
// policy naming its own Tool, is allowed by that policy; a kind ACP does not define is
// decided as other.
func TestContractEveryKindIsItsTool(t *testing.T) {
	kinds := []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}
	var pol strings.Builder
	var steps []any
	for _, k := range kinds {
		fmt.Fprintf(&pol, "@id(\"k-%s\") permit (principal == Agent::\"coder\", action == Action::\"use_tool\", resource == Tool::\"%s\") when { context.title == \"%s\" };\n", k, k, k)
		steps = append(steps, map[string]any{"permission": map[string]any{"tool_call_id": "c-" + k, "kind": k, "title": k, "locations": []string{"$CWD/x-" + k}}, "expect": "allow"})
	}
	steps = append(steps,
		map[string]any{"permission": map[string]any{"tool_call_id": "c-bogus", "kind": "frobnicate", "title": "other"}, "expect": "allow"},
		map[string]any{"permission": map[string]any{"tool_call_id": "c-mismatch", "kind": "read", "title": "edit"}, "expect": "reject"},
		map[string]any{"message": "done"})
	f := contractFixture(t, "", steps, map[string]string{
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n",
		"policies/tools.cedar":   pol.String(),
	}, "")
	_, recs, err := contractRun(t, f, "")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	ds := contractDecisions(recs)
	if len(ds) != len(kinds)+2 {
		t.Fatalf("%d decisions", len(ds))
	}
	for i, k := range kinds {
		if d := ds[i]; d.Kind != k || d.Decision != "allow" || len(d.PolicyIDs) != 1 || d.PolicyIDs[0] != "k-"+k || d.OptionID != "allow" {
			t.Errorf("kind %s: %+v", k, d)
		}
	}
	if d := ds[len(kinds)]; d.Kind != "other" || d.Decision != "allow" {
		t.Errorf("unknown kind: %+v", d)
	}
	if d := ds[len(kinds)+1]; d.Decision != "deny" || d.OptionID != "reject" {
		t.Errorf("mismatch: %+v", d)
	}
}

// TestContractAnswerThroughRespondGate: the delegation contract: "The final answer is the agent's
// message text of the last turn; it passes Action::"respond" exactly like a model answer
// before release." A respond forbid matching the agent's answer denies the run
// (policy_denied, nothing released); the judged digest is session_finished's.
func TestContractAnswerThroughRespondGate(t *testing.T) {
	const answer = "the password is hunter2"
	f := contractFixture(t, "", []any{map[string]any{"message": answer}}, map[string]string{
		"policies/respond.cedar": "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n" +
			"@id(\"no-passwords\") forbid (principal, action == Action::\"respond\", resource) when { context.response like \"*password*\" };\n",
	}, "")
	run, recs, err := contractRun(t, f, "")
	if err == nil || run.Reason() != reasonPolicyDenied {
		t.Fatalf("run: %v (reason %s); want policy_denied", err, run.Reason())
	}
	var fin journal.SessionFinished
	var pe journal.PolicyEvaluated
	for _, r := range recs {
		switch r.Type {
		case journal.TypeSessionFinished:
			_ = json.Unmarshal(r.Data, &fin)
		case journal.TypePolicyEvaluated:
			_ = json.Unmarshal(r.Data, &pe)
		}
	}
	if fin.TextSHA256 != digest.SHA256Hex([]byte(answer)) || pe.TextSHA256 != fin.TextSHA256 || pe.Decision != "deny" || len(pe.PolicyIDs) != 1 || pe.PolicyIDs[0] != "no-passwords" {
		t.Fatalf("session_finished %+v, policy_evaluated %+v", fin, pe)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("the withheld answer leaks in the error: %v", err)
	}
}
