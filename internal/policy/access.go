package policy

import (
	"fmt"
	"os"
	"slices"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"

	"symbi/internal/project"
)

// The run-access actions: who may start, read, cancel, resolve and approve runs. They are
// decided by their own set of policies (LoadAccess, policies/access/*.cedar), with the
// principal Caller::"<caller id>".
const (
	ActionStartRun   = "start_run"   // resource Agent::"<name>"
	ActionReadRun    = "read_run"    // run_status, run_events, the run resource, list_runs
	ActionCancelRun  = "cancel_run"  // resource Run::"<run id>"
	ActionResolveRun = "resolve_run" // resource Run::"<run id>"
	ActionApproveRun = "approve_run" // resource Run::"<run id>"
)

// AccessActions are the run-access actions, in the order the docs list them.
var AccessActions = []string{ActionStartRun, ActionReadRun, ActionCancelRun, ActionResolveRun, ActionApproveRun}

// AccessRequest is one run-access decision: who (the caller, and how it was
// authenticated) wants to do what to which run, or, for start_run, with which agent.
type AccessRequest struct {
	Action     string // one of AccessActions
	Caller     string // the caller's id: the principal Caller::"<id>"
	CallerAuth string // how it was authenticated: principal.auth ("stdio", "token", "jwt", "none")
	Agent      string // start_run: the agent's declared name, the resource Agent::"<name>"
	// start_run: the agent's attributes, as the respond principal's (NewStartRequest).
	AgentID      string
	File         string
	Capabilities []string
	SourceSHA256 string
	Run          *RunResource
}

// NewStartRequest builds the start_run request of caller for a, an admitted agent: the
// resource Agent::"<declared name>" with the attributes it has as the respond principal
// (policies/symbi.cedarschema declares one Agent).
func NewStartRequest(a *project.Agent, caller, callerAuth string) AccessRequest {
	adm := a.Admission
	return AccessRequest{Action: ActionStartRun, Caller: caller, CallerAuth: callerAuth, Agent: adm.Agent,
		AgentID: AgentID(adm.Agent), File: a.Entry.File, Capabilities: adm.Capabilities, SourceSHA256: a.SourceSHA256}
}

// RunResource is the resource Run::"<id>" of the access actions other than start_run.
type RunResource struct {
	ID     string
	Owner  string // the id of the caller that started it: the attribute owner, Caller::"<id>"
	Agent  string // the agent's declared name
	Status string // its status (docs/runs.md)
}

// LoadAccess reads the run-access policies, policies/access/*.cedar, relative to root,
// the project's pinned directory descriptor, by the same rules as Load (the same limits,
// the same refusal of links and of what cannot be read, the same digest layout over its
// own files). It never fails: a set it cannot fully use is in deny_all mode, and then
// every access decision is a deny.
func LoadAccess(root *os.File) *Set {
	l := &loader{set: &Set{}, ids: map[string]string{}, decides: AccessActions, model: accessModel}
	l.loadAccess(root)
	s := l.finish()
	s.mentions = map[string]bool{}
	for _, p := range s.compiled {
		names, all := scopeActions(p)
		s.anyAction = s.anyAction || all
		for _, a := range names {
			s.mentions[a] = true
		}
	}
	return s
}

// scopeActions returns the action ids p's action scope names, or all: an unconstrained
// scope, or one this code does not know (taken as naming every action, so that Cedar, not
// a built-in default, decides and no policy is taken for another set's). An entity of
// another type than Action (Actions::"respond", a misspelling) names no action.
func scopeActions(p *cedar.Policy) (names []string, all bool) {
	add := func(e types.EntityUID) {
		if e.Type == "Action" {
			names = append(names, string(e.ID))
		}
	}
	switch scope := (*xast.Policy)(p.AST()).Action.(type) {
	case xast.ScopeTypeAll:
		return nil, true
	case xast.ScopeTypeEq:
		add(scope.Entity)
	case xast.ScopeTypeIn:
		add(scope.Entity)
	case xast.ScopeTypeInSet:
		for _, e := range scope.Entities {
			add(e)
		}
	default:
		return nil, true
	}
	return names, false
}

// Mentions reports whether some access policy's scope names action (a policy whose
// action scope is unconstrained names every action). An action no policy mentions is
// decided by the built-in default.
func (s *Set) Mentions(action string) bool {
	return s.anyAction || s.mentions[action]
}

// DecideAccess makes a run-access decision. It fails closed: a request without a caller,
// with an unknown action or without its resource is denied; a deny_all set denies every
// access action; an action no policy mentions gets the built-in default — any caller may
// start runs; a caller may read, cancel and resolve only the runs it started, and approve
// only runs it did not start (except the caller of a stdio server, the only one there is,
// which approves its own); otherwise Cedar decides (any evaluation error denies, a
// forbid wins over a permit, no permit denies).
func (s *Set) DecideAccess(r AccessRequest) Decision {
	switch {
	case r.Caller == "":
		return Decision{Reason: "denied: the access request names no caller"}
	case !slices.Contains(AccessActions, r.Action):
		return Decision{Reason: fmt.Sprintf("denied: %q is not an access action (%v)", r.Action, AccessActions)}
	case r.Action == ActionStartRun && r.Agent == "":
		return Decision{Reason: "denied: start_run names no agent"}
	case r.Action != ActionStartRun && (r.Run == nil || r.Run.ID == ""):
		return Decision{Reason: "denied: " + r.Action + " names no run"}
	}
	switch s.Mode {
	case ModeDenyAll:
		return Decision{Reason: "denied: access policies unusable (deny_all): " + s.Reason}
	case ModeCedar:
		if s.Mentions(r.Action) {
			d := s.decideCedarRequest(accessCedarRequest(r))
			if d.Gate != "" { // access denials are final: a gate holds nothing here
				d.Gate = ""
				d.Reason = "denied by forbid " + strings.Join(d.Policies, ", ") + " (its @gate has no effect on access)"
			}
			return d
		}
	case ModeDefault:
	default:
		return Decision{Reason: fmt.Sprintf("denied: unknown policy mode %q", s.Mode)}
	}
	return defaultAccess(r)
}

// defaultAccess is the built-in decision for an action no access policy mentions.
func defaultAccess(r AccessRequest) Decision {
	switch r.Action {
	case ActionStartRun:
		return Decision{Allow: true, Reason: "allowed by the built-in default: any caller may start runs (no access policy mentions start_run)"}
	case ActionApproveRun:
		if r.CallerAuth == "stdio" {
			return Decision{Allow: true, Reason: "allowed by the built-in default: over stdio the one caller approves its own runs (four eyes needs a shared server; no access policy mentions approve_run)"}
		}
		if r.Run.Owner == r.Caller {
			return Decision{Reason: fmt.Sprintf("denied by the built-in default: a caller may not approve a run it started (%s started %s; no access policy mentions approve_run)", r.Caller, r.Run.ID)}
		}
		return Decision{Allow: true, Reason: "allowed by the built-in default: a caller may approve runs another caller started (no access policy mentions approve_run)"}
	default:
		if r.Run.Owner != r.Caller {
			// Who started the run is the run's to tell, to those who may read it.
			return Decision{Reason: fmt.Sprintf("denied by the built-in default: %s may %s only its own runs, and %s is not one of them (no access policy mentions %s)",
				r.Caller, verbOf(r.Action), r.Run.ID, r.Action)}
		}
		return Decision{Allow: true, Reason: fmt.Sprintf("allowed by the built-in default: a caller may %s its own runs (no access policy mentions %s)", verbOf(r.Action), r.Action)}
	}
}

func verbOf(action string) string {
	switch action {
	case ActionReadRun:
		return "read"
	case ActionCancelRun:
		return "cancel"
	case ActionResolveRun:
		return "resolve"
	}
	return action
}

// accessCedarRequest returns the Cedar request and entities for an access request:
//
//	principal  Caller::"<id>" with auth (String)
//	action     Action::"<access action>"
//	resource   Agent::"<name>" (start_run), else Run::"<run id>" with owner (the Caller
//	           that started it), agent and status
//	context    {}
func accessCedarRequest(r AccessRequest) (cedar.Request, types.EntityMap) {
	principal := types.NewEntityUID("Caller", types.String(r.Caller))
	entities := types.EntityMap{
		principal: {UID: principal, Attributes: types.NewRecord(types.RecordMap{"auth": types.String(r.CallerAuth)})},
	}
	var resource types.EntityUID
	if r.Action == ActionStartRun {
		resource = types.NewEntityUID("Agent", types.String(r.Agent))
		entities[resource] = types.Entity{UID: resource, Attributes: agentAttributes(r.AgentID, r.File, r.Capabilities, r.SourceSHA256)}
	} else {
		resource = types.NewEntityUID("Run", types.String(r.Run.ID))
		entities[resource] = types.Entity{UID: resource, Attributes: types.NewRecord(types.RecordMap{
			"owner":  types.NewEntityUID("Caller", types.String(r.Run.Owner)),
			"agent":  types.String(r.Run.Agent),
			"status": types.String(r.Run.Status),
		})}
	}
	return cedar.Request{
		Principal: principal,
		Action:    types.NewEntityUID("Action", types.String(r.Action)),
		Resource:  resource,
		Context:   types.NewRecord(nil),
	}, entities
}
