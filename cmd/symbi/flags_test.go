package main

import (
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
