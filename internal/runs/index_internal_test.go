package runs

import (
	"encoding/json"
	"testing"

	"symbi/internal/journal"
	"symbi/internal/ledger"
)

// TestRunEntryKeepsOwnEnd: a run entry read from the ledger after this process's run
// ended does not overrule the end its watcher recorded. The entry is written before the
// journal's terminated line, whose write or fsync may then fail: such a run ends
// audit_failed, its text withheld, whatever its entry says. A run this process did not
// end takes the entry's outcome.
func TestRunEntryKeepsOwnEnd(t *testing.T) {
	const agentID, runID = "e2d0c2d0-a1b1-504f-a10b-3aa572170aee", "01a233af-5df3-762d-9518-650847d321ec"
	data, err := json.Marshal(ledger.Run{RunID: runID, AgentID: agentID, Agent: "alpha", File: journal.FileName(agentID, runID),
		Reason: StatusCompleted, Released: true, Records: 5, Head: "h"})
	if err != nil {
		t.Fatal(err)
	}
	for _, own := range []bool{true, false} {
		m := &Manager{runs: map[string]*run{}, resolutions: map[string]*Resolution{}}
		r, _ := m.record(runID)
		if own {
			r.ended, r.reason, r.released, r.ownEnd = true, StatusAuditFailed, false, true
		}
		if _, err := m.apply(&ledger.Line{Type: ledger.TypeRun, Data: data}); err != nil {
			t.Fatal(err)
		}
		want, released := StatusCompleted, true
		if own {
			want, released = StatusAuditFailed, false
		}
		if r.reason != want || r.released != released {
			t.Errorf("own end %v: the run is %s, released %v; want %s, %v", own, r.reason, r.released, want, released)
		}
	}
}
