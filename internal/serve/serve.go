// Package serve runs symbi mcp's server process: it assembles the server from a project
// and the operator's options (the executors, the registry, the policy sets, the provider,
// the project ledger and the runs waiting at a human gate when the last server stopped),
// serves it over stdio (Stdio) or Streamable HTTP (HTTP), and shuts it down in order:
// runs cancelled, each journal ended with its terminated record, then the transport.
//
// The stop signals are caught for the process's life by a Watch, which the command starts
// before serving and ends after its last log line.
package serve

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
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

// ShutdownGrace bounds how long the server waits, after its input closed or a signal,
// for runs in flight to write their terminated records.
const ShutdownGrace = 15 * time.Second

// TransportGrace bounds how long the server waits, once every run has finished, for the
// MCP session (or the HTTP requests still open) to end when writes to the client are
// blocked (the client stopped reading).
const TransportGrace = 5 * time.Second

// Options are the operator's choices for one server (symbi mcp's flags and environment),
// and what it needs of its process: Getenv, Log and Watch are required.
type Options struct {
	Dir       string   // the project directory
	MaxRuns   int      // runs in flight at most
	MinFree   uint64   // the journal file system's free-space floor, in bytes (0: none)
	Executors string   // the executors file (empty: no run is delegated)
	Roots     []string // the directories delegated runs' workspaces must be in (absolute)
	// ApprovalTimeout bounds a wait at a human gate.
	ApprovalTimeout time.Duration
	// MaxRunsPerCaller bounds each caller's runs in flight (0: only MaxRuns).
	MaxRunsPerCaller int
	// Rate is each caller's requests a second at most (0: no limit).
	Rate   float64
	Getenv func(string) string
	// Log takes the server's log lines; a call must not wait for its output to be read
	// (symbi mcp's writes them on a goroutine of its own, dropping what stderr does not
	// take): a client that does not read stderr must not hold a run or the shutdown.
	Log *slog.Logger
	// Watch catches the stop signals; the caller ends it.
	Watch *Watch
}

// server is a server assembled (open) and not yet served.
type server struct {
	o      Options
	reg    *project.Registry
	runner *invoke.Runner
	cfg    mcpserver.Config
	attrs  []any         // the "serving" log line's
	served chan struct{} // closed by close
	lw     *ledger.Writer
	p      *project.Project
}

// open assembles the server: the executors, the project and its registry (listed now,
// read once serving begins, or at once when a resumed run's answer is judged again), the
// policy sets, the provider, the project ledger and the runs it resumes. A failure here is the operator's to fix; the ledger's alone does not
// stop the server (every run is refused, the authoring tools still serve).
func open(o Options) (*server, error) {
	log := o.Log
	var execs *executors.Registry
	if o.Executors != "" {
		var err error
		if execs, err = executors.Load(o.Executors, o.Getenv); err != nil {
			return nil, err
		}
		log.Info("executors registered", "names", execs.Names())
	}
	// agents/ is listed now; its files are read, parsed and admitted once the server is
	// set up, while it answers initialize (the calls that need the registry wait for it).
	p, err := project.Open(o.Dir)
	if err != nil {
		return nil, err
	}
	reg, err := p.PrepareRegistry(log, dsl.Options{Executors: func(n string) bool { _, ok := execs.Get(n); return ok }})
	if err != nil {
		p.Close()
		return nil, err
	}
	s := &server{o: o, reg: reg, p: p, served: make(chan struct{})}
	hashesOnly, err := journalTextChoice(o.Getenv("SYMBI_JOURNAL_TEXT"))
	if err != nil {
		s.close()
		return nil, err
	}
	pol := policy.Load(p.Root())
	if pol.Mode == policy.ModeDenyAll {
		log.Warn("policy set is deny_all: every response will be denied until it is fixed", "reason", pol.Reason)
	}
	prov, provErr := inference.FromEnv(o.Getenv)
	if provErr != nil {
		log.Warn("no usable inference provider; invoke_agent will answer no_provider", "detail", provErr)
		prov = nil
	}
	// The project ledger: opened, and reconciled with the journals on disk, before the
	// first run. Without it every run is refused (fail closed); the server still serves
	// the authoring tools.
	// Runs that were waiting at a human gate when the last server stopped are reopened
	// (their journals verified whole) before the ledger is reconciled, and continued below.
	var held []*invoke.Held
	keyFile := o.Getenv("SYMBI_AUDIT_KEY_FILE")
	lw, recovered, ledgerErr := ledger.OpenProjectResuming(p.Root(), keyFile, func(store *journal.Store, name string) {
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
		s.lw = lw
		for _, rec := range recovered {
			log.Warn("ledger: recovered a journal it had no entry for", "run_id", rec.RunID, "file", rec.File, "state", rec.State, "records", rec.Records)
		}
	}
	s.runner = invoke.New(invoke.Config{
		Ledger: lw, LedgerErr: ledgerErr,
		Project: p, Registry: reg, Policies: pol, Provider: prov, ProviderErr: provErr,
		KeyFile: keyFile, HashesOnly: hashesOnly, MinFreeBytes: o.MinFree, MaxRuns: o.MaxRuns, Log: log,
		Executors: execs, WorkspaceRoots: o.Roots, ApprovalTimeout: o.ApprovalTimeout,
	})
	// Runs: every run of this server and every run the ledger records, started through
	// runner (invoke_agent and start_run share it).
	access := policy.LoadAccess(p.Root())
	if access.Mode == policy.ModeDenyAll {
		log.Warn("access policy set is deny_all: every run access will be denied until it is fixed", "reason", access.Reason)
	}
	rm := runs.New(runs.Config{Root: p.Root(), KeyFile: keyFile, Runner: s.runner, Registry: reg, Ledger: lw, Log: log,
		Access: access, MaxRunsPerCaller: o.MaxRunsPerCaller})
	for _, h := range held {
		rm.Resume(h)
	}
	s.cfg = mcpserver.Config{Project: p, Registry: reg, Runs: rm, Schemas: schemapin.NewVerifier(o.Getenv), Log: log, Rate: o.Rate}
	s.attrs = []any{"project", p.Path(), "policy_mode", pol.Mode, "policy_digest", pol.Digest, "access_mode", access.Mode}
	if prov != nil {
		s.attrs = append(s.attrs, "provider", prov.Name(), "model", prov.Model())
	}
	return s, nil
}

// loadRegistry begins reading the registry in the background (initialize does not need
// it), as the server starts serving, whatever the client does; a call that needs it
// waits for it.
func (s *server) loadRegistry() { loadRegistry(s.reg, s.o.Getenv, s.o.Log, s.served) }

// armShutdown makes a stop signal shut the server down in order (before, it ends the
// process): armed before "serving" is logged, which a client may act on.
func (s *server) armShutdown() { s.o.Watch.setHurry(s.runner.Hurry) }

// close lets go of what open took: the ledger writer, then the registry and the project.
// The runs are ended before (shutdownRuns).
func (s *server) close() {
	if s.lw != nil {
		s.lw.Close()
	}
	close(s.served)
	s.reg.Stop()
	s.p.Close()
}

// catchSIGPIPE makes a write to a closed pipe fail with EPIPE instead of killing the
// process. A client that stops reading must not kill the server, even while it starts
// up: a failed stderr write loses a log line; a failed stdout write means no one can be
// answered, so it ends the session like a signal does. Caught, not ignored: an ignored
// signal stays ignored in the programs started (delegated agents and what they run),
// where a closed pipe must end a writer as usual.
func catchSIGPIPE() {
	sigpipe.Do(func() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) })
}

var sigpipe sync.Once

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

// shutdownRuns cancels the runs in flight and waits, at most ShutdownGrace, for each to
// write its terminated record.
func shutdownRuns(runner *invoke.Runner, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
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
