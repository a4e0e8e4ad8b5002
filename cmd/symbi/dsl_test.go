package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"symbi/internal/dsl"
)

func writeDSLFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDSLCheck(t *testing.T) {
	valid, err := filepath.Glob("../../testdata/dsl/valid/*.symbi")
	if err != nil || len(valid) == 0 {
		t.Fatalf("no valid corpus: %v", err)
	}
	code, out, errOut := runCLI(t, "", append([]string{"dsl", "check"}, valid...)...)
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("valid corpus: code %d, out %q, err %q", code, out, errOut)
	}

	invalid, err := filepath.Glob("../../testdata/dsl/invalid/*.symbi")
	if err != nil || len(invalid) == 0 {
		t.Fatalf("no invalid corpus: %v", err)
	}
	for _, p := range invalid {
		want, err := os.ReadFile(strings.TrimSuffix(p, ".symbi") + ".err")
		if err != nil {
			t.Fatal(err)
		}
		code, out, _ := runCLI(t, "", "dsl", "check", p)
		if code != 1 || !strings.HasPrefix(out, p+":"+string(want)) {
			t.Errorf("%s: code %d, out %q, want prefix %q", p, code, out, p+":"+string(want))
		}
	}

	dir := t.TempDir()
	good := writeDSLFile(t, dir, "good.symbi", "agent good {}")
	bad := writeDSLFile(t, dir, "bad.symbi", "agent bad {\n  with x = \n}")
	code, out, _ = runCLI(t, "", "dsl", "check", good, bad)
	if code != 1 || out != bad+":3:1: unexpected \"}\", expected an array or a value\n" {
		t.Errorf("mixed: code %d, out %q", code, out)
	}
	code, _, errOut = runCLI(t, "", "dsl", "check", filepath.Join(dir, "missing.symbi"))
	if code != 1 || !strings.Contains(errOut, "missing.symbi") {
		t.Errorf("missing file: code %d, err %q", code, errOut)
	}
	if code, _, _ := runCLI(t, "", "dsl", "check"); code != 2 {
		t.Errorf("no arguments: code %d, want 2", code)
	}
}

func TestDSLLimits(t *testing.T) {
	dir := t.TempDir()
	deep := writeDSLFile(t, dir, "deep.symbi", "function f() { let x = "+strings.Repeat("(", 100000)+"1"+strings.Repeat(")", 100000)+"; }")
	brackets := writeDSLFile(t, dir, "brackets.symbi", "metadata { a = "+strings.Repeat("[", 100000))
	big := writeDSLFile(t, dir, "big.symbi", strings.Repeat("#", dsl.MaxSourceBytes)+"x")
	tests := []struct {
		path, want string
	}{
		{deep, deep + ":1:279: brackets nested deeper than 256 levels\n"},
		{brackets, brackets + ":1:271: brackets nested deeper than 256 levels\n"},
		{big, big + ":1:1048577: source is more than 1048576 bytes (1 MiB), the limit\n"},
	}
	for _, tt := range tests {
		code, out, _ := runCLI(t, "", "dsl", "check", tt.path)
		if code != 1 || out != tt.want {
			t.Errorf("check %s: code %d, out %q, want %q", filepath.Base(tt.path), code, out, tt.want)
		}
		code, out, errOut := runCLI(t, "", "dsl", "parse", tt.path)
		var r dsl.Result
		if code != 1 || json.Unmarshal([]byte(out), &r) != nil || r.Valid || len(r.Errors) != 1 || errOut != tt.want {
			t.Errorf("parse %s: code %d, stderr %q, result %+v", filepath.Base(tt.path), code, errOut, r)
		}
	}
	// Standard input gets the same limit.
	code, _, errOut := runCLI(t, strings.Repeat(" ", dsl.MaxSourceBytes+1), "dsl", "parse", "-")
	if code != 1 || !strings.Contains(errOut, "source is more than 1048576 bytes (1 MiB), the limit") {
		t.Errorf("stdin: code %d, stderr %q", code, errOut)
	}
}

func TestDSLParse(t *testing.T) {
	tests := []struct {
		name, src string
		code      int
		admitted  bool
		refusal   string
	}{
		{"declared", "agent declared {}", 0, true, ""},
		{"reader", "metadata { description = \"reader\", executor = \"orga\" } agent reader() { capabilities =\n[\"read\"] with sandbox = \"docker\", timeout = 3.seconds {} }", 0, true, ""},
		{"selection", "agent a {}\nagent a {}", 0, false, `selection at 2:1: agent "a" is declared more than once`},
		{"rule 2", "agent a {}\nschedule s {}", 0, false, `rule 2 at 2:1: top-level schedule "s" requires an executable route`},
		{"rule 3", "metadata { executor = \"shell\" }\nagent a {}", 0, false, `rule 3 at 1:23: executor "shell" is not registered with this server (symbi mcp --executors FILE); only "orga" runs without one`},
		{"rule 4", "agent a(x: int) {}", 0, false, `rule 4 at 1:9: agent "a" declares parameters`},
		{"rule 5", "agent a { with sandbox = \"vm\" {} }", 0, false, `rule 5 at 1:16: sandbox "vm" is not one of docker|tier1, gvisor|tier2, firecracker|tier3, e2b`},
		{"rule 6", "agent a { policy p { audit: true } }", 0, false, `rule 6 at 1:22: unsupported policy: "audit" rule in policy "p" (only allow and deny)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tt.src, "dsl", "parse", "-")
			if code != tt.code {
				t.Fatalf("code %d, stderr %q", code, errOut)
			}
			var r struct {
				Source string `json:"source"`
				Valid  bool   `json:"valid"`
				Agents []struct {
					Admitted bool   `json:"admitted"`
					Refusal  string `json:"refusal"`
				} `json:"agents"`
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if r.Source != "inline" || !r.Valid || len(r.Agents) == 0 {
				t.Fatalf("result %+v", r)
			}
			got := r.Agents[len(r.Agents)-1]
			if got.Admitted != tt.admitted || got.Refusal != tt.refusal {
				t.Errorf("admitted %v refusal %q, want %v %q", got.Admitted, got.Refusal, tt.admitted, tt.refusal)
			}
		})
	}

	// A syntax error is reported in the JSON and on stderr, with exit status 1.
	code, out, errOut := runCLI(t, "agent {}", "dsl", "parse", "-")
	if code != 1 || !strings.Contains(out, `"valid": false`) || errOut != "inline:1:7: unexpected \"{\", expected an identifier\n" {
		t.Errorf("syntax error: code %d, out %q, err %q", code, out, errOut)
	}
	for _, cmd := range []string{"parse", "check"} {
		// The second would read nothing, and check an empty definition no one gave.
		if code, _, errOut := runCLI(t, "agent a {}", "dsl", cmd, "-", "x.symbi", "-"); code != 2 || !strings.Contains(errOut, "can be given once") {
			t.Errorf("dsl %s: standard input twice: code %d, err %q, want 2", cmd, code, errOut)
		}
	}
}

// TestDSLParseSeveralFiles: dsl parse FILE... prints a JSON array of the views, one per file
// in the order given; a file that does not parse or cannot be read makes the exit status 1,
// the others' views still printed (an unreadable one has no element).
func TestDSLParseSeveralFiles(t *testing.T) {
	dir := t.TempDir()
	a, b, bad := filepath.Join(dir, "a.symbi"), filepath.Join(dir, "b.symbi"), filepath.Join(dir, "bad.symbi")
	writeFile(t, a, "agent a {}\n")
	writeFile(t, b, "agent b {}\n")
	writeFile(t, bad, "agent {}\n")
	read := func(out string) []string {
		t.Helper()
		var rs []struct {
			Source string `json:"source"`
			Valid  bool   `json:"valid"`
		}
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			t.Fatalf("output is not a JSON array: %v\n%s", err, out)
		}
		var got []string
		for _, r := range rs {
			got = append(got, fmt.Sprintf("%s %v", filepath.Base(r.Source), r.Valid))
		}
		return got
	}
	code, out, errOut := runCLI(t, "", "dsl", "parse", a, b)
	if got := read(out); code != 0 || errOut != "" || !slices.Equal(got, []string{"a.symbi true", "b.symbi true"}) {
		t.Errorf("dsl parse a b: code %d, views %v, err %q", code, got, errOut)
	}
	code, out, errOut = runCLI(t, "", "dsl", "parse", bad, filepath.Join(dir, "missing.symbi"), a)
	if got := read(out); code != 1 || !slices.Equal(got, []string{"bad.symbi false", "a.symbi true"}) ||
		!strings.Contains(errOut, "bad.symbi:1:7: ") || !strings.Contains(errOut, "missing.symbi") {
		t.Errorf("dsl parse bad missing a: code %d, views %v, err %q", code, got, errOut)
	}
}
