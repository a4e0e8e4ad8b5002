package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/executors"
	"symbi/internal/inference"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/mcpserver"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
	"symbi/internal/schemapin"
)

// shutdownGrace bounds how long symbi mcp waits, after its input closed or a signal, for
// runs in flight to write their terminated records.
const shutdownGrace = 15 * time.Second

// transportGrace bounds how long symbi mcp waits, once every run has finished, for the
// MCP session to end when writes to the client are blocked (the client stopped reading).
const transportGrace = 5 * time.Second

var cmdMCP = &command{name: "mcp", summary: "serve the project's agents over MCP on stdin/stdout, or Streamable HTTP with --http (governed runs)"}

func init() {
	cmdMCP.run = runMCP
	register(cmdMCP)
}

// runMCP runs symbi mcp: its flags, checked, then the server (serveMCP).
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
	watch := watchShutdown(log, nil)
	defer watch.end()
	err := serveMCP(e, serveOptions{dir: *dir, maxRuns: *maxRuns, minFree: uint64(minFree), executors: *execFile, roots: roots, http: h, approvalTimeout: *approvalTimeout, watch: watch}, log)
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

// serveOptions are the flags of symbi mcp.
type serveOptions struct {
	dir       string
	maxRuns   int
	minFree   uint64
	executors string   // --executors FILE
	roots     []string // --workspace-root
	http      httpFlags
	// approvalTimeout bounds a wait at a human gate (--approval-timeout).
	approvalTimeout time.Duration
	// watch catches the stop signals; the caller ends it.
	watch *shutdownWatch
}

// serveMCP serves the project until stdin closes or SIGTERM, SIGINT or SIGHUP arrives,
// then lets the runs in flight finish their journals.
func serveMCP(e *env, o serveOptions, log *slog.Logger) error {
	// A client that stops reading must not kill the server, even while it starts up: with
	// SIGPIPE caught a write to a closed stdout or stderr fails with EPIPE instead. A
	// failed stderr write loses a log line; a failed stdout write means no one can be
	// answered, so it ends the session like a signal does (below). Caught, not ignored:
	// an ignored signal stays ignored in the programs started (delegated agents and what
	// they run), where a closed pipe must end a writer as usual.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	var execs *executors.Registry
	if o.executors != "" {
		var err error
		if execs, err = executors.Load(o.executors, e.getenv); err != nil {
			return err
		}
		log.Info("executors registered", "names", execs.Names())
	}
	// agents/ is listed now; its files are read, parsed and admitted once the server is
	// set up, while it answers initialize (the calls that need the registry wait for it).
	p, err := project.Open(o.dir)
	if err != nil {
		return err
	}
	reg, err := p.PrepareRegistry(log, dsl.Options{Executors: func(n string) bool { _, ok := execs.Get(n); return ok }})
	if err != nil {
		p.Close()
		return err
	}
	served := make(chan struct{})
	defer func() { close(served); reg.Stop(); p.Close() }()
	pol := policy.Load(p.Root())
	if pol.Mode == policy.ModeDenyAll {
		log.Warn("policy set is deny_all: every response will be denied until it is fixed", "reason", pol.Reason)
	}
	prov, provErr := inference.FromEnv(e.getenv)
	if provErr != nil {
		log.Warn("no usable inference provider; invoke_agent will answer no_provider", "detail", provErr)
		prov = nil
	}
	hashesOnly, err := journalTextChoice(e.getenv("SYMBI_JOURNAL_TEXT"))
	if err != nil {
		return err
	}
	// The project ledger: opened, and reconciled with the journals on disk, before the
	// first run. Without it every run is refused (fail closed); the server still serves
	// the authoring tools.
	// Runs that were waiting at a human gate when the last server stopped are reopened
	// (their journals verified whole) before the ledger is reconciled, and continued below.
	var held []*invoke.Held
	lw, recovered, ledgerErr := ledger.OpenProjectResuming(p.Root(), e.getenv("SYMBI_AUDIT_KEY_FILE"), func(store *journal.Store, name string) {
		h, err := invoke.ReopenHeld(store, name)
		switch {
		case err != nil:
			log.Warn("a journal waiting for approval could not be reopened; it is reconciled as found", "file", name, "err", err)
		case h != nil:
			held = append(held, h)
		}
	})
	if ledgerErr != nil {
		log.Error("project ledger unavailable: every run will be refused (audit_unavailable)", "err", ledgerErr)
		for _, h := range held {
			h.Close()
		}
		held = nil
	} else {
		defer lw.Close()
		for _, rec := range recovered {
			log.Warn("ledger: recovered a journal it had no entry for", "run_id", rec.RunID, "file", rec.File, "state", rec.State, "records", rec.Records)
		}
	}
	runner := invoke.New(invoke.Config{
		Ledger: lw, LedgerErr: ledgerErr,
		Project: p, Registry: reg, Policies: pol, Provider: prov, ProviderErr: provErr,
		KeyFile: e.getenv("SYMBI_AUDIT_KEY_FILE"), HashesOnly: hashesOnly, MinFreeBytes: o.minFree, MaxRuns: o.maxRuns, Log: log,
		Executors: execs, WorkspaceRoots: o.roots, ApprovalTimeout: o.approvalTimeout,
	})
	// Runs: every run of this server and every run the ledger records, started through
	// runner (invoke_agent and start_run share it).
	access := policy.LoadAccess(p.Root())
	if access.Mode == policy.ModeDenyAll {
		log.Warn("access policy set is deny_all: every run access will be denied until it is fixed", "reason", access.Reason)
	}
	rm := runs.New(runs.Config{Root: p.Root(), KeyFile: e.getenv("SYMBI_AUDIT_KEY_FILE"), Runner: runner, Registry: reg, Ledger: lw, Log: log,
		Access: access, MaxRunsPerCaller: o.http.maxPerCaller})
	for _, h := range held {
		rm.Resume(h)
	}
	cfg := mcpserver.Config{Project: p, Registry: reg, Runs: rm, Schemas: schemapin.NewVerifier(e.getenv), Log: log, Rate: o.http.rate}
	attrs := []any{"project", p.Path(), "policy_mode", pol.Mode, "policy_digest", pol.Digest, "access_mode", access.Mode}
	if prov != nil {
		attrs = append(attrs, "provider", prov.Name(), "model", prov.Model())
	}
	// The registry is read in the background (initialize does not need it), begun here,
	// as the server starts serving, whatever the client does; a call that needs it waits
	// for it.
	loadRegistry(reg, e.getenv, log, served)
	if o.http.addr != "" {
		return serveHTTP(e, o.http, cfg, runner, log, attrs, o.watch)
	}
	server := mcpserver.New(cfg)
	// From here a stop signal shuts the server down in order (before, it ends the
	// process): armed before "serving" is logged, which a client may act on.
	watch := o.watch
	watch.setHurry(runner.Hurry)
	log.Info("serving", attrs...)

	ctx, clientGone := context.WithCancelCause(watch.Context())
	defer clientGone(nil)
	stdout := mcpserver.WatchWrites(e.stdout, func(err error) {
		log.Warn("the client stopped reading stdout; cancelling the runs in flight", "err", err)
		clientGone(fmt.Errorf("writing to stdout: %w", err))
	})
	// stdin closing ends the session: the SDK cancels the calls in flight, and Run returns
	// once they have. The shutdown begins at the close, not then: the runs start_run began
	// are cancelled at once, and a signal from here on hurries them.
	stdinEnded := make(chan struct{})
	stdin := mcpserver.WatchReads(e.stdin, func(err error) {
		runner.Stop()
		why := "the client closed stdin"
		if !errors.Is(err, io.EOF) {
			why = fmt.Sprintf("reading stdin: %v", err)
		}
		watch.begin(why)
		close(stdinEnded)
	})
	runDone := make(chan error, 1)
	go func() { runDone <- server.Run(ctx, mcpserver.NewStdioTransport(stdin, stdout)) }()
	var runErr error
	select {
	case runErr = <-runDone:
	case <-stdinEnded:
		// The client is done. The runs end, each writing terminated; Run returns once
		// the calls have — but a call blocked writing to a client that no longer reads
		// would hold it forever: transportGrace, as below.
		shutdownRuns(runner, log)
		select {
		case runErr = <-runDone:
		case <-time.After(transportGrace):
			log.Warn("the MCP session did not end: writes to the client are blocked; exiting with every run finished", "waited", transportGrace)
		}
	case <-ctx.Done():
		// A signal, or a client that stopped reading: cancel the runs in flight at once
		// and wait, within the grace period, for each to write terminated. The SDK's Run
		// then waits for the calls; a call blocked writing to a client that no longer
		// reads would hold it forever, so it gets transportGrace and is then left behind:
		// every journal is finished by then, and exiting loses no record.
		watch.begin(context.Cause(ctx).Error())
		shutdownRuns(runner, log)
		select {
		case runErr = <-runDone:
		case <-time.After(transportGrace):
			log.Warn("the MCP session did not end: writes to the client are blocked; exiting with every run finished", "waited", transportGrace)
		}
	}
	signalled := ctx.Err() != nil // a signal, or the client gone: both end the session cleanly
	// The signals stay caught until every run has finished its journal: a client that
	// closes stdin and sends SIGTERM after a grace period must not kill the runs' ends;
	// its signal hurries them instead (shutdownWatch).
	shutdownRuns(runner, log)
	if runErr != nil && !signalled {
		return fmt.Errorf("MCP session: %w", runErr)
	}
	return nil
}

// startupGCPercent is the garbage collector's target while the registry loads: start-up
// allocates much and keeps little (each file's parse is garbage once admitted), so fewer
// collections make it faster, at a heap of a few tens of MB.
const startupGCPercent = 400

// loadRegistry starts taking the registry snapshot in the background, the collector's
// start-up target (startupGC) raised until it is taken or the server ends first (served
// closed), and logs when it is taken.
func loadRegistry(reg *project.Registry, getenv func(string) string, log *slog.Logger, served <-chan struct{}) {
	restore, began := startupGC(getenv), time.Now()
	reg.Load()
	go func() {
		defer restore()
		select {
		case <-reg.Ready():
			log.Info("registry loaded", "agents", len(reg.Entries()), "took", time.Since(began).Round(time.Millisecond))
		case <-served: // still loading at exit: Stop settles it
		}
	}()
}

// startupGC raises the collector's target for start-up unless GOGC is set, and returns
// what restores it.
func startupGC(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(startupGCPercent)
	return func() { debug.SetGCPercent(old) }
}

// shutdownRuns cancels the runs in flight and waits, at most shutdownGrace, for each to
// write its terminated record.
func shutdownRuns(runner *invoke.Runner, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := runner.Shutdown(ctx); err != nil {
		log.Error("runs still in flight at exit", "err", err)
	}
}

// journalTextChoice reads SYMBI_JOURNAL_TEXT: "full" (default) journals the clear text of
// prompts and responses beside their hashes; "hashes" keeps only hashes and lengths.
func journalTextChoice(v string) (hashesOnly bool, err error) {
	switch v {
	case "", "full":
		return false, nil
	case "hashes":
		return true, nil
	}
	return false, errcode.Errorf(errcode.InvalidRequest, "SYMBI_JOURNAL_TEXT=%s: want full or hashes", errcode.Quote(v))
}
