package main

import (
	"bytes"
	"strings"
	"testing"
)

// runCLI runs symbi in-process with the given arguments and standard input.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	code = run(e, args)
	return code, out.String(), errb.String()
}

func TestVersionAndHelp(t *testing.T) {
	code, out, _ := runCLI(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "symbi ") {
		t.Fatalf("version: code %d, out %q", code, out)
	}
	code, out, _ = runCLI(t, "", "--help")
	if code != 0 || !strings.Contains(out, "version") {
		t.Fatalf("--help: code %d, out %q", code, out)
	}
	code, _, errOut := runCLI(t, "", "no-such-command")
	if code != 2 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown: code %d, stderr %q", code, errOut)
	}
	code, _, _ = runCLI(t, "", "version", "--help")
	if code != 0 {
		t.Fatalf("version --help: code %d", code)
	}
}

// TestVersionFlagStrayArgument: docs/errors.md: "A command that takes no argument
// besides its flags refuses a stray one (exit 2)": `symbi --version extra` (and
// `--version --bogus`) as `symbi version extra` does.
func TestVersionFlagStrayArgument(t *testing.T) {
	for _, args := range [][]string{{"--version", "extra"}, {"--version", "--bogus"}} {
		code, out, errOut := runCLI(t, "", args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s%s", args, code, out, errOut)
		}
	}
}
