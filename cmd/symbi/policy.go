package main

import (
	"encoding/json"
	"fmt"

	"symbi/internal/errcode"
	"symbi/internal/policy"
	"symbi/internal/project"
)

func init() {
	c := &command{name: "policy check", summary: "load the project's Cedar policies and list files and policy ids (exit 1 if unusable)"}
	c.run = func(e *env, args []string) int {
		fs := newFlags(e, c)
		dir := fs.String("project", ".", "project directory")
		asJSON := fs.Bool("json", false, "print a JSON object instead of text")
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		if fs.NArg() != 0 {
			fmt.Fprintf(e.stderr, "symbi policy check: unexpected arguments %q\n", fs.Args())
			return 2
		}
		set, code := policyLoad(e, "policy check", *dir)
		if set == nil {
			return code
		}
		if *asJSON {
			if !policyPrintJSON(e, c.name, policyCheckJSON(set)) {
				return 1
			}
		} else {
			policyPrintCheck(e, set)
		}
		if set.Mode == policy.ModeDenyAll {
			for _, p := range set.Problems {
				fmt.Fprintln(e.stderr, p.String())
			}
			fmt.Fprintf(e.stderr, "symbi policy check: deny_all: every response would be denied: %s\n", set.Reason)
			return 1
		}
		return 0
	}
	register(c)
}

// policyLoad pins the project directory and loads its policies; on failure it
// reports on stderr and returns (nil, 1).
func policyLoad(e *env, name, dir string) (*policy.Set, int) {
	p, err := project.Open(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi %s: %s\n", name, errcode.Text(err))
		return nil, 1
	}
	defer p.Close()
	return policy.Load(p.Root()), 0
}

func policyPrintCheck(e *env, set *policy.Set) {
	fmt.Fprintf(e.stdout, "mode: %s\n", set.Mode)
	fmt.Fprintf(e.stdout, "digest: %s\n", set.Digest)
	if set.Mode == policy.ModeDefault {
		fmt.Fprintln(e.stdout, "no policy files: the built-in default permits respond")
		return
	}
	byFile := map[string][]policy.Policy{}
	for _, p := range set.Policies() {
		byFile[p.File] = append(byFile[p.File], p)
	}
	for _, f := range set.Files {
		fmt.Fprintln(e.stdout, f)
		for _, p := range byFile[f] {
			fmt.Fprintf(e.stdout, "  %s %s (%d:%d)\n", p.Effect, p.ID, p.Line, p.Column)
		}
	}
}

type policyEntryJSON struct {
	ID     string `json:"id"`
	Effect string `json:"effect"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

type policyFileJSON struct {
	File     string            `json:"file"`
	Policies []policyEntryJSON `json:"policies"`
}

type policyProblemJSON struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

type policyCheckOutput struct {
	Mode     policy.Mode         `json:"mode"`
	Digest   string              `json:"digest"`
	Reason   string              `json:"reason,omitempty"`
	Files    []policyFileJSON    `json:"files"`
	Problems []policyProblemJSON `json:"problems"`
}

func policyCheckJSON(set *policy.Set) policyCheckOutput {
	out := policyCheckOutput{Mode: set.Mode, Digest: set.Digest, Reason: set.Reason, Files: []policyFileJSON{}, Problems: []policyProblemJSON{}}
	index := map[string]int{}
	for _, f := range set.Files {
		index[f] = len(out.Files)
		out.Files = append(out.Files, policyFileJSON{File: f, Policies: []policyEntryJSON{}})
	}
	for _, p := range set.Policies() {
		i := index[p.File]
		out.Files[i].Policies = append(out.Files[i].Policies, policyEntryJSON{ID: p.ID, Effect: p.Effect, Line: p.Line, Column: p.Column})
	}
	for _, p := range set.Problems {
		out.Problems = append(out.Problems, policyProblemJSON{File: p.File, Line: p.Line, Column: p.Column, Message: p.Message})
	}
	return out
}

// policyPrintJSON prints v as indented JSON; it reports false if v cannot be
// encoded.
func policyPrintJSON(e *env, name string, v any) bool {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi %s: %v\n", name, err)
		return false
	}
	fmt.Fprintf(e.stdout, "%s\n", b)
	return true
}
