package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
	"symbi/internal/ledger"
)

var (
	cmdAuditCheckpoint = &command{name: "audit checkpoint", summary: "print a signed checkpoint of the project ledger (a C2SP tlog-checkpoint note); save it to catch a later rollback or rewrite"}
	cmdAuditProve      = &command{name: "audit prove", summary: "print the inclusion proof of a run's ledger entry in the ledger's Merkle tree, as JSON"}
	cmdAuditPrune      = &command{name: "audit prune", summary: "remove journals, recording each removal in the ledger first (the only sanctioned way)"}
)

func init() {
	cmdAuditCheckpoint.run = runAuditCheckpoint
	register(cmdAuditCheckpoint)
	cmdAuditProve.run = runAuditProve
	register(cmdAuditProve)
	cmdAuditPrune.run = runAuditPrune
	register(cmdAuditPrune)
}

// projectLedger opens the project's store (for its key) and reads its ledger.
func projectLedger(e *env, dir string) (*journal.Store, []ledger.Line, error) {
	root, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, nil, errcode.Wrap(errcode.NotFound, err)
	}
	defer root.Close()
	if err := ledger.Present(root); err != nil {
		return nil, nil, err
	}
	store, err := journal.OpenStore(root, journal.StoreOptions{KeyFile: e.getenv("SYMBI_AUDIT_KEY_FILE")})
	if err != nil {
		return nil, nil, err
	}
	data, err := ledger.ReadDurable(root)
	if err != nil {
		store.Close()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, errcode.Wrap(errcode.NotFound, err)
		}
		return nil, nil, err
	}
	rep := ledger.Verify(data, store.PublicKey())
	if len(rep.Problems) > 0 {
		store.Close()
		return nil, nil, errcode.Errorf(errcode.AuditUnavailable, "the ledger is invalid at line %d: %s (symbi audit verify --project says more)", rep.Problems[0].Line, rep.Problems[0].Message)
	}
	return store, rep.Entries, nil
}

// runAuditCheckpoint runs symbi audit checkpoint.
func runAuditCheckpoint(e *env, args []string) int {
	fs := newFlags(e, cmdAuditCheckpoint)
	dir := fs.String("project", ".", "the project `DIR`")
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	store, entries, err := projectLedger(e, *dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit checkpoint: %s\n", errcode.Text(err))
		return 1
	}
	defer store.Close()
	tree, err := ledger.NewTree(entries)
	if err == nil {
		var note []byte
		if note, err = ledger.SignCheckpoint(tree, store.SigningKey()); err == nil {
			e.stdout.Write(note)
			return 0
		}
	}
	fmt.Fprintf(e.stderr, "symbi audit checkpoint: %v\n", err)
	return 1
}

// runAuditProve runs symbi audit prove.
func runAuditProve(e *env, args []string) int {
	fs := newFlags(e, cmdAuditProve)
	dir := fs.String("project", ".", "the project `DIR`")
	runID := fs.String("run-id", "", "the run `ID` whose entry to prove (required)")
	size := fs.Int64("size", 0, "the tree `SIZE` to prove it in (default: the whole ledger)")
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	if *runID == "" {
		fmt.Fprintln(e.stderr, "symbi audit prove: --run-id is required")
		return 2
	}
	if *size < 1 && given(fs, "size") {
		fmt.Fprintf(e.stderr, "symbi audit prove: --size %d: want a tree size of at least 1\n", *size)
		return 2
	}
	store, entries, err := projectLedger(e, *dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit prove: %s\n", errcode.Text(err))
		return 1
	}
	defer store.Close()
	index := int64(-1)
	for _, l := range entries {
		if l.RunID() == *runID && (l.Type == ledger.TypeRun || l.Type == ledger.TypeRecovered) {
			index = l.Seq
		}
	}
	if index < 0 {
		fmt.Fprintf(e.stderr, "symbi audit prove: the ledger has no entry for run %s\n", *runID)
		return 1
	}
	n := *size
	if n == 0 {
		n = int64(len(entries))
	}
	if n > int64(len(entries)) {
		fmt.Fprintf(e.stderr, "symbi audit prove: --size %d: the ledger has %d entries\n", n, len(entries))
		return 1
	}
	if index >= n {
		// Lines are counted from 0: the entry at line i is in the trees of size i+1 and more.
		fmt.Fprintf(e.stderr, "symbi audit prove: --size %d: run %s's entry is line %d of the ledger (from 0), in the trees of size %d and more\n", n, nameText(*runID), index, index+1)
		return 1
	}
	// The proof and the checkpoint are of the same tree, the ledger's first n lines: the
	// checkpoint signs the root the proof leads to (ledger.CheckProof).
	tree, err := ledger.NewTree(entries[:n])
	var proof *ledger.Proof
	if err == nil {
		proof, err = ledger.Prove(tree, entries, index, n)
	}
	var cp []byte
	if err == nil {
		cp, err = ledger.SignCheckpoint(tree, store.SigningKey())
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit prove: %v\n", err)
		return 1
	}
	printJSON(e, cmdAuditProve.name, struct {
		*ledger.Proof
		Checkpoint string `json:"checkpoint"`
	}{proof, string(cp)})
	return 0
}

// runAuditPrune runs symbi audit prune.
func runAuditPrune(e *env, args []string) int {
	fs := newFlags(e, cmdAuditPrune)
	dir := fs.String("project", ".", "the project `DIR`")
	runID := fs.String("run-id", "", "prune the journal of the run `ID`")
	olderThan := fs.Duration("older-than", 0, "prune the journals last written longer ago than `DURATION` (e.g. 720h)")
	dryRun := fs.Bool("dry-run", false, "list what would be pruned; change nothing")
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	// Decided by what was given, not by the values: --run-id X --older-than 0s names two
	// selections, and neither is dropped without a word.
	if given(fs, "run-id") == given(fs, "older-than") {
		fmt.Fprintln(e.stderr, "symbi audit prune: give exactly one of --run-id and --older-than")
		return 2
	}
	if given(fs, "run-id") && *runID == "" {
		fmt.Fprintln(e.stderr, "symbi audit prune: --run-id is empty: give the run's id")
		return 2
	}
	if given(fs, "older-than") && *olderThan <= 0 {
		// A cutoff in the future would choose every journal, the newest too; 0 is now.
		fmt.Fprintf(e.stderr, "symbi audit prune: --older-than %v: want a positive duration\n", *olderThan)
		return 2
	}
	root, err := os.OpenFile(*dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit prune: %s\n", errcode.Text(errcode.Wrap(errcode.NotFound, err)))
		return 1
	}
	defer root.Close()
	cutoff := time.Now().Add(-*olderThan)
	pruned, held, err := ledger.Prune(root, e.getenv("SYMBI_AUDIT_KEY_FILE"), func(id string, mod time.Time) bool {
		if *runID != "" {
			return id == *runID
		}
		return mod.Before(cutoff)
	}, *dryRun)
	verb := "pruned"
	if *dryRun {
		verb = "would prune"
	}
	for _, p := range pruned {
		fmt.Fprintf(e.stdout, "%s %s (run %s, %d records)\n", verb, nameText(p.File), nameText(p.RunID), p.Records)
	}
	for _, id := range held {
		fmt.Fprintf(e.stdout, "left the journal of run %s: its writer still holds it (a server ending the run); a later prune takes it\n", nameText(id))
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit prune: %s\n", errcode.Text(err))
		return 1
	}
	// Every prune also finishes one a stop cut short, whatever it selects: what it
	// pruned is not the run asked for unless that run is among it.
	if *runID != "" && !slices.ContainsFunc(pruned, func(p ledger.Pruned) bool { return p.RunID == *runID }) {
		if slices.Contains(held, *runID) {
			fmt.Fprintf(e.stderr, "symbi audit prune: the journal of run %s is still held by its writer (a server ending the run): prune it later\n", nameText(*runID))
		} else {
			fmt.Fprintf(e.stderr, "symbi audit prune: no journal of run %s to prune\n", nameText(*runID))
		}
		return 1
	}
	return 0
}

// runAuditVerifyProject is symbi audit verify --project: the whole project.
func runAuditVerifyProject(e *env, dir string, pub ed25519.PublicKey, checkpointFiles []string, asJSON bool) int {
	var cps [][]byte
	for _, f := range checkpointFiles {
		b, err := readCheckpoint(f)
		if err != nil {
			fmt.Fprintf(e.stderr, "symbi audit verify: checkpoint: %s\n", errcode.Text(err))
			return 1
		}
		cps = append(cps, b)
	}
	r := ledger.VerifyProject(dir, pub, cps)
	if asJSON {
		printJSON(e, cmdAuditVerify.name, r)
		return r.ExitCode()
	}
	// Names a journal's file name (or a problem quoting one) could forge report lines
	// with: each is quoted or escaped, and prints no line of its own.
	for _, f := range r.Runs {
		if f.Problem != "" {
			fmt.Fprintf(e.stdout, "run %s (%s): %s\n", nameText(f.RunID), nameText(f.File), cellText(f.Problem))
		} else if f.Note != "" {
			fmt.Fprintf(e.stdout, "run %s (%s): %s (%s)\n", nameText(f.RunID), nameText(f.File), f.Journal, cellText(f.Note))
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintln(e.stdout, cellText(p))
	}
	for _, c := range r.Checkpoints {
		fmt.Fprintln(e.stdout, cellText(c))
	}
	fmt.Fprintf(e.stdout, "%s: %s: %d ledger entries, %d journals\n", nameText(dir), r.Status, r.LedgerSize, r.Journals)
	return r.ExitCode()
}

// noteVerifierKey is the ledger's note verifier key for the key in hex.
func noteVerifierKey(pubHex string) string {
	pub, _ := hex.DecodeString(pubHex)
	k, err := ledger.VerifierKey(pub)
	if err != nil {
		return ""
	}
	return k
}

// maxCheckpointBytes bounds a checkpoint file read: a signed note of a few hundred bytes,
// with room for many signatures.
const maxCheckpointBytes = 64 << 10

// readCheckpoint reads a saved checkpoint, at most maxCheckpointBytes: the file may be
// anything the auditor names (a pipe, a device), so it is never read whole.
func readCheckpoint(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errcode.Wrap(errcode.NotFound, err)
	}
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err) // the file named cannot be read
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCheckpointBytes+1))
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err)
	}
	if len(b) > maxCheckpointBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "%s is larger than %d bytes; a checkpoint is a signed note of a few hundred", path, maxCheckpointBytes)
	}
	return b, nil
}
