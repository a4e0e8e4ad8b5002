package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"symbi/internal/auth"
	"symbi/internal/errcode"
)

var cmdTokenAdd = &command{name: "token add", args: "--file FILE NAME", summary: "make a bearer token for the caller NAME, append its hash to the token file (symbi mcp --auth-tokens) and print the token, once"}

func init() {
	cmdTokenAdd.run = runTokenAdd
	register(cmdTokenAdd)
}

// runTokenAdd runs symbi token add.
func runTokenAdd(e *env, args []string) int {
	fs := newFlags(e, cmdTokenAdd)
	file := fs.String("file", "", "the token `FILE` (created 0600 when absent; required)")
	// Flags before or after NAME: "token add bob --file F" is as clear as the other order.
	pos, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	if *file == "" {
		fmt.Fprintln(e.stderr, "symbi token add: --file is required")
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintf(e.stderr, "symbi token add: want one NAME argument, got %d\n", len(pos))
		return 2
	}
	name := pos[0]
	// A closed stdout then fails the write (EPIPE) instead of killing the process between
	// the entry's append and its cut (SIGPIPE).
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	_, err := auth.AddToken(*file, name, rand.Reader, func(token string) error {
		_, err := fmt.Fprintln(e.stdout, token)
		return err
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi token add: %s\n", errcode.Text(err))
		return 1
	}
	fmt.Fprintf(e.stderr, "symbi token add: the token of %q is shown only this once; %s keeps only its hash\n", name, *file)
	return 0
}
