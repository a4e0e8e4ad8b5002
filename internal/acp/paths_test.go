package acp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/workspace"
)

// countingDecider allows the kinds given when every path is under src/, and counts the
// requests it decided.
type countingDecider struct {
	mu   sync.Mutex
	seen []policy.ToolUse
}

func (c *countingDecider) decide(t policy.ToolUse) policy.Decision {
	c.mu.Lock()
	c.seen = append(c.seen, t)
	c.mu.Unlock()
	for _, p := range t.Paths {
		if !strings.HasPrefix(p, "src/") {
			return policy.Decision{Policies: []string{}, Reason: "only src/ is permitted"}
		}
	}
	if len(t.Outside) > 0 {
		return policy.Decision{Policies: []string{}, Reason: "outside"}
	}
	return policy.Decision{Allow: true, Policies: []string{"edit-src"}}
}

func (c *countingDecider) calls() []policy.ToolUse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// TestPermissionTooManyLocations: a permission request is decided on all its locations
// or not at all. Past journal.MaxPaths it is rejected before any policy — never decided
// on the first MaxPaths, which would let a 65th path the policy forbids ride along — and
// the journal says why.
func TestPermissionTooManyLocations(t *testing.T) {
	src := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("$CWD/src/f%d.go", i))
		}
		return out
	}
	tests := []struct {
		name      string
		locations []string
		expect    string // what the agent must hear
		decided   bool   // the policy saw the request
	}{
		{"64 under src", src(journal.MaxPaths), "allow", true},
		{"64 under src and a secret", append(src(journal.MaxPaths), "$CWD/secrets/prod.env"), "reject", false},
		{"65 under src", src(journal.MaxPaths + 1), "reject", false},
		{"a secret and 64 under src", append([]string{"$CWD/secrets/prod.env"}, src(journal.MaxPaths)...), "reject", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit files", "locations": tt.locations}, "expect": tt.expect},
				map[string]any{"message": "done"},
			}})
			var dec countingDecider
			e.cfg.Decide = dec.decide
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			if got := len(dec.calls()) == 1; got != tt.decided {
				t.Fatalf("the policy decided %d requests, want decided %v", len(dec.calls()), tt.decided)
			}
			pds := ofType(e.entries(), journal.TypePermissionDecided)
			if len(pds) != 1 {
				t.Fatalf("%d permission_decided", len(pds))
			}
			pd := data[journal.PermissionDecided](t, pds[0])
			if len(pd.Paths) > journal.MaxPaths {
				t.Fatalf("%d paths recorded", len(pd.Paths))
			}
			if !tt.decided {
				want := fmt.Sprintf("the request names %d locations, more than the limit of %d", len(tt.locations), journal.MaxPaths)
				if pd.Decision != "deny" || pd.OptionID != "reject" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], want) {
					t.Fatalf("permission_decided %+v, want a deny naming the limit (%q)", pd, want)
				}
			} else if pd.Decision != "allow" || len(pd.Paths) != journal.MaxPaths {
				t.Fatalf("permission_decided %+v", pd)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestPermissionGoverned: a permission request naming the project's audit store
// (.symbiont) or its policies is denied before any policy, whatever it would permit; other
// hidden names are the policy's to decide (here: only src/ is permitted).
func TestPermissionGoverned(t *testing.T) {
	tests := []struct {
		name      string
		locations []string
		want      string // the rule of the refusal; "" for a request the policy decides
	}{
		{"the signing key", []string{"$CWD/src/a.go", "$CWD/.symbiont/governed/audit-signing.key"}, "the audit store is protected"},
		{"a nested audit store", []string{"$CWD/sub/.symbiont/ledger.jsonl"}, "the audit store is protected"},
		{"the policies", []string{"$CWD/policies/respond.cedar"}, "policies are protected"},
		{"a hidden name", []string{"$CWD/.github/workflows/ci.yml"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect := "reject" // by the rule, or by the test's policy (only src/)
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": tt.locations}, "expect": expect},
				map[string]any{"message": "done"},
			}})
			var dec countingDecider
			e.cfg.Decide = dec.decide
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			if got := len(dec.calls()); got != map[bool]int{true: 1, false: 0}[tt.want == ""] {
				t.Fatalf("the policy decided %d requests", got)
			}
			pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
			if tt.want != "" && (pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], tt.want)) {
				t.Fatalf("permission_decided %+v, want a deny naming %q", pd, tt.want)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestLongPaths: a path the agent sends is at most workspace.MaxPathBytes bytes, and the
// paths of one request at most maxLocationBytes together; past either the agent breaks
// the protocol: the run ends with ErrMalformed naming the limit, nothing of the request
// journaled — never audit_failed on a record too large.
func TestLongPaths(t *testing.T) {
	atLimit := strings.Repeat("d/", workspace.MaxPathBytes/2-1) + "xy"
	over := atLimit + "z"
	huge := strings.Repeat("a/", 1<<20)
	// As many paths as a record holds, each at the limit, of control characters (6 bytes
	// each once escaped in the journal): without the bound on their sum, a record of
	// more than 1.5 MiB.
	var many []string
	for i := range journal.MaxPaths {
		many = append(many, fmt.Sprintf("s%03d/", i)+strings.Repeat("\x01", workspace.MaxPathBytes-8))
	}
	tests := []struct {
		name string
		step map[string]any
		want string // in the error; "" when the run completes
	}{
		{"tool call at the limit", map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "t", "locations": []string{atLimit}}}, ""},
		{"tool call over the limit", map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "t", "locations": []string{over}}}, "4097 bytes"},
		{"tool call of 2 MB", map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "t", "locations": []string{huge}}}, "limit of 4096"},
		{"tool call, paths too long together", map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "t", "locations": many}}, fmt.Sprint(maxLocationBytes)},
		{"permission", map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "t", "locations": []string{"$CWD/" + over}}}, "limit of 4096"},
		{"permission, paths too long together", map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "t", "locations": many}}, fmt.Sprint(maxLocationBytes)},
		{"read", map[string]any{"read": over}, "limit of 4096"},
		{"write", map[string]any{"write": map[string]any{"path": "$CWD/" + over, "content": "x"}}, "limit of 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{tt.step, map[string]any{"message": "done"}}})
			res := e.run(nil)
			es := e.entries()
			if tt.want == "" {
				mustOutcome(t, res, OutcomeCompleted)
				if tc := data[journal.ToolCall](t, ofType(es, journal.TypeToolCall)[0]); !slices.Equal(tc.Paths, []string{atLimit}) {
					t.Fatalf("tool_call paths %d: %.80q", len(tc.Paths), tc.Paths)
				}
				e.finishAndVerify(res)
				return
			}
			mustOutcome(t, res, OutcomeError)
			if !errors.Is(res.Err, ErrMalformed) || errors.Is(res.Err, ErrJournal) || !strings.Contains(res.Err.Error(), tt.want) {
				t.Fatalf("err %.200v, want ErrMalformed naming %q", res.Err, tt.want)
			}
			for _, x := range es {
				switch x.Type {
				case journal.TypeToolCall, journal.TypePermissionDecided, journal.TypeFSRead, journal.TypeFSWrite:
					t.Fatalf("%s journaled: %.200s", x.Type, x.Data)
				}
			}
			if fin := data[journal.SessionFinished](t, es[len(es)-1]); fin.Outcome != OutcomeError || !strings.Contains(fin.Error, "malformed ACP") {
				t.Fatalf("session_finished %+v", fin)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestFSProtectedNames: the agent's fs requests follow the project's rules about names —
// no hidden component (the journals and the signing key under .symbiont, .git), nothing
// at or under a policies directory, the project's own included when the workspace holds
// the project. Each is refused by its rule before any policy and without a gate (the
// decider holds everything at a gate, whose holder approves anything), journaled as a
// deny naming the rule; the files are untouched.
func TestFSProtectedNames(t *testing.T) {
	type fsCase struct {
		step map[string]any
		rel  string
		rule string
	}
	cases := []fsCase{
		{map[string]any{"read": "$CWD/.symbiont/governed/other-run.jsonl"}, ".symbiont/governed/other-run.jsonl", "no hidden components"},
		{map[string]any{"write": map[string]any{"path": "$CWD/.symbiont/governed/audit-signing.key", "content": "0123"}}, ".symbiont/governed/audit-signing.key", "no hidden components"},
		{map[string]any{"read": ".git/config"}, ".git/config", "no hidden components"},
		{map[string]any{"write": map[string]any{"path": "src/../.git/config", "content": "x"}}, ".git/config", "no hidden components"},
		{map[string]any{"read": "$CWD/policies/tools.cedar"}, "policies/tools.cedar", "policies are protected"},
		{map[string]any{"write": map[string]any{"path": "policies/tools.cedar", "content": "permit(principal, action, resource);\n"}}, "policies/tools.cedar", "policies are protected"},
		{map[string]any{"write": map[string]any{"path": "$CWD/proj/policies/new.cedar", "content": "permit(principal, action, resource);\n"}}, "proj/policies/new.cedar", "policies are protected"},
		{map[string]any{"read": "proj/.symbiont/governed/other-run.jsonl"}, "proj/.symbiont/governed/other-run.jsonl", "no hidden components"},
	}
	var steps []any
	for _, c := range cases {
		c.step["expect_error"] = true
		steps = append(steps, c.step)
	}
	steps = append(steps, map[string]any{"read": "src/a.go", "expect_content": "package a\n"}, map[string]any{"message": "done"})
	e := newEnv(t, map[string]any{"steps": steps})
	for _, rel := range []string{".symbiont/governed/other-run.jsonl", ".symbiont/governed/audit-signing.key", ".git/config",
		"policies/tools.cedar", "proj/.symbiont/governed/other-run.jsonl", "proj/policies/tools.cedar"} {
		p := filepath.Join(e.dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("protected\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(e.dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "src/a.go"), []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(e.dir, workspace.Options{Project: filepath.Join(e.dir, "proj")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	e.cfg.Workspace = ws
	decisions, held := gateAll(e)
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	decided := decisions()
	if len(decided) != 1 || !slices.Equal(decided[0].Paths, []string{"src/a.go"}) || held() != 1 {
		t.Fatalf("the policy decided %+v, the gate held %d: only src/a.go should reach the policy and the gate", decided, held())
	}
	pds := ofType(e.entries(), journal.TypePermissionDecided)
	if len(pds) != len(cases)+1 {
		t.Fatalf("%d permission_decided, want %d", len(pds), len(cases)+1)
	}
	heard := append(e.eventsNamed("read"), e.eventsNamed("write")...)
	for i, c := range cases {
		pd := data[journal.PermissionDecided](t, pds[i])
		if pd.Decision != "deny" || !slices.Equal(pd.Paths, []string{c.rel}) || len(pd.Outside) != 0 || len(pd.PolicyIDs) != 0 ||
			len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], `refused by rule "`+c.rule+`"`) {
			t.Errorf("case %d: permission_decided %+v, want a deny of %q by rule %q", i, pd, c.rel, c.rule)
		}
	}
	for _, ev := range heard {
		if ev["ok"] == false && !strings.Contains(fmt.Sprint(ev["error"]), "refused by rule") {
			t.Errorf("the agent heard %v: the refusal names no rule", ev)
		}
	}
	for _, rel := range []string{".symbiont/governed/audit-signing.key", ".git/config", "policies/tools.cedar"} {
		if b, _ := os.ReadFile(filepath.Join(e.dir, rel)); string(b) != "protected\n" {
			t.Errorf("%s now holds %q", rel, b)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "proj/policies/new.cedar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("proj/policies/new.cedar was written: %v", err)
	}
	e.finishAndVerify(res)
}

// TestPermissionThroughLinks: a permission request is decided on where its paths lead as
// well as on their names — the agent's own tools follow symbolic links — so a link in the
// workspace cannot open the policies, the audit store or anything outside to a policy that
// permits every edit; a link that stays inside is decided on both paths, both journaled.
func TestPermissionThroughLinks(t *testing.T) {
	tests := []struct {
		name  string
		links map[string]string // in the workspace: name → target
		loc   string
		want  string   // the deny's rule; "outside" for a path outside; "" for an allow
		paths []string // the paths journaled, for an allow
	}{
		{"to the policies", map[string]string{"pol": "policies"}, "pol/respond.cedar", "policies are protected", nil},
		{"to the audit store", map[string]string{"store": ".symbiont"}, "store/governed/audit-signing.key", "the audit store is protected", nil},
		{"a chain to the policies", map[string]string{"a": "b", "b": "./policies"}, "a/new.cedar", "policies are protected", nil},
		{"up and out", map[string]string{"up": ".."}, "up/elsewhere.txt", "outside", nil},
		{"absolute, out", map[string]string{"etc": "/etc"}, "etc/passwd", "outside", nil},
		{"dangling, out", map[string]string{"new": "../created-by-the-write"}, "new", "outside", nil},
		{"a loop", map[string]string{"l1": "l2", "l2": "l1"}, "l1/x", "outside", nil},
		{"up from a link into the policies", map[string]string{"l": "policies/access"}, "l/../x.cedar", "policies are protected", nil},
		{"up from a link outside", map[string]string{"l": "$OUT/sub"}, "l/../escaped.txt", "outside", nil},
		{"up after what is not there", nil, "missing/../src/a.go", "outside", nil},
		{"inside to inside", map[string]string{"s2": "src"}, "s2/a.go", "", []string{"s2/a.go", "src/a.go"}},
		{"absolute, inside", map[string]string{"s3": "$CWD/src"}, "s3/b.go", "", []string{"s3/b.go", "src/b.go"}},
		{"no link", nil, "src/a.go", "", []string{"src/a.go"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": []string{"$CWD/" + tt.loc}}},
				map[string]any{"message": "done"},
			}})
			out := t.TempDir()
			for _, d := range []string{"policies/access", ".symbiont/governed", "src", out + "/sub"} {
				if !filepath.IsAbs(d) {
					d = filepath.Join(e.dir, d)
				}
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			for name, target := range tt.links {
				target = strings.NewReplacer("$CWD", e.dir, "$OUT", out).Replace(target)
				if err := os.Symlink(target, filepath.Join(e.dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			e.cfg.Decide = allowKinds("edit") // every edit in the workspace
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
			switch tt.want {
			case "":
				if pd.Decision != "allow" || !slices.Equal(pd.Paths, tt.paths) || len(pd.Outside) != 0 {
					t.Fatalf("permission_decided %+v, want an allow on %q", pd, tt.paths)
				}
			case "outside":
				if pd.Decision != "deny" || len(pd.Outside) != 1 || pd.Outside[0] != e.dir+"/"+tt.loc { // as sent
					t.Fatalf("permission_decided %+v, want a deny with %s outside", pd, tt.loc)
				}
			default:
				if pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], tt.want) {
					t.Fatalf("permission_decided %+v, want a deny naming %q", pd, tt.want)
				}
			}
			e.finishAndVerify(res)
		})
	}
}

// TestPlanRecordBounded: a plan at its worst — as many entries as a record keeps, each
// field long and of control characters (6 bytes each once escaped) — still fits one
// journal record: the run goes on, never audit_failed on a record too large.
func TestPlanRecordBounded(t *testing.T) {
	field := strings.Repeat("\x01", 4*journal.MaxTitleBytes)
	var entries []any
	for range journal.MaxPlanEntries + 1 {
		entries = append(entries, map[string]any{"content": field, "priority": field, "status": field})
	}
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"plan": entries}, map[string]any{"message": "done"}}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	pl := data[journal.Plan](t, ofType(e.entries(), journal.TypePlan)[0])
	if len(pl.Entries) != journal.MaxPlanEntries || len(pl.Entries[0].Content) > journal.MaxTitleBytes || len(pl.Entries[0].Priority) > maxPlanWordBytes || len(pl.Entries[0].Status) > maxPlanWordBytes {
		t.Fatalf("plan of %d entries, the first %d/%d/%d bytes", len(pl.Entries), len(pl.Entries[0].Content), len(pl.Entries[0].Priority), len(pl.Entries[0].Status))
	}
	e.finishAndVerify(res)
}

// TestUndecodableUpdate: a session/update of a kind the SDK knows that it cannot decode —
// which it would log and drop, a tool call missing from the journal without a word — is
// malformed ACP and ends the run; one it matches to no kind it knows (a newer protocol's)
// carries nothing symbi journals or decides on, and is dropped.
func TestUndecodableUpdate(t *testing.T) {
	toolCall := map[string]any{"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "t", "kind": "read"}
	for _, tt := range []struct {
		name     string
		update   map[string]any // the params' update
		envelope map[string]any // members set on the message itself
		want     string         // in the error; "" when the run completes
	}{
		{"a tool call whose id is a number", map[string]any{"sessionUpdate": "tool_call", "toolCallId": 7, "title": "rm -rf /", "kind": "execute"}, nil, "a session/update symbi cannot read"},
		{"a message chunk without content", map[string]any{"sessionUpdate": "agent_message_chunk", "content": 5}, nil, "a session/update symbi cannot read"},
		{"a kind of a newer protocol", map[string]any{"sessionUpdate": "future_update", "anything": true}, nil, ""},
		{"no kind the SDK can match", map[string]any{"x": 1}, nil, ""},
		// Lines the SDK cannot read as a message at all, which it skips with a log line.
		{"jsonrpc a number", toolCall, map[string]any{"jsonrpc": 2}, "not a JSON-RPC message"},
		{"error not an object", toolCall, map[string]any{"error": 5}, "not a JSON-RPC message"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msg := map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": "fake-session-1", "update": tt.update}}
			for k, v := range tt.envelope {
				msg[k] = v
			}
			e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": "hi"}, map[string]any{"raw": msg}, map[string]any{"message": "done"}}})
			res := e.run(nil)
			if tt.want == "" {
				mustOutcome(t, res, OutcomeCompleted)
			} else {
				mustOutcome(t, res, OutcomeError)
				if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), tt.want) {
					t.Fatalf("err %v, want ErrMalformed with %q", res.Err, tt.want)
				}
			}
			e.finishAndVerify(res)
		})
	}
}

// gateAll makes e's every use_tool decision a gated denial (policy gate-all), recorded,
// and approves every hold, counted: decided returns the decisions asked for so far, held
// how many were held.
func gateAll(e *env) (decided func() []policy.ToolUse, held func() int64) {
	var mu sync.Mutex
	var asked []policy.ToolUse
	e.cfg.Decide = func(t policy.ToolUse) policy.Decision {
		mu.Lock()
		asked = append(asked, t)
		mu.Unlock()
		return policy.Decision{Policies: []string{"gate-all"}, Gate: "human", Reason: "held"}
	}
	var n atomic.Int64
	e.cfg.Hold = func(_ context.Context, h Hold, _ func(journal.Record) error) HoldResult {
		n.Add(1)
		return HoldResult{Approved: true, Note: "approved"}
	}
	return func() []policy.ToolUse {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}, n.Load
}

// TestPermissionPathsBeyondRecord: 40 locations through one symbolic link lead to 80
// paths (each location's name, and where it leads), more than the 64 a record holds. A
// decision is only ever taken on what is recorded: the request is denied before any
// policy, saying why, never allowed on paths its record would not list.
func TestPermissionPathsBeyondRecord(t *testing.T) {
	var locs []string
	for i := range 40 {
		locs = append(locs, fmt.Sprintf("$CWD/s/f%d.go", i))
	}
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": locs}},
		map[string]any{"message": "done"},
	}})
	if err := os.Mkdir(filepath.Join(e.dir, "src"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src", filepath.Join(e.dir, "s")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var decided []string
	allow := allowKinds("edit")
	e.cfg.Decide = func(tu policy.ToolUse) policy.Decision {
		mu.Lock()
		decided = append(decided, tu.Paths...)
		mu.Unlock()
		return allow(tu)
	}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
	if pd.Decision != "deny" || len(decided) != 0 || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], "lead to 80 paths") {
		t.Fatalf("permission_decided %+v after the policy was asked about %d paths; want a deny before any policy, naming the 80 paths", pd, len(decided))
	}
	e.finishAndVerify(res)
}

// TestMalformedFSPathRefusedByItsRule: an fs request whose path is lexically inside the
// workspace but not well-formed — a name over NAME_MAX, a NUL byte — is denied by the
// rule "well-formed path" before any policy, not filed among the paths outside.
func TestMalformedFSPathRefusedByItsRule(t *testing.T) {
	for name, p := range map[string]string{
		"a name over NAME_MAX": strings.Repeat("a", 300),
		"a NUL byte":           "src/a\x00b.go",
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"read": "$CWD/" + p, "expect_error": true},
				map[string]any{"message": "done"},
			}})
			e.cfg.Decide = allowKinds("read")
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pds := ofType(e.entries(), journal.TypePermissionDecided)
			if len(pds) != 1 {
				t.Fatalf("%d permission_decided", len(pds))
			}
			pd := data[journal.PermissionDecided](t, pds[0])
			ev := e.eventsNamed("read")
			if len(pd.Outside) != 0 || len(pd.Errors) == 0 || !strings.Contains(pd.Errors[0], "well-formed path") {
				t.Fatalf("permission_decided %+v; agent heard %v — want a deny by rule \"well-formed path\", not a path outside the workspace", pd, ev)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestFSPathEndingInSlashRefused: a read or write of "f/" or "f/." names a directory.
// Rel cleans it to "f", a regular file that the write would replace: it is refused by rule
// "regular files only" before any policy, and the file is untouched.
func TestFSPathEndingInSlashRefused(t *testing.T) {
	for _, p := range []string{"f/", "f/."} {
		t.Run(p, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"write": map[string]any{"path": "$CWD/" + p, "content": "replaced"}, "expect_error": true},
				map[string]any{"read": "$CWD/" + p, "expect_error": true},
				map[string]any{"message": "done"},
			}})
			if err := os.WriteFile(filepath.Join(e.dir, "f"), []byte("kept"), 0o600); err != nil {
				t.Fatal(err)
			}
			e.cfg.Decide = allowKinds("read", "edit")
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pds := ofType(e.entries(), journal.TypePermissionDecided)
			for _, ent := range pds {
				pd := data[journal.PermissionDecided](t, ent)
				if pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], "regular files only") {
					t.Fatalf("permission_decided %+v; want a deny by rule \"regular files only\"", pd)
				}
			}
			if len(pds) != 2 {
				t.Fatalf("%d permission_decided, want 2", len(pds))
			}
			if b, err := os.ReadFile(filepath.Join(e.dir, "f")); err != nil || string(b) != "kept" {
				t.Fatalf("f is %q (%v); want it untouched", b, err)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestOutsideDeniedWhateverTheDecider: a permission request naming a path outside the
// workspace is denied whatever the decider says, and never held at a gate: here the
// decider allows everything, or names a gate (the package's other deciders refuse such a
// request themselves, so they could not tell).
func TestOutsideDeniedWhateverTheDecider(t *testing.T) {
	for _, gate := range []string{"", "human"} {
		t.Run("gate="+gate, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": []string{"$CWD/up/elsewhere.txt"}}},
				map[string]any{"message": "done"},
			}})
			if err := os.Symlink("..", filepath.Join(e.dir, "up")); err != nil {
				t.Fatal(err)
			}
			e.cfg.Decide = func(policy.ToolUse) policy.Decision {
				if gate != "" {
					return policy.Decision{Policies: []string{"g"}, Gate: "g"}
				}
				return policy.Decision{Allow: true, Policies: []string{"allow-everything"}}
			}
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
			if pd.Decision != "deny" || len(pd.Outside) != 1 {
				t.Fatalf("permission_decided %+v: a path outside the workspace was not denied by acp whatever the decider said", pd)
			}
			if ah := ofType(e.entries(), journal.TypeApprovalRequested); len(ah) != 0 {
				t.Fatalf("a request with a path outside the workspace was held at a gate: %d approval_requested", len(ah))
			}
			e.finishAndVerify(res)
		})
	}
}
