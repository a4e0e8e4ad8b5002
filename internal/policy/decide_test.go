package policy

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"

	"symbi/internal/digest"
)

// request returns a well-formed request for agent with the given response.
func request(agent, response string, caps ...string) Request {
	return Request{
		Action:            ActionRespond,
		Agent:             agent,
		AgentID:           AgentID(agent),
		File:              "agents/" + agent + ".symbi",
		Capabilities:      caps,
		SourceSHA256:      digest.SHA256Hex([]byte("source of " + agent)),
		DeclarationSHA256: digest.SHA256Hex([]byte("declaration of " + agent)),
		RunID:             "run-1",
		Response:          response,
		Surface:           Surface,
		Caller:            "stdio",
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		files    map[string]string
		req      Request
		allow    bool
		policies []string
		errors   int
		reason   string
	}{
		{
			name:   "default mode allows",
			req:    request("a", "hi"),
			allow:  true,
			reason: "built-in default",
		},
		{
			name:   "default mode still needs a run id",
			req:    Request{Action: ActionRespond, Agent: "a", Response: "hi", Surface: Surface, Caller: "stdio"},
			reason: "no run id",
		},
		{
			name:   "cedar mode needs an agent name",
			files:  map[string]string{"policies/a.cedar": permitAll},
			req:    Request{Action: ActionRespond, RunID: "r", Response: "hi", Surface: Surface, Caller: "stdio"},
			reason: "no agent name",
		},
		{
			name:     "broad permit allows",
			files:    map[string]string{"policies/a.cedar": permitAll},
			req:      request("a", "hi"),
			allow:    true,
			policies: []string{"all"},
			reason:   "allowed by permit all",
		},
		{
			name:   "no permit denies",
			files:  map[string]string{"policies/a.cedar": forbidKeys},
			req:    request("a", "hi"),
			reason: "no permit matched",
		},
		{
			name: "forbid erroring on a missing attribute beside a broad permit denies",
			files: map[string]string{"policies/a.cedar": permitAll + `@id("needs-owner")
forbid (principal, action, resource) when { principal.owner == "mallory" };
`},
			req:      request("a", "hi"),
			policies: []string{"needs-owner"},
			errors:   1,
			reason:   "evaluation error in needs-owner",
		},
		{
			name: "forbid erroring on a missing context key beside a broad permit denies",
			files: map[string]string{"policies/a.cedar": permitAll + `
forbid (principal, action, resource) when { context.tool == "shell" };
`},
			req:      request("a", "hi"),
			policies: []string{"policies/a.cedar:4:1"},
			errors:   1,
			reason:   "any evaluation error denies",
		},
		{
			name:     "like pattern forbids a private key",
			files:    map[string]string{"policies/a.cedar": permitAll + forbidKeys},
			req:      request("a", "here:\n-----BEGIN PRIVATE KEY-----\nMIIE...\n"),
			policies: []string{"keys"},
			reason:   "denied by forbid keys",
		},
		{
			name:     "like pattern lets other text through",
			files:    map[string]string{"policies/a.cedar": permitAll + forbidKeys},
			req:      request("a", "BEGIN PUBLIC KEY"),
			allow:    true,
			policies: []string{"all"},
		},
		{
			name:     "like pattern is case sensitive and exact",
			files:    map[string]string{"policies/a.cedar": permitAll + `@id("exact") forbid (principal, action, resource) when { context.response like "secret" };`},
			req:      request("a", "a secret"),
			allow:    true,
			policies: []string{"all"},
		},
		{
			name:     "capability permit allows an agent with the capability",
			files:    map[string]string{"policies/a.cedar": `@id("reviewers") permit (principal is Agent, action == Action::"respond", resource) when { principal.capabilities.contains("code_review") };`},
			req:      request("a", "looks good", "read", "code_review"),
			allow:    true,
			policies: []string{"reviewers"},
		},
		{
			name:   "capability permit denies an agent without it",
			files:  map[string]string{"policies/a.cedar": `@id("reviewers") permit (principal is Agent, action == Action::"respond", resource) when { principal.capabilities.contains("code_review") };`},
			req:    request("a", "looks good", "read"),
			reason: "no permit matched",
		},
		{
			name: "per-agent rule",
			files: map[string]string{"policies/a.cedar": permitAll + `@id("quiet-bot")
forbid (principal == Agent::"quiet", action, resource) when { context.response_bytes > 5 };`},
			req:      request("quiet", "too long"),
			policies: []string{"quiet-bot"},
		},
		{
			name: "per-agent rule leaves other agents alone",
			files: map[string]string{"policies/a.cedar": permitAll + `@id("quiet-bot")
forbid (principal == Agent::"quiet", action, resource) when { context.response_bytes > 5 };`},
			req:      request("loud", "too long"),
			allow:    true,
			policies: []string{"all"},
		},
		{
			name: "surface forbid layered over a root permit",
			files: map[string]string{
				"policies/a.cedar":            permitAll,
				"policies/mcp-server/b.cedar": `@id("mcp-no-todo") forbid (principal, action, resource) when { context.surface == "mcp-server" && context.response like "*TODO*" };`,
			},
			req:      request("a", "TODO: later"),
			policies: []string{"mcp-no-todo"},
		},
		{
			name: "surface permit works alone",
			files: map[string]string{
				"policies/mcp-server/b.cedar": `@id("mcp-text") permit (principal, action, resource) when { context.surface == "mcp-server" && context.mode == "text_response" };`,
			},
			req:      request("a", "fine"),
			allow:    true,
			policies: []string{"mcp-text"},
		},
		{
			name:     "every attribute of the model is present",
			files:    map[string]string{"policies/a.cedar": modelCheck},
			req:      request("a", "héllo", "x"),
			allow:    true,
			policies: []string{"model"},
		},
		{
			name:     "several forbids are all reported in load order",
			files:    map[string]string{"policies/a.cedar": permitAll + forbidKeys, "policies/mcp-server/z.cedar": `@id("z") forbid (principal, action, resource) when { context.response like "*KEY*" };`},
			req:      request("a", "BEGIN PRIVATE KEY"),
			policies: []string{"keys", "z"},
			reason:   "denied by forbid keys, z",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadDir(t, makeProject(t, tt.files, nil))
			if s.Mode == ModeDenyAll {
				t.Fatalf("set unusable: %s", s.Reason)
			}
			d := s.Decide(tt.req)
			if d.Allow != tt.allow {
				t.Fatalf("allow %v, want %v: %+v", d.Allow, tt.allow, d)
			}
			if !slices.Equal(d.Policies, tt.policies) {
				t.Fatalf("policies %q, want %q", d.Policies, tt.policies)
			}
			if len(d.Errors) != tt.errors {
				t.Fatalf("errors %q, want %d", d.Errors, tt.errors)
			}
			if !strings.Contains(d.Reason, tt.reason) {
				t.Fatalf("reason %q does not contain %q", d.Reason, tt.reason)
			}
		})
	}
}

// modelCheck permits only when every name of the entity model has the value
// request() gives it.
var modelCheck = `@id("model")
permit (principal == Agent::"a", action == Action::"respond", resource == Response::"run-1")
when {
  principal.agent_id == "` + AgentID("a") + `" &&
  principal.file == "agents/a.symbi" &&
  principal.capabilities == ["x"] &&
  principal.source_sha256 == "` + digest.SHA256Hex([]byte("source of a")) + `" &&
  context.surface == "mcp-server" &&
  context.mode == "text_response" &&
  context.response == "héllo" &&
  context.response_bytes == 6 &&
  context.source_sha256 == principal.source_sha256 &&
  context.declaration_sha256 == "` + digest.SHA256Hex([]byte("declaration of a")) + `"
};
`

func TestAgentID(t *testing.T) {
	// Independently computed UUIDv5 of "symbi://response/reviewer" in the URL namespace.
	if got, want := AgentID("reviewer"), "f71931ed-b27e-5697-a6c0-217aa226e65f"; got != want {
		t.Fatalf("AgentID = %q, want %q", got, want)
	}
}

// repoRoot opens the repository root, whose policies/ is the shipped example.
func repoRoot(t *testing.T) *os.File {
	t.Helper()
	root, err := os.Open("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

func TestShippedPolicies(t *testing.T) {
	s := Load(repoRoot(t))
	if s.Mode != ModeCedar {
		t.Fatalf("mode %s: %s", s.Mode, s.Reason)
	}
	wantIDs := []string{"respond", "customer-names-review", "no-private-keys", "tools-read-search", "tools-edit-src", "tools-no-execute", "mcp-server-max-response"}
	if !slices.Equal(s.PolicyIDs(), wantIDs) {
		t.Fatalf("ids %v, want %v", s.PolicyIDs(), wantIDs)
	}
	tests := []struct {
		response string
		allow    bool
		policies []string
		gate     string // a deny held for a person (policies/review.cedar)
	}{
		{"The build passes.", true, []string{"respond"}, ""},
		{"-----BEGIN PRIVATE KEY-----\nMIIEvQ...\n-----END PRIVATE KEY-----\n", false, []string{"no-private-keys"}, ""},
		{"-----BEGIN RSA PRIVATE KEY-----\n", false, []string{"no-private-keys"}, ""},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\n", false, []string{"no-private-keys"}, ""},
		{"-----BEGIN PUBLIC KEY-----\n", true, []string{"respond"}, ""},
		{strings.Repeat("x", 256<<10), true, []string{"respond"}, ""},
		{strings.Repeat("x", 256<<10+1), false, []string{"mcp-server-max-response"}, ""},
		{"Status for ACME Corp: the export is fixed.", false, []string{"customer-names-review"}, "customer-names-review"},
		{"Status for ACME Corporation.", false, []string{"customer-names-review"}, "customer-names-review"},
		{"Status for Acme Corp.", true, []string{"respond"}, ""},
		// An ungated forbid that also matches makes the deny final: nothing to approve.
		{"ACME Corp's key: -----BEGIN PRIVATE KEY-----\n", false, []string{"customer-names-review", "no-private-keys"}, ""},
	}
	for _, tt := range tests {
		d := s.Decide(request("assistant", tt.response))
		if d.Allow != tt.allow || !slices.Equal(d.Policies, tt.policies) || len(d.Errors) != 0 || d.Gate != tt.gate {
			t.Errorf("response %.40q: %+v, want allow %v by %v, gate %q", tt.response, d, tt.allow, tt.policies, tt.gate)
		}
	}
}

// TestSchemaMatchesModel validates the shipped schema against the entities and
// requests Decide builds, and the shipped policies against the schema.
func TestSchemaMatchesModel(t *testing.T) {
	v := shippedSchema(t)
	for _, r := range []Request{request("assistant", "text"), request("assistant", "text", "read", "write"), toolRequest("edit", "src/a.go", "README.md")} {
		req, entities := cedarRequest(r)
		if err := v.Request(req); err != nil {
			t.Errorf("request does not match the schema: %v", err)
		}
		if err := v.Entities(entities); err != nil {
			t.Errorf("entities do not match the schema: %v", err)
		}
	}
	s := Load(repoRoot(t))
	for i, p := range s.compiled {
		if err := v.Policy(s.policies[i].ID, (*xast.Policy)(p.AST())); err != nil {
			t.Errorf("shipped policy %s does not validate: %v", s.policies[i].ID, err)
		}
	}
	// A policy naming an attribute outside the model must not validate, so the
	// checks above can fail.
	bad := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": `@id("bad") permit (principal is Agent, action == Action::"respond", resource is Response) when { principal.owner == "x" };`}, nil))
	if err := v.Policy("bad", (*xast.Policy)(bad.compiled[0].AST())); err == nil {
		t.Error("a policy using principal.owner validated")
	}
}

func TestDecideConcurrent(t *testing.T) {
	s := Load(repoRoot(t))
	var wg sync.WaitGroup
	results := make([]Decision, 16)
	for i := range results {
		wg.Go(func() {
			text := "plain"
			if i%2 == 1 {
				text = "-----BEGIN PRIVATE KEY-----"
			}
			results[i] = s.Decide(request("a", text))
		})
	}
	wg.Wait()
	for i, d := range results {
		if d.Allow != (i%2 == 0) {
			t.Fatalf("decision %d: %+v", i, d)
		}
	}
}

// TestDecideActions: only respond has a default permit. Every other action — and a
// request naming none — is denied in every mode unless a policy permits it.
func TestDecideActions(t *testing.T) {
	permitRespond := `@id("respond") permit (principal, action == Action::"respond", resource);`
	// (A policy naming only actions the set does not decide is a load problem: see
	// TestMisplacedPolicies.)
	permitDelegate := permitRespond + "\n" + `@id("delegate") permit (principal, action in [Action::"delegate", Action::"use_tool"], resource) when { context has response };`
	modes := []struct {
		name  string
		files map[string]string
		mode  Mode
	}{
		{"default", nil, ModeDefault},
		{"cedar, respond permitted", map[string]string{"policies/a.cedar": permitRespond}, ModeCedar},
		{"cedar, delegate permitted", map[string]string{"policies/a.cedar": permitDelegate}, ModeCedar},
		{"deny_all", map[string]string{"policies/a.cedar": "permit ("}, ModeDenyAll},
	}
	for _, m := range modes {
		s := loadDir(t, makeProject(t, m.files, nil))
		if s.Mode != m.mode {
			t.Fatalf("%s: mode %s", m.name, s.Mode)
		}
		for _, tt := range []struct {
			action string
			allow  bool
		}{
			{ActionRespond, m.mode != ModeDenyAll},
			{"delegate", m.name == "cedar, delegate permitted"},
			{"approve_run", false},
			{"", false},
		} {
			r := request("a", "hi")
			r.Action = tt.action
			if d := s.Decide(r); d.Allow != tt.allow {
				t.Errorf("%s: action %q: %+v, want allow=%v", m.name, tt.action, d, tt.allow)
			}
		}
	}
}

// toolRequest returns a well-formed use_tool request for the given kind and paths.
func toolRequest(kind string, paths ...string) Request {
	r := request("coder", "")
	r.Action = ActionUseTool
	r.Tool = &ToolUse{Kind: kind, Title: kind + " something", Paths: paths, Workspace: "/work/ws", RawInputSHA256: digest.SHA256Hex([]byte("{}"))}
	return r
}

// TestDecideUseTool: use_tool is denied unless a policy permits it, a path outside the
// workspace always denies, and the shipped examples say what they promise.
func TestDecideUseTool(t *testing.T) {
	shipped := Load(repoRoot(t))
	outside := toolRequest("read", "src/a.go")
	outside.Tool.Outside = []string{"/etc/passwd"}
	unknown := toolRequest("teleport", "x")
	noTool := toolRequest("read", "x")
	noTool.Tool = nil
	tests := []struct {
		name     string
		set      *Set
		req      Request
		allow    bool
		policies []string
		reason   string
	}{
		{"default mode denies", loadDir(t, makeProject(t, nil, nil)), toolRequest("read", "a"), false, nil, "permits only respond"},
		{"a respond permit does not cover use_tool", loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": `@id("r") permit (principal, action == Action::"respond", resource);`}, nil)), toolRequest("read", "a"), false, nil, "no permit matched"},
		{"read anywhere", shipped, toolRequest("read", "docs/x.md", "a.txt"), true, []string{"tools-read-search"}, "allowed"},
		{"search with no path", shipped, toolRequest("search"), true, []string{"tools-read-search"}, "allowed"},
		{"edit under src", shipped, toolRequest("edit", "src/a.go", "src/b/c.go"), true, []string{"tools-edit-src"}, "allowed"},
		{"edit outside src", shipped, toolRequest("edit", "src/a.go", "README.md"), false, nil, "no permit matched"},
		{"edit with no path", shipped, toolRequest("edit"), false, nil, "no permit matched"},
		{"execute is forbidden", shipped, toolRequest("execute", "src"), false, []string{"tools-no-execute"}, "denied by forbid tools-no-execute"},
		{"delete is not permitted", shipped, toolRequest("delete", "src/a.go"), false, nil, "no permit matched"},
		{"a path outside the workspace", shipped, outside, false, nil, "outside the workspace"},
		{"an unknown kind", shipped, unknown, false, nil, "not one of"},
		{"no tool", shipped, noTool, false, nil, "names no tool"},
		{"a respond-only attribute errors, and the error denies", loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": `@id("all") permit (principal, action, resource);` + "\n" + `@id("resp") forbid (principal, action, resource) when { context.response like "*x*" };`}, nil)), toolRequest("read", "a"), false, []string{"resp"}, "evaluation error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.set.Decide(tt.req)
			if d.Allow != tt.allow || !slices.Equal(d.Policies, tt.policies) || !strings.Contains(d.Reason, tt.reason) {
				t.Fatalf("%+v; want allow %v by %v, reason containing %q", d, tt.allow, tt.policies, tt.reason)
			}
		})
	}
}

func TestTopDirs(t *testing.T) {
	tu := &ToolUse{Paths: []string{"src/a.go", "README.md", "src/b/c", "docs/x", "."}}
	if got := tu.TopDirs(); !slices.Equal(got, []string{".", "docs", "src"}) {
		t.Fatalf("TopDirs = %q", got)
	}
}

// TestEvalErrorWithholdsValues: an evaluation error denies, and the decision's Errors and
// Reason name the policy, where it is and the kind of error — never Cedar's message, which
// quotes the value it failed on (here the response, the text the gate withholds); the
// message is kept in Diagnostics, for the operator's own evaluation only.
func TestEvalErrorWithholdsValues(t *testing.T) {
	const secret = "the launch code is TOP-SECRET-4471"
	for _, tt := range []struct{ cond, kind string }{
		{`ip(context.response).isInRange(ip("10.0.0.0/8"))`, "a value that is not an IP address"},
		{`decimal(context.response) > decimal("1.0")`, "a value that is not a decimal"},
		{`context.response.nothing == "x"`, "a type error"},
		{`context.nothere == "x"`, "a missing attribute"},
	} {
		for _, secret := range []string{secret, "the launch code overflows: a type error that does not exist"} { // the text chooses nothing
			t.Run(tt.kind, func(t *testing.T) {
				src := "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n" +
					"@id(\"erring\") forbid (principal, action == Action::\"respond\", resource) when { " + tt.cond + " };\n"
				s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": src}, nil))
				if s.Mode != ModeCedar {
					t.Fatalf("mode %s: %s", s.Mode, s.Reason)
				}
				d := s.Decide(request("assistant", secret))
				all := d.Reason + "\n" + strings.Join(d.Errors, "\n")
				if d.Allow || strings.Contains(all, "TOP-SECRET") || strings.Contains(all, "launch code") || !strings.Contains(all, "erring: "+tt.kind+" (in the policy at ") {
					t.Fatalf("decision %+v: want a deny naming erring and %q, without the text", d, tt.kind)
				}
				if len(d.Diagnostics) != 1 || !strings.HasPrefix(d.Diagnostics[0], "erring: ") {
					t.Fatalf("diagnostics %q", d.Diagnostics)
				}
			})
		}
	}
}

// TestDecisionListsBounded: a decision lists at most MaxDeciding policies and a bounded
// number of errors, saying how many it left out, so that its journal record always fits;
// more deciding policies than that is a deny, never held at a gate.
func TestDecisionListsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n")
	for i := range MaxDeciding + 44 {
		fmt.Fprintf(&b, "@gate(\"human\") @id(\"g%d\") forbid (principal, action == Action::\"respond\", resource);\n", i)
		fmt.Fprintf(&b, "@id(\"e%d\") forbid (principal, action == Action::\"respond\", resource) when { ip(context.response).isLoopback() };\n", i)
	}
	s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": b.String()}, nil))
	d := s.Decide(request("assistant", "text"))
	if d.Allow || len(d.Policies) != MaxDeciding || len(d.Errors) != maxErrors+2 || d.Errors[maxErrors] != "symbi: and 44 more deciding policies, not listed" {
		t.Fatalf("errors: %d ids, %d errors, the last %q", len(d.Policies), len(d.Errors), d.Errors[len(d.Errors)-1])
	}
	b.Reset()
	for i := range MaxDeciding + 1 {
		fmt.Fprintf(&b, "@gate(\"human\") @id(\"g%d\") forbid (principal, action == Action::\"respond\", resource);\n", i)
	}
	s = loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": "@id(\"respond\") permit (principal, action, resource);\n" + b.String()}, nil))
	d = s.Decide(request("assistant", "text"))
	if d.Allow || d.Gate != "" || len(d.Policies) != MaxDeciding || !strings.Contains(d.Reason, "257 policies decided this request") {
		t.Fatalf("gated: %d ids, gate %.40q, reason %q", len(d.Policies), d.Gate, d.Reason)
	}
}

// shippedSchema is the validator of policies/symbi.cedarschema, the model's schema as it
// ships.
func shippedSchema(t *testing.T) *validate.Validator {
	t.Helper()
	text, err := os.ReadFile("../../policies/symbi.cedarschema")
	if err != nil {
		t.Fatal(err)
	}
	var sch schema.Schema
	sch.SetFilename("policies/symbi.cedarschema")
	if err := sch.UnmarshalCedar(text); err != nil {
		t.Fatalf("schema: %v", err)
	}
	resolved, err := sch.Resolve()
	if err != nil {
		t.Fatalf("schema: %v", err)
	}
	return validate.New(resolved)
}
