package ledger

import (
	"bytes"
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

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// ProjectReport is the verification of a whole project: the ledger, every journal on disk
// and each saved checkpoint, and how they agree.
type ProjectReport struct {
	Status      string       `json:"status"` // complete, incomplete or invalid (journal.Status*)
	LedgerSize  int          `json:"ledger_size"`
	Journals    int          `json:"journals"`
	Runs        []RunFinding `json:"runs"`
	Problems    []string     `json:"problems"`
	Checkpoints []string     `json:"checkpoints"` // one finding per checkpoint given
}

// RunFinding is what was found of one run.
type RunFinding struct {
	RunID   string `json:"run_id"`
	File    string `json:"file"`
	Entry   string `json:"entry"`   // run, recovered, pruned, or "" when the ledger has none
	Journal string `json:"journal"` // the journal's status, or "absent"
	Problem string `json:"problem,omitempty"`
	// Note says why a journal is incomplete without a problem: a crash the ledger
	// recorded as found, or a run stopped before its journal's last line.
	Note string `json:"note,omitempty"`
}

// ExitCode maps the status to symbi audit verify's exit code: 0, 2 or 1.
func (r *ProjectReport) ExitCode() int {
	switch r.Status {
	case journal.StatusComplete:
		return 0
	case journal.StatusIncomplete:
		return 2
	}
	return 1
}

// entryFacts are the members of run, recovered and pruned entries a check compares.
type entryFacts struct {
	RunID    string `json:"run_id"`
	AgentID  string `json:"agent_id"`
	File     string `json:"file"`
	Records  int64  `json:"records"`
	Head     string `json:"head"`
	PrevHead string `json:"prev_head"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Released bool   `json:"released"`
}

// VerifyProject verifies the project at dir with its public key: the ledger's chain and
// signatures; every journal's name matches its contents; every run and recovered entry
// matches its journal on disk (present, same records and head) and every pruned run's
// journal is absent; every journal on disk has an entry; no run id has two entries (a
// pruned entry after a run's is its removal); and each checkpoint given (signed notes)
// is consistent with the ledger — a ledger rolled back or rewritten, whoever signed it, is
// caught by a checkpoint saved before.
func VerifyProject(dir string, pub ed25519.PublicKey, checkpoints [][]byte) *ProjectReport {
	r := &ProjectReport{Runs: []RunFinding{}, Problems: []string{}, Checkpoints: []string{}}
	problem := func(format string, a ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, a...)) }
	var data []byte
	if err := checkLayout(dir); err != nil {
		problem("%v", err)
	} else if data, err = journal.ReadLog(filepath.Join(dir, ".symbiont", FileName), MaxLedgerBytes); err != nil {
		if errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("no project ledger at %s: nothing here says which runs there were", filepath.Join(dir, ".symbiont", FileName))
		}
		problem("%v", err)
	}
	// The ledger is verified beside the journals, so that no core waits for it.
	verified := make(chan *Report, 1)
	rd := NewReader(pub) // kept: the second look verifies only what was appended since
	go func() { verified <- verifyWith(rd, data) }()
	gov := filepath.Join(dir, ".symbiont", "governed")
	var reports []*journal.Report
	var dirErr error = os.ErrNotExist
	if len(r.Problems) == 0 {
		reports, dirErr = journal.VerifyDir(gov, pub)
	}
	rep := <-verified
	for _, p := range rep.Problems {
		problem("ledger line %d: %s", p.Line, p.Message)
	}
	if rep.TailBytes > 0 {
		problem("the ledger ends with %d bytes that are not a whole line", rep.TailBytes)
	}
	r.LedgerSize = len(rep.Entries)

	if dirErr != nil && !errors.Is(dirErr, os.ErrNotExist) {
		problem("journals: %v", dirErr)
	}
	r.Journals = len(reports)
	onDisk := map[string]*journal.Report{}
	for _, jr := range reports {
		onDisk[filepath.Base(jr.Path)] = jr
	}

	runs, order := recordedRuns(rep.Entries, problem)
	for _, id := range order {
		k := runs[id]
		jr := onDisk[k.facts.File]
		delete(onDisk, k.facts.File)
		r.Runs = append(r.Runs, findRun(id, k, jr))
	}
	var unknown []string
	for name := range onDisk {
		unknown = append(unknown, name)
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		jr := onDisk[name]
		r.Runs = append(r.Runs, RunFinding{RunID: jr.RunID, File: name, Journal: jr.Status, Problem: "a journal the ledger does not know"})
	}
	if len(rep.Problems) == 0 && rep.TailBytes == 0 {
		if testBeforeSecondLook != nil {
			testBeforeSecondLook()
		}
		secondLook(r, filepath.Join(dir, ".symbiont", FileName), gov, pub, rd, data, rep.Entries)
	}

	tree, err := NewTree(rep.Entries)
	if err != nil {
		problem("ledger tree: %v", err)
	}
	for i, msg := range checkpoints {
		c, err := OpenCheckpoint(msg, pub)
		if err == nil && tree != nil {
			err = CheckConsistent(tree, c)
		}
		if err != nil {
			r.Checkpoints = append(r.Checkpoints, fmt.Sprintf("checkpoint %d: %v", i+1, err))
			problem("checkpoint %d: %v", i+1, err)
			continue
		}
		r.Checkpoints = append(r.Checkpoints, fmt.Sprintf("checkpoint %d: consistent (size %d of %d)", i+1, c.Size, tree.Size()))
	}
	r.Status = journal.StatusComplete
	for _, f := range r.Runs {
		switch {
		case f.Problem != "":
			r.Status = journal.StatusInvalid
		case f.Journal == journal.StatusIncomplete && r.Status == journal.StatusComplete:
			r.Status = journal.StatusIncomplete
		}
	}
	if len(r.Problems) > 0 {
		r.Status = journal.StatusInvalid
	}
	return r
}

// known is what the ledger says of one run.
type known struct {
	entry    string     // its last entry: run, recovered or pruned
	recorded string     // the run or recovered entry the run was recorded with
	facts    entryFacts // that entry's
	stopped  bool       // pruned one line short of its run entry: it never got its terminated line
}

// recordedRuns returns what the ledger's entries say of each run, and the run ids in
// order; problem is told of entries that contradict each other.
func recordedRuns(entries []Line, problem func(string, ...any)) (map[string]*known, []string) {
	runs := map[string]*known{}
	var order []string
	for _, l := range entries {
		switch l.Type {
		case TypeRun, TypeRecovered, TypePruned:
		default:
			continue
		}
		var f entryFacts
		if err := json.Unmarshal(l.Data, &f); err != nil || f.RunID == "" {
			problem("ledger line %d: a %s entry without a run_id", l.Seq+1, l.Type)
			continue
		}
		k := runs[f.RunID]
		switch {
		case k == nil && l.Type == TypePruned:
			problem("ledger line %d: run %s is pruned but was never recorded", l.Seq+1, f.RunID)
			continue
		case k == nil:
			runs[f.RunID] = &known{entry: l.Type, recorded: l.Type, facts: f}
			order = append(order, f.RunID)
			continue
		case l.Type == TypePruned && k.entry != TypePruned:
			// The journal removed is the one recorded, or one line short of a run entry
			// (its server stopped before the terminated line): the prune says which.
			k.stopped = k.recorded == TypeRun && f.File == k.facts.File && f.Records == k.facts.Records-1 && f.Head == k.facts.PrevHead && f.Reason == ""
			switch {
			case k.stopped:
			case f.File != k.facts.File || f.Records != k.facts.Records || f.Head != k.facts.Head:
				problem("ledger line %d: run %s is pruned with another receipt than it was recorded with", l.Seq+1, f.RunID)
			case f.Reason != "" && k.recorded == TypeRun && (f.Reason != k.facts.Reason || f.Released != k.facts.Released):
				problem("ledger line %d: run %s is pruned as having ended %s (released %t); it was recorded as %s (released %t)", l.Seq+1, f.RunID, f.Reason, f.Released, k.facts.Reason, k.facts.Released)
			}
		default:
			problem("ledger line %d: run %s appears twice (%s after %s)", l.Seq+1, f.RunID, l.Type, k.entry)
		}
		k.entry = l.Type
	}
	return runs, order
}

// findRun is the finding of the run id the ledger says k of, its journal on disk as
// verified (jr; nil when there is none).
func findRun(id string, k *known, jr *journal.Report) RunFinding {
	f := RunFinding{RunID: id, File: k.facts.File, Entry: k.entry, Journal: "absent"}
	if jr != nil {
		f.Journal = jr.Status
	}
	switch {
	case k.facts.File != journal.FileName(k.facts.AgentID, id):
		// No writer names a run's journal otherwise: the entry cannot stand for the file.
		f.Problem = fmt.Sprintf("the %s entry names the file %q, not its journal %q", k.recorded, k.facts.File, journal.FileName(k.facts.AgentID, id))
	case k.entry == TypePruned && jr != nil:
		if problem, _ := judge(id, k.recorded, k.facts, jr); problem != "" {
			f.Problem = "pruned, but the journal is still on disk, and " + problem
		} else {
			f.Problem = "pruned, but the journal is still on disk: a prune stopped before removing it (symbi audit prune removes it)"
		}
	case k.entry == TypePruned && k.stopped:
		f.Note = "pruned; it had " + stoppedNote + ", which never reached anyone"
	case k.entry == TypePruned:
	case jr == nil:
		f.Problem = "the journal is missing: deleted, or renamed away"
	default:
		f.Problem, f.Note = judge(id, k.entry, k.facts, jr)
	}
	if f.Problem == "" && f.Journal == journal.StatusIncomplete && f.Note == "" {
		f.Note = "a crash; the ledger recorded it as found"
	}
	return f
}

// testBeforeSecondLook, when set by a test, runs between the first reading of a project
// and the second look.
var testBeforeSecondLook func()

// inProgressNote is the note of a run a server is still writing.
const inProgressNote = "in progress: a server is writing its journal; the ledger records the run when it ends"

// secondLook looks again, once, at each run r found a problem with, or found stopped
// before its terminated line: a project a server serves changes while it is verified,
// and a run that ends between the reading of the ledger and of its journal looks unknown
// to the ledger, or cut short. First it decides, under the governed directory's lock (no
// journal is then between its creation and its writer's lock), which of those journals a
// writer holds; then it reads the ledger and each journal anew, so that a journal not
// held is read after its end — a writer lets go only once the run's entry is durable.
// Each run is judged again against the ledger as it is now (the lines appended since data
// was read, verified by rd, which read data and its entries) and its journal read anew. A
// journal the ledger still does not know whose writer held it — one just created and
// still empty included, its run named by its file name — is a run in progress: not a
// problem. The ledger read anew is used only for those runs: everything else stands as
// first read.
func secondLook(r *ProjectReport, ledgerPath, gov string, pub ed25519.PublicKey, rd *Reader, data []byte, entries []Line) {
	var again []int
	unknown := false // a run whose journal the ledger may not know
	for i, f := range r.Runs {
		if f.Problem != "" && f.File != "" && lookID(f) != "" || f.Note == stoppedNote {
			again = append(again, i)
			unknown = unknown || f.Problem != ""
		}
	}
	if len(again) == 0 {
		return
	}
	held := map[int]bool{}
	locked := "" // why the directory's lock could not be had
	if unknown {
		// Bounded: someone holding the directory's lock for good must not keep the
		// auditor from a verdict. Not had, the first findings stand.
		release, err := journal.TryLockScan(gov, scanLockWait)
		if err != nil {
			locked = "the governed directory stayed locked by another process"
			if !errors.Is(err, journal.ErrScanLocked) {
				locked = err.Error()
			}
		} else {
			for _, i := range again {
				held[i] = journal.InProgress(filepath.Join(gov, r.Runs[i].File))
			}
			release()
		}
	}
	if testAfterHeld != nil {
		testAfterHeld()
	}
	now, err := journal.ReadLog(ledgerPath, MaxLedgerBytes)
	if err != nil || !bytes.HasPrefix(now, data) {
		return // the ledger is not as it was, plus lines: the first reading stands
	}
	more := verifyWith(rd, now[len(data):])
	if len(more.Problems) > 0 || more.TailBytes > 0 {
		return
	}
	runs, _ := recordedRuns(append(entries[:len(entries):len(entries)], more.Entries...), func(string, ...any) {})
	for _, i := range again {
		f := r.Runs[i]
		id := lookID(f)
		path := filepath.Join(gov, f.File)
		var jr *journal.Report
		if _, err := os.Lstat(path); err == nil {
			jr = journal.Verify(path, pub, journal.VerifyOptions{})
		}
		k := runs[id]
		switch {
		case k != nil && k.facts.File == f.File:
			r.Runs[i] = findRun(id, k, jr)
		case k != nil || f.Problem == "":
		case locked != "":
			r.Runs[i].Note = "whether a writer holds this journal could not be decided: " + locked
		case held[i] && jr != nil && (jr.RunID == id || jr.RunID == "") && jr.Status != journal.StatusInvalid:
			// Held when looked at, and not yet in the ledger read after: the run was in
			// progress (it may have ended since, its entry after that reading). An invalid
			// journal stays a problem, held or not.
			r.Runs[i] = RunFinding{RunID: id, File: f.File, Journal: jr.Status, Note: inProgressNote}
		}
	}
}

// lookID is the run a finding is of: its journal's run id, or, for a journal with no
// record yet (just created), the run its file name names.
func lookID(f RunFinding) string {
	if f.RunID != "" {
		return f.RunID
	}
	ids, ok := strings.CutSuffix(f.File, ".jsonl")
	agent, run, two := strings.Cut(ids, ".")
	if !ok || !two || !journal.ValidID(agent) || !journal.ValidID(run) {
		return ""
	}
	return run
}

// testAfterHeld, when set by a test, runs in the second look between the decision of
// which journals a writer holds and the reading anew of the ledger and the journals.
var testAfterHeld func()

// scanLockWait bounds how long verification waits for the governed directory's lock.
var scanLockWait = 10 * time.Second

// stoppedNote is the note of a run whose journal stops just before the terminated line
// its ledger entry names.
const stoppedNote = "stopped before its terminated line; the ledger holds its outcome"

// judge compares the journal on disk of the run id, as verified (jr), with the entry the
// ledger recorded it with (entry: run or recovered; facts): problem says why verification
// refuses the pair, "" when it accepts it, and note what it says of one it accepts. Prune
// removes a journal only when verification accepts it.
func judge(id, entry string, facts entryFacts, jr *journal.Report) (problem, note string) {
	switch {
	case jr.RunID != "" && jr.RunID != id:
		return fmt.Sprintf("the file holds run %s", jr.RunID), ""
	case entry == TypeRun && jr.Status == journal.StatusIncomplete && int64(jr.Records) == facts.Records-1 && jr.Head == facts.PrevHead:
		// The server stopped after the run's entry was durable and before its journal's
		// last line: the ledger holds the outcome, which never reached anyone. (Cutting
		// that last line off looks the same; the ledger entry still tells the outcome.)
		return "", stoppedNote
	case int64(jr.Records) != facts.Records || jr.Head != facts.Head:
		return fmt.Sprintf("the journal has %d records with head %s; the ledger recorded %d with head %s: truncated or replaced", jr.Records, jr.Head, facts.Records, facts.Head), ""
	case jr.Status == journal.StatusInvalid:
		return "the journal is invalid: " + firstProblem(jr), ""
	case entry == TypeRun && jr.Status != journal.StatusComplete:
		// Its records end with the terminated line the ledger recorded, yet it is not
		// complete: bytes follow that line, which no run writes.
		return "the journal has bytes after the terminated line the ledger recorded", ""
	case entry == TypeRecovered && jr.Status != facts.State:
		return fmt.Sprintf("the journal was recovered as %s and is now %s", facts.State, jr.Status), ""
	}
	return "", ""
}

func firstProblem(jr *journal.Report) string {
	if len(jr.Problems) == 0 {
		return "no detail"
	}
	return jr.Problems[0].Message
}

// checkLayout checks, before a project is verified, that dir is a directory whose
// .symbiont, and .symbiont/governed if present, are directories and not symbolic links —
// what the journal store and the ledger writer require — so that verification reads the
// project's own files and not another directory's.
func checkLayout(dir string) error {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return fmt.Errorf("the project %s: %w", dir, err)
	}
	for _, rel := range []string{".symbiont", filepath.Join(".symbiont", "governed")} {
		st, err := os.Lstat(filepath.Join(dir, rel))
		switch {
		case errors.Is(err, os.ErrNotExist) && rel != ".symbiont":
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("the project %s has no .symbiont directory: no ledger, nothing here says which runs there were", dir)
		case err != nil:
			return fmt.Errorf("%s: %w", rel, err)
		case st.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link: refused (the store never makes one; verification reads the project's own files only)", rel)
		case !st.IsDir():
			return fmt.Errorf("%s is not a directory", rel)
		}
	}
	return nil
}

// readLedger reads a ledger file without following a symlink; a missing one is empty.
func readLedger(path string) ([]byte, error) {
	data, err := journal.ReadLog(path, MaxLedgerBytes)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return data, err
}

// Present returns a not_found error (matching fs.ErrNotExist) when the project root has
// no ledger — no .symbiont, or no ledger in it: no run is recorded there. It is checked
// before the signing key is looked for, which such a project may not have either. Any
// other state is for the ledger's opener to judge.
func Present(root *os.File) error {
	missing := errcode.Errorf(errcode.NotFound, "no project ledger at %s: no run is recorded here: %w", filepath.Join(root.Name(), ".symbiont", FileName), fs.ErrNotExist)
	// .symbiont is opened without following a link: one that is a link (ELOOP) or not a
	// directory is left to the store, which refuses it by its rule.
	sym, err := unix.Openat(int(root.Fd()), ".symbiont", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return missing
	}
	if err != nil {
		return nil
	}
	defer unix.Close(sym)
	var st unix.Stat_t
	if err := unix.Fstatat(sym, FileName, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return missing
	}
	return nil
}

// ReadDurable reads the ledger of the project root for a checkpoint or a proof: found
// from the project without following links, with the writers' lock held (no line is half
// written) and after an fsync of the file, so that every line read is durable — a
// checkpoint never signs a line a crash could still take back. A missing ledger is an
// error wrapping fs.ErrNotExist.
func ReadDurable(root *os.File) ([]byte, error) {
	if err := Present(root); err != nil {
		return nil, err
	}
	sym, err := unix.Openat(int(root.Fd()), ".symbiont", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ledger: open .symbiont (not a symlink): %w", err)
	}
	defer unix.Close(sym)
	fd, err := unix.Openat(sym, FileName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT): // removed since Present looked
		return nil, fmt.Errorf("ledger: open .symbiont/%s: %w", FileName, err)
	case errors.Is(err, unix.ELOOP):
		// The ledger is read as every reader reads it, and as the writer writes it: the
		// project's own file, never another one a link leads to.
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: .symbiont/%s is a symbolic link: refused (the writer never makes one; the project's own ledger is read without following one)", FileName)
	case err != nil: // unreadable (permissions): the ledger cannot be used
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: open .symbiont/%s: %w", FileName, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(".symbiont", FileName))
	defer f.Close()
	// What is not a regular file is refused by that rule before it is locked or synced (a
	// FIFO's fsync fails as EINVAL).
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	} else if !st.Mode().IsRegular() {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "ledger: .symbiont/%s is not a regular file", FileName)
	}
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("ledger: lock: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("ledger: sync: %w", err)
	}
	return journal.ReadLogFile(f, MaxLedgerBytes)
}
