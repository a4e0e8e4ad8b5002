package runs

import (
	"slices"
	"sync/atomic"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"symbi/internal/policy"
	"sync"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/project"
)

// Config is what a Manager needs. Root is required.
type Config struct {
	Root    *os.File // the project directory
	KeyFile string   // SYMBI_AUDIT_KEY_FILE; "" for the project's key
	// Runner starts runs; nil for a Manager that only reads (the CLI twins).
	Runner *invoke.Runner
	// Registry, when set, lets list_runs filter by an agent's registry name.
	Registry *project.Registry
	// Ledger receives resolution entries; nil refuses resolve.
	Ledger *ledger.Writer
	// Access is the project's run-access policy set (policy.LoadAccess); nil applies the
	// built-in defaults. Only Authorize, AuthorizeStart and List with a Reader consult it.
	Access *policy.Set
	// MaxRunsPerCaller bounds the runs one caller may have in flight in this server
	// (start_run and invoke_agent alike); 0 means no bound beyond the server's own.
	MaxRunsPerCaller int
	Log              *slog.Logger
}

// Manager answers for a project's runs. Its methods are safe for concurrent use.
type Manager struct {
	cfg        Config
	waiters    atomic.Int64 // run_events calls waiting (MaxWaiters)
	gov        string       // the governed directory
	pub        ed25519.PublicKey
	ledgerPath string
	watchers   sync.WaitGroup

	perCallerMu sync.Mutex
	perCaller   map[string]int // runs in flight by caller id (MaxRunsPerCaller)

	mu           sync.Mutex
	runs         map[string]*run
	order        []string // run ids, ascending
	resolutions  map[string]*Resolution
	ledgerReader *ledger.Reader
	ledgerOff    int64
	ledgerLines  int64
	ledgerErr    error
	scanned      bool              // the governed directory was scanned for journals the ledger does not know
	ledgerID     [2]uint64         // device and inode of the ledger file read
	names        map[string]string // the governed directory's journals by run id (listing)
	namesStamp   [3]int64          // the directory's mtime and size when names was read
	listeners    map[int]func(runID string)
	nextListener int
}

// cancelWait bounds how long cancel_run waits for the run's terminated record before
// answering with the status it has then.
const cancelWait = 10 * time.Second

// Open builds the index of the project's runs: the ledger, verified line by line, and the
// journals on disk it does not know. The governed directory must exist (a server creates
// it at start-up); without it the error is errcode.NotFound.
func Open(cfg Config) (*Manager, error) {
	m := New(cfg)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.ledgerTail(); err != nil {
		return nil, err
	}
	return m, nil
}

// New is Open for a server: it always returns a Manager. When the index cannot be built
// (no governed store, a ledger that does not verify), every answer about runs fails
// closed with that reason, while runs are still started through the Runner (which
// refuses them for the same reason).
func New(cfg Config) *Manager {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, runs: map[string]*run{}, resolutions: map[string]*Resolution{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ledgerTail() // opens the store; a failure is kept and returned by every query
	return m
}

// openStore finds the governed store and the project's public key; m.mu is held. A
// project without one yet (no run has ever started) is tried again at the next call.
func (m *Manager) openStore() error {
	store, err := journal.OpenStore(m.cfg.Root, journal.StoreOptions{KeyFile: m.cfg.KeyFile})
	if err != nil {
		if errors.Is(err, journal.ErrNoKey) || errors.Is(err, os.ErrNotExist) {
			return errcode.Errorf(errcode.NotFound, "the project has no run records yet (%v)", err)
		}
		m.ledgerErr = errcode.Errorf(errcode.AuditUnavailable, "the project's governed store: %v", err)
		return m.ledgerErr
	}
	m.gov, m.pub = store.Dir(), store.PublicKey()
	store.Close()
	m.ledgerPath = filepath.Join(filepath.Dir(m.gov), ledger.FileName)
	m.ledgerReader = ledger.NewReader(m.pub)
	return nil
}

// PublicKey returns the project's public key, which verifies every event line (nil
// before the project has a governed store).
func (m *Manager) PublicKey() ed25519.PublicKey {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pub
}

// Close waits until every run this Manager watches has ended (the Runner's Shutdown
// ends them) and its end is in the index.
func (m *Manager) Close() { m.watchers.Wait() }

// Start starts a governed run and returns once its started record is durable: the run
// then goes on, owned by the server, whatever becomes of the request that started it.
func (m *Manager) Start(ctx context.Context, req invoke.Request) (*Status, *invoke.Audit, error) {
	release, err := m.admit(req.Caller)
	if err != nil {
		return nil, nil, err
	}
	req.Ended = release // freed before anyone hears the run ended; watch's is a backstop
	lr, err := m.runner().Start(req, nil)
	if err != nil {
		release()
		return nil, nil, err
	}
	m.watch(lr, release)
	for {
		changed := lr.Changed() // taken before Durable is read: no change is missed
		if lr.Durable().Records > 0 {
			break
		}
		select {
		case <-changed:
		case <-lr.Done():
			if lr.Durable().Records == 0 {
				_, err := lr.Wait(ctx) // it ended before its journal held a record
				if err == nil {
					err = errcode.Errorf(errcode.Internal, "the run ended before its journal held a record, and said no error")
				}
				return nil, nil, err
			}
		case <-ctx.Done():
			// Nobody learnt its id: the run is not left going on unseen.
			lr.Cancel(invoke.ErrCallerGone)
			if _, err := lr.Wait(ctx); err != nil {
				return nil, nil, err
			}
			// It had committed to releasing its answer before the cancel: it ended, to no
			// one, and the project ledger has it.
			return nil, nil, errcode.Errorf(errcode.Cancelled, "start_run was cancelled before the run's id was returned; the run ended meanwhile (list_runs shows it)")
		}
	}
	m.mu.Lock()
	if m.gov == "" {
		m.ledgerTail() // the first run of a project creates its store
	}
	r := m.adopt(lr)
	snap := *r
	m.mu.Unlock()
	audit := *lr.Audit()
	rc := lr.Durable()
	audit.Records, audit.Head = rc.Records, rc.Head
	if isDone(lr) {
		return m.build(&snap, false), &audit, nil
	}
	// Running: what the caller needs is known without reading the journal back.
	return &Status{RunID: snap.id, Agent: snap.agent, AgentID: snap.agentID, Status: StatusRunning, Caller: snap.caller, CallerAuth: snap.callerAuth,
		Records: int64(rc.Records), Head: rc.Head, Journal: audit.Path}, &audit, nil
}

// Invoke starts a governed run and waits for its outcome: invoke_agent. The run is
// cancelled when ctx ends (its caller is gone), as invoke.Run.Await says.
func (m *Manager) Invoke(ctx context.Context, req invoke.Request, progress func(invoke.Stage)) (*invoke.Result, error) {
	release, err := m.admit(req.Caller)
	if err != nil {
		return nil, err
	}
	req.Ended = release
	lr, err := m.runner().Start(req, progress)
	if err != nil {
		release()
		return nil, err
	}
	m.watch(lr, release)
	return lr.Await(ctx)
}

func (m *Manager) runner() *invoke.Runner {
	if m.cfg.Runner == nil {
		panic("runs: Start on a Manager without a Runner")
	}
	return m.cfg.Runner
}

// watch follows lr until it ends: it enters the run in the index at its first durable
// record, reports each new durable event, and records how the run ended. release is
// called when the run has ended (again, for a run whose Request.Ended called it: release
// uncounts once).
func (m *Manager) watch(lr *invoke.Run, release func()) {
	m.watchers.Add(1)
	go func() {
		defer m.watchers.Done()
		defer release()
		var id string
		var seen int
		for {
			ch := lr.Changed()
			if rc := lr.Durable(); rc.Records > seen {
				seen = rc.Records
				if id == "" {
					m.mu.Lock()
					if r := m.adopt(lr); r != nil {
						id = r.id
					}
					m.mu.Unlock()
				}
				m.notify(id)
			}
			select {
			case <-ch:
				continue
			case <-lr.Done():
			}
			m.mu.Lock()
			if id == "" && lr.Durable().Records > 0 {
				if r := m.adopt(lr); r != nil {
					id = r.id
				}
			}
			if r := m.runs[id]; r != nil && r.live == lr {
				rc := lr.Durable()
				r.ended, r.reason, r.released = true, lr.Reason(), lr.Reason() == StatusCompleted
				r.records, r.head = int64(rc.Records), rc.Head
				r.live, r.ownEnd = nil, true
			}
			m.mu.Unlock()
			m.notify(id)
			return
		}
	}()
}

// listing returns the journal file names of the governed directory by run id, read again
// only when the directory's modification time or size has changed; m.mu is held.
func (m *Manager) listing() (map[string]string, error) {
	var st unix.Stat_t
	if err := unix.Stat(m.gov, &st); err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "the governed directory: %v", err)
	}
	stamp := [3]int64{st.Mtim.Sec, st.Mtim.Nsec, st.Size}
	if m.names != nil && stamp == m.namesStamp {
		return m.names, nil
	}
	ents, err := os.ReadDir(m.gov)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "reading the governed directory: %v", err)
	}
	names := make(map[string]string, len(ents))
	for _, ent := range ents {
		if _, runID, ok := splitName(ent.Name()); ok && ent.Type().IsRegular() {
			names[runID] = ent.Name()
		}
	}
	m.names, m.namesStamp = names, stamp
	return names, nil
}

// agentIDs returns the agent ids the index and the registry know; m.mu is held.
func (m *Manager) agentIDs() map[string]bool {
	ids := map[string]bool{}
	for _, r := range m.runs {
		if r.agentID != "" {
			ids[r.agentID] = true
		}
	}
	if m.cfg.Registry != nil {
		for _, e := range m.cfg.Registry.Entries() {
			if a, err := m.cfg.Registry.Resolve(e.Name); err == nil && a.Admission != nil && a.Admission.Agent != "" {
				ids[policy.AgentID(a.Admission.Agent)] = true
			}
		}
	}
	return ids
}

// adopt enters lr, which holds a durable record, in the index; m.mu is held.
func (m *Manager) adopt(lr *invoke.Run) *run {
	a := lr.Audit()
	if a == nil {
		return nil
	}
	r, isNew := m.record(a.RunID)
	if !isNew && r.external {
		// Seen on disk before this process entered it: it is this process's run.
		isNew = true
		m.order = slices.DeleteFunc(m.order, func(id string) bool { return id == a.RunID })
		r.external, r.facts, r.verified = false, nil, nil
	}
	if isNew {
		r.agent, r.agentID, r.caller, r.callerAuth = lr.Agent()
		r.file = filepath.Base(a.Path)
		r.live = lr
		m.insert(a.RunID)
	}
	return r
}

// OnChange registers f to be called, never with a lock held, when a run gets a new
// durable event, ends, or is resolved. f must not block for long: it delays only the
// next report, never a run. The returned function unregisters f.
func (m *Manager) OnChange(f func(runID string)) (unregister func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listeners == nil {
		m.listeners = map[int]func(string){}
	}
	k := m.nextListener
	m.nextListener++
	m.listeners[k] = f
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.listeners, k)
	}
}

func (m *Manager) notify(id string) {
	if id == "" {
		return
	}
	m.mu.Lock()
	fs := make([]func(string), 0, len(m.listeners))
	for _, f := range m.listeners {
		fs = append(fs, f)
	}
	m.mu.Unlock()
	for _, f := range fs {
		f(id)
	}
}

// lookup returns a copy of what the index knows of id: this process's runs, the ledger
// (read on when id is not known yet), and a journal on disk.
func (m *Manager) lookup(id string) (*run, error) {
	if !validID(id) {
		return nil, errcode.Errorf(errcode.InvalidRequest, "run_id %s is not a run id (ASCII letters, digits, '-' and '_', at most %d bytes)", errcode.Quote(id), MaxRunIDBytes)
	}
	if m.cfg.Registry != nil {
		// agentIDs below may need the registry, which a server reads while it starts:
		// wait for it here rather than with m.mu held.
		m.cfg.Registry.Wait()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.runs[id]
	if r == nil || r.live == nil {
		// Read on: what the ledger says of the run (an end, a resolution another process
		// recorded) is current, and a ledger that no longer verifies fails the answer
		// closed. Only this process's run in flight is answered without it.
		if err := m.ledgerTail(); err != nil {
			if errcode.Of(err) == errcode.NotFound && r == nil {
				// The project has never run anything: no run has this id.
				return nil, errcode.Errorf(errcode.RunNotFound, "%w: %s (%v)", ErrNotFound, id, err)
			}
			return nil, err
		}
		r = m.runs[id]
	}
	if r == nil && m.gov != "" {
		// Another process's run, begun after this index was built: its journal is
		// <agent_id>.<run_id>.jsonl for one of the agents known here (no directory scan
		// and no pattern: an unknown id costs one lstat per agent).
		name := ""
		for agentID := range m.agentIDs() {
			var st unix.Stat_t
			if n := journal.FileName(agentID, id); unix.Lstat(filepath.Join(m.gov, n), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				name = n
				break
			}
		}
		if name == "" {
			// An agent not known here: the directory's listing, read again only when the
			// directory has changed since.
			names, err := m.listing()
			if err != nil {
				return nil, err
			}
			name = names[id]
		}
		if agentID, _, ok := splitName(name); ok {
			r, _ = m.record(id)
			r.agentID, r.file, r.external = agentID, name, true
			m.insert(id)
		}
	}
	if r == nil {
		return nil, errcode.Errorf(errcode.RunNotFound, "%w: %s (neither running here nor in the project ledger)", ErrNotFound, id)
	}
	snap := *r
	return &snap, nil
}

// Status returns what is known of the run, with its released text when the journal keeps
// it.
func (m *Manager) Status(runID string) (*Status, error) {
	snap, err := m.lookup(runID)
	if err != nil {
		return nil, err
	}
	return m.build(snap, true), nil
}

// Cancel cancels a run of this server and waits (bounded) for its terminated record. A
// run that has already ended is answered with its status and alreadyFinished.
func (m *Manager) Cancel(ctx context.Context, runID string) (st *Status, alreadyFinished bool, err error) {
	snap, err := m.lookup(runID)
	if err != nil {
		return nil, false, err
	}
	if lr := snap.live; lr != nil && !isDone(lr) {
		lr.Cancel(invoke.ErrCancelRequested)
		t := time.NewTimer(cancelWait)
		defer t.Stop()
		select {
		case <-lr.Done():
		case <-t.C:
		case <-ctx.Done():
		}
		if snap, err = m.lookup(runID); err != nil {
			return nil, false, err
		}
		return m.build(snap, false), false, nil
	}
	st = m.build(snap, false)
	if st.Status == StatusRunning || st.Status == StatusAwaitingApproval {
		return nil, false, errcode.Errorf(errcode.InvalidTransition, "%w: run %s is in flight in another server process; cancel it there", ErrTransition, runID)
	}
	return st, true, nil
}

// Resolve records a caller's resolution of a finished run: a signed resolution ledger
// entry, durable before the answer. A later call revises it; every entry stays. The
// status returned carries the released text only when by may read the run.
func (m *Manager) Resolve(runID, value, note string, by Caller) (*Status, error) {
	if err := CheckResolution(value, note); err != nil {
		return nil, err
	}
	snap, err := m.lookup(runID)
	if err != nil {
		return nil, err
	}
	if snap.live == nil {
		// Another process's run, or one no server writes: whether a writer holds its
		// journal is decided under the governed directory's scan lock, held exclusively
		// as reconciliation holds it, until the resolution is durable. A server creating
		// a journal holds that lock shared until its writer holds the file: without it,
		// a journal in that moment would look abandoned.
		release, err := journal.LockScan(m.gov)
		if err != nil {
			return nil, err
		}
		defer release()
		if snap, err = m.lookup(runID); err != nil {
			return nil, err
		}
	}
	if st := m.build(snap, false); st.Status == StatusRunning || st.Status == StatusAwaitingApproval {
		return nil, errcode.Errorf(errcode.InvalidTransition, "%w: run %s is %s; only a finished run can be resolved", ErrTransition, runID, st.Status)
	}
	if m.cfg.Ledger == nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "no project ledger is open, so the resolution cannot be recorded")
	}
	if _, err := m.cfg.Ledger.Append(ledger.Resolution{RunID: runID, Resolution: value, Note: note, Caller: by.ID, CallerAuth: by.Auth}); err != nil {
		return nil, err
	}
	m.mu.Lock()
	err = m.ledgerTail()
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m.notify(runID)
	if snap, err = m.lookup(runID); err != nil {
		return nil, err
	}
	// The released text only to a caller that may read the run: resolve_run is its own
	// action, and a caller allowed it may be forbidden read_run.
	st := m.build(snap, false)
	return m.build(snap, m.mayRead(by, st).Allow), nil
}

// CheckResolution checks resolve_run's arguments, before the run is looked up: a
// resolution of Resolutions, a note of at most 4 KiB.
func CheckResolution(value, note string) error {
	if !contains(Resolutions, value) {
		return errcode.Errorf(errcode.InvalidRequest, "resolution %s: want one of %v", errcode.Quote(value), Resolutions)
	}
	if len(note) > ledger.MaxNoteBytes {
		return errcode.Errorf(errcode.LimitExceeded, "note is %d bytes; the limit is %d (4 KiB)", len(note), ledger.MaxNoteBytes)
	}
	if !utf8.ValidString(note) {
		// Signed as it stands, it would read as other text (U+FFFD for each bad byte).
		return errcode.Errorf(errcode.InvalidRequest, "note is not valid UTF-8")
	}
	return nil
}

func isDone(lr *invoke.Run) bool {
	select {
	case <-lr.Done():
		return true
	default:
		return false
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
