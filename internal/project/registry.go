package project

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"symbi/internal/digest"
	"symbi/internal/dsl"
	"symbi/internal/errcode"
)

// Registry limits.
const (
	// RegistryMaxEntries is the number of agents/ directory entries inspected.
	RegistryMaxEntries = 1024
	// AgentFileLimit is the largest agent file read, in bytes.
	AgentFileLimit = 1 << 20
	// RegistryRetainLimit is the total of agent sources retained, in bytes.
	RegistryRetainLimit = 16 << 20
)

// agentsDir is the registry's directory, relative to the project.
const agentsDir = "agents"

// Entry describes one agent file of the registry snapshot.
type Entry struct {
	Name         string   `json:"name"`         // the file's stem
	File         string   `json:"file"`         // path relative to the project, e.g. agents/x.symbi
	Agents       []string `json:"agents"`       // declared agent names
	Description  string   `json:"description"`  // metadata description
	Capabilities []string `json:"capabilities"` // the selected agent's capabilities
	Invocable    bool     `json:"invocable"`    // whether invoke_agent may run it
	Reason       string   `json:"reason"`       // why not invocable (the first reason), with line:column; empty when invocable
	Reasons      []string `json:"reasons"`      // every reason it is not invocable; empty when invocable
	// Mode is how it answers: text_response (one model call, invoke_agent or start_run) or
	// delegated (a registered coding agent over ACP, start_run only); "" when refused.
	Mode     string `json:"mode"`
	Executor string `json:"executor,omitempty"` // the registered executor of a delegated agent
}

// The modes of an invocable agent.
const (
	ModeTextResponse = "text_response"
	ModeDelegated    = "delegated"
)

// Agent is a resolved registration: its entry, the source read at startup, and the
// admission verdict of the selected definition. It is shared: callers must not modify it.
type Agent struct {
	Entry     Entry
	Source    []byte
	Admission *dsl.Admission
	// Digests computed once, at registry time: of the whole file and of the selected
	// declaration's exact bytes (lowercase hex SHA-256).
	SourceSHA256, DeclarationSHA256 string

	ambiguous bool  // its stem is another agent file's too (markAmbiguous)
	notRead   error // why its file was never read (Resolve's answer): no source, no admission
}

// Registry is the agent registry snapshot taken by LoadRegistry: the agent files of
// agents/ as they were when it was taken (with PrepareRegistry: the names listed then,
// the contents read when the load ran). Files added later are not seen.
type Registry struct {
	mu     sync.Mutex
	start  func()        // builds agents (PrepareRegistry); nil once started or stopped
	ready  chan struct{} // closed once agents is built (or Stop prevented it)
	agents []*Agent      // sorted by name, then file
	more   bool          // agents/ had more entries than were inspected
	opts   dsl.Options   // what the agents were admitted with
}

// AdmitOptions are the options the registry's agents were admitted with (the server's
// executors): a definition judged elsewhere on the server is judged alike.
func (r *Registry) AdmitOptions() dsl.Options { return r.opts }

// LoadRegistry takes the registry snapshot: it inspects at most RegistryMaxEntries
// entries of agents/, keeps names ending in .symbi or .dsl, reads each through the
// confined reader (at most AgentFileLimit bytes) in name order, and stops retaining
// once the total would pass RegistryRetainLimit. A file that cannot be read, or is not
// retained, is listed refused with the rule (and a warning on log); Resolve answers with
// that refusal. A missing agents/ gives an empty registry.
//
// Reading, parsing and admission dominate start-up, so the files are read, parsed and
// admitted on all cores (see loadFiles); the snapshot and the warnings are then decided
// in name order, exactly as a one-by-one reading would.
func (p *Project) LoadRegistry(log *slog.Logger, opts ...dsl.Options) (*Registry, error) {
	r, err := p.PrepareRegistry(log, opts...)
	if err != nil {
		return nil, err
	}
	r.Wait()
	return r, nil
}

// PrepareRegistry is LoadRegistry in two steps, so that a server can answer initialize
// before its registry is read: it lists agents/ now — the only step that can fail — and
// returns the Registry, whose files are read, parsed and admitted in the background once
// Load is called. Entries, Resolve and Wait start the load if it has not started and
// wait until the snapshot is taken: it is the snapshot LoadRegistry takes. p must stay
// open until Wait has returned.
func (p *Project) PrepareRegistry(log *slog.Logger, opts ...dsl.Options) (*Registry, error) {
	var o dsl.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	names, more, err := p.agentFileNames(log)
	if err != nil {
		return nil, err
	}
	r := &Registry{ready: make(chan struct{}), more: more, opts: o}
	r.start = func() {
		defer close(r.ready)
		r.agents = p.snapshot(names, o, log)
	}
	return r, nil
}

// Load starts reading the registry's files in the background, once; later calls, and
// calls after Stop, do nothing.
func (r *Registry) Load() {
	if f := r.take(); f != nil {
		go f()
	}
}

// Wait starts the load if need be and waits until the snapshot is taken.
func (r *Registry) Wait() {
	if r.ready != nil {
		r.Load()
		<-r.ready
	}
}

// Ready is closed once the snapshot is taken (or Stop has prevented it); it does not start
// the load.
func (r *Registry) Ready() <-chan struct{} { return r.ready }

// Stop waits for a load in progress, or prevents one not started: the snapshot is then
// empty. After Stop the Project may be closed.
func (r *Registry) Stop() {
	if r.ready == nil {
		return
	}
	if r.take() != nil {
		close(r.ready)
	}
	<-r.ready
}

// take returns the load not yet started, and forgets it.
func (r *Registry) take() func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.start
	r.start = nil
	return f
}

// snapshot reads, parses and admits the files of names and returns the snapshot's
// agents, sorted.
func (p *Project) snapshot(names []string, o dsl.Options, log *slog.Logger) []*Agent {
	loaded := p.loadFiles(names, o)
	r := &Registry{}
	var refused []*Agent
	var retained int64
	for i, f := range loaded {
		rel := agentsDir + "/" + names[i]
		switch {
		case f.unprintable:
			// Never read, never invocable, and named only in escaped form, so that no
			// listing, AGENTS.md or terminal receives the raw bytes.
			refused = append(refused, unprintableAgent(names[i]))
			log.Warn("registry: refusing agent file", "file", refused[len(refused)-1].Entry.File, "reason", refused[len(refused)-1].Entry.Reason)
			continue
		case f.err != nil:
			// Listed, never invocable, with the rule that refused its reading: asking for
			// it is answered with that rule, not "no agent file".
			refused = append(refused, notReadAgent(names[i], errcode.Wrap(errcode.Of(f.err), fmt.Errorf("agent file %s was not read at startup: %w", rel, f.err))))
			log.Warn("registry: refusing agent file", "file", rel, "err", errcode.Text(f.err))
			continue
		}
		// loadFiles reads a prefix of names that runs past the retention limit, so this
		// stops at or before the first file it did not read.
		if f.agent == nil || retained+int64(len(f.agent.Source)) > RegistryRetainLimit {
			log.Warn("registry: retention limit reached; remaining agent files not loaded",
				"limit_bytes", RegistryRetainLimit, "skipped", len(names)-i, "first_skipped", rel)
			for j := i; j < len(names); j++ {
				if !printableName(names[j]) {
					refused = append(refused, unprintableAgent(names[j]))
					continue
				}
				refused = append(refused, notReadAgent(names[j], errcode.Errorf(errcode.LimitExceeded,
					"agent file %s/%s was not read at startup: refused by rule \"registry retention\": the agent files before it in name order hold about %d MiB, and the registry retains at most %d MiB; make the files smaller or fewer",
					agentsDir, names[j], RegistryRetainLimit>>20, RegistryRetainLimit>>20)))
			}
			break
		}
		retained += int64(len(f.agent.Source))
		r.agents = append(r.agents, f.agent)
	}
	r.agents = append(r.agents, refused...)
	r.markAmbiguous(names)
	sort.SliceStable(r.agents, func(i, j int) bool {
		a, b := r.agents[i].Entry, r.agents[j].Entry
		return a.Name < b.Name || a.Name == b.Name && a.File < b.File
	})
	return r.agents
}

// loadedFile is what loadFiles found for one name: a parsed and admitted agent, a read
// error, or a name that is not printable (never read).
type loadedFile struct {
	agent       *Agent
	err         error
	unprintable bool
}

// loadFiles reads, parses and admits the files of names on all cores, each worker
// taking the next name in order, and returns what it found for each, indexed like
// names. Workers stop taking names once the bytes read pass RegistryRetainLimit: the
// names taken form a prefix of names in which a reading in name order reaches the
// limit, and the files past that prefix, which no snapshot retains, are never read.
// So memory stays bounded by the limit plus one file per worker.
func (p *Project) loadFiles(names []string, o dsl.Options) []loadedFile {
	out := make([]loadedFile, len(names))
	var next, read atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for read.Load() <= RegistryRetainLimit {
				i := int(next.Add(1) - 1)
				if i >= len(names) {
					return
				}
				name, f := names[i], &out[i]
				if !printableName(name) {
					f.unprintable = true
					continue
				}
				rel := agentsDir + "/" + name
				src, err := p.Read(rel, AgentFileLimit)
				if err != nil {
					f.err = err
					continue
				}
				read.Add(int64(len(src)))
				f.agent = newAgent(rel, name, src, o)
				// A file takes tens of microseconds; yielding after each lets a server's
				// other goroutines (answering initialize while the registry loads) run at
				// once rather than at the scheduler's next preemption, 10 ms away.
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	return out
}

// agentFileNames lists at most RegistryMaxEntries entries of agents/ and returns the
// .symbi and .dsl names among them, sorted, and whether agents/ has more entries.
func (p *Project) agentFileNames(log *slog.Logger) (names []string, more bool, err error) {
	// No O_DIRECTORY: with O_NOFOLLOW it would report a symlink as "not a directory".
	fd, err := p.open(agentsDir, []string{agentsDir}, unix.O_RDONLY|unix.O_NONBLOCK)
	if errors.Is(err, ErrNotExist) {
		log.Warn("registry: the project has no agents/ directory; no agent can be invoked (symbi init writes a starter project)", "project", p.path)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("registry: %w", err)
	}
	dir := os.NewFile(uintptr(fd), agentsDir)
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, fmt.Errorf("registry: %w", refuse(agentsDir, ErrUnreadable, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, false, fmt.Errorf("registry: %w", refuse(agentsDir, ErrNotRegular, fmt.Errorf("%s, want a directory", fileType(st.Mode))))
	}
	all, err := dir.Readdirnames(RegistryMaxEntries)
	if err != nil && len(all) == 0 && !errors.Is(err, io.EOF) {
		return nil, false, errcode.Errorf(errcode.Internal, "registry: list agents/: %w", err)
	}
	if rest, _ := dir.Readdirnames(1); len(rest) > 0 {
		more = true
		log.Warn("registry: agents/ has more entries than are inspected; the rest are ignored",
			"inspected", RegistryMaxEntries)
	}
	for _, n := range all {
		if strings.HasSuffix(n, ".symbi") || strings.HasSuffix(n, ".dsl") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, more, nil
}

// printableName reports whether a directory entry's name is valid UTF-8 of printable
// characters only (unicode.IsPrint: no controls, no format characters such as a
// right-to-left override or a zero-width space, no line or paragraph separators) and
// without a backslash, which the escaped names of the others are shown with ("bad\xff"):
// the only names the registry registers.
func printableName(name string) bool {
	return utf8.ValidString(name) && !strings.ContainsFunc(name, func(r rune) bool { return r == '\\' || !unicode.IsPrint(r) })
}

// unprintableAgent is the refused registration of a file whose name is not printable
// UTF-8: its name and file are shown escaped (Go string-literal escapes, as in
// "bad\xff"), its source is not read.
func unprintableAgent(name string) *Agent {
	esc := strings.Trim(strconv.Quote(name), `"`)
	const reason = `refused by rule "printable file name": the file name is not valid UTF-8 or holds a character that is not printable, or a backslash (shown escaped); rename the file`
	return unreadAgent(esc, errcode.Errorf(errcode.RefusedDefinition, "%s/%s: %s", agentsDir, esc, reason), reason)
}

// notReadAgent is the refused registration of a file whose reading was refused (err,
// whose code and text Resolve returns): listed with the reason, never invocable.
func notReadAgent(name string, err error) *Agent {
	return unreadAgent(name, err, err.Error())
}

// unreadAgent is the registration of the file agents/name, never read: listed with
// reason, never invocable; Resolve answers err.
func unreadAgent(name string, err error, reason string) *Agent {
	e := Entry{Name: Stem(name), File: agentsDir + "/" + name, Agents: []string{}, Capabilities: []string{}, Reason: reason, Reasons: []string{reason}}
	return &Agent{Entry: e, notRead: err}
}

// Stem returns a file name without its .symbi or .dsl extension: the name it is
// registered by.
func Stem(name string) string {
	if s, ok := strings.CutSuffix(name, ".symbi"); ok {
		return s
	}
	return strings.TrimSuffix(name, ".dsl")
}

// newAgent parses and admits one agent file.
func newAgent(rel, name string, src []byte, o dsl.Options) *Agent {
	st := Stem(name)
	e := Entry{Name: st, File: rel, Agents: []string{}, Capabilities: []string{}, Reasons: []string{}}
	var adm *dsl.Admission
	if f, err := dsl.Parse(rel, src); err == nil {
		e.Agents = append(e.Agents, f.AgentNames()...)
		adm = dsl.Admit(f, st, o)
	} else {
		adm = dsl.AdmitSource(rel, st, src, o)
	}
	e.Description = adm.Description
	if adm.Capabilities != nil {
		e.Capabilities = adm.Capabilities
	}
	e.Invocable, e.Reason, e.Reasons = adm.Admitted, adm.Reason, adm.Reasons
	switch {
	case adm.Delegated():
		e.Mode, e.Executor = ModeDelegated, adm.Executor
	case adm.Admitted:
		e.Mode = ModeTextResponse
	}
	if e.Reasons == nil {
		e.Reasons = []string{}
	}
	return &Agent{Entry: e, Source: src, Admission: adm,
		SourceSHA256: digest.SHA256Hex(src), DeclarationSHA256: digest.SHA256Hex(adm.Declaration)}
}

// markAmbiguous refuses every stem present as more than one file (x.symbi and x.dsl)
// among names, the agent files found — read or not: a stem whose other file could not be
// read (a link, too large, past the retention limit) is no less ambiguous.
func (r *Registry) markAmbiguous(names []string) {
	files := map[string][]string{}
	for _, n := range names {
		files[Stem(n)] = append(files[Stem(n)], agentsDir+"/"+n)
	}
	for _, a := range r.agents {
		if fs := files[a.Entry.Name]; len(fs) > 1 {
			a.ambiguous = true
			a.Entry.Invocable, a.Entry.Mode, a.Entry.Executor = false, "", ""
			a.Entry.Reason = ambiguity(a.Entry.Name, fs)
			a.Entry.Reasons = append([]string{a.Entry.Reason}, a.Entry.Reasons...)
		}
	}
}

func ambiguity(stem string, files []string) string {
	fs := slices.Clone(files)
	sort.Strings(fs)
	return fmt.Sprintf("ambiguous: %s all have the stem %q; remove or rename all but one", strings.Join(fs, " and "), stem)
}

// Summary is why the entry is not invocable, in one line: its first reason and how many
// more there are ("" when invocable).
func (e Entry) Summary() string {
	if n := len(e.Reasons); n > 1 {
		return fmt.Sprintf("%s (and %d more)", e.Reason, n-1)
	}
	return e.Reason
}

// Entries returns the snapshot's entries, sorted by name.
func (r *Registry) Entries() []Entry {
	r.Wait()
	out := make([]Entry, len(r.agents))
	for i, a := range r.agents {
		out[i] = a.Entry
	}
	return out
}

// Resolve finds the registration of stem. No file → errcode.UnknownAgent; a stem
// present as both x.symbi and x.dsl → errcode.UnknownAgent ("ambiguous"); a file whose
// selection or admission refuses → errcode.RefusedDefinition with the reason, and the
// agent itself (its source is still of use to authoring tools; it must not be invoked).
func (r *Registry) Resolve(stem string) (*Agent, error) {
	r.Wait()
	var found []*Agent
	for _, a := range r.agents {
		if a.Entry.Name == stem {
			found = append(found, a)
		}
	}
	switch len(found) {
	case 0:
		if r.more {
			return nil, errcode.Errorf(errcode.UnknownAgent, "no agent file with the name %s among the %d entries of agents/ inspected at startup: agents/ has more entries, and the rest were not inspected (rule \"registry entries\"); the registry is a snapshot taken at startup", errcode.Quote(stem), RegistryMaxEntries)
		}
		return nil, errcode.Errorf(errcode.UnknownAgent, "no agent file with the name %s in agents/ (the registry is a snapshot taken at startup)", errcode.Quote(stem))
	case 1:
	default:
		files := make([]string, len(found))
		for i, a := range found {
			files[i] = a.Entry.File
		}
		return nil, errcode.Errorf(errcode.UnknownAgent, "%s", ambiguity(stem, files))
	}
	a := found[0]
	if a.ambiguous {
		return nil, errcode.Errorf(errcode.UnknownAgent, "%s", a.Entry.Reason)
	}
	if a.notRead != nil { // never read: nothing to show or invoke
		return nil, a.notRead
	}
	if !a.Entry.Invocable {
		// The agent comes back with the refusal so authoring tools can still show it.
		return a, errcode.Errorf(errcode.RefusedDefinition, "%s: %s", a.Entry.File, a.Entry.Summary())
	}
	return a, nil
}
