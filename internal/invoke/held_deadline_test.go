package invoke

// Security check of the human gate for a delegated run: the wait recorded for a held
// permission request is the wait it really has.

import (
	"encoding/json"
	"testing"
	"time"

	"symbi/internal/journal"
)

// docs/errors.md, timeout: "for a delegated agent's held permission request,
// `--approval-timeout` or what is left of the run's deadline, whichever is shorter";
// docs/journal-format.md: approval_requested `timeout_ms` is "how long the run waits";
// gate.go, holdPermission: "the record says the wait it really has". A request held in a
// session whose deadline is 5 minutes is recorded in approval_requested, and shown as
// Pending.Deadline, as waiting at most those 5 minutes: an approver is not told of a wait
// the session's deadline cuts short.
func TestHeldPermissionWaitRecordsSessionDeadline(t *testing.T) {
	reg, script := fakeExecutor(t)
	f := editHeldFixture(t, reg, script)
	delegatedAgent(t, f, reg, "coder", "5.minutes")
	run := startAtGate(t, f, Request{Agent: "coder", Prompt: "Edit a.txt.", Async: true})
	pend := run.Pending()
	run.Cancel(ErrCancelRequested)
	waitEnd(t, run)
	if pend == nil || pend.RequestID != "perm-1" {
		t.Fatalf("pending %+v; want the held request perm-1", pend)
	}
	if wait := pend.Deadline.Sub(pend.Since); wait > 5*time.Minute {
		t.Errorf("the held permission waits %s, past the session's 5 min deadline", wait)
	}
	for _, r := range payloads(t, run.Audit().Path) {
		if r.Type != journal.TypeApprovalRequested {
			continue
		}
		var ar journal.ApprovalRequested
		if err := json.Unmarshal(r.Data, &ar); err != nil || ar.TimeoutMS > 5*60*1000 {
			t.Errorf("approval_requested %s: timeout_ms past the session's 5 min deadline", r.Data)
		}
	}
}
