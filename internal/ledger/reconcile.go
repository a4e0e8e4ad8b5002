package ledger

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"

	"symbi/internal/errcode"
	"symbi/internal/journal"
)

// Reconcile makes the ledger whole at start-up: every journal in the governed directory
// gov that the ledger has no entry for — a crash between the journal's end and the
// ledger append, or a run abandoned mid-way — gets a recovered entry with the file as
// found (state complete, incomplete or invalid; records and head). Journals are never
// rewritten. It returns the entries appended.
func Reconcile(w *Writer, gov string, pub ed25519.PublicKey) ([]Recovered, error) {
	reports, err := journal.VerifyDir(gov, pub)
	if err != nil {
		return nil, err
	}
	var out []Recovered
	for _, rep := range reports {
		base := filepath.Base(rep.Path)
		runID, agentID := rep.RunID, rep.AgentID
		if runID == "" { // unreadable from the start: name it as its file does
			if ids, ok := strings.CutSuffix(base, ".jsonl"); ok {
				agentID, runID, _ = strings.Cut(ids, ".")
			}
		}
		if runID == "" || w.Knows(runID) {
			continue
		}
		rec := Recovered{RunID: runID, AgentID: agentID, File: base, State: rep.Status, Records: int64(rep.Records), Head: rep.Head}
		if _, err := w.Append(rec); err != nil {
			return out, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// OpenProject opens the project's governed store (creating it and the key when absent;
// keyFile is SYMBI_AUDIT_KEY_FILE) and its ledger, and reconciles the ledger with the
// journals on disk. It is what a server does before its first run.
func OpenProject(root *os.File, keyFile string) (*Writer, []Recovered, error) {
	store, err := journal.OpenStore(root, journal.StoreOptions{KeyFile: keyFile, Create: true})
	if err != nil {
		return nil, nil, err
	}
	defer store.Close()
	w, err := Open(root, store.SigningKey())
	if err != nil {
		return nil, nil, err
	}
	recovered, err := Reconcile(w, store.Dir(), store.PublicKey())
	if err != nil {
		w.Close()
		return nil, nil, errcode.Wrap(errcode.AuditUnavailable, err)
	}
	return w, recovered, nil
}
