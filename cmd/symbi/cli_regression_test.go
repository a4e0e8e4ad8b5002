package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/ledger"
	"symbi/internal/policy"
	"symbi/internal/runs"
)

// TestStrayArgumentsRefused: a positional argument a command does not take is a usage
// error (exit 2), never silently dropped: the command would act on the working
// directory's project instead of the one the operator named (audit prune deleting the
// wrong project's journals, symbi mcp creating a key and ledger in the wrong directory).
func TestStrayArgumentsRefused(t *testing.T) {
	t.Run("audit prune", func(t *testing.T) {
		dir, _, files, lw := ledgerProject(t, 2)
		lw.Close()
		other := t.TempDir() // the project the operator meant
		t.Chdir(dir)
		code, out, errOut := runCLI(t, "", "audit", "prune", "--older-than", "1ns", other)
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("%s was pruned from the working directory's project: %v", filepath.Base(f), err)
			}
		}
		if code != 2 {
			t.Errorf("audit prune --older-than 1ns %s: exit %d, want 2 (usage error)\n%s%s", other, code, out, errOut)
		}
	})
	for _, args := range [][]string{
		{"audit", "checkpoint", "OTHER"},
		{"audit", "prove", "--run-id", "run-a", "OTHER"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			dir, _, _, lw := ledgerProject(t, 1)
			lw.Close()
			t.Chdir(dir)
			args[len(args)-1] = t.TempDir()
			code, out, errOut := runCLI(t, "", args...)
			if code != 2 {
				t.Errorf("%s: exit %d, want 2 (usage error)\n%s%s", strings.Join(args, " "), code, out, errOut)
			}
		})
	}
	t.Run("mcp", func(t *testing.T) {
		cwd, project := t.TempDir(), t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, symbiBin, "mcp", project) // "--project" forgotten
		cmd.Dir = cwd                                             // stdin: /dev/null
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("symbi mcp %s: %v, want exit 2 (usage error)\n%s", project, err, out)
		}
		if _, err := os.Lstat(filepath.Join(cwd, ".symbiont")); err == nil {
			t.Errorf("symbi mcp %s created a signing key and ledger in the working directory %s", project, cwd)
		}
	})
}

// TestPruneNegativeOlderThan: --older-than is an age; a negative one (a cutoff in the
// future, choosing every journal) is a usage error, like --older-than 0.
func TestPruneNegativeOlderThan(t *testing.T) {
	dir, _, files, lw := ledgerProject(t, 2)
	lw.Close()
	code, out, errOut := runCLI(t, "", "audit", "prune", "--project", dir, "--older-than", "-1h")
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s (written just now) was pruned by --older-than -1h", filepath.Base(f))
		}
	}
	if code != 2 {
		t.Errorf("audit prune --older-than -1h: exit %d, want 2\n%s%s", code, out, errOut)
	}
}

// TestCheckpointFileBounded: audit verify --checkpoint reads a checkpoint note (a few
// hundred bytes) up to a limit, as every other file the CLI reads: a huge or endless one
// (/dev/zero, a pipe) is refused, not read whole into memory.
func TestCheckpointFileBounded(t *testing.T) {
	dir, key, _, lw := ledgerProject(t, 1)
	lw.Close()
	huge := filepath.Join(t.TempDir(), "checkpoint")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 256<<20); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, out, errOut := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", key, "--checkpoint", huge)
	runtime.ReadMemStats(&after)
	if code != 1 {
		t.Errorf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
		t.Errorf("a 256 MiB --checkpoint file made the command allocate %d MiB: the read is not bounded", n>>20)
	}
}

// TestCheckpointFileUnreadable: a --checkpoint file that is missing, or cannot be read
// (a directory), is the auditor's error, named so — not_found, invalid_request — with its
// path, not "internal".
func TestCheckpointFileUnreadable(t *testing.T) {
	dir, key, _, lw := ledgerProject(t, 1)
	lw.Close()
	missing := filepath.Join(t.TempDir(), "none")
	for file, want := range map[string]string{missing: "checkpoint: not_found: open " + missing, t.TempDir(): "checkpoint: invalid_request: read "} {
		code, out, errOut := runCLI(t, "", "audit", "verify", "--project", dir, "--public-key", key, "--checkpoint", file)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("--checkpoint %s: exit %d, stderr %q; want 1, %q\n%s", file, code, errOut, want, out)
		}
	}
}

// TestRunsEventsLimitIsUsage: a --limit out of range is a usage error (exit 2) whatever
// the project holds: it is checked before the project is opened.
func TestRunsEventsLimitIsUsage(t *testing.T) {
	code, out, errOut := runCLI(t, "", "runs", "events", "--project", t.TempDir(), "--limit", "0", "run-a")
	if code != 2 || !strings.Contains(errOut, "1..1000") {
		t.Errorf("runs events --limit 0 on a project without runs: exit %d, want 2 naming 1..1000\n%s%s", code, out, errOut)
	}
}

// TestRunsMoreHint: the "more:" line printed after a page is a command that gives the next
// page of the same listing: it repeats --project, the filters and --limit (the cursor
// carries only a run id).
func TestRunsMoreHint(t *testing.T) {
	dir, _, _, lw := ledgerProject(t, 3)
	lw.Close()
	code, out, _ := runCLI(t, "", "runs", "list", "--project", dir, "--status", "cancelled", "--limit", "1")
	if code != 0 || !strings.Contains(out, "more: ") {
		t.Fatalf("runs list: exit %d\n%s", code, out)
	}
	hint := out[strings.Index(out, "more: "):]
	for _, want := range []string{"--project " + dir, "--status cancelled", "--limit 1"} {
		if !strings.Contains(hint, want) {
			t.Errorf("runs list hint %q lacks %q", strings.TrimSpace(hint), want)
		}
	}
	code, out, _ = runCLI(t, "", "runs", "events", "--project", dir, "--limit", "1", "run-a")
	if code != 0 || !strings.Contains(out, "more: ") {
		t.Fatalf("runs events: exit %d\n%s", code, out)
	}
	hint = out[strings.Index(out, "more: "):]
	for _, want := range []string{"--project " + dir, "--limit 1"} {
		if !strings.Contains(hint, want) {
			t.Errorf("runs events hint %q lacks %q", strings.TrimSpace(hint), want)
		}
	}
}

// TestPolicyEvalUseToolProtectedPaths: the use_tool dry run gives the decision the server
// gives: a permission request naming a path through .symbiont (the journals, the ledger,
// the signing key) or under policies/, or more paths than a record holds, is denied before
// any policy, whatever the policies permit (the example's permit read anywhere).
func TestPolicyEvalUseToolProtectedPaths(t *testing.T) {
	var many []string // more paths than a permission_decided record holds: rejected before any policy
	for i := range 65 {
		many = append(many, "--path", fmt.Sprintf("docs/f%d.md", i))
	}
	code, out, errOut := runCLI(t, "", append([]string{"policy", "eval", "--project", "../..", "--agent", "reviewer", "--action", "use_tool", "--tool", "read"}, many...)...)
	if code != 0 || !strings.Contains(out, "decision: deny") {
		t.Errorf("use_tool read with 65 paths: exit %d; the server rejects it before any policy, the dry run says:\n%s%s", code, out, errOut)
	}
	for _, path := range []string{".symbiont/governed/audit-signing.key", ".symbiont/ledger.jsonl", "policies/secrets.cedar"} {
		t.Run(path, func(t *testing.T) {
			code, out, errOut := runCLI(t, "", "policy", "eval", "--project", "../..", "--agent", "reviewer", "--action", "use_tool", "--tool", "read", "--path", path)
			if code != 0 || !strings.Contains(out, "decision: deny") || !strings.Contains(out, "errors: symbi: ") {
				t.Errorf("use_tool read %s: exit %d; the server denies it before any policy, naming the rule; the dry run says:\n%s%s", path, code, out, errOut)
			}
		})
	}
}

// TestRunsListAgentByRegistryName: runs list --agent takes a registry name, a declared name
// or an agent_id, as list_runs does: a file alias (agents/helper.symbi declaring agent
// assistant) lists its runs under its registry name too — also when its definition is
// refused now (a delegated agent, read without the executors file).
func TestRunsListAgentByRegistryName(t *testing.T) {
	for what, src := range map[string]string{
		"invocable": "agent assistant {}\n",
		"refused":   "metadata { executor = \"claude_code\" }\nagent assistant {}\n",
	} {
		t.Run(what, func(t *testing.T) { runsListByRegistryName(t, src) })
	}
}

func runsListByRegistryName(t *testing.T, src string) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agents", "helper.symbi"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	store, err := journal.OpenStore(root, journal.StoreOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lw, err := ledger.Open(root, store.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	agentID := policy.AgentID("assistant")
	runID := "0190a000-0000-7000-8000-000000000001"
	recordRun(t, store, lw, agentID, runID, journal.Started{Agent: "assistant", File: "agents/helper.symbi"})
	lw.Close()

	for _, name := range []string{"assistant", agentID, "helper"} {
		var page runs.Page
		code, out, errOut := runCLI(t, "", "runs", "list", "--project", dir, "--json", "--agent", name)
		if code != 0 || unmarshalFresh(out, &page) != nil || len(page.Runs) != 1 {
			t.Errorf("runs list --agent %s: exit %d, want the one run\n%s%s", name, code, out, errOut)
		}
	}
}

// TestInitRefusesBeforeWriting: symbi init refuses a .gitignore it cannot use (a
// directory) changing nothing: not half a project that the next symbi init refuses
// ("agents/assistant.symbi already exists").
func TestInitRefusesBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, ".gitignore"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "init", dir)
	if code != 1 {
		t.Errorf("init with a .gitignore directory: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, rel := range []string{"agents", "policies", "README.md", "AGENTS.md"} {
		if _, err := os.Lstat(filepath.Join(dir, rel)); err == nil {
			t.Errorf("the refused init left %s behind", rel)
		}
	}
}

// TestPolicyEvalUseToolSymlinkedProject: the use_tool dry run resolves its workspace's
// symbolic links as the server does: a project reached through a link (a symlinked home, a
// working directory entered through one) gets the same decision as by its real path.
func TestPolicyEvalUseToolSymlinkedProject(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "project-link")
	if err := os.Symlink(repo, link); err != nil {
		t.Fatal(err)
	}
	// The same request, by the real path and through the link.
	for _, project := range []string{repo, link} {
		code, out, errOut := runCLI(t, "", "policy", "eval", "--project", project, "--agent", "reviewer",
			"--action", "use_tool", "--tool", "read", "--path", "docs/a.md")
		if code != 0 || !strings.Contains(out, "decision: allow") {
			t.Errorf("policy eval --project %s use_tool read docs/a.md: exit %d, want 0 and allow (as through the real path)\nstdout: %s\nstderr: %s", project, code, out, errOut)
		}
	}
}
