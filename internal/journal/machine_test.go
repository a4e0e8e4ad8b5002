package journal

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestMachine runs stories through the run's state machine: each possible one passes,
// each impossible one is refused at the step that makes it impossible.
func TestMachine(t *testing.T) {
	var (
		started   = Step{Type: TypeStarted}
		requested = Step{Type: TypeInferenceRequested, CallID: "c1"}
		finished  = Step{Type: TypeInferenceFinished, CallID: "c1", Outcome: "completed", TextSHA256: "t1"}
		allowed   = Step{Type: TypePolicyEvaluated, Decision: "allow", TextSHA256: "t1"}
		denied    = Step{Type: TypePolicyEvaluated, Decision: "deny", TextSHA256: "t1"}
		released  = Step{Type: TypeTerminated, Reason: "completed", Released: true}
		end       = func(reason string) Step { return Step{Type: TypeTerminated, Reason: reason} }
		outcome   = func(o string) Step { return Step{Type: TypeInferenceFinished, CallID: "c1", Outcome: o} }
		unknown   = Step{Type: "note_added"} // a later version's record type
		held      = Step{Type: TypeApprovalRequested, Gate: "customer-names", TextSHA256: "t1"}
		decide    = func(d string) Step { return Step{Type: TypeApprovalDecided, Decision: d} }
		hold      = func(id string) Step { return Step{Type: TypeApprovalRequested, Gate: "g", RequestID: id} }
		decideP   = func(id, d string) Step { return Step{Type: TypeApprovalDecided, RequestID: id, Decision: d} }
		rejudged  = func(d, text string) Step { return Step{Type: TypePolicyReevaluated, Decision: d, TextSHA256: text} }
		atGate    = func(gate string) Step {
			return Step{Type: TypePolicyReevaluated, Decision: "deny", TextSHA256: "t1", Gate: gate}
		}
		// A delegated run.
		session    = Step{Type: TypeSessionStarted}
		message    = Step{Type: TypeAgentMessage}
		call       = Step{Type: TypeToolCall}
		grant      = func(id, d string) Step { return Step{Type: TypePermissionDecided, RequestID: id, Decision: d} }
		read       = func(id string) Step { return Step{Type: TypeFSRead, RequestID: id} }
		write      = func(id string) Step { return Step{Type: TypeFSWrite, RequestID: id} }
		answered   = Step{Type: TypeSessionFinished, Outcome: "completed", TextSHA256: "t1"}
		sessionEnd = func(o string) Step { return Step{Type: TypeSessionFinished, Outcome: o} }
	)
	tests := []struct {
		name  string
		steps []Step
		want  string // "" when possible; else a substring of the refusal of the last step
	}{
		{"released", []Step{started, requested, finished, allowed, released}, ""},
		{"denied", []Step{started, requested, finished, denied, end("policy_denied")}, ""},
		{"cancelled after an allow", []Step{started, requested, finished, allowed, end("cancelled")}, ""},
		{"inference failed", []Step{started, requested, outcome("error"), end("inference_failed")}, ""},
		{"timed out", []Step{started, requested, outcome("timeout"), end("timeout")}, ""},
		{"cancelled during inference", []Step{started, requested, outcome("cancelled"), end("cancelled")}, ""},
		{"journal failed early", []Step{started, end("audit_failed")}, ""},
		{"crashed", []Step{started, requested}, ""},
		{"a later version's record", []Step{started, unknown, requested, finished, unknown, allowed, released}, ""},

		{"delegated, released", []Step{started, session, message, call, grant("p1", "allow"), grant("fs1", "allow"), read("fs1"), grant("fs2", "deny"), message, answered, allowed, released}, ""},
		{"delegated, denied", []Step{started, session, answered, denied, end("policy_denied")}, ""},
		{"delegated, the agent failed", []Step{started, session, call, sessionEnd("error"), end("inference_failed")}, ""},
		{"delegated, no session could be opened", []Step{started, sessionEnd("error"), end("inference_failed")}, ""},
		{"delegated, cancelled mid-session", []Step{started, session, message, sessionEnd("cancelled"), end("cancelled")}, ""},
		{"delegated, crashed", []Step{started, session, message}, ""},

		{"a file read without a decision", []Step{started, session, read("fs1")}, "without a permission_decided"},
		{"a file write after a deny", []Step{started, session, grant("fs1", "deny"), write("fs1")}, "which was denied"},
		{"one allow used twice", []Step{started, session, grant("fs1", "allow"), read("fs1"), write("fs1")}, "already used"},
		{"a request decided twice", []Step{started, session, grant("p1", "deny"), grant("p1", "allow")}, "a second permission_decided"},
		{"a decision without a request id", []Step{started, session, grant("", "allow")}, "without a request_id"},
		{"held, approved, released", []Step{started, requested, finished, denied, held, decide("approve"), released}, ""},
		{"held, rejected", []Step{started, requested, finished, denied, held, decide("reject"), end("policy_denied")}, ""},
		{"held, timed out", []Step{started, requested, finished, denied, held, end("timeout")}, ""},
		{"held, cancelled", []Step{started, requested, finished, denied, held, end("cancelled")}, ""},
		{"held, approved, cancelled", []Step{started, requested, finished, denied, held, decide("approve"), end("cancelled")}, ""},
		{"held, crashed while waiting", []Step{started, requested, finished, denied, held}, ""},
		{"delegated, held, approved", []Step{started, session, answered, denied, held, decide("approve"), released}, ""},
		{"held after an allow", []Step{started, requested, finished, allowed, held}, "without a policy_evaluated that denied"},
		{"held before a decision", []Step{started, requested, finished, held}, "without a policy_evaluated that denied"},
		{"held twice", []Step{started, requested, finished, denied, held, held}, "a second approval_requested"},
		{"held without a gate", []Step{started, requested, finished, denied, {Type: TypeApprovalRequested, TextSHA256: "t1"}}, "names no gate"},
		{"held other text", []Step{started, requested, finished, denied, {Type: TypeApprovalRequested, Gate: "g", TextSHA256: "t2"}}, "holds text t2"},
		{"decided without a request", []Step{started, requested, finished, denied, decide("approve")}, "without approval_requested"},
		{"decided twice", []Step{started, requested, finished, denied, held, decide("approve"), decide("reject")}, "a second approval_decided"},
		{"an unknown approval decision", []Step{started, requested, finished, denied, held, decide("maybe")}, `decision "maybe"`},
		{"released after a rejection", []Step{started, requested, finished, denied, held, decide("reject"), released}, "no person approved"},
		{"judged again while waiting, approved", []Step{started, requested, finished, denied, held, atGate("customer-names"), rejudged("allow", "t1"), decide("approve"), released}, ""},
		{"judged again, denied outright", []Step{started, requested, finished, denied, held, rejudged("deny", "t1"), end("policy_denied")}, ""},
		{"judged again, denied at another gate", []Step{started, requested, finished, denied, held, atGate("other"), end("policy_denied")}, ""},
		{"approved after a deny outright", []Step{started, requested, finished, denied, held, rejudged("deny", "t1"), decide("approve")}, "denied the held answer outright"},
		{"released after a deny outright", []Step{started, requested, finished, denied, held, atGate("other"), released}, "denied the held answer outright"},
		{"timeout after a deny outright", []Step{started, requested, finished, denied, held, rejudged("deny", "t1"), end("timeout")}, "denied the held answer outright"},
		{"cancelled after a deny outright", []Step{started, requested, finished, denied, held, rejudged("deny", "t1"), end("cancelled")}, "denied the held answer outright"},
		{"audit_failed after a deny outright", []Step{started, requested, finished, denied, held, rejudged("deny", "t1"), end("audit_failed")}, ""},
		{"judged again after a deny outright", []Step{started, requested, finished, denied, held, rejudged("deny", "t1"), rejudged("allow", "t1")}, "denied the held answer outright"},
		{"an allow naming a gate", []Step{started, requested, finished, denied, held, Step{Type: TypePolicyReevaluated, Decision: "allow", TextSHA256: "t1", Gate: "g"}}, "yet names a gate"},
		{"released on an allow judged again, no person deciding", []Step{started, requested, finished, denied, held, rejudged("allow", "t1"), released}, "no person approved"},
		{"judged again with nothing held", []Step{started, requested, finished, denied, rejudged("deny", "t1")}, "without a held answer waiting"},
		{"judged again after the decision", []Step{started, requested, finished, denied, held, decide("approve"), rejudged("allow", "t1")}, "without a held answer waiting"},
		{"judged again, other text", []Step{started, requested, finished, denied, held, rejudged("deny", "t2")}, "but the text held was"},
		{"judged again, no decision", []Step{started, requested, finished, denied, held, rejudged("maybe", "t1")}, "want allow or deny"},
		{"released while waiting", []Step{started, requested, finished, denied, held, released}, "no person approved"},
		{"denied after an approval", []Step{started, requested, finished, denied, held, decide("approve"), end("policy_denied")}, "a person approved"},
		{"timeout after a decision", []Step{started, requested, finished, denied, held, decide("reject"), end("timeout")}, "no approval was awaited"},
		{"a permission held, approved, allowed, used", []Step{started, session, hold("p1"), decideP("p1", "approve"), grant("p1", "allow"), read("p1"), answered, allowed, released}, ""},
		{"a permission held, rejected, denied", []Step{started, session, hold("p1"), decideP("p1", "reject"), grant("p1", "deny"), answered, allowed, released}, ""},
		{"a permission held, no decision, denied", []Step{started, session, hold("p1"), grant("p1", "deny"), answered, allowed, released}, ""},
		{"a permission held, approved, denied (no allow option)", []Step{started, session, hold("p1"), decideP("p1", "approve"), grant("p1", "deny")}, ""},
		{"a permission held, cancelled while held", []Step{started, session, hold("p1"), sessionEnd("cancelled"), end("cancelled")}, ""},
		{"a held permission allowed without a decision", []Step{started, session, hold("p1"), grant("p1", "allow")}, "held at a gate no one decided"},
		{"a rejected permission allowed", []Step{started, session, hold("p1"), decideP("p1", "reject"), grant("p1", "allow")}, "a person rejected"},
		{"a permission held twice", []Step{started, session, hold("p1"), hold("p1")}, "already held or decided"},
		{"a decided permission held", []Step{started, session, grant("p1", "deny"), hold("p1")}, "already held or decided"},
		{"a permission decided without a hold", []Step{started, session, decideP("p1", "approve")}, "not held at a gate"},
		{"a permission decided twice", []Step{started, session, hold("p1"), decideP("p1", "approve"), decideP("p1", "approve")}, "not held at a gate"},
		{"a permission held outside a session", []Step{started, hold("p1")}, "without session_started"},
		{"a permission held after the session", []Step{started, session, answered, hold("p1")}, "after session_finished"},
		{"a permission decided twice after use", []Step{started, session, hold("p1"), decideP("p1", "approve"), grant("p1", "allow"), grant("p1", "allow")}, "a second permission_decided"},
		{"an unknown permission decision", []Step{started, session, grant("p1", "always")}, `decision "always"`},
		{"agent records before the session", []Step{started, message}, "without session_started"},
		{"agent records after the session", []Step{started, session, answered, call}, "after session_finished"},
		{"two sessions", []Step{started, session, session}, "a second session_started"},
		{"a model request in a delegated run", []Step{started, session, requested}, "in a delegated run"},
		{"a session in a model run", []Step{started, requested, session}, "made a model request"},
		{"an answer without a session", []Step{started, answered}, "no session was started"},
		{"a delegated release without a decision", []Step{started, session, answered, released}, "no policy_evaluated allowed"},
		{"judged other text than the agent's answer", []Step{started, session, answered, {Type: TypePolicyEvaluated, Decision: "allow", TextSHA256: "t2"}}, "judged text t2"},

		{"released after a deny", []Step{started, requested, finished, denied, released}, "no policy_evaluated allowed"},
		{"released without a decision", []Step{started, requested, finished, released}, "no policy_evaluated allowed"},
		{"released with another reason", []Step{started, requested, finished, allowed, {Type: TypeTerminated, Reason: "cancelled", Released: true}}, "a release is reason completed"},
		{"completed, not released", []Step{started, requested, finished, allowed, end("completed")}, "completed but not released"},
		{"policy_denied without a deny", []Step{started, requested, finished, allowed, end("policy_denied")}, "no policy_evaluated denied"},
		{"inference_failed without a failure", []Step{started, requested, finished, end("inference_failed")}, "no inference_finished failed"},
		{"timeout without a timeout", []Step{started, requested, outcome("error"), end("timeout")}, "no inference_finished timed out"},
		{"judged before the text came", []Step{started, requested, allowed}, "without a completed inference_finished"},
		{"judged a failed call", []Step{started, requested, outcome("error"), allowed}, "without a completed inference_finished"},
		{"judged other text", []Step{started, requested, finished, {Type: TypePolicyEvaluated, Decision: "allow", TextSHA256: "t2"}}, "judged text t2"},
		{"an unknown decision", []Step{started, requested, finished, {Type: TypePolicyEvaluated, Decision: "maybe", TextSHA256: "t1"}}, `decision "maybe"`},
		{"two decisions", []Step{started, requested, finished, denied, allowed}, "a second policy_evaluated"},
		{"two requests", []Step{started, requested, requested}, "one run makes one request"},
		{"finished without a request", []Step{started, finished}, "without inference_requested"},
		{"finished another call", []Step{started, requested, {Type: TypeInferenceFinished, CallID: "c2", Outcome: "completed"}}, `call "c2"`},
		{"an unknown outcome", []Step{started, requested, outcome("great")}, `outcome "great"`},
		{"request without a call id", []Step{started, {Type: TypeInferenceRequested}}, "without a call_id"},
		{"nothing before started", []Step{requested}, "before started"},
		{"two starts", []Step{started, started}, "a second started"},
		{"after the end", []Step{started, end("cancelled"), unknown}, "after terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Machine
			for i, s := range tt.steps {
				before := m
				err := m.Next(s)
				last := i == len(tt.steps)-1
				switch {
				case tt.want == "" || !last:
					if err != nil {
						t.Fatalf("step %d (%s): %v", i, s.Type, err)
					}
				case err == nil:
					t.Fatalf("step %d (%s) accepted; want a refusal containing %q", i, s.Type, tt.want)
				case !errors.Is(err, ErrImpossible) || !strings.Contains(err.Error(), tt.want):
					t.Fatalf("step %d (%s): %v; want ErrImpossible containing %q", i, s.Type, err, tt.want)
				case !reflect.DeepEqual(m, before):
					t.Fatalf("a refused step changed the machine")
				}
			}
		})
	}
}

// TestWriterRefusesImpossibleRuns: the writer runs the same machine, so it cannot write a
// release the policy never allowed; the refusal writes nothing and does not stop it.
func TestWriterRefusesImpossibleRuns(t *testing.T) {
	s, w := createJournal(t, "run")
	recs := run{agent: "a", prompt: "p", text: "t", allow: false}.records()
	for _, r := range recs[:4] { // up to a deny
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Append(Terminated{Reason: "completed", Released: true}); !errors.Is(err, ErrImpossible) || !errors.Is(err, ErrOrder) {
		t.Fatalf("a release after a deny: %v, want ErrImpossible", err)
	}
	if err := w.Append(recs[4]); err != nil {
		t.Fatalf("the possible end after the refusal: %v", err)
	}
	if rep := Verify(w.Path(), s.PublicKey(), VerifyOptions{}); rep.ExitCode() != 0 {
		t.Fatalf("report %s", reportJSON(rep))
	}
}

// TestMachineCopies: a copy of a Machine is a value — permissions it records are not the
// original's, two copies of one machine record apart, and a refused step changes nothing —
// and a long run's thousands of permissions each cost one record, not a copy of all.
func TestMachineCopies(t *testing.T) {
	var m Machine
	for _, s := range []Step{{Type: TypeStarted}, {Type: TypeSessionStarted}, {Type: TypePermissionDecided, RequestID: "p0", Decision: "allow"}} {
		if err := m.Next(s); err != nil {
			t.Fatal(err)
		}
	}
	a, b := m, m
	if err := a.Next(Step{Type: TypeFSRead, RequestID: "p0"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Next(Step{Type: TypePermissionDecided, RequestID: "p1", Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	// b, copied before a's steps, still holds p0's allow and knows nothing of p1.
	if err := b.Next(Step{Type: TypePermissionDecided, RequestID: "p1", Decision: "deny"}); err != nil {
		t.Fatalf("b sees a's permission: %v", err)
	}
	if err := b.Next(Step{Type: TypeFSRead, RequestID: "p0"}); err != nil {
		t.Fatalf("b sees a's use of p0: %v", err)
	}
	// a is untouched by b: p0 used, p1 allowed.
	if err := a.Next(Step{Type: TypeFSRead, RequestID: "p0"}); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Errorf("a reads p0 twice: %v", err)
	}
	if err := a.Next(Step{Type: TypeFSWrite, RequestID: "p1"}); err != nil {
		t.Errorf("a's p1: %v", err)
	}
	// The original saw none of it.
	if got := m.grants.get("p0"); got != "allow" || m.grants.get("p1") != "" {
		t.Errorf("the original: p0 %q, p1 %q", got, m.grants.get("p1"))
	}
	// A refused step leaves the machine as it was.
	before := m
	if err := m.Next(Step{Type: TypeFSRead, RequestID: "p9"}); err == nil || !reflect.DeepEqual(m, before) {
		t.Errorf("a refused step: %v, machine changed %v", err, !reflect.DeepEqual(m, before))
	}
	// Many permissions in a row record in place.
	for i := range 5000 {
		if err := m.Next(Step{Type: TypePermissionDecided, RequestID: fmt.Sprintf("q%d", i), Decision: "allow"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.grants.t.states); n != m.grants.n || n != 5001 {
		t.Errorf("the log holds %d entries, the machine sees %d; want 5001, recorded in place", n, m.grants.n)
	}
}

// TestSessionStartedAfterSessionFinished: session_started follows only started, and a
// session_finished without a session says none could be opened: a session opened after it
// is an impossible run, refused by the machine (so by the writer) and by both verification
// paths at its line.
func TestSessionStartedAfterSessionFinished(t *testing.T) {
	var m Machine
	for _, s := range []Step{
		{Type: TypeStarted},
		{Type: TypeSessionFinished, Outcome: "error", TextSHA256: sum("")},
	} {
		if err := m.Next(s); err != nil {
			t.Fatalf("%s: %v", s.Type, err)
		}
	}
	if err := m.Next(Step{Type: TypeSessionStarted}); !errors.Is(err, ErrImpossible) {
		t.Errorf("session_started after session_finished accepted by the machine (err %v)", err)
	}

	seed, _ := hex.DecodeString(vectorSeed)
	data := forge(ed25519.NewKeyFromSeed(seed), "coder", delegatedRun, []Record{
		Started{Agent: "coder", Mode: "delegated"},
		SessionFinished{Outcome: "error", TextSHA256: sum(""), Error: "could not open a session"},
		SessionStarted{Executor: "fake", Command: []string{"/bin/fake"}, SessionID: "s-1"},
		Terminated{Reason: "inference_failed"},
	})
	r := verifyBoth(t, "session after session_finished", data, vectorKey(), VerifyOptions{})
	if r.ExitCode() != 1 || len(r.Problems) == 0 || r.Problems[0].Line != 3 {
		t.Errorf("a session opened after its run recorded that none could be: want invalid at line 3, got %s", reportJSON(r))
	}
}

// TestMachineMoreImpossible: two stories the state machine refuses that TestMachine does
// not tell: session_finished in a run that made a model request (with an outcome allowed
// without a session), and a held permission decided after session_finished.
func TestMachineMoreImpossible(t *testing.T) {
	for name, steps := range map[string][]Step{
		"session_finished after inference_requested": {
			{Type: TypeStarted}, {Type: TypeInferenceRequested, CallID: "c1"},
			{Type: TypeSessionFinished, Outcome: "error"},
		},
		"a held permission decided after session_finished": {
			{Type: TypeStarted}, {Type: TypeSessionStarted},
			{Type: TypeApprovalRequested, Gate: "g", RequestID: "p1"},
			{Type: TypeSessionFinished, Outcome: "cancelled"},
			{Type: TypeApprovalDecided, RequestID: "p1", Decision: "approve"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var m Machine
			for i, s := range steps {
				err := m.Next(s)
				if i < len(steps)-1 {
					if err != nil {
						t.Fatalf("step %d (%s): %v", i, s.Type, err)
					}
					continue
				}
				if !errors.Is(err, ErrImpossible) {
					t.Fatalf("step %d (%s) accepted: %v", i, s.Type, err)
				}
			}
		})
	}
}
