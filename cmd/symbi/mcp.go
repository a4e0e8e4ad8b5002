package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/serve"
)

var cmdMCP = &command{name: "mcp", summary: "serve the project's agents over MCP on stdin/stdout, or Streamable HTTP with --http (governed runs)"}

func init() {
	cmdMCP.run = runMCP
	register(cmdMCP)
}

// runMCP runs symbi mcp: its flags, checked, then the server (package serve).
func runMCP(e *env, args []string) int {
	fs := newFlags(e, cmdMCP)
	dir := fs.String("project", ".", "the project `DIR` to serve")
	level := fs.String("log-level", "info", "stderr log `LEVEL`: debug, info, warn or error")
	maxRuns := fs.Int("max-runs", invoke.DefaultMaxRuns, "`N` runs in flight at most; a call beyond it fails at once with busy")
	minFree := byteSize(defaultMinFree)
	fs.Var(&minFree, "min-free-space", "refuse new runs (audit_unavailable) while the journal file system has less free space than `SIZE` (e.g. 64MiB; 0: no floor)")
	approvalTimeout := fs.Duration("approval-timeout", invoke.DefaultApprovalTimeout, "how long a run whose answer a @gate(\"human\") policy holds waits for approve_run, at least (the agent's own timeout when longer); then it ends with timeout")
	execFile := fs.String("executors", "", "register the coding agents delegated agents may run, from the JSON `FILE` (docs/executors.md)")
	var roots listFlag
	fs.Var(&roots, "workspace-root", "a `DIR` inside which delegated runs' workspaces must be (repeatable; default: the project directory)")
	var h httpFlags
	h.register(fs)
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	h.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { h.set[f.Name] = true })
	if len(roots) > 0 && *execFile == "" {
		// Without executors no run is delegated: the flag would say where workspaces
		// may be for runs that cannot exist.
		fmt.Fprintln(e.stderr, "symbi mcp: --workspace-root applies only with --executors (no run is delegated without it)")
		return 2
	}
	for i, r := range roots {
		// Checked now, for the operator: each run would otherwise be refused for it.
		abs, err := filepath.Abs(r)
		if err == nil {
			var st os.FileInfo
			if st, err = os.Stat(abs); err == nil && !st.IsDir() {
				err = errors.New("not a directory")
			}
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "symbi mcp: --workspace-root %q: %v; want an existing directory\n", r, err)
			return 2
		}
		roots[i] = abs
	}
	if *maxRuns < 1 {
		fmt.Fprintf(e.stderr, "symbi mcp: --max-runs %d: want 1 or more\n", *maxRuns)
		return 2
	}
	if *approvalTimeout <= 0 {
		fmt.Fprintf(e.stderr, "symbi mcp: --approval-timeout %s: want a positive duration (e.g. 30m, 24h)\n", *approvalTimeout)
		return 2
	}
	if err := h.check(); err != nil {
		fmt.Fprintf(e.stderr, "symbi mcp: %v\n", err)
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(e.stderr, "symbi mcp: --log-level %q: want debug, info, warn or error\n", *level)
		return 2
	}
	// Log lines are written on their own goroutine, dropped (and counted) when stderr is
	// not read: a log call never waits for the client to read stderr.
	sink := newLogSink(e.stderr)
	log := slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: lv, ReplaceAttr: clipAttr}))
	// The stop signals are caught from here to the exit, the last log lines' flush
	// included (until serving begins, a signal ends the process as uncaught): a client
	// that closes stdin and then sends SIGTERM, while stderr is not read, cuts the
	// flush short and sees exit 0, not a kill.
	watch := serve.WatchSignals(log)
	defer watch.End()
	o := serve.Options{Dir: *dir, MaxRuns: *maxRuns, MinFree: uint64(minFree), Executors: *execFile, Roots: roots,
		ApprovalTimeout: *approvalTimeout, MaxRunsPerCaller: h.maxPerCaller, Rate: h.rate, Getenv: e.getenv, Log: log, Watch: watch}
	var err error
	if h.addr != "" {
		err = serve.HTTP(o, h.options())
	} else {
		err = serve.Stdio(o, e.stdin, e.stdout)
	}
	if err != nil {
		fmt.Fprintf(sink, "symbi mcp: %s\n", errcode.Text(err))
	}
	sink.Close(logFlushWait, watch.Hurried())
	if err != nil {
		return 1
	}
	return 0
}

// defaultMinFree is the default free-space floor of the journal file system: room for
// one journal at its largest (64 MiB).
const defaultMinFree = 64 << 20
