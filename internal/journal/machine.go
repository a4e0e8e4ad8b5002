package journal

import (
	"errors"
	"fmt"
)

// ErrImpossible is wrapped by every refusal of the run's state machine: the record would
// tell a story no run can have (a release the policy never allowed, a decision on text
// that was never received, ...).
var ErrImpossible = errors.New("impossible run")

// Step is what the run's state machine reads of one record: its type and the members its
// rules speak of. Other members are not its business.
type Step struct {
	Type       string
	CallID     string // inference_requested, inference_finished
	Outcome    string // inference_finished: completed, error, timeout, cancelled
	TextSHA256 string // inference_finished, policy_evaluated
	Decision   string // policy_evaluated, permission_decided: allow, deny
	Reason     string // terminated
	Released   bool   // terminated
	RequestID  string // permission_decided, fs_read, fs_write
	Gate       string // approval_requested
}

// Machine is the state machine of one run, shared by the writer (which refuses to write
// an impossible record) and the verifier (which refuses to accept one). Feed it every
// record in order with Next. Its zero value is a run before its first record. The rules,
// documented in docs/journal-format.md ("The run's state machine"):
//
//   - started comes first, once;
//   - inference_requested follows started, once, before any later stage; it names a call_id;
//   - inference_finished follows inference_requested, once, for the same call_id, with an
//     outcome of completed, error, timeout or cancelled;
//   - policy_evaluated follows an inference_finished whose outcome is completed, once,
//     with a decision of allow or deny, on the same text_sha256;
//   - terminated ends the run: released true only with reason completed, after an allow;
//     reason completed only when released; reason policy_denied only after a deny;
//     reason inference_failed only after an outcome error, timeout only after an outcome
//     timeout;
//   - a delegated run (delegated.go) has session_started where a model run has
//     inference_requested — once, right after started, never in a run that made a model
//     request — and session_finished where it has inference_finished: once, after
//     session_started (or directly after started when no session could be opened), with
//     an outcome as inference_finished's and the final answer's text_sha256, which
//     policy_evaluated and terminated then follow as for a model run;
//   - agent_message, agent_thought, tool_call, tool_call_update, plan, permission_decided,
//     fs_read and fs_write stand only between session_started and session_finished;
//     permission_decided has a request_id used once and a decision of allow or deny; an
//     fs_read or fs_write names the request_id of an earlier permission_decided that
//     allowed it, once;
//   - in a session, approval_requested with a request_id holds that permission request (a
//     request_id not yet used; a gate named); approval_decided with the same request_id
//     decides it, once; the permission_decided that follows may allow it only after an
//     approve (a rejection, or a wait no decision ended, is a deny);
//   - approval_requested follows a policy_evaluated that denied, once, naming a gate and
//     the same text_sha256; approval_decided follows it, once, with a decision of approve
//     or reject. Then terminated may say released (reason completed) after an approve as
//     after an allow; policy_denied needs a deny not approved; timeout is also the end of
//     a wait no decision ended;
//   - policy_reevaluated stands only while the answer waits (after approval_requested of
//     the answer, before approval_decided), on the same text_sha256, with a decision of
//     allow (naming no gate) or deny; an allow, or a deny naming the gate approval_requested
//     named, changes nothing (a person still decides); a deny naming no gate or another
//     ends the wait: only terminated may follow, and not a release;
//   - records of other types (a later version's) may stand anywhere after started and
//     before terminated; the machine does not read them.
//
// A Machine is a small value: copy it to try a step without committing to it (its
// permissions are a log each copy sees only its own part of, written only by a step that
// succeeds, after every check).
type Machine struct {
	started, requested, finished, decided, ended bool
	session                                      bool   // session_started seen
	gated                                        bool   // approval_requested seen
	gate                                         string // the gate approval_requested named
	approval                                     string // approval_decided's decision
	overruled                                    bool   // a policy_reevaluated denied the held answer at no gate or another

	callID     string
	outcome    string
	textSHA256 string
	decision   string
	grants     grantLog // permission_decided request_id → decision ("used" once an fs record used an allow)
}

// Next checks that s can follow the records fed so far and, if so, records it. A refusal
// wraps ErrImpossible and leaves m unchanged.
func (m *Machine) Next(s Step) error {
	next := *m
	if err := next.step(s); err != nil {
		return fmt.Errorf("%w: %w", ErrImpossible, err)
	}
	*m = next
	return nil
}

func (m *Machine) step(s Step) error {
	switch {
	case m.ended:
		return fmt.Errorf("%s after terminated", s.Type)
	case !m.started && s.Type != TypeStarted:
		return fmt.Errorf("%s before started", s.Type)
	}
	switch s.Type {
	case TypeStarted:
		if m.started {
			return errors.New("a second started")
		}
		m.started = true
	case TypeInferenceRequested:
		switch {
		case m.session || m.finished:
			return errors.New("inference_requested in a delegated run")
		case m.requested:
			return errors.New("a second inference_requested: one run makes one request")
		case s.CallID == "":
			return errors.New("inference_requested without a call_id")
		}
		m.requested, m.callID = true, s.CallID
	case TypeInferenceFinished:
		switch {
		case !m.requested:
			return errors.New("inference_finished without inference_requested")
		case m.finished:
			return errors.New("a second inference_finished")
		case s.CallID != m.callID:
			return fmt.Errorf("inference_finished for call %q, but the request was call %q", s.CallID, m.callID)
		}
		switch s.Outcome {
		case "completed", "error", "timeout", "cancelled":
		default:
			return fmt.Errorf("inference_finished with outcome %q (want completed, error, timeout or cancelled)", s.Outcome)
		}
		m.finished, m.outcome, m.textSHA256 = true, s.Outcome, s.TextSHA256
	case TypePolicyEvaluated:
		switch {
		case !m.finished || m.outcome != "completed":
			return errors.New("policy_evaluated without a completed inference_finished: no text was received to judge")
		case m.decided:
			return errors.New("a second policy_evaluated")
		case s.Decision != "allow" && s.Decision != "deny":
			return fmt.Errorf("policy_evaluated with decision %q (want allow or deny)", s.Decision)
		case s.TextSHA256 != m.textSHA256:
			return fmt.Errorf("policy_evaluated judged text %s, but the text received was %s", s.TextSHA256, m.textSHA256)
		}
		m.decided, m.decision = true, s.Decision
	case TypeSessionStarted:
		switch {
		case m.session:
			return errors.New("a second session_started")
		case m.finished:
			return errors.New("session_started after session_finished: a session is opened right after started, or never")
		case m.requested:
			return errors.New("session_started in a run that made a model request: a run is a model run or a delegated one")
		}
		m.session = true
	case TypeSessionFinished:
		switch {
		case m.requested:
			return errors.New("session_finished in a run that made a model request")
		case m.finished:
			return errors.New("a second session_finished")
		}
		switch s.Outcome {
		case "completed", "error", "timeout", "cancelled":
		default:
			return fmt.Errorf("session_finished with outcome %q (want completed, error, timeout or cancelled)", s.Outcome)
		}
		if !m.session && (s.Outcome == "completed" || s.Outcome == "timeout") {
			return fmt.Errorf("session_finished with outcome %s, but no session was started", s.Outcome)
		}
		m.finished, m.outcome, m.textSHA256 = true, s.Outcome, s.TextSHA256
	case TypeAgentMessage, TypeAgentThought, TypeToolCall, TypeToolCallUpdate, TypePlan, TypePermissionDecided, TypeFSRead, TypeFSWrite:
		switch {
		case !m.session:
			return fmt.Errorf("%s without session_started", s.Type)
		case m.finished:
			return fmt.Errorf("%s after session_finished", s.Type)
		}
		switch s.Type {
		case TypePermissionDecided:
			switch held := m.grants.get(s.RequestID); {
			case s.RequestID == "":
				return errors.New("permission_decided without a request_id")
			case held == "held" && s.Decision != "deny":
				return fmt.Errorf("permission_decided allows request %q, held at a gate no one decided", s.RequestID)
			case held == "rejected" && s.Decision != "deny":
				return fmt.Errorf("permission_decided allows request %q, which a person rejected", s.RequestID)
			case held != "" && held != "held" && held != "approved" && held != "rejected":
				return fmt.Errorf("a second permission_decided for request %q", s.RequestID)
			case s.Decision != "allow" && s.Decision != "deny":
				return fmt.Errorf("permission_decided with decision %q (want allow or deny)", s.Decision)
			}
			m.grant(s.RequestID, s.Decision)
		case TypeFSRead, TypeFSWrite:
			switch m.grants.get(s.RequestID) {
			case "allow":
			case "used":
				return fmt.Errorf("%s for request %q, whose permission was already used", s.Type, s.RequestID)
			case "deny":
				return fmt.Errorf("%s for request %q, which was denied", s.Type, s.RequestID)
			default:
				return fmt.Errorf("%s for request %q, without a permission_decided before it", s.Type, s.RequestID)
			}
			m.grant(s.RequestID, "used")
		}
	case TypeApprovalRequested:
		if s.RequestID != "" {
			return m.holdPermission(s)
		}
		switch {
		case !m.decided || m.decision != "deny":
			return errors.New("approval_requested without a policy_evaluated that denied: only a held deny waits for a person")
		case m.gated:
			return errors.New("a second approval_requested")
		case s.Gate == "":
			return errors.New("approval_requested names no gate")
		case s.TextSHA256 != m.textSHA256:
			return fmt.Errorf("approval_requested holds text %s, but the text judged was %s", s.TextSHA256, m.textSHA256)
		}
		m.gated, m.gate = true, s.Gate
	case TypeApprovalDecided:
		if s.RequestID != "" {
			return m.decidePermission(s)
		}
		switch {
		case !m.gated:
			return errors.New("approval_decided without approval_requested")
		case m.overruled:
			return errors.New("approval_decided after a policy_reevaluated that denied the held answer outright: the run ends policy_denied")
		case m.approval != "":
			return errors.New("a second approval_decided")
		case s.Decision != "approve" && s.Decision != "reject":
			return fmt.Errorf("approval_decided with decision %q (want approve or reject)", s.Decision)
		}
		m.approval = s.Decision
	case TypePolicyReevaluated:
		switch {
		case !m.gated || m.approval != "":
			return errors.New("policy_reevaluated without a held answer waiting: only an answer waiting at a gate is judged again")
		case m.overruled:
			return errors.New("policy_reevaluated after one that denied the held answer outright: the run ends policy_denied")
		case s.Decision != "allow" && s.Decision != "deny":
			return fmt.Errorf("policy_reevaluated with decision %q (want allow or deny)", s.Decision)
		case s.TextSHA256 != m.textSHA256:
			return fmt.Errorf("policy_reevaluated judges text %s, but the text held was %s", s.TextSHA256, m.textSHA256)
		case s.Decision == "allow" && s.Gate != "":
			return errors.New("policy_reevaluated allows the answer yet names a gate holding it")
		}
		m.overruled = s.Decision == "deny" && s.Gate != m.gate
	case TypeTerminated:
		switch {
		case m.overruled && s.Reason != "policy_denied" && s.Reason != "audit_failed":
			return fmt.Errorf("terminated with reason %q after a policy_reevaluated that denied the held answer outright: the run ends policy_denied (or audit_failed)", s.Reason)
		case s.Released && m.decision != "allow" && m.approval != "approve":
			return errors.New("terminated says released, but no policy_evaluated allowed the text and no person approved it")
		case s.Released && s.Reason != "completed":
			return fmt.Errorf("terminated says released with reason %q; a release is reason completed", s.Reason)
		case s.Reason == "completed" && !s.Released:
			return errors.New("terminated with reason completed but not released")
		case s.Reason == "policy_denied" && m.decision != "deny":
			return errors.New("terminated with reason policy_denied, but no policy_evaluated denied")
		case s.Reason == "policy_denied" && m.approval == "approve":
			return errors.New("terminated with reason policy_denied, but a person approved the text")
		case s.Reason == "inference_failed" && m.outcome != "error":
			return errors.New("terminated with reason inference_failed, but no inference_finished failed")
		case s.Reason == "timeout" && m.outcome != "timeout" && !(m.gated && m.approval == ""):
			return errors.New("terminated with reason timeout, but no inference_finished timed out and no approval was awaited")
		}
		m.ended = true
	}
	return nil
}

// grant records a permission's state; it is the last thing a successful step does, so a
// Machine copied before a failed step is unchanged.
func (m *Machine) grant(id, state string) { m.grants.set(id, state) }

// grantLog is the permissions' states, a log shared by a Machine and its copies: each
// sees the first n entries, so what one copy records, the machine it was copied from
// does not see. Recording costs O(1), not a copy of every state: a long delegated run
// decides thousands of permissions. Recording where another copy recorded first forks
// the log.
type grantLog struct {
	t *grantTable
	n int
}

// grantTable is the shared log: entries are appended, never changed.
type grantTable struct {
	ids, states []string
	at          map[string][]int // request_id → its entries, in order
}

// get returns id's latest state ("" when none).
func (g grantLog) get(id string) string {
	if g.t == nil {
		return ""
	}
	pos := g.t.at[id]
	for i := len(pos) - 1; i >= 0; i-- {
		if pos[i] < g.n {
			return g.t.states[pos[i]]
		}
	}
	return ""
}

// set records id's new state.
func (g *grantLog) set(id, state string) {
	if g.t == nil || len(g.t.states) != g.n {
		g.t = g.fork()
	}
	g.t.at[id] = append(g.t.at[id], len(g.t.states))
	g.t.ids, g.t.states = append(g.t.ids, id), append(g.t.states, state)
	g.n++
}

// fork copies the entries g sees into a table of its own.
func (g grantLog) fork() *grantTable {
	t := &grantTable{at: map[string][]int{}}
	for i := range g.n {
		id := g.t.ids[i]
		t.at[id] = append(t.at[id], i)
		t.ids, t.states = append(t.ids, id), append(t.states, g.t.states[i])
	}
	return t
}

// stepOf is the step of a record the writer is given.
func stepOf(r Record) Step {
	s := Step{Type: r.Type()}
	switch r := r.(type) {
	case InferenceRequested:
		s.CallID = r.CallID
	case InferenceFinished:
		s.CallID, s.Outcome, s.TextSHA256 = r.CallID, r.Outcome, r.TextSHA256
	case PolicyEvaluated:
		s.Decision, s.TextSHA256 = r.Decision, r.TextSHA256
	case Terminated:
		s.Reason, s.Released = r.Reason, r.Released
	case SessionFinished:
		s.Outcome, s.TextSHA256 = r.Outcome, r.TextSHA256
	case PermissionDecided:
		s.RequestID, s.Decision = r.RequestID, r.Decision
	case ApprovalRequested:
		s.Gate, s.TextSHA256, s.RequestID = r.Gate, r.TextSHA256, r.RequestID
	case ApprovalDecided:
		s.Decision, s.RequestID = r.Decision, r.RequestID
	case PolicyReevaluated:
		s.Decision, s.TextSHA256, s.Gate = r.Decision, r.TextSHA256, r.Gate
	case FSRead:
		s.RequestID = r.RequestID
	case FSWrite:
		s.RequestID = r.RequestID
	}
	return s
}

// holdPermission is approval_requested for a delegated agent's permission request.
func (m *Machine) holdPermission(s Step) error {
	switch {
	case !m.session:
		return errors.New("approval_requested for a permission without session_started")
	case m.finished:
		return errors.New("approval_requested for a permission after session_finished")
	case s.Gate == "":
		return errors.New("approval_requested names no gate")
	case m.grants.get(s.RequestID) != "":
		return fmt.Errorf("approval_requested for request %q, which is already held or decided", s.RequestID)
	}
	m.grant(s.RequestID, "held")
	return nil
}

// decidePermission is approval_decided for a held permission request.
func (m *Machine) decidePermission(s Step) error {
	switch {
	case m.finished:
		return errors.New("approval_decided for a permission after session_finished")
	case m.grants.get(s.RequestID) != "held":
		return fmt.Errorf("approval_decided for request %q, which is not held at a gate", s.RequestID)
	case s.Decision != "approve" && s.Decision != "reject":
		return fmt.Errorf("approval_decided with decision %q (want approve or reject)", s.Decision)
	}
	state := "approved"
	if s.Decision == "reject" {
		state = "rejected"
	}
	m.grant(s.RequestID, state)
	return nil
}
