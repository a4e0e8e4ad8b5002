package main

import (
	"fmt"

	"symbi/internal/buildinfo"
)

var cmdVersion = &command{name: "version", summary: "print the version of symbi"}

func init() {
	cmdVersion.run = runVersion
	register(cmdVersion)
}

// runVersion runs symbi version.
func runVersion(e *env, args []string) int {
	fs := newFlags(e, cmdVersion)
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	fmt.Fprintf(e.stdout, "symbi %s\n", buildinfo.Version)
	return 0
}
