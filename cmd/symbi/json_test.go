package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

func TestDSLCheckJSON(t *testing.T) {
	bad := filepath.Join("..", "..", "testdata", "dsl", "invalid", "01_unterminated_string.symbi")
	good := filepath.Join("..", "..", "agents", "reviewer.symbi")
	code, out, _ := runCLI(t, "", "dsl", "check", "--json", bad, good)
	var diags []struct {
		File         string
		Line, Column int
		Message      string
	}
	if err := json.Unmarshal([]byte(out), &diags); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if code != 1 || len(diags) != 1 || diags[0].File != bad || diags[0].Line != 2 || diags[0].Column != 17 || diags[0].Message != "unterminated string" {
		t.Fatalf("exit %d, diagnostics %+v", code, diags)
	}
	code, out, _ = runCLI(t, "", "dsl", "check", "--json", good)
	if code != 0 || out != "[]\n" {
		t.Fatalf("clean file: exit %d, output %q", code, out)
	}
}

func TestAuditShowJSON(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "journal", "torn.jsonl")
	code, out, _ := runCLI(t, "", "audit", "show", "--json", path)
	var shown struct {
		Path     string
		Verified bool
		Entries  []struct {
			Line      int
			Seq, Type string
			Data      json.RawMessage
		}
		TailBytes int `json:"tail_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if code != 0 || shown.Verified || len(shown.Entries) == 0 || shown.Entries[0].Type != "started" || shown.Entries[0].Seq != "0" || shown.TailBytes == 0 {
		t.Fatalf("exit %d, shown %+v", code, shown)
	}
}
