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

// TestHelpAskedGoesToStdout: the usage a person asks for (COMMAND --help, symbi help
// COMMAND) is the command's output, on stdout with exit 0, as symbi --help prints the
// command list; after a usage error it is on stderr.
func TestHelpAskedGoesToStdout(t *testing.T) {
	code, out, errOut := runCLI(t, "", "audit", "verify", "--help")
	if code != 0 || !strings.HasPrefix(out, "usage: symbi audit verify [flags] JOURNAL|DIR") || errOut != "" {
		t.Fatalf("audit verify --help: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	code, helpOut, errOut := runCLI(t, "", "help", "audit", "verify")
	if code != 0 || helpOut != out || errOut != "" {
		t.Fatalf("help audit verify: exit %d\nstdout %q\nstderr %q\nwant stdout %q", code, helpOut, errOut, out)
	}
	code, out, errOut = runCLI(t, "", "audit", "verify", "--bogus")
	if code != 1 || out != "" || !strings.Contains(errOut, "-bogus") || !strings.Contains(errOut, "usage: symbi audit verify") {
		t.Fatalf("audit verify --bogus: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "runs", "list", "--limit", "x")
	if code != 2 || out != "" || !strings.Contains(errOut, "usage: symbi runs list") {
		t.Fatalf("runs list --limit x: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
}

// TestHelpCommand: symbi help GROUP lists the group's commands only, symbi help
// COMMAND prints its usage, and anything else is a usage error naming what was asked.
func TestHelpCommand(t *testing.T) {
	code, out, _ := runCLI(t, "", "help", "runs")
	if code != 0 || !strings.Contains(out, "runs list") || strings.Contains(out, "audit verify") {
		t.Fatalf("help runs: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "help", "version")
	if code != 0 || !strings.HasPrefix(out, "usage: symbi version") {
		t.Fatalf("help version: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"help", "nope"}, {"help", "audit", "verify", "x"}, {"help", "runs", "list", "--bogus"}} {
		code, out, errOut := runCLI(t, "", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "symbi help: no command") {
			t.Errorf("%v: exit %d\nstdout %q\nstderr %q", args, code, out, errOut)
		}
	}
}

// TestHelpListOutputFailure: a command list asked for (symbi help GROUP, symbi --help)
// that cannot be written exits 1 saying so, as a command's usage does (symbi help GROUP
// COMMAND) and as every command's output does.
func TestHelpListOutputFailure(t *testing.T) {
	for _, args := range [][]string{{"help", "runs", "list"}, {"help", "runs"}, {"--help"}, {"runs", "--help"}} {
		code, errOut := runCLIOut(fullDisk{}, args...)
		if code != 1 || !strings.Contains(errOut, "no space left on device") {
			t.Errorf("%v with an unwritable stdout: exit %d, stderr %q; want 1, saying why", args, code, errOut)
		}
	}
}

// TestMCPHelpNotOnProtocolStream: product.md: symbi mcp's "stdout carries only MCP
// messages", so its help is on stderr (exit 0), where every other command's is on stdout.
func TestMCPHelpNotOnProtocolStream(t *testing.T) {
	for _, args := range [][]string{{"mcp", "--help"}, {"help", "mcp"}} {
		code, out, errOut := runCLI(t, "", args...)
		if code != 0 || out != "" || !strings.HasPrefix(errOut, "usage: symbi mcp") {
			t.Errorf("%v: exit %d, stdout %.60q, stderr %.60q; want exit 0, the usage on stderr, stdout left to MCP", args, code, out, errOut)
		}
	}
}

// TestBareUsageErrorStream: symbi with no command is a usage error (exit 2), its list on
// stderr, as symbi runs without its subcommand is.
func TestBareUsageErrorStream(t *testing.T) {
	for _, args := range [][]string{{"runs"}, {}} {
		code, out, errOut := runCLI(t, "", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage: symbi") {
			t.Errorf("symbi %v: exit %d, stdout %.60q, stderr %.60q; want 2 with the usage on stderr", args, code, out, errOut)
		}
	}
}
