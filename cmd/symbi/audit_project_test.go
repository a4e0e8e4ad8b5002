package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/digest"
	"symbi/internal/journal"
	"symbi/internal/ledger"
)

// ledgerProject makes a project with n finished runs, each journaled and in the ledger,
// and returns its directory, public key (hex), journal paths and the open ledger writer.
func ledgerProject(t *testing.T, n int) (dir, key string, files []string, lw *ledger.Writer) {
	t.Helper()
	dir = t.TempDir()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	store, err := journal.OpenStore(root, journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lw, err = ledger.Open(root, store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lw.Close() })
	for i := range n {
		files = append(files, recordRun(t, store, lw, "agent", "run-"+string(rune('a'+i)), journal.Started{Agent: "a"}))
	}
	return dir, hex.EncodeToString(store.PublicKey()), files, lw
}

// recordRun writes a cancelled run's journal (started, inference_requested, terminated)
// and its ledger entry, as a server does, and returns the journal's path.
func recordRun(t *testing.T, store *journal.Store, lw *ledger.Writer, agentID, runID string, started journal.Started) string {
	t.Helper()
	w, err := store.Create(agentID, runID)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, r := range []journal.Record{started, journal.InferenceRequested{CallID: "c1"}, journal.Terminated{Reason: "cancelled"}} {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	rc := w.Durable()
	data, _ := os.ReadFile(w.Path())
	ls := bytes.SplitAfter(data, []byte("\n"))
	prev := digest.SHA256Hex(ls[len(ls)-3])
	if _, err := lw.Append(ledger.Run{RunID: runID, AgentID: agentID, Agent: started.Agent, File: filepath.Base(w.Path()), Reason: "cancelled", Records: int64(rc.Records), Head: rc.Head, PrevHead: prev, Caller: "stdio"}); err != nil {
		t.Fatal(err)
	}
	return w.Path()
}

// TestAuditVerifyProjectReports: symbi audit verify --project names what it found and
// exits by it: no project at the path (a typo) is 1, not an empty project verified; a
// pruned entry for a run never recorded is 1 with its problem (a crash exited 2, which
// reads "incomplete"); a run stopped before its journal's last line is 2 and named.
func TestAuditVerifyProjectReports(t *testing.T) {
	t.Run("no project", func(t *testing.T) {
		_, key, _, _ := ledgerProject(t, 0)
		missing := filepath.Join(t.TempDir(), "typo")
		code, out, errOut := runCLI(t, "", "audit", "verify", "--project", missing, "--public-key", key)
		if code != 1 || !strings.Contains(out, "the project "+missing) {
			t.Fatalf("verify --project %s: exit %d\n%s%s", missing, code, out, errOut)
		}
	})
	t.Run("pruned, never recorded", func(t *testing.T) {
		dir, key, _, lw := ledgerProject(t, 1)
		lw.Close()
		// The writer refuses such an entry (ledger.ErrNotRecorded): signed by hand.
		root, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		store, err := journal.OpenStore(root, journal.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		path := filepath.Join(dir, ".symbiont", ledger.FileName)
		data, _ := os.ReadFile(path)
		ver := ledger.Verify(data, store.PublicKey())
		payload := fmt.Sprintf(`{"v":1,"seq":%d,"prev":"%s","time":"2026-01-02T03:04:05.000Z","type":"pruned","data":{"run_id":"ghost","file":"agent.ghost.jsonl","records":3,"head":"%s"}}`,
			len(ver.Entries), ver.Entries[len(ver.Entries)-1].Hash, strings.Repeat("a", 64))
		if err := os.WriteFile(path, append(data, journal.Seal(store.SigningKey(), ledger.Context, []byte(payload))...), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", key)
		if code != 1 || !strings.Contains(out, "run ghost is pruned but was never recorded") {
			t.Fatalf("exit %d, want 1 naming the problem:\n%s%s", code, out, errOut)
		}
	})
	t.Run("stopped before the last line", func(t *testing.T) {
		dir, key, files, lw := ledgerProject(t, 2)
		lw.Close()
		b, _ := os.ReadFile(files[1])
		os.WriteFile(files[1], b[:bytes.LastIndexByte(b[:len(b)-1], '\n')+1], 0o600)
		code, out, errOut := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", key)
		want := "run run-b (" + filepath.Base(files[1]) + "): incomplete (stopped before its terminated line; the ledger holds its outcome)"
		if code != 2 || !strings.Contains(out, want) {
			t.Fatalf("exit %d, want 2 with %q:\n%s%s", code, want, out, errOut)
		}
	})
}

// TestAuditProve: audit prove prints a proof and the signed checkpoint of the same tree
// — the ledger's first --size lines, or all of them — which ledger.CheckProof accepts
// with the project's public key.
func TestAuditProve(t *testing.T) {
	dir, key, _, lw := ledgerProject(t, 3)
	lw.Close()
	pub, err := hex.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		size int64
	}{{nil, 3}, {[]string{"--size", "2"}, 2}, {[]string{"--size", "1"}, 1}} {
		code, out, errOut := runCLI(t, "", append([]string{"audit", "prove", "--project", dir, "--run-id", "run-a"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("prove %v: exit %d\n%s%s", tc.args, code, out, errOut)
		}
		var got struct {
			ledger.Proof
			Checkpoint string `json:"checkpoint"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("prove %v printed %q: %v", tc.args, out, err)
		}
		if got.Size != tc.size || got.Index != 0 {
			t.Errorf("prove %v: size %d, index %d", tc.args, got.Size, got.Index)
		}
		if err := ledger.CheckProof(&got.Proof, []byte(got.Checkpoint), ed25519.PublicKey(pub)); err != nil {
			t.Errorf("prove %v: the proof does not verify against its checkpoint: %v\n%s", tc.args, err, out)
		}
	}
}

// TestAuditProveSizeZero: --size takes a tree size from 1 to the ledger's; an explicit
// --size 0 is a usage error (exit 2), not the whole ledger's proof in disguise.
func TestAuditProveSizeZero(t *testing.T) {
	dir, _, _, _ := ledgerProject(t, 2)
	code, out, errOut := runCLI(t, "", "audit", "prove", "--project", dir, "--run-id", "run-a", "--size", "0")
	if code != 2 {
		t.Fatalf("audit prove --size 0: exit %d, want 2 (a size is 1 to the ledger's)\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestAuditProveSizeBeforeEntry: a --size whose tree ends before the run's entry is
// refused naming the entry's line and the smallest tree that holds it, not a bare "no
// line" of the tree.
func TestAuditProveSizeBeforeEntry(t *testing.T) {
	dir, _, _, lw := ledgerProject(t, 3)
	lw.Close()
	code, out, errOut := runCLI(t, "", "audit", "prove", "--project", dir, "--run-id", "run-c", "--size", "2")
	if code != 1 || out != "" || !strings.Contains(errOut, "run run-c's entry is line 2 of the ledger (from 0), in the trees of size 3 and more") {
		t.Fatalf("audit prove --size 2 of the third entry: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestPruneWithoutSymbiontIsNotFound: a project that never ran anything (no .symbiont at
// all) has no ledger: a prune, dry or not, is refused not_found — as for a .symbiont
// without a ledger — before any key is looked for, and creates nothing.
func TestPruneWithoutSymbiontIsNotFound(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"audit", "prune", "--project", dir, "--older-than", "1h"},
		{"audit", "prune", "--project", dir, "--older-than", "1h", "--dry-run"},
	} {
		code, _, errOut := runCLI(t, "", args...)
		if code != 1 || !strings.Contains(errOut, "not_found") {
			t.Errorf("%v on a project without .symbiont: exit %d, stderr %q; want exit 1 and not_found", args, code, errOut)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, ".symbiont")); err == nil {
		t.Errorf("a refused prune created .symbiont")
	}
}

// TestVerifyProjectQuotesFileNames: audit verify --project prints a journal's file name
// quoted when it holds a line break: a name placed in .symbiont/governed forges no report
// line (here a checkpoint finding the auditor never asked for).
func TestVerifyProjectQuotesFileNames(t *testing.T) {
	dir, key, _, lw := ledgerProject(t, 1)
	lw.Close()
	forged := "checkpoint 1: consistent (size 1 of 1)" // a file name holds no "/"
	name := "x\n" + forged + "\n.jsonl"
	if err := os.WriteFile(filepath.Join(dir, ".symbiont", "governed", name), []byte("junk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", key)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s%s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if line == forged {
			t.Fatalf("a journal's file name printed a report line of its own (%q):\n%s", forged, out)
		}
	}
}

// TestPruneRunIDNotPruned: audit prune --run-id ID fails unless ID was pruned, also when
// the same call finished a prune a stop cut short (a pruned entry whose journal was still
// on disk), which every prune does whatever it selects.
func TestPruneRunIDNotPruned(t *testing.T) {
	dir, key, files, lw := ledgerProject(t, 2)
	// A prune stopped between its two writes: run-a's pruned entry is durable, its
	// journal still on disk.
	pub, err := hex.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	rep := journal.Verify(files[0], ed25519.PublicKey(pub), journal.VerifyOptions{})
	if _, err := lw.Append(ledger.Pruned{RunID: "run-a", File: filepath.Base(files[0]), Records: int64(rep.Records), Head: rep.Head}); err != nil {
		t.Fatal(err)
	}
	lw.Close()
	code, out, errOut := runCLI(t, "", "audit", "prune", "--project", dir, "--run-id", "no-such-run")
	if code != 1 || !strings.Contains(errOut, "no journal of run no-such-run to prune") {
		t.Fatalf("prune --run-id no-such-run exited %d though that run was not pruned:\n%s%s", code, out, errOut)
	}
}

// TestPruneHeldJournalSaysHeld: audit prune --run-id of a run whose journal its writer
// still holds (a server ending the run) fails saying so — the journal is there, for a
// later prune — not that there is no journal.
func TestPruneHeldJournalSaysHeld(t *testing.T) {
	dir, _, files, _ := ledgerProject(t, 1)
	fd, err := unix.Open(files[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil { // what the run's journal writer holds
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "audit", "prune", "--project", dir, "--run-id", "run-a")
	if code != 1 || !strings.Contains(errOut, "the journal of run run-a is still held by its writer") || strings.Contains(errOut, "no journal of run") {
		t.Fatalf("prune of a journal its writer holds: exit %d, out %q, err %q", code, out, errOut)
	}
	if !strings.Contains(out, "left the journal of run run-a: its writer still holds it") {
		t.Errorf("prune does not list the journal it left: %q", out)
	}
	if _, err := os.Lstat(files[0]); err != nil {
		t.Errorf("the held journal: %v", err)
	}
}

// TestPruneSelectorsByWhatIsGiven: audit prune takes exactly one of --run-id and
// --older-than, decided by what was given, not by the values: `--run-id run-a
// --older-than 0s` names two selections and prunes nothing (run-a was pruned, the
// --older-than dropped without a word); an empty --run-id and a duration that is not
// positive are usage errors too.
func TestPruneSelectorsByWhatIsGiven(t *testing.T) {
	dir, _, files, lw := ledgerProject(t, 2)
	lw.Close()
	for _, args := range [][]string{
		{"--run-id", "run-a", "--older-than", "0s"},
		{"--run-id", "run-a", "--older-than", "1h"},
		{"--run-id", ""},
		{"--older-than", "0s"},
		{"--older-than", "-1h"},
		{},
	} {
		code, out, errOut := runCLI(t, "", append([]string{"audit", "prune", "--project", dir}, args...)...)
		if code != 2 || out != "" {
			t.Errorf("audit prune %q: exit %d, stdout %q, stderr %q; want 2 and nothing pruned", args, code, out, errOut)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after refused prunes: %v", err)
		}
	}
}
