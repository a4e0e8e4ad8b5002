package main

import (
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"

	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/project"
)

var cmdAgentsList = &command{name: "agents list", summary: "list the project's agent files: which are invocable, and why the others are refused"}

func init() {
	cmdAgentsList.run = runAgentsList
	register(cmdAgentsList)
}

// runAgentsList runs symbi agents list.
func runAgentsList(e *env, args []string) int {
	fs := newFlags(e, cmdAgentsList)
	dir := fs.String("project", ".", "the project `DIR`")
	asJSON := fs.Bool("json", false, "print the entries as a JSON array")
	execFile := fs.String("executors", "", executorsUsage)
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	opts, err := executorOptions(e, *execFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi agents list: %s\n", errcode.Text(err))
		return 1
	}
	entries, err := registryEntries(e, *dir, opts...)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi agents list: %s\n", errcode.Text(err))
		return 1
	}
	if *asJSON {
		if !printJSON(e, "agents list", entries) {
			return 1
		}
		return 0
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tINVOCABLE\tFILE\tAGENTS\tDESCRIPTION OR REASON")
	for _, en := range entries {
		inv, detail := "yes", en.Description
		if en.Mode == project.ModeDelegated {
			inv = "delegated (" + en.Executor + ")"
		}
		if !en.Invocable {
			inv, detail = "no", en.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cellText(en.Name), inv, cellText(en.File), cellText(strings.Join(en.Agents, ",")), cellText(detail))
		for _, more := range en.Reasons[min(1, len(en.Reasons)):] { // every reason, one a line
			fmt.Fprintf(tw, "\t\t\t\t%s\n", cellText(more))
		}
	}
	tw.Flush()
	return 0
}

// executorsUsage is the --executors flag's of the commands that take the registry
// snapshot as the server would.
const executorsUsage = "the executors `FILE` the server is started with, so delegated agents show as such"

// executorOptions are the admission options of a registry read as a server started with
// the executors file would read it ("": none, as a server started without).
func executorOptions(e *env, file string) ([]dsl.Options, error) {
	if file == "" {
		return nil, nil
	}
	execs, err := executors.Load(file, e.getenv)
	if err != nil {
		return nil, err
	}
	return []dsl.Options{{Executors: func(n string) bool { _, ok := execs.Get(n); return ok }}}, nil
}

// registryEntries takes the registry snapshot of the project in dir, with warnings
// on stderr.
func registryEntries(e *env, dir string, opts ...dsl.Options) ([]project.Entry, error) {
	p, reg, err := openRegistry(dir, slog.New(slog.NewTextHandler(e.stderr, nil)), opts...)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return reg.Entries(), nil
}

// openRegistry opens (pins) the project in dir and takes its registry snapshot, with
// warnings on log. The caller closes the project.
func openRegistry(dir string, log *slog.Logger, opts ...dsl.Options) (*project.Project, *project.Registry, error) {
	p, err := project.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	reg, err := p.LoadRegistry(log, opts...)
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	return p, reg, nil
}
