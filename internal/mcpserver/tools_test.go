package mcpserver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"symbi/internal/dsl"
	"symbi/internal/project"
)

// sameJSON reports whether a and b are equal JSON values.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func TestListAgents(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	res := call(t, cs, "list_agents", map[string]any{})
	if res.IsError {
		t.Fatalf("error: %s", textOf(t, res))
	}
	raw := structuredJSON(t, res)
	if !sameJSON(t, []byte(textOf(t, res)), raw) {
		t.Fatalf("text content %s differs from structuredContent %s", textOf(t, res), raw)
	}
	var out struct {
		Agents []project.Entry `json:"agents"`
	}
	decodeStrict(t, raw, &out)
	var names []string
	for _, e := range out.Agents {
		names = append(names, e.Name)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("not sorted by name: %v", names)
	}
	if want := []string{"alias", "broken", "dup", "dup", "helper", "legacy", "refused"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("names %v, want %v (notes.txt is not an agent file)", names, want)
	}
	tests := []struct {
		file         string
		name         string
		agents       []string
		description  string
		capabilities []string
		invocable    bool
		reason       []string // substrings of the refusal reason
	}{
		{"agents/alias.symbi", "alias", []string{"aliased_name"}, "", []string{"summarize", "answer"}, true, nil},
		{"agents/broken.symbi", "broken", []string{}, "", []string{}, false, []string{"2:18", `"[" opened here is never closed`}},
		{"agents/dup.dsl", "dup", []string{"dup"}, "", []string{}, false, []string{"ambiguous", "agents/dup.dsl and agents/dup.symbi"}},
		{"agents/dup.symbi", "dup", []string{"dup"}, "", []string{}, false, []string{"ambiguous"}},
		{"agents/helper.symbi", "helper", []string{"helper"}, "answers questions", []string{"answer"}, true, nil},
		{"agents/legacy.dsl", "legacy", []string{"legacy"}, "", []string{}, true, nil},
		{"agents/refused.symbi", "refused", []string{"refused"}, "", []string{"answer"}, false, []string{"1:15", "declares parameters"}},
	}
	byFile := map[string]project.Entry{}
	for _, e := range out.Agents {
		byFile[e.File] = e
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			e, ok := byFile[tt.file]
			if !ok {
				t.Fatalf("%s not listed", tt.file)
			}
			if e.Name != tt.name || !reflect.DeepEqual(e.Agents, tt.agents) || e.Description != tt.description ||
				!reflect.DeepEqual(e.Capabilities, tt.capabilities) || e.Invocable != tt.invocable {
				t.Fatalf("got %+v", e)
			}
			if tt.invocable != (e.Reason == "") {
				t.Fatalf("invocable %v with reason %q", e.Invocable, e.Reason)
			}
			for _, s := range tt.reason {
				if !strings.Contains(e.Reason, s) {
					t.Errorf("reason %q does not contain %q", e.Reason, s)
				}
			}
		})
	}
}

func TestListAgentsEmptyProject(t *testing.T) {
	cs := serve(t, t.TempDir(), serveOpts{})
	res := call(t, cs, "list_agents", nil)
	if res.IsError || string(structuredJSON(t, res)) != `{"agents":[]}` || textOf(t, res) != `{"agents":[]}` {
		t.Fatalf("got error=%v %s", res.IsError, structuredJSON(t, res))
	}
}

func TestParseDSL(t *testing.T) {
	dir := testProject(t, map[string]string{
		"other/good.symbi":    "agent good {}\n",
		"other/hard.symbi":    "agent hard {}\n",
		"policies/x.symbi":    "agent x {}\n",
		".hidden/x.symbi":     "agent x {}\n",
		"other/latin1.symbi":  "agent caf\xe9 {}\n",
		"other/sub/ok.symbi":  "agent ok {}\n",
		"other/big.symbi":     strings.Repeat("#", dsl.MaxSourceBytes+1),
		"other/exact.symbi":   "agent exact {}\n" + strings.Repeat("#", dsl.MaxSourceBytes-len("agent exact {}\n")),
		"other/readme.md":     "# not a definition\n",
		"other/dir.symbi/x":   "a directory named like a definition\n",
		"other/syntax.symbi":  "agent s {\n  capabilities = [\n",
		"other/refused.symbi": "agent r(x: String) {}\n",
	})
	for _, l := range []struct{ target, link string }{
		{"good.symbi", "other/link.symbi"},
		{"sub", "other/linkdir"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(dir, "other/hard.symbi"), filepath.Join(dir, "other/hard2.symbi")); err != nil {
		t.Fatal(err)
	}
	cs := serve(t, dir, serveOpts{})

	errTests := []struct {
		name string
		args map[string]any
		code string
		msg  []string
	}{
		{"parent", map[string]any{"file": "../x.symbi"}, "protected_path", []string{`"no parent references"`}},
		{"parent inside", map[string]any{"file": "agents/../agents/helper.symbi"}, "protected_path", []string{`"no parent references"`}},
		{"absolute", map[string]any{"file": filepath.Join(dir, "agents/helper.symbi")}, "protected_path", []string{`"relative paths only"`}},
		{"hidden", map[string]any{"file": ".hidden/x.symbi"}, "protected_path", []string{`"no hidden components"`}},
		{"governed store", map[string]any{"file": ".symbiont/governed/x.symbi"}, "protected_path", []string{`"no hidden components"`}},
		{"policies", map[string]any{"file": "policies/x.symbi"}, "protected_path", []string{`"policies are protected"`}},
		{"symlink file", map[string]any{"file": "other/link.symbi"}, "protected_path", []string{`"no symlinks"`}},
		{"symlink directory", map[string]any{"file": "other/linkdir/ok.symbi"}, "protected_path", []string{`"no symlinks"`}},
		{"hard link", map[string]any{"file": "other/hard.symbi"}, "protected_path", []string{`"single link"`}},
		{"directory", map[string]any{"file": "other/dir.symbi"}, "protected_path", []string{`"regular files only"`}},
		{"not UTF-8", map[string]any{"file": "other/latin1.symbi"}, "protected_path", []string{`"UTF-8 only"`}},
		{"extension .md", map[string]any{"file": "other/readme.md"}, "invalid_request", []string{"only .symbi and .dsl"}},
		{"extension .cedar", map[string]any{"file": "policies/respond.cedar"}, "invalid_request", []string{"only .symbi and .dsl"}},
		{"no extension", map[string]any{"file": "AGENTS"}, "invalid_request", []string{"only .symbi and .dsl"}},
		{"missing", map[string]any{"file": "agents/missing.symbi"}, "not_found", []string{"agents/missing.symbi", "no such file"}},
		{"file over 1 MiB", map[string]any{"file": "other/big.symbi"}, "limit_exceeded", []string{`"size limit"`}},
		{"content over 1 MiB", map[string]any{"content": strings.Repeat("#", dsl.MaxSourceBytes+1)}, "limit_exceeded", []string{"1048577 bytes", "1 MiB"}},
		{"both", map[string]any{"file": "agents/helper.symbi", "content": "agent a {}"}, "invalid_request", []string{"not both"}},
		{"neither", map[string]any{}, "invalid_request", []string{"give file or content"}},
		{"both empty", map[string]any{"file": "", "content": ""}, "invalid_request", []string{"is empty (leave it out for none)"}},
		{"file empty beside content", map[string]any{"file": "", "content": "agent a {}"}, "invalid_request", []string{"file is empty (leave it out for none)"}},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			wantToolError(t, call(t, cs, "parse_dsl", tt.args), tt.code, tt.msg...)
		})
	}

	okTests := []struct {
		name     string
		args     map[string]any
		source   string
		valid    bool
		errors   []dsl.ErrorView
		agents   []string
		admitted []bool
	}{
		{"file", map[string]any{"file": "agents/helper.symbi"}, "agents/helper.symbi", true, nil, []string{"helper"}, []bool{true}},
		{"legacy .dsl", map[string]any{"file": "agents/legacy.dsl"}, "agents/legacy.dsl", true, nil, []string{"legacy"}, []bool{true}},
		{"outside agents/", map[string]any{"file": "other/good.symbi"}, "other/good.symbi", true, nil, []string{"good"}, []bool{true}},
		{"exactly 1 MiB", map[string]any{"file": "other/exact.symbi"}, "other/exact.symbi", true, nil, []string{"exact"}, []bool{true}},
		{"refused definition", map[string]any{"file": "other/refused.symbi"}, "other/refused.symbi", true, nil, []string{"r"}, []bool{false}},
		{"syntax error in a file", map[string]any{"file": "other/syntax.symbi"}, "other/syntax.symbi", false,
			[]dsl.ErrorView{{Line: 2, Column: 18, Message: `"[" opened here is never closed (the input ends with 2 bracket(s) open)`}}, nil, nil},
		{"inline", map[string]any{"content": "metadata { description = \"d\" }\nagent inline_agent {\n  capabilities = [\"answer\"]\n}\n"}, "inline", true, nil, []string{"inline_agent"}, []bool{true}},
		{"inline exactly 1 MiB", map[string]any{"content": "agent a {}\n" + strings.Repeat("#", dsl.MaxSourceBytes-len("agent a {}\n"))}, "inline", true, nil, []string{"a"}, []bool{true}},
		{"inline syntax error", map[string]any{"content": "agent x {\n  capabilities = [\n"}, "inline", false,
			[]dsl.ErrorView{{Line: 2, Column: 18, Message: `"[" opened here is never closed (the input ends with 2 bracket(s) open)`}}, nil, nil},
		{"inline unknown token", map[string]any{"content": "agent x {}\n@@@\n"}, "inline", false, nil, nil, nil},
	}
	for _, tt := range okTests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, cs, "parse_dsl", tt.args)
			if res.IsError {
				t.Fatalf("tool error %s; syntax errors and refusals must be results", textOf(t, res))
			}
			raw := structuredJSON(t, res)
			if !sameJSON(t, []byte(textOf(t, res)), raw) {
				t.Fatalf("text content differs from structuredContent %s", raw)
			}
			var r dsl.Result
			decodeStrict(t, raw, &r)
			if r.Source != tt.source || r.Valid != tt.valid {
				t.Fatalf("source %q valid %v; want %q %v (errors %+v)", r.Source, r.Valid, tt.source, tt.valid, r.Errors)
			}
			if !tt.valid {
				if len(r.Errors) == 0 {
					t.Fatal("invalid without errors")
				}
				for _, e := range r.Errors {
					if e.Line < 1 || e.Column < 1 || e.Message == "" {
						t.Errorf("error without a position or message: %+v", e)
					}
				}
				if tt.errors != nil && !reflect.DeepEqual(r.Errors, tt.errors) {
					t.Errorf("errors %+v, want %+v", r.Errors, tt.errors)
				}
				return
			}
			if len(r.Errors) != 0 {
				t.Errorf("valid with errors %+v", r.Errors)
			}
			var names []string
			var admitted []bool
			for _, a := range r.Agents {
				names = append(names, a.Name)
				admitted = append(admitted, a.Admitted)
			}
			if !reflect.DeepEqual(names, tt.agents) || !reflect.DeepEqual(admitted, tt.admitted) {
				t.Errorf("agents %v admitted %v; want %v %v", names, admitted, tt.agents, tt.admitted)
			}
		})
	}
}

func TestGetAgentDSL(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	okTests := []struct{ agent, file string }{
		{"helper", "agents/helper.symbi"},
		{"alias", "agents/alias.symbi"},
		{"legacy", "agents/legacy.dsl"},
	}
	for _, tt := range okTests {
		t.Run(tt.agent, func(t *testing.T) {
			res := call(t, cs, "get_agent_dsl", map[string]any{"agent": tt.agent})
			if res.IsError {
				t.Fatalf("error %s", textOf(t, res))
			}
			src := testAgents[tt.file]
			if got := textOf(t, res); got != src {
				t.Errorf("text %q, want the raw source %q", got, src)
			}
			var out struct{ Agent, File, Source string }
			decodeStrict(t, structuredJSON(t, res), &out)
			if out.Agent != tt.agent || out.File != tt.file || out.Source != src {
				t.Errorf("structuredContent %+v", out)
			}
		})
	}
	errTests := []struct {
		name, agent, code string
		msg               []string
	}{
		{"unknown", "nobody", "unknown_agent", []string{`"nobody"`, "snapshot"}},
		{"declared name is not a stem", "aliased_name", "unknown_agent", []string{`"aliased_name"`}},
		{"file name with extension", "helper.symbi", "unknown_agent", nil},
		{"ambiguous stem", "dup", "unknown_agent", []string{"ambiguous", "agents/dup.dsl and agents/dup.symbi"}},
		{"not an agent file", "notes", "unknown_agent", nil},
		{"empty", "", "invalid_request", []string{"agent is required"}},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			wantToolError(t, call(t, cs, "get_agent_dsl", map[string]any{"agent": tt.agent}), tt.code, tt.msg...)
		})
	}
}

func TestGetAgentsMD(t *testing.T) {
	const md = "# Project\n\nGuidance for agents.\n"
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		code  string // "" for success
		msg   []string
	}{
		{"present", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "AGENTS.md"), md) }, "", nil},
		{"exactly 64 KiB", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "AGENTS.md"), md+strings.Repeat("x", project.AgentsMDLimit-len(md)))
		}, "", nil},
		{"missing", func(t *testing.T, dir string) {}, "not_found", []string{"symbi agents-md generate"}},
		{"over 64 KiB", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "AGENTS.md"), strings.Repeat("x", project.AgentsMDLimit+1))
		}, "limit_exceeded", []string{`"size limit"`}},
		{"symlink", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "real.md"), md)
			if err := os.Symlink("real.md", filepath.Join(dir, "AGENTS.md")); err != nil {
				t.Fatal(err)
			}
		}, "protected_path", []string{`"no symlinks"`}},
		{"hard link", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "AGENTS.md"), md)
			if err := os.Link(filepath.Join(dir, "AGENTS.md"), filepath.Join(dir, "copy.md")); err != nil {
				t.Fatal(err)
			}
		}, "protected_path", []string{`"single link"`}},
		{"directory", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "AGENTS.md"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "protected_path", []string{`"regular files only"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			cs := serve(t, dir, serveOpts{})
			res := call(t, cs, "get_agents_md", nil)
			if tt.code != "" {
				wantToolError(t, res, tt.code, tt.msg...)
				return
			}
			want, err := os.ReadFile(filepath.Join(dir, "AGENTS.md"))
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || textOf(t, res) != string(want) {
				t.Fatalf("error=%v text %.80q", res.IsError, textOf(t, res))
			}
			var out struct{ Path, Content string }
			decodeStrict(t, structuredJSON(t, res), &out)
			if out.Path != "AGENTS.md" || out.Content != string(want) {
				t.Errorf("structuredContent path %q content %.80q", out.Path, out.Content)
			}
		})
	}
}

// TestStrictArguments checks that bad arguments are invalid_request tool errors, not
// protocol errors, for every tool.
func TestStrictArguments(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	tests := []struct {
		tool string
		args string
		msg  []string
	}{
		{"list_agents", `{"verbose":true}`, []string{"arguments of list_agents", `unknown argument "verbose"`}},
		{"get_agents_md", `{"path":"AGENTS.md"}`, []string{"arguments of get_agents_md", `unknown argument "path"`}},
		{"parse_dsl", `{"content":5}`, []string{"arguments of parse_dsl", "content must be a string"}},
		{"parse_dsl", `{"file":["agents/helper.symbi"]}`, []string{"file must be a string"}},
		{"parse_dsl", `{"path":"agents/helper.symbi"}`, []string{`unknown argument "path"`}},
		{"get_agent_dsl", `{}`, []string{"agent is required"}},
		{"get_agent_dsl", `{"agent":null}`, []string{"agent is required"}},
		{"get_agent_dsl", `{"agent":true}`, []string{"agent must be a string"}},
		{"invoke_agent", `{"agent":"helper"}`, []string{"prompt is required"}},
		{"invoke_agent", `{"prompt":"hi"}`, []string{"agent is required"}},
		{"invoke_agent", `{"agent":"helper","prompt":{"text":"hi"}}`, []string{"prompt must be a string"}},
		{"invoke_agent", `{"agent":"helper","prompt":"hi","temperature":0.2}`, []string{`unknown argument "temperature"`}},
		{"verify_schema", `{"schema":{"type":"object"},"public_key_pem":"x"}`, []string{"schema must be a string"}},
		{"verify_schema", `{"schema":"{}","public_key":"x"}`, []string{`unknown argument "public_key"`}},
		{"list_agents", `{"` + strings.Repeat("v", 100000) + `":1}`, []string{"unknown argument", "…(100000 bytes in all)"}},
		{"parse_dsl", `{"file":"` + strings.Repeat("f", 100000) + `.txt"}`, []string{"only .symbi and .dsl", "…(100004 bytes in all)"}},
		{"list_runs", `{"limit":100.0}`, []string{"limit must be an integer written without a fraction or exponent"}},
		{"list_runs", `{"limit":1e2}`, []string{"limit must be an integer"}},
		{"run_events", `{"run_id":"x","after":1180591620717411303424}`, []string{"after must be an integer", "within range"}},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			wantToolError(t, call(t, cs, tt.tool, json.RawMessage(tt.args)), "invalid_request", tt.msg...)
		})
	}
}

// TestNullArgumentsRefused: a JSON null given for an optional integer argument
// must be refused with invalid_request. The advertised inputSchema of list_runs and
// run_events deliberately describes limit, after and wait_ms as plain "integer" (not
// ["null","integer"], internal/mcpserver/runs.go integer()), and docs/mcp-tools.md says
// "Arguments are decoded strictly: ... a wrong JSON type ... is invalid_request"
// (docs/errors.md: invalid_request "a wrong JSON type"). Read as absent (encoding/json
// leaves the field as it is), a client validating against the schema and the server
// would disagree on what is valid.
func TestNullArgumentsRefused(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	missing := "0190a000-0000-7000-8000-000000000000"
	for _, c := range []struct{ tool, args string }{
		{"list_runs", `{"limit":null}`},
		{"run_events", `{"run_id":"` + missing + `","limit":null}`},
		{"run_events", `{"run_id":"` + missing + `","after":null}`},
		{"run_events", `{"run_id":"` + missing + `","wait_ms":null}`},
	} {
		t.Run(c.tool+" "+c.args, func(t *testing.T) {
			wantToolError(t, call(t, cs, c.tool, json.RawMessage(c.args)), "invalid_request")
		})
	}
}
