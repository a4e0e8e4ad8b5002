package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// parseInterspersed parses flags that may come before or after the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, code, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, 0, true
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

var cmdAuditVerify = &command{name: "audit verify", args: "JOURNAL|DIR", summary: "verify a run journal (or every *.jsonl in a directory): exit 0 complete, 2 incomplete, 1 invalid"}
var cmdAuditShow = &command{name: "audit show", args: "JOURNAL", summary: "print a run journal as a readable timeline (does not verify it)"}
var cmdAuditKey = &command{name: "audit key", summary: "print the project's journal public key (hex); SYMBI_AUDIT_KEY_FILE overrides the key file"}

func init() {
	cmdAuditVerify.run = runAuditVerify
	register(cmdAuditVerify)
	cmdAuditShow.run = runAuditShow
	register(cmdAuditShow)
	cmdAuditKey.run = runAuditKey
	register(cmdAuditKey)
}

// runAuditVerify runs symbi audit verify.
func runAuditVerify(e *env, args []string) int {
	fs := newFlags(e, cmdAuditVerify)
	keyHex := fs.String("public-key", "", "the project's Ed25519 public key, 64 `HEX` digits (required; see symbi audit key)")
	runID := fs.String("run-id", "", "the run `ID` every record must carry")
	head := fs.String("head", "", "receipt: `HEX` SHA-256 of the last line (with --records)")
	records := fs.Int("records", 0, "receipt: number of records (with --head)")
	asJSON := fs.Bool("json", false, "print a machine-readable report")
	project := fs.String("project", "", "verify the whole project `DIR`: its ledger, every journal, and the --checkpoint files")
	var checkpoints listFlag
	fs.Var(&checkpoints, "checkpoint", "with --project: a checkpoint `FILE` saved earlier (symbi audit checkpoint), which the ledger must still be consistent with (repeatable)")
	pos, code, ok := parseInterspersed(fs, args)
	if !ok {
		if code != 0 {
			return 1 // a usage error is invalid, never "incomplete"
		}
		return 0
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "symbi audit verify: "+format+"\n", a...)
		return 1
	}
	switch {
	case *project != "" && (len(pos) != 0 || given(fs, "run-id") || given(fs, "head") || given(fs, "records")):
		return usageErr("--project verifies the whole project: no JOURNAL, --run-id or receipt with it")
	case *project == "" && len(checkpoints) > 0:
		return usageErr("--checkpoint goes with --project")
	case *project == "" && len(pos) != 1:
		return usageErr("want exactly one JOURNAL or DIR, or --project DIR")
	}
	if *keyHex == "" {
		return usageErr("--public-key is required: the project's Ed25519 public key (symbi audit key prints it)")
	}
	pub, err := hex.DecodeString(*keyHex)
	if err != nil || len(pub) != ed25519.PublicKeySize || strings.ToLower(*keyHex) != *keyHex {
		return usageErr("--public-key must be %d lowercase hex digits", 2*ed25519.PublicKeySize)
	}
	if *project != "" {
		return runAuditVerifyProject(e, *project, pub, checkpoints, *asJSON)
	}
	// A receipt is given whole or not at all, by what is on the command line: an empty
	// --head or --records 0 is refused, not taken for "no receipt" (which verifies less).
	if given(fs, "head") != given(fs, "records") {
		return usageErr("--head and --records go together (the receipt of the run)")
	}
	if h, err := hex.DecodeString(*head); given(fs, "head") && (err != nil || len(h) != 32 || strings.ToLower(*head) != *head) {
		// A head in capitals would be reported as a receipt that does not match: a false
		// sign of tampering.
		return usageErr("--head must be 64 lowercase hex digits (a SHA-256, as the receipt gives it)")
	}
	if given(fs, "records") && *records < 1 {
		return usageErr("--records %d: a receipt counts at least 1 record", *records)
	}
	if given(fs, "run-id") && *runID == "" {
		return usageErr("--run-id is empty")
	}
	opts := journal.VerifyOptions{RunID: *runID, Head: *head, Records: *records}
	var st unix.Stat_t
	if unix.Lstat(pos[0], &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if opts != (journal.VerifyOptions{}) {
			return usageErr("--run-id, --head and --records apply to one journal, not a directory")
		}
		reports, err := journal.VerifyDir(pos[0], pub)
		if err != nil {
			return usageErr("%v", err)
		}
		if len(reports) == 0 {
			return usageErr("no *.jsonl journals in %s", pos[0])
		}
		return printReports(e, reports, *asJSON)
	}
	r := journal.Verify(pos[0], pub, opts)
	if *asJSON {
		printJSON(e, "audit verify", r)
	} else {
		printReport(e.stdout, r)
	}
	return r.ExitCode()
}

// runAuditShow runs symbi audit show.
func runAuditShow(e *env, args []string) int {
	fs := newFlags(e, cmdAuditShow)
	asJSON := fs.Bool("json", false, "print the entries as JSON")
	pos, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintln(e.stderr, "symbi audit show: want exactly one JOURNAL")
		return 2
	}
	if *asJSON {
		return auditShowJSON(e, pos[0])
	}
	// Each line is printed as it is read: what a file holds costs its size, not a record
	// per line held until the end. The heading comes once the file could be read.
	headed := false
	heading := func() error {
		if headed {
			return nil
		}
		headed = true
		_, err := fmt.Fprintf(e.stdout, "%s (not verified; use symbi audit verify)\n", nameText(pos[0]))
		return err
	}
	tail, err := journal.EachEntry(pos[0], func(en journal.Entry) error {
		if err := heading(); err != nil {
			return err
		}
		var err error
		if en.Problem != "" {
			_, err = fmt.Fprintf(e.stdout, "line %d: %s\n", en.Line, cellText(en.Problem))
		} else {
			// Nothing here is verified: no field of a forged line prints a line of its own.
			_, err = fmt.Fprintf(e.stdout, "%-4s %-24s %-20s %s\n", cellText(en.Seq), cellText(en.Time), cellText(en.Type), cellText(en.Facts()))
		}
		return err
	})
	if err == nil {
		err = heading()
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit show: %v\n", err)
		return 1
	}
	if tail > 0 {
		fmt.Fprintf(e.stdout, "(torn tail of %d bytes, not shown)\n", tail)
	}
	return 0
}

// auditShowJSON prints symbi audit show --json: {"path", "verified": false, "entries":
// [...], "tail_bytes"}, as printJSON would indent it, each entry written as it is read.
func auditShowJSON(e *env, path string) int {
	name, _ := json.Marshal(path)
	headed := false
	heading := func() error { // once the file could be read
		if headed {
			return nil
		}
		headed = true
		_, err := fmt.Fprintf(e.stdout, "{\n  \"path\": %s,\n  \"verified\": false,\n  \"entries\": [", name)
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("    ", "  ")
	enc.SetEscapeHTML(false)
	sep := "\n    "
	tail, err := journal.EachEntry(path, func(en journal.Entry) error {
		if err := heading(); err != nil {
			return err
		}
		buf.Reset()
		if err := enc.Encode(en); err != nil {
			return err
		}
		_, err := fmt.Fprintf(e.stdout, "%s%s", sep, bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
		sep = ",\n    "
		return err
	})
	if err == nil {
		err = heading()
	}
	if err != nil {
		if headed {
			fmt.Fprintf(e.stdout, "\n")
		}
		fmt.Fprintf(e.stderr, "symbi audit show: %v\n", err)
		return 1
	}
	end := "]"
	if sep != "\n    " {
		end = "\n  ]"
	}
	if _, err := fmt.Fprintf(e.stdout, "%s,\n  \"tail_bytes\": %d\n}\n", end, tail); err != nil {
		fmt.Fprintf(e.stderr, "symbi audit show: %v\n", err)
		return 1
	}
	return 0
}

// runAuditKey runs symbi audit key.
func runAuditKey(e *env, args []string) int {
	fs := newFlags(e, cmdAuditKey)
	project := fs.String("project", ".", "the project `DIR`")
	create := fs.Bool("create", false, "create .symbiont/governed and the key when absent")
	noteKey := fs.Bool("note", false, "print the ledger's note verifier key (<name>+<hash>+<key>, for checkpoint tooling) instead of the hex key")
	pos, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		fmt.Fprintln(e.stderr, "symbi audit key: unexpected arguments")
		return 2
	}
	root, err := os.OpenFile(*project, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit key: %s\n", errcode.Text(errcode.Wrap(errcode.NotFound, err)))
		return 1
	}
	defer root.Close()
	st, err := journal.OpenStore(root, journal.StoreOptions{KeyFile: e.getenv("SYMBI_AUDIT_KEY_FILE"), Create: *create})
	if errors.Is(err, journal.ErrNoKey) {
		fmt.Fprintf(e.stderr, "symbi audit key: %v; the first governed run creates one, or run: symbi audit key --project %s --create\n", err, *project)
		return 1
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "symbi audit key: %s\n", errcode.Text(err))
		return 1
	}
	defer st.Close()
	pubHex := hex.EncodeToString(st.PublicKey())
	if *noteKey {
		fmt.Fprintln(e.stdout, noteVerifierKey(pubHex))
		return 0
	}
	fmt.Fprintln(e.stdout, pubHex)
	fmt.Fprintf(e.stderr, "ledger checkpoint verifier key (symbi audit key --note): %s\n", noteVerifierKey(pubHex))
	return 0
}

// printReports prints the reports of a directory and returns the worst exit code: 1 over
// 2 over 0.
func printReports(e *env, reports []*journal.Report, asJSON bool) int {
	if asJSON {
		printJSON(e, "audit verify", reports)
	}
	worst := 0
	for _, r := range reports {
		if !asJSON {
			printReport(e.stdout, r)
		}
		if c := r.ExitCode(); c == 1 || (c == 2 && worst == 0) {
			worst = c
		}
	}
	return worst
}

// printReport writes a human-readable verification report.
func printReport(w io.Writer, r *journal.Report) {
	path := nameText(r.Path)
	switch r.Status {
	case journal.StatusComplete:
		released := "text released"
		if !r.Released {
			released = "text withheld"
		}
		fmt.Fprintf(w, "%s: valid and complete: %d records, run %s, terminated %s (%s)\n", path, r.Records, r.RunID, r.TerminalReason, released)
	case journal.StatusIncomplete:
		why := "no terminated record"
		if r.TailBytes > 0 {
			why = fmt.Sprintf("a torn tail of %d unverified bytes", r.TailBytes)
		}
		fmt.Fprintf(w, "%s: valid but INCOMPLETE: %d records, run %s, %s\n", path, r.Records, r.RunID, why)
	default:
		fmt.Fprintf(w, "%s: INVALID\n", path)
		for _, p := range r.Problems {
			// A message may name a file: its line breaks print no line of their own.
			if p.Line == 0 {
				fmt.Fprintf(w, "  %s\n", cellText(p.Message))
			} else {
				fmt.Fprintf(w, "  line %d: %s\n", p.Line, cellText(p.Message))
			}
		}
		if r.TailBytes > 0 {
			fmt.Fprintf(w, "  and a torn tail of %d unverified bytes after the last line\n", r.TailBytes)
		}
	}
}
