package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/project"
	"symbi/internal/runs"
)

var (
	cmdRunsList    = &command{name: "runs list", summary: "list the project's runs, newest first, from the ledger and the journals (no server needed)"}
	cmdRunsStatus  = &command{name: "runs status", args: "RUN_ID", summary: "show one run's status, resolution and released text, read from its journal and the ledger"}
	cmdRunsEvents  = &command{name: "runs events", args: "RUN_ID", summary: "show a run's events (its verified journal records) by cursor; --json carries each signed line"}
	cmdRunsResolve = &command{name: "runs resolve", args: "RUN_ID", summary: "record a resolution of a finished run: a signed resolution entry in the project ledger"}
)

func init() {
	cmdRunsList.run = runRunsList
	register(cmdRunsList)
	cmdRunsStatus.run = runRunsStatus
	register(cmdRunsStatus)
	cmdRunsEvents.run = runRunsEvents
	register(cmdRunsEvents)
	cmdRunsResolve.run = runRunsResolve
	register(cmdRunsResolve)
}

// openRuns opens the project's runs for reading, from the files alone; with a ledger
// writer (for resolve) when writable, and with the agent registry (so that runs are found
// by an agent's registry name) when registry.
func openRuns(e *env, dir string, writable, registry bool) (m *runs.Manager, closeAll func(), err error) {
	root, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, nil, errcode.Errorf(errcode.NotFound, "project directory: %v", err)
	}
	keyFile := e.getenv("SYMBI_AUDIT_KEY_FILE")
	var lw *ledger.Writer
	if writable {
		// The CLI never creates a ledger: a project without one has no run to resolve.
		if _, err := os.Lstat(filepath.Join(dir, ".symbiont", ledger.FileName)); err != nil {
			root.Close()
			return nil, nil, errcode.Errorf(errcode.NotFound, "the project has no ledger (%v): no run has ended here yet", err)
		}
		store, err := journal.OpenStore(root, journal.StoreOptions{KeyFile: keyFile})
		if err != nil {
			root.Close()
			return nil, nil, err
		}
		lw, err = ledger.Open(root, store.SigningKey())
		store.Close()
		if err != nil {
			root.Close()
			return nil, nil, err
		}
	}
	var p *project.Project
	var reg *project.Registry
	if registry {
		if p, reg, err = openRegistry(dir, slog.New(slog.NewTextHandler(e.stderr, nil))); err != nil {
			root.Close()
			return nil, nil, err
		}
	}
	m, err = runs.Open(runs.Config{Root: root, KeyFile: keyFile, Ledger: lw, Registry: reg})
	closeAll = func() {
		if lw != nil {
			lw.Close()
		}
		if p != nil {
			p.Close()
		}
		root.Close()
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return m, closeAll, nil
}

// runID takes the one positional argument of a runs subcommand.
func runID(e *env, c *command, args []string) (string, bool) {
	if len(args) != 1 {
		fmt.Fprintf(e.stderr, "symbi %s: want one RUN_ID argument (after the flags), got %d\n", c.name, len(args))
		return "", false
	}
	return args[0], true
}

func runRunsList(e *env, args []string) int {
	fs := newFlags(e, cmdRunsList)
	dir := fs.String("project", ".", "the project `DIR`")
	agent := fs.String("agent", "", "only runs of this agent (registry name, declared name or agent_id)")
	status := fs.String("status", "", "only runs with this `STATUS` ("+strings.Join(runs.Statuses, ", ")+")")
	resolution := fs.String("resolution", "", "only runs with this latest `RESOLUTION` ("+strings.Join(runs.Resolutions, ", ")+", or unresolved)")
	after := fs.String("after", "", "the `CURSOR` printed after the previous page")
	limit := fs.Int("limit", runs.DefaultLimit, "at most `N` runs (1..1000)")
	asJSON := fs.Bool("json", false, "print the page as JSON")
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	if *limit < 1 || *limit > runs.MaxLimit {
		fmt.Fprintf(e.stderr, "symbi runs list: --limit %d: want 1..%d\n", *limit, runs.MaxLimit)
		return 2
	}
	m, closeAll, err := openRuns(e, *dir, false, *agent != "")
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs list: %s\n", errcode.Text(err))
		return 1
	}
	defer closeAll()
	page, err := m.List(runs.Filter{Agent: *agent, Status: *status, Resolution: *resolution, After: *after, Limit: *limit})
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs list: %s\n", errcode.Text(err))
		return 1
	}
	if *asJSON {
		return exitJSON(e, cmdRunsList.name, page)
	}
	if len(page.Runs) == 0 {
		fmt.Fprintln(e.stdout, "no runs")
		return 0
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN_ID\tSTATUS\tRESOLUTION\tAGENT\tSTARTED\tCALLER")
	for _, r := range page.Runs {
		res := "-"
		if r.Resolution != nil {
			res = r.Resolution.Value
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.RunID, r.Status, res, cellText(orDash(r.Agent)), orDash(r.StartedAt), cellText(orDash(r.Caller)))
	}
	tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(e.stdout, "more: %s\n", nextPage(fs, page.NextCursor))
	}
	return 0
}

func runRunsStatus(e *env, args []string) int {
	fs := newFlags(e, cmdRunsStatus)
	dir := fs.String("project", ".", "the project `DIR`")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	id, ok := runID(e, cmdRunsStatus, fs.Args())
	if !ok {
		return 2
	}
	m, closeAll, err := openRuns(e, *dir, false, false)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs status: %s\n", errcode.Text(err))
		return 1
	}
	defer closeAll()
	st, err := m.Status(id)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs status: %s\n", errcode.Text(err))
		return 1
	}
	if *asJSON {
		return exitJSON(e, cmdRunsStatus.name, st)
	}
	printStatus(e, st)
	return 0
}

// printStatus shows a run's status for a person.
func printStatus(e *env, st *runs.Status) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, cellText(v))
		}
	}
	row("run", st.RunID)
	row("agent", fmt.Sprintf("%s (%s)", st.Agent, st.AgentID))
	row("status", st.Status)
	row("reason", st.Reason)
	row("released", fmt.Sprint(st.Released))
	row("caller", st.Caller)
	row("started", st.StartedAt)
	row("ended", st.EndedAt)
	row("receipt", fmt.Sprintf("%d records, head %s", st.Records, st.Head))
	row("journal", st.Journal)
	if st.JournalPruned {
		row("journal pruned", "yes (symbi audit prune)")
	}
	row("journal problem", st.JournalProblem)
	if r := st.Resolution; r != nil {
		row("resolution", fmt.Sprintf("%s by %s at %s (revision %d)", r.Value, r.Caller, r.Time, r.Revisions))
		row("note", r.Note)
	} else {
		row("resolution", "unresolved")
	}
	if st.TextRetained != nil && !*st.TextRetained {
		row("text", "not retained (the journal keeps only its digest: SYMBI_JOURNAL_TEXT=hashes)")
	}
	tw.Flush()
	if st.Text != nil {
		fmt.Fprintf(e.stdout, "\n%s\n", *st.Text)
	}
}

func runRunsEvents(e *env, args []string) int {
	fs := newFlags(e, cmdRunsEvents)
	dir := fs.String("project", ".", "the project `DIR`")
	after := fs.Int64("after", 0, "the cursor: the number of events already read")
	limit := fs.Int("limit", runs.MaxLimit, "at most `N` events (1..1000)")
	asJSON := fs.Bool("json", false, "print the page as JSON, each event with its exact signed journal line")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	id, ok := runID(e, cmdRunsEvents, fs.Args())
	if !ok {
		return 2
	}
	if *limit < 1 || *limit > runs.MaxLimit {
		fmt.Fprintf(e.stderr, "symbi runs events: --limit %d: want 1..%d\n", *limit, runs.MaxLimit)
		return 2
	}
	m, closeAll, err := openRuns(e, *dir, false, false)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs events: %s\n", errcode.Text(err))
		return 1
	}
	defer closeAll()
	page, err := m.Events(context.Background(), id, *after, *limit, 0)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs events: %s\n", errcode.Text(err))
		return 1
	}
	if *asJSON {
		return exitJSON(e, cmdRunsEvents.name, page)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tTYPE")
	for _, ev := range page.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", ev.Seq, ev.Time, ev.Type)
	}
	tw.Flush()
	switch {
	case page.Done:
		fmt.Fprintf(e.stdout, "status %s; all events read\n", page.Status)
	default:
		fmt.Fprintf(e.stdout, "status %s; more: %s\n", page.Status, nextPage(fs, strconv.FormatInt(page.NextCursor, 10), id))
	}
	return 0
}

func runRunsResolve(e *env, args []string) int {
	fs := newFlags(e, cmdRunsResolve)
	dir := fs.String("project", ".", "the project `DIR`")
	resolution := fs.String("resolution", "", "the `RESOLUTION`: "+strings.Join(runs.Resolutions, ", "))
	note := fs.String("note", "", "why (at most 4 KiB)")
	asJSON := fs.Bool("json", false, "print the run's status as JSON")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	id, ok := runID(e, cmdRunsResolve, fs.Args())
	if !ok {
		return 2
	}
	if *resolution == "" {
		fmt.Fprintf(e.stderr, "symbi runs resolve: --resolution is required (%s)\n", strings.Join(runs.Resolutions, ", "))
		return 2
	}
	m, closeAll, err := openRuns(e, *dir, true, false)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs resolve: %s\n", errcode.Text(err))
		return 1
	}
	defer closeAll()
	st, err := m.Resolve(id, *resolution, *note, cliCaller())
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi runs resolve: %s\n", errcode.Text(err))
		return 1
	}
	if *asJSON {
		return exitJSON(e, cmdRunsResolve.name, st)
	}
	printStatus(e, st)
	return 0
}

// cliCaller names a person resolving at a terminal: "cli:<user name>", authenticated by
// the operating system ("os": whoever may write the project's ledger).
func cliCaller() runs.Caller {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return runs.Caller{ID: "cli:" + u.Username, Auth: "os"}
	}
	return runs.Caller{ID: fmt.Sprintf("cli:uid-%d", os.Getuid()), Auth: "os"}
}

func exitJSON(e *env, name string, v any) int {
	if !printJSON(e, name, v) {
		return 1
	}
	return 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// nextPage is the command line that reads the page after this one: the command of fs, the
// flags given to it but --after, then --after cursor and args — a hint the user can run as
// it is (values quoted for a POSIX shell where needed).
func nextPage(fs *flag.FlagSet, cursor string, args ...string) string {
	line := []string{fs.Name()}
	fs.Visit(func(f *flag.Flag) {
		switch b, isBool := f.Value.(interface{ IsBoolFlag() bool }); {
		case f.Name == "after":
		case isBool && b.IsBoolFlag():
			line = append(line, "--"+f.Name+"="+f.Value.String())
		default:
			line = append(line, "--"+f.Name, shellQuote(f.Value.String()))
		}
	})
	line = append(line, "--after", shellQuote(cursor))
	for _, a := range args {
		line = append(line, shellQuote(a))
	}
	return strings.Join(line, " ")
}

// shellQuote returns s as one word of a POSIX shell: as it is when it is made of safe
// characters only, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
