package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"symbi/internal/errcode"
	"symbi/internal/project"
)

var cmdInit = &command{name: "init", args: "[DIR]", summary: "create a starter project: an invocable agent, a respond policy, AGENTS.md and a README"}

func init() {
	cmdInit.run = runInit
	register(cmdInit)
}

// runInit runs symbi init.
func runInit(e *env, args []string) int {
	fs := newFlags(e, cmdInit)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	dir := "."
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	if dir == "" {
		// "$DIR" with DIR unset: the working directory is not the project meant.
		fmt.Fprintln(e.stderr, "symbi init: the project directory is empty: give one (\".\" for the working directory)")
		return 2
	}
	created, err := project.Init(dir, slog.New(slog.NewTextHandler(e.stderr, nil)))
	for _, rel := range created {
		fmt.Fprintf(e.stdout, "created %s\n", filepath.Join(dir, rel))
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi init: %s\n", errcode.Text(err))
		return 1
	}
	fmt.Fprintf(e.stdout, "\nnext: symbi agents list --project %s\n", dir)
	return 0
}
