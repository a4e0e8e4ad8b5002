package main

import (
	"crypto/rand"
	"fmt"

	"symbi/internal/auth"
	"symbi/internal/errcode"
)

var cmdTokenAdd = &command{name: "token add", args: "NAME", summary: "make a bearer token for the caller NAME, append its hash to the token file (symbi mcp --auth-tokens) and print the token, once"}

func init() {
	cmdTokenAdd.run = runTokenAdd
	register(cmdTokenAdd)
}

// runTokenAdd runs symbi token add.
func runTokenAdd(e *env, args []string) int {
	fs := newFlags(e, cmdTokenAdd)
	file := fs.String("file", "", "the token `FILE` (created 0600 when absent; required)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *file == "" {
		fmt.Fprintln(e.stderr, "symbi token add: --file is required")
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(e.stderr, "symbi token add: want one NAME argument (after the flags), got %d\n", fs.NArg())
		return 2
	}
	name := fs.Arg(0)
	token, err := auth.AddToken(*file, name, rand.Reader)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi token add: %s\n", errcode.Text(err))
		return 1
	}
	fmt.Fprintln(e.stdout, token)
	fmt.Fprintf(e.stderr, "symbi token add: the token of %q is shown only this once; %s keeps only its hash\n", name, *file)
	return 0
}
