package main

import (
	"fmt"
	"io"
	"os"
	"slices"

	"symbi/internal/dsl"
)

var cmdDslCheck = &command{name: "dsl check", args: "FILE...", summary: "check agent definitions; print file:line:col: message for each error"}
var cmdDslParse = &command{name: "dsl parse", args: "FILE...", summary: "print the JSON views of agent definitions (- reads standard input; several files: an array)"}

func init() {
	cmdDslCheck.run = runDSLCheck
	register(cmdDslCheck)
	cmdDslParse.run = runDSLParse
	register(cmdDslParse)
}

// runDSLCheck runs symbi dsl check.
func runDSLCheck(e *env, args []string) int {
	fs := newFlags(e, cmdDslCheck)
	asJSON := fs.Bool("json", false, "print the errors as a JSON array of {file, line, column, message}")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if !stdinOnce(e, cmdDslCheck, fs.Args()) {
		return 2
	}
	type diagnostic struct {
		File    string `json:"file"`
		Line    int    `json:"line"`
		Column  int    `json:"column"`
		Message string `json:"message"`
	}
	diags := []diagnostic{}
	failed := false
	for _, name := range fs.Args() {
		src, err := readSource(e, name)
		if err != nil {
			if *asJSON {
				diags = append(diags, diagnostic{File: name, Message: err.Error()})
			} else {
				fmt.Fprintf(e.stderr, "%s: %v\n", nameText(name), err)
			}
			failed = true
			continue
		}
		if _, err := dsl.Parse(name, src); err != nil {
			for _, pe := range dsl.Errors(err) {
				diags = append(diags, diagnostic{name, pe.Line, pe.Column, pe.Msg})
				if !*asJSON {
					fmt.Fprintf(e.stdout, "%s:%d:%d: %s\n", nameText(name), pe.Line, pe.Column, cellText(pe.Msg))
				}
			}
			failed = true
		}
	}
	if *asJSON && !printJSON(e, "dsl check", diags) {
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// runDSLParse runs symbi dsl parse: the views of one file (or of standard input, "-"),
// or a JSON array of them, one per file in the order given, for several. A file that
// cannot be read is said on standard error and has no element; the exit status is 1 when
// any file could not be read or does not parse.
func runDSLParse(e *env, args []string) int {
	fs := newFlags(e, cmdDslParse)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if !stdinOnce(e, cmdDslParse, fs.Args()) {
		return 2
	}
	results := []*dsl.Result{}
	failed := false
	for _, name := range fs.Args() {
		src, err := readSource(e, name)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", nameText(name), err)
			failed = true
			continue
		}
		source := name
		if name == "-" {
			source = "inline"
		}
		r := dsl.Analyze(source, src)
		results = append(results, r)
		for _, pe := range r.Errors {
			fmt.Fprintf(e.stderr, "%s:%d:%d: %s\n", nameText(source), pe.Line, pe.Column, cellText(pe.Message))
		}
		failed = failed || !r.Valid
	}
	var out any = results
	if fs.NArg() == 1 {
		if len(results) == 0 {
			return 1
		}
		out = results[0]
	}
	if !printJSON(e, "dsl parse", out) || failed {
		return 1
	}
	return 0
}

// stdinOnce reports whether "-" (standard input) is among args at most once, saying so
// when not: a second would read the rest of a stream the first read whole — nothing — and
// check an empty definition no one gave.
func stdinOnce(e *env, c *command, args []string) bool {
	if i := slices.Index(args, "-"); i >= 0 && slices.Contains(args[i+1:], "-") {
		fmt.Fprintf(e.stderr, "symbi %s: - (standard input) can be given once\n", c.name)
		return false
	}
	return true
}

// readSource reads a definition from a file, or from standard input for "-", reading at
// most one byte more than the parser accepts so that an oversized input is reported.
func readSource(e *env, name string) ([]byte, error) {
	var r io.Reader = e.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	return io.ReadAll(io.LimitReader(r, dsl.MaxSourceBytes+1))
}
