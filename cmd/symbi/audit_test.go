package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const auditVectors = "../../testdata/journal"

type auditExpected struct {
	PublicKey string `json:"public_key"`
	Vectors   []struct {
		File    string `json:"file"`
		RunID   string `json:"run_id"`
		Head    string `json:"head"`
		Records int    `json:"records"`
		Exit    int    `json:"exit"`
	} `json:"vectors"`
}

func loadAuditExpected(t *testing.T) auditExpected {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(auditVectors, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exp auditExpected
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatal(err)
	}
	return exp
}

// TestAuditVerifyVectors runs symbi audit verify on every published vector and checks the
// documented exit code, in human and JSON form.
func TestAuditVerifyVectors(t *testing.T) {
	exp := loadAuditExpected(t)
	for _, v := range exp.Vectors {
		args := []string{"audit", "verify", filepath.Join(auditVectors, v.File), "--public-key", exp.PublicKey}
		if v.RunID != "" {
			args = append(args, "--run-id", v.RunID)
		}
		if v.Head != "" {
			args = append(args, "--head", v.Head, "--records", itoa(v.Records))
		}
		code, out, errOut := runCLI(t, "", args...)
		if code != v.Exit {
			t.Errorf("%v: exit %d, want %d\n%s%s", args[2:], code, v.Exit, out, errOut)
		}
		want := map[int]string{0: "valid and complete", 1: "INVALID", 2: "INCOMPLETE"}[v.Exit]
		if !strings.Contains(out, want) {
			t.Errorf("%s: output %q lacks %q", v.File, out, want)
		}
		code, out, _ = runCLI(t, "", append(args, "--json")...)
		var r struct {
			Status   string `json:"status"`
			Problems []struct {
				Line int `json:"line"`
			} `json:"problems"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != v.Exit || (v.Exit == 1) != (len(r.Problems) > 0) {
			t.Errorf("%s --json: exit %d, %v, %q", v.File, code, err, out)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestAuditVerifyDirAndUsage(t *testing.T) {
	exp := loadAuditExpected(t)
	// Eight of the vectors are journals of one run: in a directory, each is flagged; denied,
	// delegated and gated are whole.
	code, out, _ := runCLI(t, "", "audit", "verify", "--public-key", exp.PublicKey, auditVectors)
	if code != 1 || strings.Count(out, "INVALID") != 8 || strings.Count(out, "valid and complete") != 3 || !strings.Contains(out, "each run has exactly one journal") {
		t.Errorf("directory: exit %d\n%s", code, out)
	}
	// A governed directory where one run's journal was copied over another's: the copy
	// is caught by its name alone, and the directory by the repeated run.
	governed := filepath.Join(auditVectors, "governed")
	copied := filepath.Join(governed, "5ea0897b-c36e-5f04-bdd0-fc151f6172eb.1c8f9b63-7a2e-4d4b-8f3c-6e5d4c3b2a11.jsonl")
	if code, out, _ := runCLI(t, "", "audit", "verify", copied, "--public-key", exp.PublicKey); code != 1 || !strings.Contains(out, "a journal must keep the name its writer gave it") {
		t.Errorf("copied file: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, "", "audit", "verify", governed, "--public-key", exp.PublicKey); code != 1 || strings.Count(out, "INVALID") != 2 || !strings.Contains(out, "also recorded in") {
		t.Errorf("governed directory: exit %d\n%s", code, out)
	}
	good := t.TempDir()
	for _, f := range []string{"allowed.jsonl", "crashed.jsonl"} {
		b, _ := os.ReadFile(filepath.Join(auditVectors, f))
		os.WriteFile(filepath.Join(good, f), b, 0o600)
	}
	if code, out, _ := runCLI(t, "", "audit", "verify", good, "--public-key", exp.PublicKey, "--json"); code != 2 || !strings.HasPrefix(out, "[") {
		t.Errorf("directory with a crashed run: exit %d\n%s", code, out)
	}
	allowed := filepath.Join(auditVectors, "allowed.jsonl")
	for _, args := range [][]string{
		{allowed},
		{allowed, "--public-key", "zz"},
		{allowed, "--public-key", strings.ToUpper(exp.PublicKey)},
		{allowed, "--public-key", exp.PublicKey, "--head", "ab"},
		{auditVectors, "--public-key", exp.PublicKey, "--run-id", "x"},
		{"--public-key", exp.PublicKey},
		{allowed, "--no-such-flag"},
	} {
		if code, _, _ := runCLI(t, "", append([]string{"audit", "verify"}, args...)...); code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
	}
}

func TestAuditShow(t *testing.T) {
	code, out, _ := runCLI(t, "", "audit", "show", filepath.Join(auditVectors, "torn.jsonl"))
	for _, want := range []string{"not verified", "started", "agent=greeter", "prompt=<31 bytes>", "inference_finished", "http_status=200", "policy_evaluated", "decision=allow", "torn tail of"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Errorf("exit %d", code)
	}
	if code, _, _ := runCLI(t, "", "audit", "show", filepath.Join(t.TempDir(), "absent.jsonl")); code != 1 {
		t.Errorf("absent journal: exit %d", code)
	}
}

func TestAuditKey(t *testing.T) {
	project := t.TempDir()
	if code, _, errOut := runCLI(t, "", "audit", "key", "--project", project); code != 1 || !strings.Contains(errOut, "no signing key yet") || !strings.Contains(errOut, "--create") {
		t.Errorf("no key, no --create: exit %d, %q", code, errOut)
	}
	code, created, _ := runCLI(t, "", "audit", "key", "--project", project, "--create")
	if code != 0 || len(strings.TrimSpace(created)) != 64 {
		t.Fatalf("--create: exit %d, %q", code, created)
	}
	if code, again, _ := runCLI(t, "", "audit", "key", "--project", project); code != 0 || again != created {
		t.Errorf("second call: exit %d, %q, want %q", code, again, created)
	}
	keyFile := filepath.Join(t.TempDir(), "k")
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "SYMBI_AUDIT_KEY_FILE" {
			return keyFile
		}
		return ""
	}}
	if code := run(e, []string{"audit", "key", "--project", project, "--create"}); code != 0 || out.String() == created {
		t.Fatalf("override: exit %d, %q %q", code, out.String(), errb.String())
	}
	if st, err := os.Stat(keyFile); err != nil || st.Size() != 32 {
		t.Errorf("override key file: %v", err)
	}
}

// TestVerifyReportQuotesOddNames: the human report of symbi audit verify DIR names each
// journal by its path, and a file name may hold any byte but '/' and NUL: newlines,
// carriage returns, ANSI escapes. Printed raw, whoever can create a file in the directory
// (no key needed) could print a line "…: valid and complete" for a journal that is not,
// or erase an INVALID line on a terminal. docs/journal-format.md, "symbi audit": "`verify`
// prints one line per journal". So: one line per journal, a path with a control character
// printed quoted, reading as a name.
func TestVerifyReportQuotesOddNames(t *testing.T) {
	exp := loadAuditExpected(t)
	dir := t.TempDir()
	tampered, err := os.ReadFile(filepath.Join(auditVectors, "tampered-payload.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "allowed.jsonl"), tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	evil := "zz\n" + dir + "/allowed.jsonl: valid and complete: 5 records, run 0b7e8a52-6f1d-4c3a-9e2b-5d4c3b2a1f00, terminated completed (text released)\n\x1b[2K.jsonl"
	evil = strings.ReplaceAll(evil, "/", "\u2215") // a name holds no '/': DIVISION SLASH looks the same
	if err := os.WriteFile(filepath.Join(dir, evil), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI(t, "", "audit", "verify", "--public-key", exp.PublicKey, dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	if strings.ContainsAny(out, "\x1b\r") || !strings.Contains(out, strconv.Quote(filepath.Join(dir, evil))+": INVALID") {
		t.Errorf("the report does not show the name quoted, as a name:\n%s", out)
	}
	reports := 0
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !strings.HasPrefix(l, "  ") {
			reports++
		}
	}
	if reports != 2 {
		t.Errorf("%d unindented report lines for 2 journals:\n%s", reports, out)
	}
}

// TestVerifyReportQuotesOddNamesInProblems: the quoting of odd names added to
// symbi audit verify DIR (TestVerifyReportQuotesOddNames) covers the report line, not the
// problem lines under it, which print the problem's message raw — and a problem's message
// can hold a file's name: a symlink's path ("… is a symlink"), or the other files of a run
// recorded twice. A name with a line break and an ANSI escape then prints a fake report
// line again.
func TestVerifyReportQuotesOddNamesInProblems(t *testing.T) {
	exp := loadAuditExpected(t)
	for _, how := range []string{"symlink", "copy"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			valid, err := os.ReadFile(filepath.Join(auditVectors, "allowed.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "a.jsonl"), valid, 0o600); err != nil {
				t.Fatal(err)
			}
			evil := "zz\n" + "\u2215tmp\u2215x.jsonl: valid and complete: 5 records\n\x1b[2K.jsonl"
			if how == "symlink" {
				err = os.Symlink("a.jsonl", filepath.Join(dir, evil))
			} else {
				err = os.WriteFile(filepath.Join(dir, evil), valid, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			_, out, _ := runCLI(t, "", "audit", "verify", "--public-key", exp.PublicKey, dir)
			if strings.ContainsAny(out, "\x1b") {
				t.Errorf("an odd file name printed raw (ESC, line break) in a problem line:\n%q", out)
			}
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if strings.Contains(l, ": valid and complete") && !strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, `"`) && !strings.HasPrefix(l, dir) {
					t.Errorf("a fake report line: %q", l)
				}
			}
		})
	}
}
