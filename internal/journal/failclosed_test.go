package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAppendRefusesLinkedFile: the writer fails closed when its file is no longer exactly
// one name in the file system, checked before every append (the link count, in the stat
// made for the length) as after every fsync: no line — in a run, terminated saying the
// text was released — is written to a file with a second name.
func TestAppendRefusesLinkedFile(t *testing.T) {
	_, w := createJournal(t, "r-linked")
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(w.Path(), filepath.Join(filepath.Dir(w.Path()), "second-name")); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, w.Path())
	err := w.Append(InferenceRequested{CallID: "c"})
	after := mustRead(t, w.Path())
	if err == nil || len(after) != len(before) {
		t.Fatalf("append to a journal with 2 links: err %v; file %d -> %d bytes (a line was written to a file the writer must refuse)", err, len(before), len(after))
	}
	if !errors.Is(err, ErrStopped) {
		t.Errorf("append to a journal with 2 links: %v; want ErrStopped", err)
	}
}

// TestReopenNotRefusedByProbe: InProgress (run_status of a run another server wrote,
// audit prune) probes a journal by taking its lock shared for a moment; a probe is no
// writer. Reopen of a held run while a probe holds the lock waits for the probe to let go,
// not refused as "another writer holds it" — which would leave the run to be recorded as
// found, and never resumed. The probe lets go once Reopen waits for it (lockForWriting
// waits for shared locks to be let go). A shared lock that is never let go is refused once
// writerLockWait has passed, naming the wait, and the file is left as it was.
func TestReopenNotRefusedByProbe(t *testing.T) {
	s := storeWithSeed(t, bytes.Repeat([]byte{7}, 32))
	name := heldJournal(t, s, "run-probed")
	path := filepath.Join(s.Dir(), name)
	// The probe, as InProgress takes it: a shared lock on a descriptor of its own.
	probe, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(probe, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	type result struct {
		w   *Writer
		err error
	}
	waits := make(chan struct{}, 1)
	testLockWaits = func() { waits <- struct{}{} }
	defer func() { testLockWaits = nil }()
	done := make(chan result, 1)
	go func() {
		w, _, err := s.Reopen(name)
		done <- result{w, err}
	}()
	var res result
	select {
	case res = <-done: // refused at once
	case <-waits:
		unix.Close(probe)
		res = <-done
	}
	unix.Close(probe)
	if res.err != nil {
		t.Fatalf("Reopen of a held run while a status probe held the journal's lock shared: %v", res.err)
	}
	res.w.Close()

	// A shared lock kept: refused once the wait has passed.
	if probe, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(probe)
	if err := unix.Flock(probe, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	defer func(wait time.Duration) { writerLockWait = wait }(writerLockWait)
	writerLockWait = 50 * time.Millisecond
	before, _ := os.ReadFile(path)
	if w, _, err := s.Reopen(name); !errors.Is(err, ErrNotResumable) || !strings.Contains(err.Error(), "was not let go within 50ms") {
		if w != nil {
			w.Close()
		}
		t.Fatalf("Reopen while another process keeps a shared lock on the journal: %v, want ErrNotResumable naming the wait", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused Reopen changed the journal")
	}
}

// TestConcurrentAppends: appends are serialized: Append prepares and writes under one
// lock, so that concurrent Appends all succeed, none refused as out of order.
func TestConcurrentAppends(t *testing.T) {
	_, w := createJournal(t, "r-concurrent")
	for _, r := range []Record{Started{Agent: "a"}, SessionStarted{Executor: "x"}} {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	const goroutines, each = 8, 200
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fails int
		first error
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := w.Append(AgentThought{TextSHA256: sum("t"), Bytes: 1, Chunks: 1}); err != nil {
					mu.Lock()
					if fails++; first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if fails > 0 {
		t.Fatalf("%d of %d concurrent appends refused; first: %v", fails, goroutines*each, first)
	}
}

// TestPointerRecordChecked: a record given by pointer is checked by the run's state
// machine as its value is: a release no policy allowed is refused (ErrOrder), not written.
func TestPointerRecordChecked(t *testing.T) {
	s, w := createJournal(t, "r-pointer")
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	err := w.Append(&Terminated{Reason: "completed", Released: true})
	if err == nil {
		w.Sync()
		rep := Verify(w.Path(), s.PublicKey(), VerifyOptions{})
		t.Fatalf("the writer wrote terminated released=true right after started (a pointer record); the verifier says exit %d: %+v", rep.ExitCode(), rep.Problems)
	}
	if !errors.Is(err, ErrOrder) {
		t.Errorf("pointer terminated: %v; want ErrOrder", err)
	}
}

// TestInProgressFailsClosed: a journal InProgress cannot open for want of a descriptor
// (EMFILE) while its writer holds it is in progress: its callers (reconciliation, prune,
// run_status) must never take a run in flight for abandoned. Only a journal that is not
// there is not in progress.
func TestInProgressFailsClosed(t *testing.T) {
	_, w := createJournal(t, "r-live")
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if !InProgress(w.Path()) {
		t.Fatal("a held journal is not in progress")
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 256
	if low.Cur > old.Cur {
		low.Cur = old.Cur
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fds []int
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fds = append(fds, fd)
	}
	got := InProgress(w.Path())
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !got {
		t.Fatal("with no descriptor to spare, InProgress says a journal its writer holds is not in progress")
	}
}

// TestOverruledEndsTheWait: after a policy_reevaluated that denied the held answer at no
// gate, the writer refuses a person's approval and a release: only terminated
// policy_denied may follow.
func TestOverruledEndsTheWait(t *testing.T) {
	s, w := createJournal(t, "r-rejudged")
	recs := gatedRecords()
	pe := recs[3].(PolicyEvaluated)
	for _, r := range recs[:5] { // up to approval_requested
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	// Judged again by another set: denied, and by no gate (an ungated forbid).
	if err := w.Append(PolicyReevaluated{PolicyMode: "cedar", PolicyDigest: sum("another set"), Decision: "deny",
		PolicyIDs: []string{"customer-names"}, TextSHA256: pe.TextSHA256}); err != nil {
		t.Fatal(err)
	}
	err1 := w.Append(ApprovalDecided{Decision: "approve", Approver: "bob", ApproverAuth: "token", Via: "approve_run"})
	err2 := w.Append(Terminated{Reason: "completed", Released: true})
	if err1 == nil && err2 == nil {
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		rep := Verify(w.Path(), s.PublicKey(), VerifyOptions{})
		t.Fatalf("after policy_reevaluated deny with no gate, approval_decided approve and terminated released were written, and the journal verifies exit %d (released %v); want only terminated policy_denied to follow",
			rep.ExitCode(), rep.Released)
	}
}

// TestFailedWriteCutBack: a writer stopped at a failed write (a full disk: part of the line
// written, ENOSPC) cuts back the torn line and the lines after its last durable point, so
// the receipt a failed run is handed (Kept) agrees with its journal.
func TestFailedWriteCutBack(t *testing.T) {
	s, ff, w := faultyWriter(t)
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(InferenceRequested{CallID: "c"}); err != nil { // written, not yet durable
		t.Fatal(err)
	}
	ff.failWrite = true
	if err := w.Append(InferenceFinished{CallID: "c", Outcome: "completed", TextSHA256: sum("x")}); err == nil {
		t.Fatal("the failing write succeeded")
	}
	rc := w.Kept()
	rep := Verify(w.Path(), s.PublicKey(), VerifyOptions{RunID: "r", Records: rc.Records, Head: rc.Head})
	if rep.ExitCode() == 1 {
		t.Errorf("the receipt of a writer stopped at a failed write (%d records) makes its journal invalid (%d records): %+v", rc.Records, rep.Records, rep.Problems)
	}
}
