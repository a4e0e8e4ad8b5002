package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/project"
)

// listJSON runs "agents list --json" on dir and decodes the entries.
func listJSON(t *testing.T, dir string) []project.Entry {
	t.Helper()
	code, out, errOut := runCLI(t, "", "agents", "list", "--project", dir, "--json")
	if code != 0 {
		t.Fatalf("agents list: exit %d, stderr %s", code, errOut)
	}
	var entries []project.Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("agents list --json: %v\n%s", err, out)
	}
	return entries
}

// TestAgentsListExampleProject checks the example project at the repository root.
func TestAgentsListExampleProject(t *testing.T) {
	want := map[string]string{ // name → "" when invocable, else a reason prefix
		"docs_writer":    "",
		"explainer":      "",
		"reviewer":       "",
		"summarizer":     "",
		"deploy_bot":     "rule 3 at ",
		"nightly_digest": "rule 2 at ",
		"pair_coder":     "rule 3 at ", // delegated: refused without --executors
		"shell_helper":   "rule 4 at ",
	}
	entries := listJSON(t, "../..")
	if len(entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(entries), len(want), entries)
	}
	for i, e := range entries {
		if i > 0 && entries[i-1].Name >= e.Name {
			t.Errorf("entries not sorted by name at %q", e.Name)
		}
		prefix, ok := want[e.Name]
		switch {
		case !ok:
			t.Errorf("unexpected entry %q", e.Name)
		case prefix == "" && (!e.Invocable || e.Reason != ""):
			t.Errorf("%s: want invocable, got %+v", e.Name, e)
		case prefix != "" && (e.Invocable || !strings.HasPrefix(e.Reason, prefix)):
			t.Errorf("%s: want refused with %q, got %+v", e.Name, prefix, e)
		}
	}

	code, out, _ := runCLI(t, "", "agents", "list", "--project", "../..")
	if code != 0 || !strings.Contains(out, "NAME") ||
		!strings.Contains(out, "reviewer") || !strings.Contains(out, "rule 2 at") {
		t.Fatalf("agents list text: exit %d\n%s", code, out)
	}
}

func TestAgentsListErrors(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "agents"), 0o755))
	must(os.WriteFile(filepath.Join(root, "agents/ok.symbi"), []byte("agent ok {}"), 0o644))
	must(os.WriteFile(filepath.Join(root, "agents/bad.symbi"), []byte("agent bad {} // \xff"), 0o644))
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"--project", root}, 0, "ok", `agents/bad.symbi`},
		{[]string{"--project", filepath.Join(root, "missing")}, 1, "", "not_found"},
		{[]string{"--project", root, "extra"}, 2, "", "usage"},
		{[]string{"--no-such-flag"}, 2, "", "usage"},
	}
	for _, tt := range tests {
		code, out, errOut := runCLI(t, "", append([]string{"agents", "list"}, tt.args...)...)
		if code != tt.code || !strings.Contains(out, tt.stdout) || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("agents list %v: exit %d, stdout %q, stderr %q", tt.args, code, out, errOut)
		}
		if tt.code == 0 && (!strings.Contains(out, "agents/bad.symbi") || !strings.Contains(out, `rule "UTF-8 only"`)) {
			t.Errorf("the unreadable file is not listed refused, naming its rule: %s", out)
		}
	}
}

func TestInitThenList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := runCLI(t, "", "init", dir)
	if code != 0 || !strings.Contains(out, "created "+filepath.Join(dir, "agents/assistant.symbi")) || !strings.Contains(out, "created "+filepath.Join(dir, ".gitignore")) {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	if ig, err := os.ReadFile(filepath.Join(dir, ".gitignore")); err != nil || !strings.Contains(string(ig), "\n.symbiont/\n") {
		t.Errorf(".gitignore %q (%v) does not keep .symbiont/ out of git", ig, err)
	}
	if readme, _ := os.ReadFile(filepath.Join(dir, "README.md")); !strings.Contains(string(readme), "OPENAI_BASE_URL") || !strings.Contains(string(readme), "Ollama") {
		t.Errorf("starter README does not say how to use a local model:\n%s", readme)
	}
	entries := listJSON(t, dir)
	if len(entries) != 1 || entries[0].Name != "assistant" || !entries[0].Invocable {
		t.Fatalf("starter project entries %+v, want assistant invocable", entries)
	}
	code, _, errOut = runCLI(t, "", "init", dir)
	if code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("second init: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runCLI(t, "", "init", dir, "extra"); code != 2 {
		t.Fatalf("init with two arguments: exit %d, want 2", code)
	}
	// In an existing repository, .symbiont/ is added to its .gitignore, once.
	repo := t.TempDir()
	writeFile(t, filepath.Join(repo, ".gitignore"), "bin/")
	if code, _, errOut := runCLI(t, "", "init", repo); code != 0 {
		t.Fatalf("init in a repository: exit %d: %s", code, errOut)
	}
	if ig, _ := os.ReadFile(filepath.Join(repo, ".gitignore")); string(ig) != "bin/\n.symbiont/\n" {
		t.Errorf("existing .gitignore became %q", ig)
	}
}

// TestEveryRefusalReason: a definition wrong in several ways shows every reason in
// agents list (text and --json "reasons", "reason" the first) and a one-line summary with
// the count in the refused_definition error.
func TestEveryRefusalReason(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "agents/reviewer.symbi"), "metadata {\n    tags = [\"a\"]\n}\nagent reviewer(code: String) {\n    with memory = \"persistent\" {}\n}\n")
	code, out, errOut := runCLI(t, "", "agents", "list", "--project", root, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var entries []struct {
		Reason  string   `json:"reason"`
		Reasons []string `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("agents list --json: %v\n%s", err, out)
	}
	want := []string{
		`rule 3 at 2:5: metadata key "tags" is not allowed (only description, version, author, executor)`,
		`rule 4 at 4:16: agent "reviewer" declares parameters`,
		`rule 5 at 5:10: with setting "memory" is not allowed (only sandbox and timeout)`,
	}
	if e := entries[0]; e.Reason != want[0] || strings.Join(e.Reasons, "\n") != strings.Join(want, "\n") {
		t.Errorf("reason %q, reasons %q", e.Reason, e.Reasons)
	}
	_, text, _ := runCLI(t, "", "agents", "list", "--project", root)
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("agents list text lacks %q:\n%s", w, text)
		}
	}
	_, _, errOut = runCLI(t, "", "policy", "eval", "--project", root, "--agent", "reviewer", "--response", "x")
	if !strings.Contains(errOut, "refused_definition: agents/reviewer.symbi: "+want[0]+" (and 2 more)") {
		t.Errorf("refused_definition error: %s", errOut)
	}
}

// TestFirstRunMessages: what a person following the README first meets says what is
// wrong and what to do.
func TestFirstRunMessages(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	cmd := exec.Command(symbiBin, "mcp", "--project", missing)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 || !strings.Contains(string(out), "project directory "+missing+" does not exist") {
		t.Errorf("mcp on a missing directory: exit %d\n%s", code, out)
	}
	code, _, errOut := runCLI(t, "", "agents", "list", "--project", t.TempDir())
	if code != 0 || !strings.Contains(errOut, "no agents/ directory") || !strings.Contains(errOut, "symbi init") {
		t.Errorf("agents list without agents/: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := runCLI(t, "", "--version"); code != 0 || !strings.HasPrefix(out, "symbi ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	if code, out, _ := runCLI(t, "", "-h"); code != 0 || !strings.Contains(out, "usage: symbi") {
		t.Errorf("-h: exit %d, %q", code, out)
	}
	_, help, _ := runCLI(t, "", "agents", "list", "--help")
	if !strings.Contains(help, "--project DIR") || strings.Contains(help, "  -project") {
		t.Errorf("help does not use the --flag form:\n%s", help)
	}
	if _, help, _ := runCLI(t, "", "init", "--help"); strings.Contains(help, "[flags]") || !strings.HasPrefix(help, "usage: symbi init") {
		t.Errorf("init --help promises flags it does not have:\n%s", help)
	}
	if code, _, errOut := runCLI(t, "", "schema", "verify", "x.json"); code != 2 || !strings.Contains(errOut, "give exactly one of --key and --key-url") {
		t.Errorf("schema verify without a key: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "audit", "verify", "x.jsonl"); code != 1 || !strings.Contains(errOut, "--public-key is required") {
		t.Errorf("audit verify without a key: exit %d, %q", code, errOut)
	}
	_, usage, _ := runCLI(t, "", "--help")
	for _, line := range strings.Split(usage, "\n") {
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && len(line) > 43 && line[42] != ' ' && !strings.HasPrefix(line, "  schema verify SCHEMA") {
			t.Errorf("command table out of line: %q", line)
		}
	}
}

// TestAgentsListExecutors: with the server's executors file, a delegated agent is listed
// as such; without it, refused by rule 3 naming the flag.
func TestAgentsListExecutors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"fake\" }\nagent coder {}\n")
	execFile := filepath.Join(t.TempDir(), "executors.json")
	writeFile(t, execFile, `{"executors":{"fake":{"command":["/bin/sh"]}}}`)
	code, out, errOut := runCLI(t, "", "agents", "list", "--project", dir, "--executors", execFile)
	if code != 0 || !strings.Contains(out, "delegated (fake)") {
		t.Fatalf("with --executors: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "", "agents", "list", "--project", dir)
	if code != 0 || !strings.Contains(out, "--executors") || strings.Contains(out, "delegated") {
		t.Fatalf("without --executors: exit %d\n%s", code, out)
	}
}

// TestAgentsListDescriptionForgesNoRow: `symbi agents list` prints one row per agent
// file and then "every reason, one a line". A definition's description is text from a
// project file; the terminal filter (security-model.md, "Text from outside cannot drive a
// terminal") keeps newline and tab, and text/tabwriter breaks a line at a form feed and a
// cell at a vertical tab, so a description holding one would print a second line that
// reads like another registry row — here a forged "zzz  yes  agents/zzz.symbi" row
// claiming an invocable agent that does not exist. The AGENTS.md table keeps cells to one
// line for the same reason (project.md). Each field keeps to its row, its line breaks, tabs
// and other controls shown escaped: one agent with no refusal reasons prints a header and
// one row.
func TestAgentsListDescriptionForgesNoRow(t *testing.T) {
	for _, tc := range []struct{ name, description, want string }{
		{"newline", `line one\nzzz\tyes\tagents/zzz.symbi\tzzz\tforged row`, `line one\nzzz\tyes`},
		{"form feed", "line one\fzzz        yes        agents/zzz.symbi  zzz     forged row", `line one\u000czzz`},
		{"vertical tab", "line one\vzzz\vyes\vagents/zzz.symbi\vzzz\vforged row", `line one\u000bzzz`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "agents", "a.symbi"), "metadata {\n    description = \""+tc.description+"\",\n    version = \"0.1.0\"\n}\n\nagent a {\n    capabilities = [\"answer\"]\n}\n")
			entries := listJSON(t, dir)
			if len(entries) != 1 || !entries[0].Invocable || !strings.Contains(entries[0].Description, "zzz") {
				t.Fatalf("setup: want one invocable agent with that description, got %+v", entries)
			}
			code, out, errOut := runCLI(t, "", "agents", "list", "--project", dir)
			if code != 0 {
				t.Fatalf("agents list: exit %d: %s", code, errOut)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if len(lines) != 2 {
				t.Errorf("agents list printed %d lines for one agent, want header + 1 row:\n%s", len(lines), out)
			}
			for _, l := range lines[1:] {
				if strings.HasPrefix(l, "zzz") {
					t.Errorf("a description forged a registry row: %q", l)
				}
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("the description is not shown escaped on its row (want %s):\n%s", tc.want, out)
			}
		})
	}
}

// TestAgentsMDGenerateDelegatedAgent: `symbi agents-md generate --executors FILE` takes the
// registry as the server started with that file does, so a delegated agent it serves is
// written into AGENTS.md's generated section — the guidance every invoked model is given
// and get_agents_md serves — as delegated (start_run only), not as refused for an
// executor "not registered with this server".
func TestAgentsMDGenerateDelegatedAgent(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "metadata { description = \"writes code\", executor = \"claude_code\" }\nagent coder { capabilities = [\"code\"] }\n"
	if err := os.WriteFile(filepath.Join(root, "agents/coder.symbi"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	execs := filepath.Join(t.TempDir(), "executors.json")
	if err := os.WriteFile(execs, []byte(`{"executors": {"claude_code": {"command": ["/bin/true"]}}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The server's view: the agent is delegated and usable.
	code, out, errOut := runCLI(t, "", "agents", "list", "--project", root, "--executors", execs)
	if code != 0 || !strings.Contains(out, "delegated (claude_code)") {
		t.Fatalf("agents list --executors: exit %d, %q %q", code, out, errOut)
	}

	code, out, errOut = runCLI(t, "", "agents-md", "generate", "--project", root, "--executors", execs)
	if code != 0 {
		t.Fatalf("agents-md generate --executors: exit %d, stdout %q, stderr %q (no way to generate AGENTS.md with the server's executors)", code, out, errOut)
	}
	md, err := os.ReadFile(filepath.Join(root, "AGENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := project.Guidance(md)
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(g, "\n") {
		if strings.HasPrefix(l, "| coder |") {
			row = l
		}
	}
	if row == "" || strings.Contains(row, "not registered") || !strings.Contains(row, "delegated") {
		t.Errorf("AGENTS.md row for the delegated agent %q: want it shown as delegated, not refused", row)
	}
}
