package main

import (
	"errors"
	"flag"
	"fmt"
)

// newFlags returns a FlagSet for a subcommand whose usage text names the command,
// its arguments and its flags, printed to the command's stderr.
func newFlags(e *env, c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("symbi "+c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: symbi %s [flags] %s\n\n%s\n", c.name, c.args, c.summary)
		fmt.Fprintln(fs.Output())
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; it returns (exit code, false) when the command must stop:
// 0 after --help, 2 after a usage error.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}
