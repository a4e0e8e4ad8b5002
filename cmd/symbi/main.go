// Command symbi is a governed agent-invocation MCP server and its companion tools.
//
// Run "symbi --help" for the list of subcommands. Each subcommand lives in its own
// file of this package and registers itself in init; the files hold flag parsing and
// output formatting only — the logic lives under internal/.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"symbi/internal/errcode"
)

// env is what a subcommand may touch of the outside world, so that tests can run
// subcommands in-process with their own streams and environment.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// command is one subcommand, named by one or two words ("version", "dsl check").
type command struct {
	name    string
	args    string // usage after the name, e.g. "FILE..."
	summary string
	run     func(e *env, args []string) int
}

var commands = map[string]*command{}

// register adds a subcommand; called from init functions of this package.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("symbi: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(run(e, os.Args[1:]))
}

// run dispatches args to a subcommand and returns the process exit code.
func run(e *env, args []string) int {
	if args0 := firstArg(args); args0 == "--version" || args0 == "-version" {
		return runCommand(e, commands["version"], args[1:])
	}
	if len(args) == 0 {
		usage(e.stderr, "") // a usage error: no command
		return 2
	}
	if isHelp(args[0]) {
		return help(e, args[1:])
	}
	if len(args) >= 2 {
		if c, ok := commands[args[0]+" "+args[1]]; ok {
			return runCommand(e, c, args[2:])
		}
	}
	if c, ok := commands[args[0]]; ok {
		return runCommand(e, c, args[1:])
	}
	if hasGroup(args[0]) {
		if len(args) >= 2 && isHelp(args[1]) {
			return printUsage(e, args[0])
		}
		fmt.Fprintf(e.stderr, "symbi %s: unknown or missing subcommand\n\n", args[0])
		usage(e.stderr, args[0])
		return 2
	}
	fmt.Fprintf(e.stderr, "symbi: unknown command %q\n\n", args[0])
	usage(e.stderr, "")
	return 2
}

// runCommand runs c; every command but mcp, whose stdout carries the protocol, prints
// through the terminal-safe streams.
func runCommand(e *env, c *command, args []string) int {
	if c.name == "mcp" {
		return c.run(e, args)
	}
	safe, finish := e.forPeople()
	code := c.run(safe, args)
	if err := finish(); err != nil {
		// A command whose output could not be written (a full disk, a closed pipe) did
		// not do its job: `symbi audit key > pub.hex` must not leave an empty file and 0,
		// nor `symbi audit verify J > report` an empty report and 2, a verdict ("valid but
		// incomplete") no report says; and a command failing anyway says its report was
		// lost (the reason it failed was in it).
		fmt.Fprintf(e.stderr, "symbi %s: writing the output: %v\n", c.name, err)
		return 1
	}
	return code
}

// help answers symbi help [COMMAND]: the command list, a group's commands, or one
// command's usage (as symbi COMMAND --help prints it).
func help(e *env, args []string) int {
	name := strings.Join(args, " ")
	switch c := commands[name]; {
	case name == "":
		return printUsage(e, "")
	case c != nil:
		return runCommand(e, c, []string{"--help"})
	case len(args) == 1 && hasGroup(name):
		return printUsage(e, name)
	}
	fmt.Fprintf(e.stderr, "symbi help: no command %s\n\n", errcode.Quote(name))
	usage(e.stderr, "")
	return 2
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func isHelp(s string) bool { return s == "-h" || s == "-help" || s == "--help" || s == "help" }

func hasGroup(g string) bool {
	for name := range commands {
		if strings.HasPrefix(name, g+" ") {
			return true
		}
	}
	return false
}

// printUsage prints the command list (of group, when given) asked for, on stdout, and
// returns the exit code: 0, or 1 when it could not be written (as runCommand does for a
// command's output).
func printUsage(e *env, group string) int {
	safe, finish := e.forPeople()
	usage(safe.stdout, group)
	if err := finish(); err != nil {
		fmt.Fprintf(e.stderr, "symbi: writing the output: %v\n", err)
		return 1
	}
	return 0
}

// usage lists the subcommands, or those of one group.
func usage(w io.Writer, group string) {
	fmt.Fprintln(w, "usage: symbi <command> [arguments]   (symbi <command> --help for details)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		if group == "" || strings.HasPrefix(name, group+" ") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		c := commands[name]
		call := strings.TrimSpace(name + " " + c.args)
		if len(call) > 40 { // a long call gets a line of its own, the columns stay aligned
			fmt.Fprintf(w, "  %s\n  %-40s %s\n", call, "", c.summary)
			continue
		}
		fmt.Fprintf(w, "  %-40s %s\n", call, c.summary)
	}
}
