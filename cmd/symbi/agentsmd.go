package main

import (
	"fmt"
	"log/slog"

	"symbi/internal/errcode"
)

var cmdAgentsMDGenerate = &command{name: "agents-md generate", summary: "write the generated agents section of AGENTS.md, keeping the rest of the file"}

func init() {
	cmdAgentsMDGenerate.run = runAgentsMDGenerate
	register(cmdAgentsMDGenerate)
}

// runAgentsMDGenerate runs symbi agents-md generate.
func runAgentsMDGenerate(e *env, args []string) int {
	fs := newFlags(e, cmdAgentsMDGenerate)
	dir := fs.String("project", ".", "the project `DIR`")
	execFile := fs.String("executors", "", executorsUsage)
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "symbi agents-md generate: %s\n", errcode.Text(err))
		return 1
	}
	opts, err := executorOptions(e, *execFile)
	if err != nil {
		return fail(err)
	}
	p, reg, err := openRegistry(*dir, slog.New(slog.NewTextHandler(e.stderr, nil)), opts...)
	if err != nil {
		return fail(err)
	}
	defer p.Close()
	created, err := p.UpdateAgentsMD(reg.Entries())
	if err != nil {
		return fail(err)
	}
	verb := "updated the generated section of"
	if created {
		verb = "created"
	}
	fmt.Fprintf(e.stdout, "%s %s/AGENTS.md (%d agent files)\n", verb, p.Path(), len(reg.Entries()))
	return 0
}
