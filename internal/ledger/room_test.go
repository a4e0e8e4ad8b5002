package ledger

import (
	"errors"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

// TestRunRoomKept: a run admitted by Room(RunRoom) — exactly RunRoom left is enough —
// records its end whatever other entries are appended while it runs: resolutions
// (resolve_run's 4 KiB notes, any number of them) are refused once they would take from
// the last RunRoom bytes, with audit_unavailable naming the room kept; the run's entry
// and a recovered entry still fit.
func TestRunRoomKept(t *testing.T) {
	_, root := newRoot(t)
	w := openWriter(t, root)
	if _, err := w.Append(runEntry(0)); err != nil {
		t.Fatal(err)
	}
	w.max = w.size + RunRoom + 64<<10 // room for a few resolutions, then exactly RunRoom
	accepted := 0
	for {
		_, err := w.Append(Resolution{RunID: "run-0", Resolution: "accepted", Note: strings.Repeat("n", MaxNoteBytes), Caller: "mallory"})
		if err != nil {
			if !errors.Is(err, ErrFull) || errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), "kept for the entries of runs in flight") {
				t.Fatalf("resolution refused with %v; want audit_unavailable naming the room kept for runs in flight", err)
			}
			break
		}
		accepted++
	}
	if accepted == 0 || w.max-w.size < RunRoom {
		t.Fatalf("%d resolutions appended, %d bytes left; want some, and RunRoom kept", accepted, w.max-w.size)
	}
	if err := w.Room(RunRoom); err != nil {
		t.Fatalf("Room(RunRoom) with RunRoom kept: %v", err)
	}
	if _, err := w.Append(runEntry(1)); err != nil {
		t.Fatalf("the run admitted cannot record its end: %v", err)
	}
	if _, err := w.Append(Recovered{RunID: "run-2", AgentID: "agent", File: "agent.run-2.jsonl", State: "incomplete"}); err != nil {
		t.Fatalf("a recovered entry within the room kept: %v", err)
	}
}
