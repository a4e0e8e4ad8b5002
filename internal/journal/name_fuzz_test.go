package journal

import (
	"strings"
	"testing"
)

// FuzzCheckName: a journal's file name is what is on disk, anyone's to choose. checkName
// never panics; it invalidates a report only for a name of the writer's form,
// <agent_id>.<run_id>.jsonl with both valid ids, that names another agent or run than the
// records; and the writer's own name for the records' ids always passes.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"helper.01900000-0000-7000-8000-000000000001.jsonl", "helper.run.jsonl", "a.b.c.jsonl", ".jsonl", "x.jsonl",
		"helper..jsonl", "helper.run.JSONL", "helper.run.jsonl.bak", "hélper.run.jsonl", "a\x00.b.jsonl"} {
		f.Add(s, "helper", "run")
	}
	f.Fuzz(func(t *testing.T, base, agent, run string) {
		r := &Report{Status: StatusComplete, Complete: true, AgentID: agent, RunID: run}
		checkName(r, base)
		ids, ok := strings.CutSuffix(base, ".jsonl")
		a, b, two := strings.Cut(ids, ".")
		mismatch := ok && two && ValidID(a) && ValidID(b) && run != "" && (a != agent || b != run)
		if got := r.Status == StatusInvalid; got != mismatch {
			t.Fatalf("checkName(%q) with agent %q, run %q: invalid %v, want %v", base, agent, run, got, mismatch)
		}
		if ValidID(agent) && ValidID(run) {
			own := &Report{Status: StatusComplete, Complete: true, AgentID: agent, RunID: run}
			if checkName(own, FileName(agent, run)); own.Status == StatusInvalid {
				t.Fatalf("the writer's own name %q refused", FileName(agent, run))
			}
		}
	})
}
