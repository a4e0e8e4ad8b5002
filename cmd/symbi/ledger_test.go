package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"symbi/internal/loopback"
)

// TestE2ELedger: runs served by the real binary are in the project ledger; the project
// verifies whole, with a checkpoint that stock note tooling accepts; a run's entry has an
// inclusion proof; a pruned journal is recorded and the project still verifies; a deleted
// journal, and a ledger rolled back below a saved checkpoint, do not.
func TestE2ELedger(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t, loopback.WithReply(loopback.Reply{Text: "fine"}))
	s := startSymbi(t, dir, modelEnv(model), nil)
	var runs []string
	for range 3 {
		res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hi"})
		if res.IsError {
			t.Fatal(text(res))
		}
		runs = append(runs, structured(t, res).Audit.RunID)
	}
	s.session.Close()
	s.cmd.Wait()

	code, keyOut, _ := runCLI(t, "", "audit", "key", "--project", dir)
	key := strings.TrimSpace(keyOut)
	_, vkey, _ := runCLI(t, "", "audit", "key", "--project", dir, "--note")
	code, cp, errOut := runCLI(t, "", "audit", "checkpoint", "--project", dir)
	if code != 0 {
		t.Fatalf("checkpoint: exit %d: %s", code, errOut)
	}
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		t.Fatalf("note verifier key %q: %v", vkey, err)
	}
	if n, err := note.Open([]byte(cp), note.VerifierList(v)); err != nil || !strings.Contains(n.Text, "\n3\n") {
		t.Fatalf("note.Open of the checkpoint: %v\n%s", err, cp)
	}
	cpFile := filepath.Join(t.TempDir(), "cp")
	os.WriteFile(cpFile, []byte(cp), 0o600)
	verify := func() (int, string) {
		code, out, _ := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", key, "--checkpoint", cpFile)
		return code, out
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "complete: 3 ledger entries, 3 journals") {
		t.Fatalf("verify --project: exit %d\n%s", code, out)
	}
	code, proof, errOut := runCLI(t, "", "audit", "prove", "--project", dir, "--run-id", runs[1])
	var p struct {
		Index int64    `json:"index"`
		Proof []string `json:"proof"`
	}
	if code != 0 || json.Unmarshal([]byte(proof), &p) != nil || p.Index != 1 || len(p.Proof) == 0 {
		t.Fatalf("prove: exit %d %s\n%s", code, errOut, proof)
	}
	if code, out, errOut := runCLI(t, "", "audit", "prune", "--project", dir, "--run-id", runs[0]); code != 0 || !strings.Contains(out, "pruned ") {
		t.Fatalf("prune: exit %d\n%s%s", code, out, errOut)
	}
	if code, out := verify(); code != 0 {
		t.Fatalf("verify after prune: exit %d\n%s", code, out)
	}
	// A journal deleted behind the ledger's back.
	for _, f := range journals(t, dir) {
		if strings.Contains(f, runs[2]) {
			os.Remove(f)
		}
	}
	if code, out := verify(); code != 1 || !strings.Contains(out, "the journal is missing") {
		t.Fatalf("verify with a deleted journal: exit %d\n%s", code, out)
	}
	// The ledger rolled back to one line: caught by the checkpoint saved before.
	ledgerPath := filepath.Join(dir, ".symbiont", "ledger.jsonl")
	data, _ := os.ReadFile(ledgerPath)
	os.WriteFile(ledgerPath, data[:strings.IndexByte(string(data), '\n')+1], 0o600)
	if code, out := verify(); code != 1 || !strings.Contains(out, "truncated or rolled back") {
		t.Fatalf("verify with a rolled-back ledger: exit %d\n%s", code, out)
	}
}

// TestAuditCheckpointInvalidLedgerCode: a ledger that does not verify is
// `audit_unavailable` (docs/errors.md: "a ledger that does not verify — every run query
// then fails closed, naming the line"), as `symbi runs …` report it; `internal` is "a bug
// or an unexpected system failure". So say `audit checkpoint` and `audit prove`.
func TestAuditCheckpointInvalidLedgerCode(t *testing.T) {
	dir, _, _, _ := ledgerProject(t, 2)
	p := filepath.Join(dir, ".symbiont", "ledger.jsonl")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`"reason":"cancelled"`), []byte(`"reason":"completed"`), 1)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"audit", "checkpoint", "--project", dir},
		{"audit", "prove", "--project", dir, "--run-id", "run-a"},
	} {
		code, _, errOut := runCLI(t, "", args...)
		if code != 1 || !strings.Contains(errOut, "audit_unavailable") || strings.Contains(errOut, "internal") {
			t.Errorf("%v on an edited ledger: exit %d, stderr %q; want exit 1, audit_unavailable", args[:2], code, errOut)
		}
	}
}

// TestAuditCheckpointLinkedLedgerCode: a ledger that is a symbolic link is refused, as
// every reader of the ledger refuses it, and the refusal is `audit_unavailable` (the
// ledger cannot be used), as `symbi runs …` report it — not `internal`.
func TestAuditCheckpointLinkedLedgerCode(t *testing.T) {
	dir, _, _, _ := ledgerProject(t, 2)
	p := filepath.Join(dir, ".symbiont", "ledger.jsonl")
	elsewhere := filepath.Join(t.TempDir(), "ledger.jsonl")
	if err := os.Rename(p, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, p); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"audit", "checkpoint", "--project", dir},
		{"audit", "prove", "--project", dir, "--run-id", "run-a"},
		{"runs", "list", "--project", dir},
	} {
		code, out, errOut := runCLI(t, "", args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "audit_unavailable") || !strings.Contains(errOut, "symbolic link") {
			t.Errorf("%v on a linked ledger: exit %d, stdout %q, stderr %q; want exit 1, audit_unavailable naming the link", args[:2], code, out, errOut)
		}
	}
}
