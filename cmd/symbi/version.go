package main

import (
	"fmt"

	"symbi/internal/buildinfo"
)

func init() {
	c := &command{name: "version", summary: "print the version of symbi"}
	c.run = func(e *env, args []string) int {
		fs := newFlags(e, c)
		if code, ok := parseNoArgs(fs, args); !ok {
			return code
		}
		fmt.Fprintf(e.stdout, "symbi %s\n", buildinfo.Version)
		return 0
	}
	register(c)
}
