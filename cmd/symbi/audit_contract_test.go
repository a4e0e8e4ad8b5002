package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

type verifyReport struct {
	Status         string `json:"status"`
	Complete       bool   `json:"complete"`
	Records        int    `json:"records"`
	TailBytes      int    `json:"tail_bytes"`
	TerminalReason string `json:"terminal_reason"`
	Released       bool   `json:"released"`
	Problems       []struct {
		Line    int    `json:"line"`
		Message string `json:"message"`
	} `json:"problems"`
}

// TestAuditVerifyJSONReport: "`--json` for a machine report (records, tail bytes,
// complete, terminal reason, problems found with their line numbers)", and the exit codes
// 0 / 2 / 1.
func TestAuditVerifyJSONReport(t *testing.T) {
	exp := loadAuditExpected(t)
	cases := []struct {
		file     string
		exit     int
		status   string
		complete bool
		records  int
		tail     bool
		reason   string // checked for valid journals only
		problem  int    // a problem's line, 0 when none is expected
	}{
		{"allowed.jsonl", 0, "complete", true, 5, false, "completed", 0},
		{"denied.jsonl", 0, "complete", true, 5, false, "policy_denied", 0},
		{"crashed.jsonl", 2, "incomplete", false, 3, false, "", 0},
		{"torn.jsonl", 2, "incomplete", false, 4, true, "", 0},
		{"tampered-payload.jsonl", 1, "invalid", false, 5, false, "", 3},
		{"swapped.jsonl", 1, "invalid", false, 5, false, "", 2},
	}
	for _, c := range cases {
		code, out, _ := runCLI(t, "", "audit", "verify", "--json", "--public-key", exp.PublicKey, filepath.Join(auditVectors, c.file))
		var r verifyReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: %v\n%s", c.file, err, out)
		}
		if code != c.exit || r.Status != c.status || r.Complete != c.complete || r.Records != c.records || (r.TailBytes > 0) != c.tail || (c.exit != 1 && r.TerminalReason != c.reason) {
			t.Errorf("%s: exit %d, report %+v", c.file, code, r)
		}
		if c.problem != 0 && (len(r.Problems) == 0 || r.Problems[0].Line != c.problem) {
			t.Errorf("%s: problems %+v, want the first on line %d", c.file, r.Problems, c.problem)
		}
		if c.problem == 0 && len(r.Problems) != 0 {
			t.Errorf("%s: problems %+v", c.file, r.Problems)
		}
	}
	// The torn tail's byte count, in the human report as in the JSON one.
	data, _ := os.ReadFile(filepath.Join(auditVectors, "torn.jsonl"))
	tail := len(data) - bytes.LastIndexByte(data, '\n') - 1
	code, out, _ := runCLI(t, "", "audit", "verify", "--public-key", exp.PublicKey, filepath.Join(auditVectors, "torn.jsonl"))
	if code != 2 || !strings.Contains(out, strconv.Itoa(tail)+" unverified bytes") {
		t.Errorf("torn: exit %d, %q lacks the tail's %d bytes", code, out, tail)
	}
}

// TestAuditVerifyInvalidReportNamesTail: "A final fragment without `\n` is an unverified
// tail: never trusted, reported with its byte count." The human report of an invalid
// journal that also ends in a torn fragment says so, with the count, as --json does.
func TestAuditVerifyInvalidReportNamesTail(t *testing.T) {
	exp := loadAuditExpected(t)
	bad, _ := os.ReadFile(filepath.Join(auditVectors, "tampered-payload.jsonl"))
	bad = append(bad, []byte(`{"payload":{"v":1,"run_id":"x"`)...)
	tail := len(`{"payload":{"v":1,"run_id":"x"`)
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI(t, "", "audit", "verify", "--json", "--public-key", exp.PublicKey, path)
	var r verifyReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.TailBytes != tail {
		t.Fatalf("--json: exit %d, %v, %s", code, err, out)
	}
	code, out, _ = runCLI(t, "", "audit", "verify", "--public-key", exp.PublicKey, path)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("a torn tail of %d unverified bytes", tail)) {
		t.Errorf("human report of an invalid journal with a %d-byte unverified tail does not report it:\n%s", tail, out)
	}
}

// TestAuditVerifyHeadCase: --head is the receipt's SHA-256 in lowercase hex, as receipts
// give it; in capitals — the same hash — it is refused as malformed (a usage error naming
// the rule), not reported as a receipt that does not match, which is a sign of tampering.
func TestAuditVerifyHeadCase(t *testing.T) {
	exp := loadAuditExpected(t)
	for _, v := range exp.Vectors {
		if v.File != "allowed.jsonl" || v.Head == "" || v.Exit != 0 {
			continue
		}
		path := filepath.Join(auditVectors, v.File)
		if code, out, errOut := runCLI(t, "", "audit", "verify", path, "--public-key", exp.PublicKey, "--head", v.Head, "--records", strconv.Itoa(v.Records)); code != 0 {
			t.Fatalf("the allowed run's own receipt: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut := runCLI(t, "", "audit", "verify", path, "--public-key", exp.PublicKey, "--head", strings.ToUpper(v.Head), "--records", strconv.Itoa(v.Records))
		if code != 1 || out != "" || !strings.Contains(errOut, "--head must be 64 lowercase hex digits") {
			t.Errorf("the receipt's head in capitals: exit %d, want 1 and a usage error\n%s%s", code, out, errOut)
		}
		return
	}
	t.Fatal("no receipt vector")
}
