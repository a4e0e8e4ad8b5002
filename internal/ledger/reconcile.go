package ledger

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// Reconcile makes the ledger whole at start-up: every journal in the governed directory
// gov that the ledger has no entry for — a crash between the journal's end and the
// ledger append, or a run abandoned mid-way — gets a recovered entry with the file as
// found (state complete, incomplete or invalid; records and head). Journals the ledger
// knows (by the run id in their name) are not read, so start-up does not grow with the
// history; a journal another server is still writing (its writer holds a lock on it) is
// left to that server, and one being created is waited for (journal.LockScan). Journals
// are never rewritten. It returns the entries appended.
func Reconcile(w *Writer, gov string, pub ed25519.PublicKey) ([]Recovered, error) {
	ents, err := os.ReadDir(gov)
	if err != nil {
		return nil, err
	}
	var out []Recovered
	for _, ent := range ents {
		base := ent.Name()
		ids, ok := strings.CutSuffix(base, ".jsonl")
		if !ok {
			continue
		}
		agentID, runID, _ := strings.Cut(ids, ".")
		if runID != "" && w.Knows(runID) {
			continue
		}
		rec, err := recoverJournal(w, gov, base, agentID, runID, pub, false)
		if err != nil {
			return out, err
		}
		if rec != nil {
			out = append(out, *rec)
		}
	}
	return out, nil
}

// RecordAsFound appends the recovered entry of the journal at path (a file of the governed
// directory), as found, unless the ledger already has an entry for its run. A server calls
// it when a run's journal failed before its terminated record — the writer stopped — and
// after closing that writer, before the run's withheld result is returned: the ledger
// knows of every run a caller heard of, and a journal that was removed meanwhile is
// recorded all the same, so its absence is reported by verification. It returns the entry
// appended, or nil.
func RecordAsFound(w *Writer, path, agentID, runID string) (*Recovered, error) {
	return recoverJournal(w, filepath.Dir(path), filepath.Base(path), agentID, runID, w.PublicKey(), true)
}

// testRecovering, set by tests, runs while recoverJournal holds the scan lock.
var testRecovering func()

// recoverJournal appends the recovered entry of the journal base when no writer holds it
// and the ledger has no entry for its run; nil when it appended none. It decides under the
// governed directory's scan lock: no journal is then between its creation and its
// writer's lock, which would look abandoned, nor being removed as debris (Discard). A
// journal no longer there is recorded only with recordGone (RecordAsFound: the server's
// own run, of which a caller has heard); reconciliation passes it over — a file listed and
// then removed by its writer held nothing durable.
func recoverJournal(w *Writer, gov, base, agentID, runID string, pub ed25519.PublicKey, recordGone bool) (*Recovered, error) {
	release, err := journal.LockScan(gov)
	if err != nil {
		return nil, err
	}
	defer release()
	if testRecovering != nil {
		testRecovering()
	}
	path := filepath.Join(gov, base)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) && !recordGone {
		return nil, nil
	}
	if journal.InProgress(path) {
		return nil, nil
	}
	rep := journal.Verify(path, pub, journal.VerifyOptions{})
	state, caller, callerAuth := rep.Status, rep.Caller, rep.CallerAuth
	switch {
	case recordGone && rep.RunID != "" && (rep.RunID != runID || rep.AgentID != agentID):
		// The server's own run, whose file now holds another run's journal (copied over it
		// by someone else): the run the caller heard of is recorded, under its own ids, as
		// invalid — never passed over because the other run is known.
		state, caller, callerAuth = journal.StatusInvalid, "", ""
	case rep.RunID != "" && base == journal.FileName(rep.AgentID, rep.RunID):
		runID, agentID = rep.RunID, rep.AgentID // reconciliation knows only the file
	case rep.RunID != "" && !recordGone:
		// A journal whose name is not its run's (renamed, or copied under another run's
		// name) is never recorded under the ids of its contents: an entry naming a file
		// that is not <agent_id>.<run_id>.jsonl of its run is refused by every reader of
		// the ledger, and would stand for the misnamed file at verification. Under a
		// journal's name it is recorded under that name's ids, as invalid; under any
		// other name it is passed over, and verification reports it as unknown.
		state, caller, callerAuth = journal.StatusInvalid, "", ""
	}
	if !journal.ValidID(runID) || !journal.ValidID(agentID) || w.Knows(runID) {
		return nil, nil
	}
	rec := Recovered{RunID: runID, AgentID: agentID, File: base, State: state, Records: int64(rep.Records), Head: rep.Head,
		Caller: caller, CallerAuth: callerAuth}
	if _, err := w.Append(rec); errors.Is(err, ErrKnown) {
		return nil, nil // another server recorded it since this one opened the ledger
	} else if err != nil {
		return nil, err
	}
	return &rec, nil
}

// OpenProject opens the project's governed store (creating it and the key when absent;
// keyFile is SYMBI_AUDIT_KEY_FILE) and its ledger, and reconciles the ledger with the
// journals on disk. It is what a server does before its first run.
func OpenProject(root *os.File, keyFile string) (*Writer, []Recovered, error) {
	return OpenProjectResuming(root, keyFile, nil)
}

// OpenProjectResuming is OpenProject that first offers resume every journal the ledger has
// no entry for and no other process is writing, by name, before reconciling: a journal
// resume reopens (journal.Store.Reopen, which holds its lock) is in progress, so
// reconciliation leaves it to the run that continues it.
func OpenProjectResuming(root *os.File, keyFile string, resume func(store *journal.Store, name string)) (*Writer, []Recovered, error) {
	store, err := journal.OpenStore(root, journal.StoreOptions{KeyFile: keyFile, Create: true})
	if err != nil {
		return nil, nil, err
	}
	defer store.Close()
	w, err := Open(root, store.SigningKey())
	if err != nil {
		return nil, nil, err
	}
	if resume != nil {
		if err := offer(w, store, resume); err != nil {
			w.Close()
			return nil, nil, errcode.Wrap(errcode.AuditUnavailable, err)
		}
	}
	recovered, err := Reconcile(w, store.Dir(), store.PublicKey())
	if err != nil {
		w.Close()
		return nil, nil, errcode.Wrap(errcode.AuditUnavailable, err)
	}
	return w, recovered, nil
}

// Prune removes the journals of the runs select chooses — the only sanctioned way to
// delete a journal: each removal is recorded as a pruned entry, durable, before the file
// is removed. A run is pruned only when verification accepts its journal against the
// entry the ledger recorded it with (verify --project: the same records and head, the
// same state for a recovered one, nothing after a run's terminated line, or a run's
// journal one line short, its last line never written); a journal it does not accept is
// evidence and is left in place, the other chosen runs still pruned, and the error joins
// one ErrEvidence for each. A journal whose writer still holds it (a server ending its
// run) is left for a later prune, its run id returned in held. A journal whose pruned entry is durable but which is
// still on disk — a prune stopped between its two writes — is removed whatever select
// says, without a second entry, under the same rules. A run another prune has recorded
// meanwhile is left to it (the writer refuses a second pruned entry: ErrPruned). The
// runs are chosen from the ledger as the writer read it, under the writers' lock: lines
// that are durable. With dryRun nothing is changed: the ledger is read and verified, not
// opened for writing. select is given the run id and the journal file's modification
// time.
func Prune(root *os.File, keyFile string, choose func(runID string, mod time.Time) bool, dryRun bool) (pruned []Pruned, held []string, err error) {
	// No ledger, no recorded run: nothing may be pruned, and prune creates no ledger.
	if err := Present(root); err != nil {
		return nil, nil, fmt.Errorf("%w, so none can be pruned", err)
	}
	store, err := journal.OpenStore(root, journal.StoreOptions{KeyFile: keyFile})
	if err != nil {
		return nil, nil, err
	}
	defer store.Close()
	ledgerPath := filepath.Join(filepath.Dir(store.Dir()), FileName)
	var (
		w     *Writer
		lines []Line
	)
	if dryRun {
		data, err := readLedger(ledgerPath)
		if err != nil {
			return nil, nil, err
		}
		ver := Verify(data, store.PublicKey())
		if len(ver.Problems) > 0 {
			return nil, nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: cannot prune from an invalid ledger: line %d: %s", ver.Problems[0].Line, ver.Problems[0].Message)
		}
		lines = ver.Entries
	} else {
		// Open takes the writers' lock and verifies the ledger whole: its lines are the
		// durable ones the writer continues.
		if w, err = Open(root, store.SigningKey()); err != nil {
			return nil, nil, err
		}
		defer w.Close()
		if o := w.TakeOpened(); o != nil {
			lines = o.Lines
		}
	}
	type entry struct {
		typ    string // run or recovered
		facts  entryFacts
		pruned bool
	}
	recorded := map[string]*entry{}
	for _, l := range lines {
		switch l.Type {
		case TypeRun, TypeRecovered:
			var f entryFacts
			if json.Unmarshal(l.Data, &f) == nil {
				recorded[f.RunID] = &entry{typ: l.Type, facts: f}
			}
		case TypePruned:
			if e := recorded[l.RunID()]; e != nil {
				e.pruned = true
			}
		}
	}
	ids := make([]string, 0, len(recorded))
	for id := range recorded {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var kept []error // journals left in place as evidence: the others are still pruned
	for _, id := range ids {
		e := recorded[id]
		f := e.facts
		path := filepath.Join(store.Dir(), filepath.Base(f.File))
		st, err := os.Lstat(path)
		if err != nil {
			continue // gone: verification reports it if it should not be
		}
		if !e.pruned && !choose(id, st.ModTime()) {
			continue
		}
		// A recorded run's journal is held only by the writer ending that run (no server
		// resumes a run the ledger knows): once it is not held, it never is again.
		if journal.InProgress(path) {
			held = append(held, id)
			continue
		}
		rep := journal.Verify(path, store.PublicKey(), journal.VerifyOptions{RunID: id})
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile (by another prune): verification reports it if unrecorded
		}
		if problem, _ := judge(id, e.typ, f, rep); problem != "" {
			kept = append(kept, fmt.Errorf("ledger: %s: %s: %w", f.File, problem, ErrEvidence))
			continue
		}
		// What is removed: the receipt judge accepted — the entry's, or one line short of
		// a run entry's when its server stopped before the terminated line — and how the
		// journal ended, if it did.
		p := Pruned{RunID: id, File: filepath.Base(f.File), Records: int64(rep.Records), Head: rep.Head,
			Reason: rep.TerminalReason, Released: rep.TerminalReason != "" && rep.Released}
		if !dryRun {
			if !e.pruned {
				if _, err := w.Append(p); errors.Is(err, ErrPruned) {
					continue // another prune recorded it, and removes the file
				} else if err != nil {
					return pruned, held, err
				}
			}
			if err := os.Remove(path); errors.Is(err, fs.ErrNotExist) && e.pruned {
				continue // another prune finished it
			} else if err != nil {
				return pruned, held, fmt.Errorf("ledger: %s was recorded as pruned but could not be removed (symbi audit prune removes it): %w", p.File, err)
			}
		}
		pruned = append(pruned, p)
	}
	if !dryRun && len(pruned) > 0 {
		if d, err := os.Open(store.Dir()); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return pruned, held, errors.Join(kept...)
}

// offer calls resume for each journal of the governed directory that the ledger has no
// entry for and no writer holds. A run someone resolved is not offered: it was resolved
// as finished (abandoned, while no server ran), and it stays so — reconciled as found,
// never brought back to a wait its resolution already concluded about. It decides on each under the directory's scan lock,
// having taken in the lines other servers appended, and resume takes the journal's lock
// before it returns: a server reconciling meanwhile finds the journal held, and one that
// recorded it first is seen — never a run resumed and recovered both.
func offer(w *Writer, store *journal.Store, resume func(store *journal.Store, name string)) error {
	ents, err := os.ReadDir(store.Dir())
	if err != nil {
		return err
	}
	for _, ent := range ents {
		base := ent.Name()
		ids, ok := strings.CutSuffix(base, ".jsonl")
		_, runID, _ := strings.Cut(ids, ".")
		if !ok || runID == "" || w.Knows(runID) {
			continue
		}
		if err := offerOne(w, store, base, runID, resume); err != nil {
			return err
		}
	}
	return nil
}

func offerOne(w *Writer, store *journal.Store, base, runID string, resume func(store *journal.Store, name string)) error {
	release, err := journal.LockScan(store.Dir())
	if err != nil {
		return err
	}
	defer release()
	if err := w.Refresh(); err != nil {
		return err
	}
	if w.Knows(runID) || w.Resolved(runID) || journal.InProgress(filepath.Join(store.Dir(), base)) {
		return nil
	}
	resume(store, base)
	return nil
}
