package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/project"
)

// run is what the index knows of one run. Fields are guarded by Manager.mu.
type run struct {
	id, agentID, agent, file, caller, callerAuth string

	// From a run ledger entry, or from this process's run when it ended.
	ended    bool
	reason   string // the terminated reason; "" for a recovered entry (read from the journal)
	released bool
	records  int64
	head     string
	prevHead string // a run entry's: the journal's head before its last line
	endedAt  string

	recovered string // a recovered entry's state: complete, incomplete or invalid
	pruned    bool
	// Of the pruned entry: the journal removed had no terminated line, one line short of
	// its run entry (prunedShort); or how it ended, by its terminated record.
	prunedShort    bool
	prunedReason   string
	prunedReleased bool
	resolution     *Resolution

	live     *invoke.Run // this process's run, until it has ended
	ownEnd   bool        // this process's run ended here: its watcher recorded how
	external bool        // found on disk, unknown to the ledger: another process's run or an unreconciled crash

	facts *facts // read from the journal; kept once the run has ended

	verified *verified // the journal's prefix run_events last verified
}

// ledgerTail follows the ledger file: it reads the lines appended since the last call,
// verifies each as the chain continues, and applies them to the index.
func (m *Manager) ledgerTail() (err error) {
	if m.ledgerErr != nil {
		return m.ledgerErr
	}
	if m.gov == "" {
		if err := m.openStore(); err != nil {
			return err
		}
		if err := m.takeOpened(); err != nil {
			return err
		}
	}
	// Once the ledger has been read, the journals it does not know are added: at the
	// first call that reads it, or — when that failed — the next one that does.
	defer func() {
		if err == nil && !m.scanned {
			err = m.scanJournals()
			m.scanned = err == nil
		}
	}()
	f, err := m.openInProject(".symbiont", ledger.FileName) // a FIFO does not block
	switch {
	case errors.Is(err, unix.ENOENT):
		if m.ledgerLines > 0 {
			return m.stopLedger(fmt.Errorf("the file was removed after %d lines were read", m.ledgerLines))
		}
		return nil // no run has ended yet
	case errors.Is(err, unix.ELOOP):
		return errcode.Errorf(errcode.AuditUnavailable, "the project ledger: %v", linkErr(err))
	case err != nil:
		return errcode.Errorf(errcode.AuditUnavailable, "the project ledger: open: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "the project ledger: %v", err)
	}
	if !st.Mode().IsRegular() {
		return m.stopLedger(fmt.Errorf("not a regular file"))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id := [2]uint64{uint64(sys.Dev), sys.Ino}
		if m.ledgerLines > 0 && id != m.ledgerID {
			return m.stopLedger(fmt.Errorf("the file was replaced after %d lines were read", m.ledgerLines))
		}
		m.ledgerID = id
	}
	if st.Size() < m.ledgerOff {
		return m.stopLedger(fmt.Errorf("the file shrank from %d to %d bytes", m.ledgerOff, st.Size()))
	}
	if st.Size() == m.ledgerOff {
		return nil
	}
	if st.Size()-m.ledgerOff > ledger.MaxLedgerBytes {
		return m.stopLedger(fmt.Errorf("more than %d bytes", ledger.MaxLedgerBytes))
	}
	data := make([]byte, st.Size()-m.ledgerOff)
	if _, err := f.ReadAt(data, m.ledgerOff); err != nil && err != io.EOF {
		return errcode.Errorf(errcode.AuditUnavailable, "the project ledger: read: %v", err)
	}
	// A line still being written, or torn, is taken when whole.
	var verified []ledger.Line
	_, verr := m.ledgerReader.NextIn(data, func(l []ledger.Line) { verified = append(verified, l...) })
	if err := m.applyLines(verified); err != nil {
		return err
	}
	if verr != nil {
		return m.stopLedger(fmt.Errorf("line %d: %v", m.ledgerLines+1, verr))
	}
	return nil
}

// applyLines takes verified ledger lines, the next ones, into the index. m.mu is held.
func (m *Manager) applyLines(lines []ledger.Line) error {
	var added []string
	for i := range lines {
		m.ledgerLines++
		m.ledgerOff += int64(len(lines[i].Leaf)) + 1
		id, err := m.apply(&lines[i])
		if err != nil {
			m.insert(added...)
			return m.stopLedger(fmt.Errorf("line %d: %v", m.ledgerLines, err))
		}
		if id != "" {
			added = append(added, id)
		}
	}
	m.insert(added...)
	return nil
}

// takeOpened starts the index from the lines the server's ledger Writer verified when it
// opened (ledger.Writer.TakeOpened), so that start-up verifies the ledger once; the
// lines after them are then followed as any others. Without a Writer, or one that
// verified with another key, the index reads the whole ledger itself. m.mu is held.
func (m *Manager) takeOpened() error {
	if m.cfg.Ledger == nil || !m.cfg.Ledger.PublicKey().Equal(m.pub) {
		return nil
	}
	o := m.cfg.Ledger.TakeOpened()
	if o == nil {
		return nil
	}
	if o.Size > ledger.MaxLedgerBytes {
		return m.stopLedger(fmt.Errorf("more than %d bytes", ledger.MaxLedgerBytes))
	}
	m.ledgerReader, m.ledgerID = o.Reader, o.FileID
	return m.applyLines(o.Lines)
}

// stopLedger records that the ledger no longer verifies: from then on every answer that
// needs it fails closed, naming the problem.
func (m *Manager) stopLedger(err error) error {
	m.ledgerErr = errcode.Errorf(errcode.AuditUnavailable, "the project ledger does not verify (%v); run `symbi audit verify --project`", err)
	return m.ledgerErr
}

// apply takes one verified ledger line into the index and returns the run id it added.
// A signed entry this version cannot read, or one naming a journal that is not its run's
// file, is an error: the ledger is not what a server writes.
func (m *Manager) apply(l *ledger.Line) (added string, err error) {
	switch l.Type {
	case ledger.TypeRun:
		var e ledger.Run
		if err := json.Unmarshal(l.Data, &e); err != nil {
			return "", fmt.Errorf("a run entry this version cannot read: %v", err)
		}
		if err := checkEntry(e.RunID, e.AgentID, e.File); err != nil {
			return "", err
		}
		r, isNew := m.record(e.RunID)
		r.agentID, r.agent, r.file, r.caller, r.callerAuth = e.AgentID, e.Agent, e.File, e.Caller, e.CallerAuth
		r.prevHead, r.endedAt, r.ended = e.PrevHead, formatTime(l.Time), true
		if r.live == nil && !r.ownEnd {
			// This process's run records its own end (its watcher), in flight or ended:
			// the entry is written before the journal's terminated record, which may yet
			// fail — a run whose end failed to be durable released nothing, whatever its
			// entry says.
			r.reason, r.released, r.records, r.head = e.Reason, e.Released, e.Records, e.Head
		}
		r.external, r.facts, r.verified = false, nil, nil
		if isNew {
			return e.RunID, nil
		}
	case ledger.TypeRecovered:
		var e ledger.Recovered
		if err := json.Unmarshal(l.Data, &e); err != nil {
			return "", fmt.Errorf("a recovered entry this version cannot read: %v", err)
		}
		if err := checkEntry(e.RunID, e.AgentID, e.File); err != nil {
			return "", err
		}
		r, isNew := m.record(e.RunID)
		if r.ended && r.recovered == "" {
			return "", nil // a run entry says more
		}
		r.agentID, r.file, r.recovered, r.records, r.head = e.AgentID, e.File, e.State, e.Records, e.Head
		if e.Caller != "" {
			// Its owner, once its journal is pruned or unreadable: the entry names the
			// caller its verified started record did.
			r.caller, r.callerAuth = e.Caller, e.CallerAuth
		}
		r.ended, r.external, r.facts = true, false, nil
		if isNew {
			return e.RunID, nil
		}
	case ledger.TypePruned:
		var e ledger.Pruned
		if json.Unmarshal(l.Data, &e) == nil {
			if r := m.runs[e.RunID]; r != nil {
				r.pruned, r.prunedReason, r.prunedReleased = true, e.Reason, e.Released
				r.prunedShort = r.reason != "" && r.recovered == "" && e.Reason == "" && e.Records == r.records-1 && e.Head == r.prevHead
			}
		}
	case ledger.TypeResolution:
		var e ledger.Resolution
		if json.Unmarshal(l.Data, &e) == nil {
			revisions := 1
			if prev := m.resolutions[e.RunID]; prev != nil {
				revisions = prev.Revisions + 1
			}
			res := &Resolution{Value: e.Resolution, Note: e.Note, Caller: e.Caller, CallerAuth: e.CallerAuth, Time: formatTime(l.Time), Revisions: revisions}
			m.resolutions[e.RunID] = res
			if r := m.runs[e.RunID]; r != nil {
				r.resolution = res
			}
		}
	}
	return "", nil
}

// checkEntry checks that an entry's run id is one and its file is the run's journal name.
func checkEntry(runID, agentID, file string) error {
	if !validID(runID) || !validID(agentID) || file != journal.FileName(agentID, runID) {
		return fmt.Errorf("an entry for run %s names the file %s, not its journal <agent_id>.<run_id>.jsonl", errcode.Quote(runID), errcode.Quote(file))
	}
	return nil
}

// record returns the index entry of id, creating it (not yet in order) when absent.
func (m *Manager) record(id string) (r *run, isNew bool) {
	if r = m.runs[id]; r != nil {
		return r, false
	}
	r = &run{id: id, resolution: m.resolutions[id]}
	m.runs[id] = r
	return r, true
}

// insert places new run ids in the order of the index (ascending; listed from the end).
func (m *Manager) insert(ids ...string) {
	if len(ids) == 0 {
		return
	}
	sorted := len(m.order) == 0 || ids[0] > m.order[len(m.order)-1]
	for i := 1; sorted && i < len(ids); i++ {
		sorted = ids[i] > ids[i-1]
	}
	m.order = append(m.order, ids...)
	if !sorted {
		sort.Strings(m.order)
	}
}

// scanJournals adds the journals on disk the ledger does not know: another process's
// runs in flight, or a crash no server has reconciled yet.
func (m *Manager) scanJournals() error {
	d, err := m.openInProject(".symbiont", "governed")
	if err != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "reading the governed directory: %v", linkErr(err))
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "reading the governed directory: %v", err)
	}
	var added []string
	for _, ent := range ents {
		agentID, runID, ok := splitName(ent.Name())
		if !ok || m.runs[runID] != nil || !ent.Type().IsRegular() {
			continue
		}
		r, _ := m.record(runID)
		r.agentID, r.file, r.external = agentID, ent.Name(), true
		added = append(added, runID)
	}
	sort.Strings(added)
	m.insert(added...)
	return nil
}

// splitName reads <agent_id>.<run_id>.jsonl.
func splitName(name string) (agentID, runID string, ok bool) {
	ids, ok := strings.CutSuffix(name, ".jsonl")
	if !ok {
		return "", "", false
	}
	agentID, runID, ok = strings.Cut(ids, ".")
	return agentID, runID, ok && validID(agentID) && validID(runID)
}

// validID reports whether s is a run id or agent id as the journal writer accepts them.
func validID(s string) bool { return journal.ValidID(s) }

// journalPath is the absolute path of r's journal.
func (m *Manager) journalPath(r *run) string {
	if r.live != nil {
		if a := r.live.Audit(); a != nil {
			return a.Path
		}
	}
	return filepath.Join(m.gov, r.file)
}

// openInProject opens the path made of parts beneath the project's pinned directory,
// without following a symbolic link anywhere in it (ELOOP): a .symbiont or governed/
// replaced by a link to another project's is not read through, as the journal writer and
// the store refuse it.
func (m *Manager) openInProject(parts ...string) (*os.File, error) {
	fd, err := project.OpenBeneath(int(m.cfg.Root.Fd()), parts, unix.O_RDONLY|unix.O_NONBLOCK, false)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(append([]string{filepath.Dir(m.gov)}, parts[1:]...)...)), nil
}

// linkErr names the rule for an open that met a symbolic link (ELOOP): the kernel's
// message does not say it was refused on purpose.
func linkErr(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return errors.New("a symbolic link in its path (.symbiont, governed/ or the file itself), refused: the project's own files are read without following one")
	}
	return err
}

// readJournal reads r's journal (at most journal.MaxFileBytes), without following links.
func (m *Manager) readJournal(r *run) ([]byte, error) {
	f, err := m.openInProject(".symbiont", "governed", filepath.Base(m.journalPath(r)))
	var data []byte
	if err == nil {
		data, err = journal.ReadLogFile(f, journal.MaxFileBytes)
		f.Close()
	}
	if err != nil {
		if r.pruned {
			return nil, errcode.Errorf(errcode.NotFound, "run %s: its journal was pruned (symbi audit prune); the ledger keeps its entry", r.id)
		}
		return nil, errcode.Errorf(errcode.AuditUnavailable, "run %s: reading its journal: %v", r.id, linkErr(err))
	}
	return data, nil
}
