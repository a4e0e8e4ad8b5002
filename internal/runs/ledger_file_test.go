package runs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/runs"
)

// blockedOnFIFO reports whether a thread of this process is blocked opening a FIFO that
// has no writer (the kernel's wait channel "wait_for_partner").
func blockedOnFIFO() bool {
	tasks, _ := filepath.Glob("/proc/self/task/*/wchan")
	for _, p := range tasks {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == "wait_for_partner" {
			return true
		}
	}
	return false
}

// TestLedgerFIFO: a FIFO where .symbiont/ledger.jsonl should be is "not a regular file"
// (audit_unavailable), as ReadLog and the ledger writer refuse it; opening the run index
// does not wait for a writer to the FIFO — the server's start-up (runs.New) and
// `symbi runs list|status` would hang for good.
func TestLedgerFIFO(t *testing.T) {
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
	store.Close()
	fifo := filepath.Join(dir, ".symbiont", "ledger.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := runs.Open(runs.Config{Root: root})
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("runs.Open with a FIFO ledger: %v; want a refusal naming \"not a regular file\"", err)
			}
			return
		default:
		}
		if blockedOnFIFO() {
			// Unblock the open so the goroutine ends, then fail.
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			<-done
			t.Fatal("runs.Open blocked opening .symbiont/ledger.jsonl, a FIFO with no writer: the run index (symbi runs list, symbi mcp start-up) hangs")
		}
		time.Sleep(time.Millisecond) // the polling interval, not an expectation
	}
}

// TestRenamedJournalAtStartUp: a crash leaves a journal with no ledger entry, and someone
// renames it. Start-up reconciliation appends no entry naming a file that is not
// <agent_id>.<run_id>.jsonl of its run — which the server's own run index would refuse,
// every later answer about any run failing closed for good (the entry signed into the
// append-only ledger).
func TestRenamedJournalAtStartUp(t *testing.T) {
	for _, name := range []string{"x.jsonl", "other"} {
		t.Run(name, func(t *testing.T) {
			p := newTestProject(t, nil)
			earlier := p.run(t, "alpha", runs.StatusCompleted)
			crashed := newRunID(t)
			p.journalRun(t, "alpha", crashed, records("alpha", "", "text", true), false)
			to := name
			if name == "other" {
				to = journal.FileName(policy.AgentID("alpha"), newRunID(t))
			}
			if err := os.Rename(p.journalPath("alpha", crashed), filepath.Join(p.store.Dir(), to)); err != nil {
				t.Fatal(err)
			}
			// What a server does at start-up.
			if _, err := ledger.Reconcile(p.lw, p.store.Dir(), p.pub); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			m, err := runs.Open(runs.Config{Root: p.root, Ledger: p.lw})
			if err != nil {
				t.Fatalf("after start-up reconciliation of a renamed journal, the run index refuses the ledger the server itself wrote: %v", err)
			}
			if _, err := m.Status(earlier); err != nil {
				t.Fatalf("status of an unrelated earlier run: %v", err)
			}
		})
	}
}
