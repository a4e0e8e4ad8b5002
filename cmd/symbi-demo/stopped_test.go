package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"symbi/internal/digest"
	"symbi/internal/journal"
	"symbi/internal/ledger"
)

// TestDemoAcceptsStoppedRun: step 7 accepts an incomplete project whose incomplete runs
// verification accepts as crashes — here a run whose ledger entry was durable and whose
// server was killed before the journal's terminated line ("stopped before its terminated
// line; the ledger holds its outcome", exit 2 by design): make demo runs on the checkout
// and must not fail for good after such a crash. A report with a problem is still refused.
func TestDemoAcceptsStoppedRun(t *testing.T) {
	bins := buildDemo(t)
	dir := t.TempDir()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	store, err := journal.OpenStore(root, journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lw, err := ledger.Open(root, store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	// A run ended as a server ends one: the journal, then its ledger entry (durable before
	// the terminated line), then the terminated line — which a kill -9 never wrote.
	w, err := store.Create("agent", "run-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []journal.Record{journal.Started{Agent: "a"}, journal.InferenceRequested{CallID: "c1"}, journal.Terminated{Reason: "cancelled"}} {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	rc := w.Durable()
	w.Close()
	data, _ := os.ReadFile(w.Path())
	ls := bytes.SplitAfter(data, []byte("\n"))
	prev := digest.SHA256Hex(ls[len(ls)-3])
	if _, err := lw.Append(ledger.Run{RunID: "run-a", AgentID: "agent", Agent: "a", File: filepath.Base(w.Path()), Reason: "cancelled", Records: int64(rc.Records), Head: rc.Head, PrevHead: prev, Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
	lw.Close()
	if err := os.WriteFile(w.Path(), data[:bytes.LastIndexByte(data[:len(data)-1], '\n')+1], 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"audit", "verify", "--project", dir, "--public-key", hex.EncodeToString(store.PublicKey())}
	out, err := exec.Command(bins["symbi"], args...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("precondition: verify exits %v, want 2 (incomplete):\n%s", err, out)
	}
	if err := projectIncomplete(bins["symbi"], args, false); err != nil {
		t.Fatalf("step 7 refuses a project whose only incomplete run is one a crash stopped after its ledger entry (verify: %s): %v", bytes.TrimSpace(out), err)
	}
}
