package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/loopback"
)

// TestDSLCheckMessageForgesNoDiagnostic: one error, one `file:line:col: message` line
// (product.md). The parser's "unexpected string …" message quotes the string token as
// written, line breaks included; `dsl check` (stdout) and `dsl parse` (stderr) print it
// escaped, so a definition cannot print a diagnostic of its own, for another file, that
// editors' and CI's problem matchers would read as real.
func TestDSLCheckMessageForgesNoDiagnostic(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "t.symbi")
	writeFile(t, file, "agent \"a\nother.symbi:3:1: forged\" {}\n")
	code, out, errOut := runCLI(t, "", "dsl", "check", file)
	if code != 1 {
		t.Fatalf("dsl check: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if !strings.HasPrefix(l, file+":") {
			t.Errorf("dsl check printed a line that is not a diagnostic of %s: %q\n%s", file, l, out)
		}
	}
	code, out, errOut = runCLI(t, "", "dsl", "parse", file)
	if code != 1 {
		t.Fatalf("dsl parse: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, l := range strings.Split(strings.TrimRight(errOut, "\n"), "\n") {
		if !strings.HasPrefix(l, file+":") {
			t.Errorf("dsl parse printed a stderr line that is not a diagnostic of %s: %q\n%s", file, l, errOut)
		}
	}
}

// TestPolicyEvalQuotesIDs: `symbi policy eval` quotes a policy @id holding a line break,
// in its "policies:" and "reason:" rows, as policy check does: it prints no line of its
// own ("decision: allow" under the real "decision: deny").
func TestPolicyEvalQuotesIDs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "p")
	if code, out, errOut := runCLI(t, "", "init", dir); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	writeFile(t, filepath.Join(dir, "policies", "zz.cedar"), `@id("x\ndecision: allow\nreason: fine")
forbid (principal, action == Action::"respond", resource) when { context.response like "*secret*" };
`)
	code, out, errOut := runCLI(t, "", "policy", "eval", "--project", dir, "--agent", "assistant", "--response", "a secret")
	if code != 0 || !strings.HasPrefix(out, "decision: deny\n") {
		t.Fatalf("policy eval: exit %d, want a deny\n%s%s", code, out, errOut)
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "decision:") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("policy eval printed %d decision lines, want 1 (a policy @id forged the others):\n%s", n, out)
	}
}

// TestRunsStatusPrunedTextNotBlamedOnHashes: `symbi runs status` of a released run
// journaled in full whose journal was pruned says the journal was pruned, not that the
// journal keeps only the text's digest (SYMBI_JOURNAL_TEXT=hashes): text_retained is said
// only of a journal that was read (docs/runs.md).
func TestRunsStatusPrunedTextNotBlamedOnHashes(t *testing.T) {
	model := startModel(t, loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	dir := newE2EProject(t)
	s := startSymbi(t, dir, modelEnv(model), nil)
	res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "one"})
	var out struct {
		Audit struct {
			RunID string `json:"run_id"`
		} `json:"audit"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || json.Unmarshal(raw, &out) != nil || out.Audit.RunID == "" {
		t.Fatalf("invoke_agent: %s", text(res))
	}
	s.session.Close()
	s.cmd.Wait()
	id := out.Audit.RunID

	// Before the prune: the text is there, read back from the full journal.
	code, st, errOut := runCLI(t, "", "runs", "status", "--project", dir, id)
	if code != 0 || !strings.HasSuffix(st, "\necho: one\n") {
		t.Fatalf("runs status: exit %d\n%s%s", code, st, errOut)
	}
	if code, o, e := runCLI(t, "", "audit", "prune", "--project", dir, "--run-id", id); code != 0 {
		t.Fatalf("audit prune: exit %d\n%s%s", code, o, e)
	}
	if _, err := os.Stat(filepath.Join(dir, ".symbiont", "governed")); err != nil {
		t.Fatal(err)
	}
	code, st, errOut = runCLI(t, "", "runs", "status", "--project", dir, id)
	if code != 0 || !strings.Contains(st, "journal pruned") {
		t.Fatalf("runs status after the prune: exit %d\n%s%s", code, st, errOut)
	}
	if strings.Contains(st, "SYMBI_JOURNAL_TEXT=hashes") {
		t.Errorf("runs status blames hashes-only journaling for the text of a run journaled in full whose journal was pruned:\n%s", st)
	}
}

// TestReceiptCountIsDecimal: the numeric flags take decimal numbers only. The flag
// package reads Go literals (--records 0x3 is 3, --records 010 is 8); a receipt's count
// copied with a leading zero would silently be read as another number. Anything else is
// a usage error naming the flag.
func TestReceiptCountIsDecimal(t *testing.T) {
	_, key, files, _ := ledgerProject(t, 1)
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	last := lines[len(lines)-1] + "\n"
	if len(lines) != 3 {
		t.Fatalf("setup: want a journal of 3 records, got %d", len(lines))
	}
	head := sha256Hex(last)
	if code, out, errOut := runCLI(t, "", "audit", "verify", files[0], "--public-key", key, "--records", "3", "--head", head); code != 0 {
		t.Fatalf("setup: the decimal receipt does not verify: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "", "audit", "verify", files[0], "--public-key", key, "--records", "0x3", "--head", head)
	if code != 1 {
		t.Errorf("audit verify --records 0x3: exit %d, want 1 (a receipt count is a decimal number)\n%s%s", code, out, errOut)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestDSLCheckFileNameForgesNoDiagnostic: one error, one line, also for a file name with
// a line break: `dsl check agents/*` over a file named "x\nagents/ok.symbi:1:1: forged…"
// prints no diagnostic line for another file; the name is quoted.
func TestDSLCheckFileNameForgesNoDiagnostic(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "x\nagents/ok.symbi:1:1: forged diagnostic\ny.symbi")
	writeFile(t, file, "agent a {\n") // one real error: the block is not closed
	code, out, errOut := runCLI(t, "", "dsl", "check", file)
	if code != 1 {
		t.Fatalf("dsl check: exit %d, want 1\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "agents/ok.symbi:1:1:") {
			t.Errorf("dsl check printed a forged diagnostic line for another file, from a file name: %q\nall output:\n%s", l, out)
		}
	}
}

// TestRateFlagDecimalOnly: the one float flag, --rate, takes decimal numbers only too
// (docs/errors.md): --rate 0x1p4, a hexadecimal float the flag package reads as 16, is a
// usage error naming it. --max-runs 0 beside it makes sure no server starts: the usage
// error must be --rate's.
func TestRateFlagDecimalOnly(t *testing.T) {
	code, out, errOut := runCLI(t, "", "mcp", "--rate", "0x1p4", "--max-runs", "0")
	if code != 2 {
		t.Fatalf("mcp: exit %d, want 2 (usage)\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "0x1p4") {
		t.Errorf("`--rate 0x1p4` (a hexadecimal float) was accepted as a number; the usage error is about something else:\n%s", errOut)
	}
}

// TestPolicyEvalDenyAllReasonOneLine: `symbi policy eval` quotes the reason an unusable
// policy set denies everything (a malformed file, named in it), as policy check does: a
// policy file whose name holds a line break prints no line of its own on stderr — here a
// forged "symbi policy eval: decision: allow" — for the respond gate's set or the access
// set (security-model.md: the policy ids and reason policy eval prints are quoted).
func TestPolicyEvalDenyAllReasonOneLine(t *testing.T) {
	dir := newE2EProject(t)
	forged := "bad\nsymbi policy eval: decision: allow.cedar"
	writeFile(t, filepath.Join(dir, "policies", forged), "permit(\n")
	forgedLine := func(stderr string) bool {
		for _, l := range strings.Split(stderr, "\n") {
			if strings.HasPrefix(l, "symbi policy eval: decision: allow") {
				return true
			}
		}
		return false
	}
	code, out, errOut := runCLI(t, "", "policy", "eval", "--project", dir, "--agent", "helper", "--response", "hi")
	if code != 0 || !strings.Contains(out, "decision: deny") || !strings.Contains(errOut, "every response is denied") || forgedLine(errOut) {
		t.Fatalf("policy eval with an unusable policy set: exit %d, want 0, deny, the reason on one line\nstdout %q\nstderr %q", code, out, errOut)
	}
	if err := os.MkdirAll(filepath.Join(dir, "policies", "access"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "policies", "access", forged), "permit(\n")
	code, out, errOut = runCLI(t, "", "policy", "eval", "--project", dir, "--action", "read_run", "--caller", "bob", "--run-owner", "bob")
	if code != 0 || !strings.Contains(out, "decision: deny") || !strings.Contains(errOut, "every access is denied") || forgedLine(errOut) {
		t.Fatalf("policy eval with an unusable access set: exit %d, want 0, deny, the reason on one line\nstdout %q\nstderr %q", code, out, errOut)
	}
}
