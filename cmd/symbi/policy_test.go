package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"symbi/internal/policy"
)

// policyCopy copies the repository's policies/ into a fresh project directory
// and adds extra files (relative path → content).
func policyCopy(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir("../../policies", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPolicyCheck(t *testing.T) {
	tests := []struct {
		name   string
		args   func(t *testing.T) []string
		code   int
		stdout []string
		stderr []string
	}{
		{
			name:   "repository policies",
			args:   func(t *testing.T) []string { return []string{"--project", "../.."} },
			stdout: []string{"mode: cedar\n", "policies/respond.cedar\n  permit respond (4:1)\n", "policies/review.cedar\n  forbid @gate(human) customer-names-review (7:1)\n", "policies/secrets.cedar\n  forbid no-private-keys (3:1)\n", "policies/mcp-server/size.cedar\n  forbid mcp-server-max-response (3:1)\n"},
		},
		{
			name: "broken copy",
			args: func(t *testing.T) []string {
				return []string{"--project", policyCopy(t, map[string]string{
					"policies/broken.cedar":            "permit (principal, action, resource)\nwhen { context.response like };\n",
					"policies/mcp-server/broken.cedar": "forbid (",
				})}
			},
			code:   1,
			stdout: []string{"mode: deny_all\n"},
			stderr: []string{"policies/broken.cedar:2:31: parse error", "policies/mcp-server/broken.cedar:1:9: parse error", "deny_all: every response would be denied"},
		},
		{
			name:   "no policies",
			args:   func(t *testing.T) []string { return []string{"--project", t.TempDir()} },
			stdout: []string{"mode: default\n", "digest: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "built-in default permits respond"},
		},
		{
			name:   "missing project",
			args:   func(t *testing.T) []string { return []string{"--project", filepath.Join(t.TempDir(), "nope")} },
			code:   1,
			stderr: []string{"not_found"},
		},
		{
			name:   "stray argument",
			args:   func(t *testing.T) []string { return []string{"extra"} },
			code:   2,
			stderr: []string{`unexpected argument "extra"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, "", append([]string{"policy", "check"}, tt.args(t)...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.code, out, errOut)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
		})
	}
}

func TestPolicyCheckJSON(t *testing.T) {
	dir := policyCopy(t, map[string]string{"policies/broken.cedar": "forbid ("})
	code, out, _ := runCLI(t, "", "policy", "check", "--json", "--project", dir)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	var got policyCheckOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Mode != "deny_all" || len(got.Problems) != 1 || got.Problems[0].File != "policies/broken.cedar" || got.Problems[0].Line != 1 || got.Problems[0].Column != 9 {
		t.Fatalf("output %+v", got)
	}
	if len(got.Files) != 6 || got.Files[0].File != "policies/broken.cedar" {
		t.Fatalf("files %+v", got.Files)
	}

	code, out, _ = runCLI(t, "", "policy", "check", "--json", "--project", "../..")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	got = policyCheckOutput{}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Mode != "cedar" || len(got.Problems) != 0 || len(got.Digest) != 64 || len(got.Files) < 3 {
		t.Fatalf("output %+v", got)
	}
	// policies/review.cedar (a forbid held for a person), then policies/secrets.cedar.
	if review, secrets := got.Files[1].Policies, got.Files[2].Policies; len(review) != 1 || review[0].ID != "customer-names-review" || review[0].Effect != "forbid" || review[0].Gate != "human" ||
		len(secrets) != 1 || secrets[0].ID != "no-private-keys" || secrets[0].Effect != "forbid" || secrets[0].Gate != "" {
		t.Fatalf("files %+v", got.Files)
	}
}

const policyTestAgent = `metadata {
    description = "Answers questions",
    executor = "orga"
}

agent helper {
    capabilities = ["explain"]
}
`

func TestPolicyEval(t *testing.T) {
	withAgent := func(extra map[string]string) func(t *testing.T) string {
		return func(t *testing.T) string {
			dir := policyCopy(t, extra)
			if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "agents", "alias.symbi"), []byte(policyTestAgent), 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}
	}
	repo := func(*testing.T) string { return "../.." }
	// misplaced moves the repository's secrets.cedar (the no-private-keys forbid) to to.
	misplaced := func(to string) func(t *testing.T) string {
		return func(t *testing.T) string {
			dir := withAgent(nil)(t)
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, to)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "policies/secrets.cedar"), filepath.Join(dir, to)); err != nil {
				t.Fatal(err)
			}
			return dir
		}
	}
	key := "here it is:\n-----BEGIN PRIVATE KEY-----\nMIIEvQ\n"
	tests := []struct {
		name     string
		project  func(t *testing.T) string
		args     []string
		code     int
		decision string
		mode     policy.Mode
		policies []string
		errors   int
		stderr   string
	}{
		{name: "repository allows plain text", project: repo, args: []string{"--agent", "reviewer", "--response", "Looks fine."}, decision: "allow", mode: "cedar", policies: []string{"respond"}},
		{name: "repository denies a private key", project: repo, args: []string{"--agent", "reviewer", "--response", key}, decision: "deny", mode: "cedar", policies: []string{"no-private-keys"}},
		{name: "response from a file", project: repo, args: []string{"--agent", "summarizer", "--response-file", "KEY"}, decision: "deny", mode: "cedar", policies: []string{"no-private-keys"}},
		{name: "filename alias uses the declared name", project: withAgent(map[string]string{"policies/only-helper.cedar": `@id("only-helper") forbid (principal, action, resource) unless { principal == Agent::"helper" && principal.capabilities.contains("explain") };`}),
			args: []string{"--agent", "alias", "--response", "hi"}, decision: "allow", mode: "cedar", policies: []string{"respond"}},
		{name: "forbid erroring beside the broad permit denies", project: withAgent(map[string]string{"policies/owner.cedar": `@id("owner") forbid (principal, action, resource) when { principal.owner == "x" };`}),
			args: []string{"--agent", "alias", "--response", "hi"}, decision: "deny", mode: "cedar", policies: []string{"owner"}, errors: 1},
		{name: "broken copy denies everything", project: withAgent(map[string]string{"policies/broken.cedar": "permit ("}),
			args: []string{"--agent", "alias", "--response", "hi"}, decision: "deny", mode: "deny_all", stderr: "policies/broken.cedar:1:9"},
		{name: "forbid moved into a subdirectory denies everything", project: misplaced("policies/secrets/secrets.cedar"),
			args: []string{"--agent", "alias", "--response", key}, decision: "deny", mode: "deny_all", stderr: "policies/secrets: is a directory the loader does not read"},
		{name: "forbid renamed in upper case denies everything", project: misplaced("policies/secrets.CEDAR"),
			args: []string{"--agent", "alias", "--response", key}, decision: "deny", mode: "deny_all", stderr: "policies/secrets.CEDAR: looks like a policy file but is not loaded"},
		{name: "unknown agent", project: repo, args: []string{"--agent", "nobody", "--response", "hi"}, code: 1, stderr: "unknown_agent"},
		{name: "refused definition", project: repo, args: []string{"--agent", "shell_helper", "--response", "hi"}, code: 1, stderr: "refused_definition"},
		{name: "missing response file", project: repo, args: []string{"--agent", "reviewer", "--response-file", "/nonexistent/answer.txt"}, code: 1, stderr: "not_found"},
		{name: "no agent", project: repo, args: []string{"--response", "hi"}, code: 2, stderr: "--agent is required"},
		{name: "no response", project: repo, args: []string{"--agent", "reviewer"}, code: 2, stderr: "exactly one of"},
		{name: "both responses", project: repo, args: []string{"--agent", "reviewer", "--response", "a", "--response-file", "b"}, code: 2, stderr: "exactly one of"},
		{name: "an authentication method the server never gives", project: repo, args: []string{"--agent", "reviewer", "--response", "a", "--caller-auth", "STDIO"}, code: 2, stderr: "want stdio, token, jwt or none"},
		{name: "a caller id the server never gives", project: repo, args: []string{"--agent", "reviewer", "--response", "a", "--caller", `bad"id`}, code: 2, stderr: "is not a caller id"},
	}
	keyFile := filepath.Join(t.TempDir(), "answer.txt")
	if err := os.WriteFile(keyFile, []byte(key), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"policy", "eval", "--json", "--project", tt.project(t)}
			for _, a := range tt.args {
				if a == "KEY" {
					a = keyFile
				}
				args = append(args, a)
			}
			code, out, errOut := runCLI(t, "", args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.code, out, errOut)
			}
			if !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("stderr lacks %q:\n%s", tt.stderr, errOut)
			}
			if tt.code != 0 {
				if out != "" {
					t.Fatalf("stdout on failure: %s", out)
				}
				return
			}
			var got policyEvalOutput
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if got.Decision != tt.decision || got.Mode != tt.mode || !slices.Equal(got.Policies, tt.policies) || len(got.Errors) != tt.errors || got.RunID != "dry-run" || got.Reason == "" {
				t.Fatalf("output %+v", got)
			}
		})
	}
}

func TestPolicyEvalText(t *testing.T) {
	code, out, _ := runCLI(t, "", "policy", "eval", "--project", "../..", "--agent", "reviewer", "--response", "-----BEGIN PRIVATE KEY-----")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"decision: deny\n", "agent: reviewer (agents/reviewer.symbi)\n", "mode: cedar\n", "policies: no-private-keys\n", "errors: (none)\n", "reason: denied by forbid no-private-keys\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

// TestPolicyEvalUseTool dry-runs use_tool decisions against the repository's example
// policies (policies/tools.cedar): read anywhere, edit only under src/, never execute, and
// never a path outside the workspace.
func TestPolicyEvalUseTool(t *testing.T) {
	ws := t.TempDir()
	tests := []struct {
		args     []string
		code     int
		decision string
		out      string
	}{
		{[]string{"--tool", "read", "--path", "docs/a.md"}, 0, "allow", "policies: tools-read-search\n"},
		{[]string{"--tool", "edit", "--path", "src/a.go", "--workspace", ws}, 0, "allow", "policies: tools-edit-src\n"},
		{[]string{"--tool", "edit", "--path", filepath.Join(ws, "src/a.go"), "--workspace", ws}, 0, "allow", "paths src/a.go (top dirs src)"},
		{[]string{"--tool", "edit", "--path", "src/a.go", "--path", "README.md"}, 0, "deny", "reason: denied: no permit matched\n"},
		{[]string{"--tool", "execute", "--path", "src/run.sh"}, 0, "deny", "policies: tools-no-execute\n"},
		{[]string{"--tool", "read", "--path", "/etc/passwd", "--workspace", ws}, 0, "deny", "outside the workspace"},
		{[]string{"--tool", "read", "--path", "src/../../x"}, 0, "deny", "outside the workspace"},
		{[]string{"--tool", "teleport"}, 0, "deny", "not one of"},
		{[]string{"--tool", "read", "--response", "x"}, 2, "", ""},
		{[]string{"--path", "x"}, 2, "", ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append([]string{"policy", "eval", "--project", "../..", "--agent", "reviewer", "--action", "use_tool"}, tt.args...)
			code, out, errOut := runCLI(t, "", args...)
			if code != tt.code || tt.code == 0 && (!strings.Contains(out, "decision: "+tt.decision) || !strings.Contains(out, tt.out)) || tt.code != 0 && errOut == "" {
				t.Fatalf("exit %d (want %d)\n%s%s", code, tt.code, out, errOut)
			}
		})
	}
	code, _, errOut := runCLI(t, "", "policy", "eval", "--project", "../..", "--agent", "reviewer", "--tool", "read", "--response", "x")
	if code != 2 || !strings.Contains(errOut, "--action use_tool") {
		t.Fatalf("--tool without --action use_tool: exit %d: %s", code, errOut)
	}
}

// TestPolicyEvalResponseNotUTF8: `policy eval` must refuse, not decide, an answer
// text that is not UTF-8. docs/policies.md: it "is a dry run of the decision the server
// makes for an answer" and "exits 0 when it could decide ... and 1 when it could not";
// the server never judges such a text (docs/providers.md, `malformed`: a body "not valid
// UTF-8" is `inference_failed`), and Cedar would see the bytes otherwise than they are: a
// forbid on "*FORBIDDEN*" would be dodged by one stray byte.
func TestPolicyEvalResponseNotUTF8(t *testing.T) {
	dir := newE2EProject(t)
	file := filepath.Join(t.TempDir(), "answer.txt")
	if err := os.WriteFile(file, []byte("FORBID\xffDEN"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"policy", "eval", "--project", dir, "--agent", "helper", "--response-file", file},
		{"policy", "eval", "--project", dir, "--agent", "helper", "--response", "FORBID\xffDEN"},
	} {
		code, out, errOut := runCLI(t, "", args...)
		if code == 0 || strings.Contains(out, "decision:") {
			t.Errorf("%v: exit %d, want a refusal (exit 1) and no decision\n%s%s", args[5:], code, out, errOut)
		}
	}
}

// TestPolicyEvalToolJSONNames: `policy eval --action use_tool --json` must name the
// tool's members as documented. docs/policies.md: "The output adds `action` and `tool`
// (kind, paths, outside paths, workspace)"; every other JSON of the CLI is snake_case and
// gives [] for an empty list.
func TestPolicyEvalToolJSONNames(t *testing.T) {
	tool, out := policyEvalMember(t, "tool", "--agent", "helper", "--action", "use_tool", "--tool", "read", "--path", "a.txt")
	for _, k := range []string{"kind", "paths", "outside", "workspace"} {
		if _, ok := tool[k]; !ok {
			t.Errorf("tool has no member %q: %s", k, out)
		}
	}
	if v, ok := tool["outside"]; ok && string(v) != "[]" {
		t.Errorf(`tool.outside is %s, want [] when no path is outside`, v)
	}
}

// policyEvalMember runs policy eval --json on a new project with args and returns the
// object its output holds as member, and the output.
func policyEvalMember(t *testing.T, member string, args ...string) (map[string]json.RawMessage, string) {
	t.Helper()
	dir := newE2EProject(t)
	code, out, errOut := runCLI(t, "", append([]string{"policy", "eval", "--project", dir, "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("policy eval %v --json: exit %d\n%s%s", args, code, out, errOut)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(got[member], &obj); err != nil {
		t.Fatalf("member %s of %s: %v", member, out, err)
	}
	return obj, out
}

// TestPolicyEvalUseToolFollowsLinks: the use_tool dry run locates --path as the server
// locates an agent's paths: through a symbolic link leading outside the workspace
// (etc -> /etc, up -> ..) the path is outside, and the decision a deny.
func TestPolicyEvalUseToolFollowsLinks(t *testing.T) {
	ws := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(ws, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(ws, "up")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"etc/passwd", "up/elsewhere.txt"} {
		code, out, errOut := runCLI(t, "", "policy", "eval", "--project", "../..", "--agent", "reviewer",
			"--action", "use_tool", "--tool", "read", "--workspace", ws, "--path", path)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", path, code, out, errOut)
		}
		if !strings.Contains(out, "decision: deny") {
			t.Errorf("--path %s (a link leading outside the workspace, which the server denies as outside): the dry run says\n%s", path, out)
		}
	}
}

// TestPolicyCheckQuotesIDs: an @id with a line break (Cedar's "\n" escape) prints no line
// of its own in `symbi policy check`: it is quoted, as a file name with one is.
func TestPolicyCheckQuotesIDs(t *testing.T) {
	dir := t.TempDir()
	forged := "respond: mode default"
	writeFile(t, filepath.Join(dir, "policies", "a.cedar"), `@id("x\n`+forged+`") permit (principal, action == Action::"respond", resource);`+"\n")
	code, out, errOut := runCLI(t, "", "policy", "check", "--project", dir)
	if code != 0 {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if line == forged {
			t.Fatalf("an @id printed a line of its own:\n%s", out)
		}
	}
	if !strings.Contains(out, `"x\n`+forged+`"`) {
		t.Fatalf("the @id is not shown quoted:\n%s", out)
	}
}
