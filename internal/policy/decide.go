package policy

import (
	"fmt"
	"iter"
	"slices"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
)

// The fixed parts of the entity model.
const (
	Surface      = "mcp-server"
	ResponseMode = "text_response"
)

// The actions a decision can be about. Each has a default for a project without policy
// files: only respond is permitted there (the built-in default); every other action is
// denied unless a policy permits it, so a new action can never fail open.
const (
	ActionRespond = "respond"
	ActionUseTool = "use_tool" // a delegated agent's tool call or file access (Tool::"<kind>")
)

// ToolKinds are the ACP tool kinds, the ids of the Tool entities of use_tool.
var ToolKinds = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}

// ToolUse is what a use_tool request is about: one permission a delegated agent asks for,
// or one file it reads or writes through symbi.
type ToolUse struct {
	Kind  string // one of ToolKinds: the resource Tool::"<kind>"
	Title string // the agent's title for the call
	// Paths are the locations the call names, relative to the workspace ("." for the
	// workspace itself). Outside lists the ones that are not inside it: any one denies,
	// whatever the policies say.
	Paths          []string
	Outside        []string
	Workspace      string // the workspace's absolute path
	RawInputSHA256 string // hex SHA-256 of the call's raw input ("" when it had none)
}

// TopDirs returns the first component of each path ("." for a file at the workspace's
// top), sorted and without repeats: the context member top_dirs, which lets a policy say
// "only under src/" (["src"].containsAll(context.top_dirs)) in a language without
// quantifiers over sets.
func (t *ToolUse) TopDirs() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range t.Paths {
		top, _, found := strings.Cut(p, "/")
		if !found {
			top = "."
		}
		if !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	slices.Sort(out)
	return out
}

// permittedWithoutPolicies lists the actions the built-in default permits.
var permittedWithoutPolicies = map[string]bool{ActionRespond: true}

// Request is one decision to make: the action, who acts (the agent), in which run, and,
// for respond, with what text.
type Request struct {
	Action            string   // the action's id: ActionRespond, ...
	Agent             string   // declared agent name (the principal's id)
	AgentID           string   // see AgentID
	File              string   // the agent's file, relative to the project
	Capabilities      []string // declared capabilities
	SourceSHA256      string   // hex SHA-256 of the whole agent file
	DeclarationSHA256 string   // hex SHA-256 of the selected declaration
	RunID             string   // the resource's id
	Response          string   // the exact text
	Surface           string   // the transport the run was asked for on: context.surface
	Caller            string   // who asked for the run ("stdio" for the local client): context.caller
	CallerAuth        string   // how the caller was authenticated: context.caller_auth
	Tool              *ToolUse // for use_tool: the tool call or file access
}

// Decision is the outcome of Decide.
type Decision struct {
	Allow    bool
	Policies []string // deciding policy ids, in load order
	Errors   []string // evaluation errors as "id: what kind of error" (any one denies)
	Reason   string   // one-line human explanation
	// Diagnostics are Cedar's own messages of the evaluation errors, as "id: message".
	// They may quote the values judged — the very text the gate withholds — so they are
	// never journaled or sent to a caller: only an operator's own evaluation (symbi
	// policy eval) shows them. Errors and Reason carry the kind of error only.
	Diagnostics []string
	// Gate is set on a deny that a person may turn into an allow: every deciding policy is
	// a forbid annotated @gate("human") (no ungated forbid matched, no evaluation error).
	// It names the gating policies' ids, comma-separated.
	Gate string
}

// Verdict is the decision's word in journals and reports: "allow" or "deny".
func (d Decision) Verdict() string {
	if d.Allow {
		return "allow"
	}
	return "deny"
}

// Decide makes the respond decision for r. It fails closed: see the package
// comment.
func (s *Set) Decide(r Request) Decision {
	switch s.Mode {
	case ModeDefault:
		if d, bad := invalid(r); bad {
			return d
		}
		if !permittedWithoutPolicies[r.Action] {
			return Decision{Reason: fmt.Sprintf("denied: no policy files, and the built-in default permits only respond, not %q", r.Action)}
		}
		return Decision{Allow: true, Reason: "allowed by the built-in default: no policy files, respond is permitted"}
	case ModeCedar:
		if d, bad := invalid(r); bad {
			return d
		}
		return s.decideCedar(r)
	case ModeDenyAll:
		return Decision{Reason: "denied: policies unusable (deny_all): " + s.Reason}
	default:
		return Decision{Reason: fmt.Sprintf("denied: unknown policy mode %q", s.Mode)}
	}
}

// invalid denies a request that lacks the names the entity model needs.
func invalid(r Request) (Decision, bool) {
	switch {
	case r.Action == "":
		return Decision{Reason: "denied: request names no action"}, true
	case r.Agent == "":
		return Decision{Reason: "denied: request has no agent name"}, true
	case r.Surface == "" || r.Caller == "":
		return Decision{Reason: "denied: request names no surface or no caller"}, true
	case r.RunID == "":
		return Decision{Reason: "denied: request has no run id"}, true
	case r.Action == ActionUseTool && r.Tool == nil:
		return Decision{Reason: "denied: use_tool request names no tool"}, true
	case r.Action == ActionUseTool && !slices.Contains(ToolKinds, r.Tool.Kind):
		return Decision{Reason: fmt.Sprintf("denied: tool kind %q is not one of %v", r.Tool.Kind, ToolKinds)}, true
	case r.Action == ActionUseTool && len(r.Tool.Outside) > 0:
		return Decision{Reason: fmt.Sprintf("denied: %q is outside the workspace %s (a path outside it is always a deny)", r.Tool.Outside[0], r.Tool.Workspace)}, true
	}
	return Decision{}, false
}

// cedarRequest returns the Cedar request and entities for r, per the entity
// model in the package comment.
func cedarRequest(r Request) (cedar.Request, types.EntityMap) {
	principal := types.NewEntityUID("Agent", types.String(r.Agent))
	entities := types.EntityMap{
		principal: {UID: principal, Attributes: agentAttributes(r.AgentID, r.File, r.Capabilities, r.SourceSHA256)},
	}
	if r.Action == ActionUseTool {
		return cedar.Request{
			Principal: principal,
			Action:    types.NewEntityUID("Action", types.String(r.Action)),
			Resource:  types.NewEntityUID("Tool", types.String(r.Tool.Kind)),
			Context: types.NewRecord(types.RecordMap{
				"surface":          types.String(r.Surface),
				"caller":           types.String(r.Caller),
				"caller_auth":      types.String(r.CallerAuth),
				"run_id":           types.String(r.RunID),
				"title":            types.String(r.Tool.Title),
				"paths":            stringSet(r.Tool.Paths),
				"top_dirs":         stringSet(r.Tool.TopDirs()),
				"workspace":        types.String(r.Tool.Workspace),
				"raw_input_sha256": types.String(r.Tool.RawInputSHA256),
			}),
		}, entities
	}
	req := cedar.Request{
		Principal: principal,
		Action:    types.NewEntityUID("Action", types.String(r.Action)),
		Resource:  types.NewEntityUID("Response", types.String(r.RunID)),
		Context: types.NewRecord(types.RecordMap{
			"surface":            types.String(r.Surface),
			"caller":             types.String(r.Caller),
			"caller_auth":        types.String(r.CallerAuth),
			"mode":               types.String(ResponseMode),
			"response":           types.String(r.Response),
			"response_bytes":     types.Long(len(r.Response)),
			"source_sha256":      types.String(r.SourceSHA256),
			"declaration_sha256": types.String(r.DeclarationSHA256),
		}),
	}
	return req, entities
}

func stringSet(ss []string) types.Set {
	vs := make([]types.Value, len(ss))
	for i, v := range ss {
		vs[i] = types.String(v)
	}
	return types.NewSet(vs...)
}

// ordered iterates the set's policies in load order, with their ids, so that
// diagnostics come out in a stable order.
type ordered struct{ s *Set }

func (o ordered) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for i, p := range o.s.compiled {
			if !yield(cedar.PolicyID(o.s.policies[i].ID), p) {
				return
			}
		}
	}
}

func (s *Set) decideCedar(r Request) Decision {
	return s.decideCedarRequest(cedarRequest(r))
}

// decideCedarRequest authorizes one Cedar request against the set, failing closed.
func (s *Set) decideCedarRequest(req cedar.Request, entities types.EntityMap) Decision {
	decision, diag := cedar.Authorize(ordered{s}, entities, req)
	var d Decision
	if len(diag.Errors) > 0 {
		for _, e := range diag.Errors {
			d.Policies = append(d.Policies, string(e.PolicyID))
			d.Errors = append(d.Errors, fmt.Sprintf("%s: %s", e.PolicyID, evalError(e)))
			d.Diagnostics = append(d.Diagnostics, fmt.Sprintf("%s: %s", e.PolicyID, e.Message))
		}
		d.Reason = "denied: evaluation error in " + strings.Join(listed(d.Policies), ", ") +
			" (any evaluation error denies): " + evalError(diag.Errors[0])
		d.Policies, d.Errors = capLists(d.Policies, d.Errors)
		return d
	}
	for _, reason := range diag.Reasons {
		d.Policies = append(d.Policies, string(reason.PolicyID))
	}
	if len(d.Policies) > MaxDeciding {
		// Too many to record, or to hold at a gate: a deny naming the first of them.
		d.Reason = fmt.Sprintf("denied: %d policies decided this request, more than the %d a decision records", len(d.Policies), MaxDeciding)
		d.Policies, d.Errors = capLists(d.Policies, []string{"symbi: " + d.Reason})
		return d
	}
	switch {
	case decision == cedar.Allow:
		d.Allow = true
		d.Reason = "allowed by permit " + strings.Join(d.Policies, ", ")
	case len(d.Policies) > 0:
		d.Reason = "denied by forbid " + strings.Join(d.Policies, ", ")
		if s.allGated(d.Policies) {
			d.Gate = strings.Join(d.Policies, ",")
			d.Reason = "held for human approval by gated forbid " + strings.Join(d.Policies, ", ")
		}
	default:
		d.Reason = "denied: no permit matched"
	}
	return d
}

// The bounds on what a decision lists, so that its journal record always fits: the
// deciding policies (an @id at most MaxIDBytes, which the loader enforces; an id made of
// file:line:column is bounded by the file name's own limit) and the evaluation errors.
const (
	MaxDeciding = 256
	MaxIDBytes  = 256
	maxErrors   = 16
)

// capLists cuts ids to MaxDeciding and errs to maxErrors, saying in errs what was cut.
func capLists(ids, errs []string) ([]string, []string) {
	var more []string
	if n := len(ids) - MaxDeciding; n > 0 {
		ids, more = ids[:MaxDeciding], append(more, fmt.Sprintf("symbi: and %d more deciding policies, not listed", n))
	}
	if n := len(errs) - maxErrors; n > 0 {
		errs, more = errs[:maxErrors], append(more, fmt.Sprintf("symbi: and %d more evaluation errors, not listed", n))
	}
	return ids, append(errs, more...)
}

// listed is ids cut to MaxDeciding, for a message.
func listed(ids []string) []string { return ids[:min(len(ids), MaxDeciding)] }

// evalKinds name an evaluation error by the fixed text Cedar's message begins with (after
// the entity it is about, when it names one). Only a prefix is read: the rest may quote the
// values judged, which must not choose the kind reported either.
var evalKinds = []struct{ prefix, kind string }{
	{"error parsing ip value", "a value that is not an IP address"},
	{"error parsing decimal value", "a value that is not a decimal"},
	{"error parsing datetime value", "a value that is not a datetime"},
	{"error parsing duration value", "a value that is not a duration"},
	{"type error", "a type error"},
	{"integer overflow", "an overflow"},
	{"record does not have the attribute", "a missing attribute"},
	{"does not have the attribute", "a missing attribute"},
	{"does not have the tag", "a missing tag"},
	{"does not exist", "an entity that does not exist"},
	{"cannot access", "an unspecified entity"},
	{"wrong number of arguments", "an extension function misused"},
	{"function does not exist", "an extension function misused"},
}

// evalError says what kind of evaluation error e is, and where its policy is, without
// Cedar's message, which may quote the values judged (an ip() or decimal() of the
// response quotes the response): a refusal must not hand out the text it withholds.
func evalError(e cedar.DiagnosticError) string {
	m := e.Message
	// "`Type::"id"` does not have…", "entity `Type::"id"` does not exist": read on after
	// the entity, an id of the request, not a value judged.
	if rest, ok := strings.CutPrefix(strings.TrimPrefix(m, "entity "), "`"); ok {
		if i := strings.Index(rest, "` "); i >= 0 {
			m = rest[i+2:]
		}
	}
	kind := "an evaluation error"
	for _, k := range evalKinds {
		if strings.HasPrefix(m, k.prefix) {
			kind = k.kind
			break
		}
	}
	if pos := e.Position; pos.Filename != "" {
		return fmt.Sprintf("%s (in the policy at %s:%d:%d; Cedar's message is not shown, as it may quote the values judged)", kind, pos.Filename, pos.Line, pos.Column)
	}
	return kind + " (Cedar's message is not shown, as it may quote the values judged)"
}

// allGated reports whether every policy of ids is a gated forbid.
func (s *Set) allGated(ids []string) bool {
	for _, id := range ids {
		i := slices.IndexFunc(s.policies, func(p Policy) bool { return p.ID == id })
		if i < 0 || s.policies[i].Gate != GateHuman {
			return false
		}
	}
	return len(ids) > 0
}

// agentAttributes are the attributes of an Agent entity (policies/symbi.cedarschema): the
// respond and use_tool principal, and the start_run resource.
func agentAttributes(agentID, file string, capabilities []string, sourceSHA256 string) types.Record {
	return types.NewRecord(types.RecordMap{
		"agent_id":      types.String(agentID),
		"file":          types.String(file),
		"capabilities":  stringSet(capabilities),
		"source_sha256": types.String(sourceSHA256),
	})
}
