package policy

import (
	"os"
	"slices"
	"strings"
	"testing"

	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

func loadAccessDir(t testing.TB, dir string) *Set {
	t.Helper()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	return LoadAccess(root)
}

func runAccess(action, caller, owner string) AccessRequest {
	return AccessRequest{Action: action, Caller: caller, CallerAuth: "token",
		Run: &RunResource{ID: "run-1", Owner: owner, Agent: "reviewer", Status: "completed"}}
}

func startAccess(caller, agent string) AccessRequest {
	return AccessRequest{Action: ActionStartRun, Caller: caller, CallerAuth: "token", Agent: agent}
}

// TestAccessDefaults: without access policies, the built-in default — start for anyone,
// read/cancel/resolve own runs only, approve only others' runs.
func TestAccessDefaults(t *testing.T) {
	s := loadAccessDir(t, makeProject(t, map[string]string{"policies/respond.cedar": `permit (principal, action, resource);`}, nil))
	if s.Mode != ModeDefault {
		t.Fatalf("mode %s, want default (policies/*.cedar is not an access policy)", s.Mode)
	}
	tests := []struct {
		req   AccessRequest
		allow bool
	}{
		{startAccess("alice", "reviewer"), true},
		{runAccess(ActionReadRun, "alice", "alice"), true},
		{runAccess(ActionReadRun, "alice", "bob"), false},
		{runAccess(ActionCancelRun, "alice", "alice"), true},
		{runAccess(ActionCancelRun, "alice", "bob"), false},
		{runAccess(ActionResolveRun, "alice", "alice"), true},
		{runAccess(ActionResolveRun, "alice", "bob"), false},
		{runAccess(ActionApproveRun, "alice", "alice"), false},
		{runAccess(ActionApproveRun, "alice", "bob"), true},
		{AccessRequest{Action: ActionApproveRun, Caller: "stdio", CallerAuth: "stdio", Run: &RunResource{ID: "r", Owner: "stdio"}}, true},
	}
	for _, tt := range tests {
		d := s.DecideAccess(tt.req)
		if d.Allow != tt.allow || !strings.Contains(d.Reason, "built-in default") || len(d.Policies) != 0 {
			t.Errorf("%s by %s: %+v, want allow=%v by the built-in default", tt.req.Action, tt.req.Caller, d, tt.allow)
		}
	}
}

// TestAccessInvalid: requests missing what the model needs are denied in every mode.
func TestAccessInvalid(t *testing.T) {
	permitAll := loadAccessDir(t, makeProject(t, map[string]string{"policies/access/a.cedar": `@id("all") permit (principal, action, resource);`}, nil))
	def := loadAccessDir(t, t.TempDir())
	noRun := runAccess(ActionReadRun, "alice", "alice")
	noRun.Run = nil
	for _, s := range []*Set{permitAll, def} {
		for name, r := range map[string]AccessRequest{
			"no caller":       runAccess(ActionReadRun, "", "alice"),
			"unknown action":  runAccess("delete_run", "alice", "alice"),
			"respond":         runAccess(ActionRespond, "alice", "alice"),
			"start, no agent": startAccess("alice", ""),
			"no run":          noRun,
		} {
			if d := s.DecideAccess(r); d.Allow || !strings.HasPrefix(d.Reason, "denied: ") {
				t.Errorf("%s (%s): %+v", name, s.Mode, d)
			}
		}
	}
}

// TestAccessMentions: an action some policy mentions is decided by Cedar alone (no
// permit denies); the others keep the default; a bare "action" scope mentions all.
func TestAccessMentions(t *testing.T) {
	s := loadAccessDir(t, makeProject(t, map[string]string{"policies/access/a.cedar": `
@id("ci-reads-all") permit (principal == Caller::"ci", action == Action::"read_run", resource is Run);
@id("no-approve-deploys") forbid (principal, action in [Action::"approve_run", Action::"cancel_run"], resource is Run) when { resource.agent == "deploy_bot" };
`}, nil))
	if s.Mode != ModeCedar {
		t.Fatalf("mode %s: %s", s.Mode, s.Reason)
	}
	for _, a := range AccessActions {
		want := a == ActionReadRun || a == ActionApproveRun || a == ActionCancelRun
		if s.Mentions(a) != want {
			t.Errorf("Mentions(%s) = %v", a, !want)
		}
	}
	deploy := runAccess(ActionApproveRun, "bob", "alice")
	deploy.Run.Agent = "deploy_bot"
	tests := []struct {
		name     string
		req      AccessRequest
		allow    bool
		policies []string
	}{
		{"ci reads another's run", runAccess(ActionReadRun, "ci", "alice"), true, []string{"ci-reads-all"}},
		// read_run is mentioned: the default no longer lets alice read her own run.
		{"own run, default replaced", runAccess(ActionReadRun, "alice", "alice"), false, nil},
		{"approve forbidden", deploy, false, []string{"no-approve-deploys"}},
		// approve_run mentioned only by a forbid: nothing permits.
		{"approve no permit", runAccess(ActionApproveRun, "bob", "alice"), false, nil},
		{"resolve keeps default", runAccess(ActionResolveRun, "alice", "alice"), true, nil},
		{"start keeps default", startAccess("anyone", "reviewer"), true, nil},
	}
	for _, tt := range tests {
		d := s.DecideAccess(tt.req)
		if d.Allow != tt.allow || !slices.Equal(d.Policies, tt.policies) {
			t.Errorf("%s: %+v, want allow=%v by %v", tt.name, d, tt.allow, tt.policies)
		}
	}
	all := loadAccessDir(t, makeProject(t, map[string]string{"policies/access/a.cedar": `@id("nobody") forbid (principal, action, resource) when { principal == Caller::"mallory" };`}, nil))
	for _, a := range AccessActions {
		if !all.Mentions(a) {
			t.Errorf("a bare action scope does not mention %s", a)
		}
	}
	if d := all.DecideAccess(startAccess("alice", "reviewer")); d.Allow || d.Reason != "denied: no permit matched" {
		t.Errorf("start_run under a bare-action forbid: %+v", d)
	}
}

// TestAccessFailClosed: an unusable access set denies every access action, and does not
// disturb the respond set; an evaluation error denies even when a permit matches.
func TestAccessFailClosed(t *testing.T) {
	dir := makeProject(t, map[string]string{
		"policies/respond.cedar":  `@id("respond") permit (principal, action == Action::"respond", resource);`,
		"policies/access/a.cedar": `permit (principal, action == Action::"read_run", resource`,
	}, nil)
	s := loadAccessDir(t, dir)
	if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "policies/access/a.cedar") {
		t.Fatalf("malformed access policy: mode %s, reason %q", s.Mode, s.Reason)
	}
	for _, a := range AccessActions {
		r := runAccess(a, "alice", "bob")
		if a == ActionStartRun {
			r = startAccess("alice", "reviewer")
		}
		if d := s.DecideAccess(r); d.Allow || !strings.Contains(d.Reason, "deny_all") {
			t.Errorf("%s under deny_all: %+v", a, d)
		}
	}
	if respond := loadDir(t, dir); respond.Mode != ModeCedar || slices.Contains(respond.Files, "policies/access/a.cedar") {
		t.Errorf("the respond set read the access directory: %s %v", respond.Mode, respond.Files)
	}

	link := makeProject(t, map[string]string{"elsewhere/a.cedar": `permit (principal, action, resource);`}, func(t testing.TB, dir string) {
		must(t, os.MkdirAll(dir+"/policies", 0o755))
		must(t, os.Symlink("../elsewhere", dir+"/policies/access"))
	})
	if s := loadAccessDir(t, link); s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "symbolic link") {
		t.Errorf("policies/access as a symlink: %s %q", s.Mode, s.Reason)
	}
	if s := loadDir(t, link); s.Mode != ModeDefault {
		t.Errorf("respond set with a linked access dir: %s %q", s.Mode, s.Reason)
	}

	evalErr := loadAccessDir(t, makeProject(t, map[string]string{"policies/access/a.cedar": `
@id("read-all") permit (principal, action == Action::"read_run", resource);
@id("broken") forbid (principal, action == Action::"read_run", resource) when { resource.nope == 1 };
`}, nil))
	if d := evalErr.DecideAccess(runAccess(ActionReadRun, "alice", "alice")); d.Allow || len(d.Errors) == 0 || !slices.Equal(d.Policies, []string{"broken"}) {
		t.Errorf("evaluation error: %+v", d)
	}
}

// TestAccessGateHasNoEffect: a gated forbid in policies/access denies like any forbid —
// no gate on the decision, and its reason says nothing is held.
func TestAccessGateHasNoEffect(t *testing.T) {
	s := loadAccessDir(t, makeProject(t, map[string]string{"policies/access/a.cedar": `
@id("all") permit (principal, action, resource);
@gate("human") @id("g") forbid (principal, action == Action::"cancel_run", resource);
`}, nil))
	d := s.DecideAccess(runAccess(ActionCancelRun, "alice", "alice"))
	if d.Allow || d.Gate != "" || strings.Contains(d.Reason, "held") || !strings.Contains(d.Reason, "denied by forbid g") {
		t.Fatalf("a gated forbid in the access set: %+v", d)
	}
}

// TestShippedAccessPolicies: the example project's policies/access says what it promises
// and validates against the shipped schema.
func TestShippedAccessPolicies(t *testing.T) {
	s := LoadAccess(repoRoot(t))
	if s.Mode != ModeCedar {
		t.Fatalf("mode %s: %s", s.Mode, s.Reason)
	}
	tests := []struct {
		req      AccessRequest
		allow    bool
		policies []string
	}{
		{runAccess(ActionReadRun, "alice", "alice"), true, []string{"access-read-own"}},
		{runAccess(ActionReadRun, "alice", "bob"), false, nil},
		{runAccess(ActionReadRun, "auditor", "bob"), true, []string{"access-auditor-reads-all"}},
		{runAccess(ActionCancelRun, "auditor", "bob"), false, nil},
		{runAccess(ActionCancelRun, "bob", "bob"), true, nil},
	}
	for _, tt := range tests {
		if d := s.DecideAccess(tt.req); d.Allow != tt.allow || !slices.Equal(d.Policies, tt.policies) {
			t.Errorf("%s by %s of %s's run: %+v", tt.req.Action, tt.req.Caller, tt.req.Run.Owner, d)
		}
	}

	v := shippedSchema(t)
	for i, p := range s.compiled {
		if err := v.Policy(s.policies[i].ID, (*xast.Policy)(p.AST())); err != nil {
			t.Errorf("shipped access policy %s does not validate: %v", s.policies[i].ID, err)
		}
	}
	for _, r := range []AccessRequest{runAccess(ActionReadRun, "a", "b"), runAccess(ActionApproveRun, "a", "b"), startAccess("a", "reviewer")} {
		req, entities := accessCedarRequest(r)
		if err := v.Request(req); err != nil {
			t.Errorf("%s request does not match the schema: %v", r.Action, err)
		}
		if err := v.Entities(entities); err != nil {
			t.Errorf("%s entities do not match the schema: %v", r.Action, err)
		}
	}
}

// TestStartRunAgentMatchesSchema: the start_run resource is the Agent entity of the
// shipped schema (policies/symbi.cedarschema), with its attributes: a policy that
// validates against the schema decides on them, without an evaluation error.
func TestStartRunAgentMatchesSchema(t *testing.T) {
	v := shippedSchema(t)
	dir := makeProject(t, map[string]string{"policies/access/start.cedar": `@id("start-reviewers")
permit (principal is Caller, action == Action::"start_run", resource is Agent)
when { resource.capabilities.contains("code_review") };
`}, nil)
	root, err := os.Open(dir)
	must(t, err)
	defer root.Close()
	s := LoadAccess(root)
	if s.Mode != ModeCedar {
		t.Fatalf("mode %s: %s", s.Mode, s.Reason)
	}
	if err := v.Policy("start-reviewers", (*xast.Policy)(s.compiled[0].AST())); err != nil {
		t.Fatalf("setup: the policy does not validate against the shipped schema: %v", err)
	}
	req := AccessRequest{Action: ActionStartRun, Caller: "alice", CallerAuth: "token", Agent: "reviewer",
		AgentID: AgentID("reviewer"), File: "agents/reviewer.symbi", Capabilities: []string{"code_review"}, SourceSHA256: strings.Repeat("a", 64)}
	if d := s.DecideAccess(req); !d.Allow || len(d.Errors) > 0 {
		t.Errorf("start_run of an agent declaring code_review: %+v; want allowed by start-reviewers", d)
	}
	req.Capabilities = []string{"other"}
	if d := s.DecideAccess(req); d.Allow || len(d.Errors) > 0 {
		t.Errorf("start_run of an agent not declaring code_review: %+v; want denied without an error", d)
	}
}
