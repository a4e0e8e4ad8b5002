package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemo runs the demo against a copy of the repository's example project, so that
// "make demo" is known to work.
func TestDemo(t *testing.T) {
	bins, project := faultDemoSetup(t)
	bin, fake := bins["symbi"], bins["fake"]
	var out bytes.Buffer
	if err := demo(&out, bin, fake, project, "reviewer"); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "level=") || !strings.Contains(out.String(), "its log: ") {
		t.Errorf("the server's log is mixed into the narrative, or not named:\n%s", out.String())
	}
	for _, want := range []string{"answer: ", "valid and complete", "policy_denied: ", "no-private-keys", "refused_definition: ", "start_run ", "event 4: terminated", "resolution: accepted",
		"pair_coder refused: rule 3 at ", "--executors", "delegated to the executor coder", "runs only through start_run",
		"read " + delegatedRead + ": allow (policy tools-read-search)", "fs_read", `execute "go test ./..." in .: deny (policy tools-no-execute)`,
		"text (read back from the journal): " + delegatedAnswer,
		"approval_required: ", "by gate " + gatePolicy, "status: awaiting_approval, caller alice (token), text withheld", "approval: gate " + gatePolicy,
		`access_denied: caller "alice" may not approve_run`, "a caller may not approve a run it started", "status: completed, approved by bob (token)",
		"text (read back from the journal): " + gatedAnswer, "held at the gate " + gatePolicy, "approval_decided: approve by bob (token, via approve_run)",
		`approval: {"run_id":`, "terminated completed (text released)", "symbi mcp --http exited 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
