package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestByteSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		str  string
		bad  bool
	}{
		{in: "0", want: 0, str: "0"},
		{in: "1048576", want: 1 << 20, str: "1MiB"},
		{in: "64MiB", want: 64 << 20, str: "64MiB"},
		{in: "1GiB", want: 1 << 30, str: "1GiB"},
		{in: "512KiB", want: 512 << 10, str: "512KiB"},
		{in: "3TiB", want: 3 << 40, str: "3TiB"},
		{in: "100B", want: 100, str: "100B"},
		{in: "1500", want: 1500, str: "1500B"},
		{in: "", bad: true},
		{in: "-1", bad: true},
		{in: "1.5GiB", bad: true},
		{in: "64MB", bad: true},
		{in: "64 MiB", bad: true},
		{in: "MiB", bad: true},
		{in: "99999999TiB", bad: true}, // overflows 64 bits
	} {
		var b byteSize
		err := b.Set(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("Set(%q) = %d, want an error", tt.in, b)
			}
			continue
		}
		if err != nil || uint64(b) != tt.want || b.String() != tt.str {
			t.Errorf("Set(%q) = %d %q, %v; want %d %q", tt.in, b, b.String(), err, tt.want, tt.str)
		}
	}
}

// TestFlagGivenTwiceRefused: a flag given twice is a usage error (exit 2) naming it — the
// flag package would keep the last value, and `runs resolve` would sign a resolution the
// person may not mean — but for a repeatable one (--path, --checkpoint).
func TestFlagGivenTwiceRefused(t *testing.T) {
	for _, args := range [][]string{
		{"runs", "resolve", "--resolution", "accepted", "--resolution", "rejected", "run-a"},
		{"agents", "list", "--json", "--json"},
		{"policy", "eval", "--agent", "a", "--agent", "b", "--response", "x"},
	} {
		code, _, errOut := runCLI(t, "", args...)
		if code != 2 || !strings.Contains(errOut, "given twice (it is not repeatable)") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming the flag given twice", args, code, errOut)
		}
	}
	dir := newE2EProject(t)
	code, out, errOut := runCLI(t, "", "policy", "eval", "--project", dir, "--agent", "helper", "--action", "use_tool", "--tool", "read", "--path", "a.txt", "--path", "b.txt")
	if code != 0 || !strings.Contains(out, "a.txt, b.txt") {
		t.Errorf("a repeatable flag given twice: exit %d\n%s%s", code, out, errOut)
	}
}

// TestIntegerFlagLeadingZero: an integer flag written with leading zeros is read in
// decimal, as docs/errors.md gives it — the flag package alone reads 010 as octal (8), so
// a receipt count, a cursor or a limit copied with a leading zero meant another number.
func TestIntegerFlagLeadingZero(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{{"010", 10}, {"-010", -10}, {"+007", 7}, {"0", 0}, {"000", 0}, {"0009", 9}} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		n := fs.Int("records", -1, "")
		m := fs.Int64("after", -1, "")
		u := fs.Uint64("limit", 1, "")
		args := []string{"--records", c.in, "--after", c.in}
		unsigned := c.in[0] != '+' && c.in[0] != '-'
		if unsigned {
			args = append(args, "--limit", c.in)
		}
		if code, ok := parseFlags(fs, args); !ok {
			t.Errorf("%q refused (exit %d)", c.in, code)
			continue
		}
		if int64(*n) != c.want || *m != c.want || (unsigned && *u != uint64(c.want)) {
			t.Errorf("%q read as %d, %d, %d; want %d", c.in, *n, *m, *u, c.want)
		}
	}
}

// TestReceiptCountLeadingZero: `audit verify --records 010` of an 8-record journal cut
// from a longer one, with the 8th line's head, is a receipt mismatch (ten records were
// promised): read as octal the receipt matched and the cut journal was merely incomplete.
func TestReceiptCountLeadingZero(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "journal", "delegated.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) < 11 {
		t.Fatalf("setup: delegated.jsonl has %d lines, want more than 10", len(lines))
	}
	file := filepath.Join(t.TempDir(), "cut.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines[:8], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	const key = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a" // the vectors' key
	head := sha256Hex(lines[7])
	if code, out, errOut := runCLI(t, "", "audit", "verify", file, "--public-key", key, "--records", "8", "--head", head); code != 2 {
		t.Fatalf("setup: --records 8 of the cut journal: exit %d, want 2 (incomplete, the receipt matching)\n%s%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "", "audit", "verify", file, "--public-key", key, "--records", "010", "--head", head)
	if code != 1 || !strings.Contains(out+errOut, "receipt") {
		t.Errorf("audit verify --records 010 of an 8-record journal: exit %d, want 1 (a receipt of ten records does not match)\n%s%s", code, out, errOut)
	}
}

// TestReceiptGivenWhole: a receipt on the command line is checked or refused, never
// taken for no receipt: `--records 0` (alone or with --head), an empty --head, and an
// empty --run-id are usage errors (exit 1, audit verify's), not a plain verification
// that checks no receipt and says the journal is complete.
func TestReceiptGivenWhole(t *testing.T) {
	file := filepath.Join("..", "..", "testdata", "journal", "delegated.jsonl")
	const key = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a" // the vectors' key
	if code, out, errOut := runCLI(t, "", "audit", "verify", file, "--public-key", key); code != 0 {
		t.Fatalf("setup: audit verify of the vector: exit %d\n%s%s", code, out, errOut)
	}
	head := strings.Repeat("ab", 32)
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--records", "0"}, "--head and --records go together"},
		{[]string{"--records", "0", "--head", head}, "--records 0: a receipt counts at least 1 record"},
		{[]string{"--head", "", "--records", "3"}, "--head must be 64 lowercase hex digits"},
		{[]string{"--head", ""}, "--head and --records go together"},
		{[]string{"--run-id", ""}, "--run-id is empty"},
		{[]string{"--project", ".", "--records", "0"}, "no JOURNAL, --run-id or receipt with it"},
	} {
		args := append([]string{"audit", "verify", "--public-key", key}, tt.args...)
		if tt.args[0] != "--project" {
			args = append(args, file)
		}
		code, out, errOut := runCLI(t, "", args...)
		if code != 1 || out != "" || !strings.Contains(errOut, tt.msg) {
			t.Errorf("audit verify %v: exit %d, stdout %q, stderr %q; want 1 and %q", tt.args, code, out, errOut, tt.msg)
		}
	}
}

// TestEmptyProjectRefused: an empty --project (`--project "$DIR"` with DIR unset) is a
// usage error (exit 2; audit verify's is 1) for every command that takes one: it would otherwise be the working
// directory's project, not the one meant (agents-md generate wrote AGENTS.md there).
func TestEmptyProjectRefused(t *testing.T) {
	cwd := t.TempDir()
	if err := os.Mkdir(filepath.Join(cwd, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	for _, args := range [][]string{
		{"agents-md", "generate", "--project", ""},
		{"agents", "list", "--project", ""},
		{"policy", "check", "--project", ""},
		{"policy", "eval", "--project", "", "--agent", "a", "--response", "hi"},
		{"runs", "list", "--project", ""},
		{"audit", "key", "--project", ""},
		{"audit", "prune", "--project", "", "--run-id", "r"},
		{"audit", "checkpoint", "--project", ""},
		{"audit", "verify", "--project", ""},
		{"mcp", "--project", ""},
		{"init", ""},
	} {
		want := 2
		if len(args) > 1 && args[1] == "verify" {
			want = 1 // audit verify's codes are its verdict: a usage error is invalid, 1
		}
		code, out, errOut := runCLI(t, "", args...)
		if code != want || !strings.Contains(errOut, "--project is empty") && !strings.Contains(errOut, "directory is empty") {
			t.Errorf("%q: exit %d, stderr %q; want %d, --project is empty\n%s", args, code, errOut, want, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(cwd, "AGENTS.md")); err == nil {
		t.Error("AGENTS.md was written in the working directory")
	}
}
