package project

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go"
	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/proctest"
)

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "project")
	created, err := Init(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := "[agents/assistant.symbi policies/respond.cedar README.md AGENTS.md .gitignore]"
	if got := strings.Join(created, " "); "["+got+"]" != want {
		t.Fatalf("created %v, want %s", created, want)
	}
	r, _ := loadRegistry(t, dir)
	a, err := r.Resolve("assistant")
	if err != nil || !a.Entry.Invocable {
		t.Fatalf("starter agent not invocable: %v", err)
	}
	pol, err := os.ReadFile(filepath.Join(dir, "policies/respond.cedar"))
	must(t, err)
	ps, err := cedar.NewPolicySetFromBytes("respond.cedar", pol)
	if err != nil {
		t.Fatalf("starter policy does not parse: %v", err)
	}
	allowed, _ := cedar.Authorize(ps, cedar.EntityMap{}, cedar.Request{
		Principal: cedar.NewEntityUID("Agent", "assistant"),
		Action:    cedar.NewEntityUID("Action", "respond"),
		Resource:  cedar.NewEntityUID("Response", "run"),
		Context:   cedar.NewRecord(cedar.RecordMap{}),
	})
	if allowed != cedar.Allow {
		t.Fatalf("starter policy does not permit respond")
	}
	md, err := openProject(t, dir, false).AgentsMD()
	must(t, err)
	if g, err := Guidance(md); err != nil || !strings.Contains(g, "| assistant | assistant |") || !strings.Contains(g, "| yes |") {
		t.Fatalf("AGENTS.md section lacks the starter agent:\n%s", md)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil || !strings.Contains(string(readme), "symbi mcp") {
		t.Fatalf("README: %q, %v", readme, err)
	}

	// A second init refuses and changes nothing.
	must(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("mine\n"), 0o644))
	must(t, os.Remove(filepath.Join(dir, "agents/assistant.symbi")))
	created, err = Init(dir, slog.New(slog.DiscardHandler))
	if !errors.Is(err, errcode.InvalidRequest) || len(created) != 0 {
		t.Fatalf("init over an existing project: created %v, error %v", created, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "agents/assistant.symbi")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused init still wrote the agent: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "README.md")); string(b) != "mine\n" {
		t.Fatalf("refused init changed README.md: %q", b)
	}
}

// TestInitFollowsNoLink: init writes nothing through a symbolic link — a policies/ that
// leads elsewhere, or a .gitignore that does — and says which.
func TestInitFollowsNoLink(t *testing.T) {
	for name, link := range map[string]string{"policies": "policies", "gitignore": ".gitignore"} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			dir, outside := filepath.Join(base, "p"), filepath.Join(base, "outside")
			must(t, os.MkdirAll(dir, 0o755))
			must(t, os.MkdirAll(outside, 0o755))
			target := outside
			if link == ".gitignore" {
				target = filepath.Join(outside, "target")
				must(t, os.WriteFile(target, []byte("x\n"), 0o644))
			}
			must(t, os.Symlink(target, filepath.Join(dir, link)))
			_, err := Init(dir, nil)
			if errcode.Of(err) != errcode.ProtectedPath || !strings.Contains(err.Error(), "symbolic link") {
				t.Fatalf("init: %v, want protected_path naming the link", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "agents")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("init changed the project before refusing: %v", err)
			}
			ents, _ := os.ReadDir(outside)
			if b, _ := os.ReadFile(filepath.Join(outside, "target")); len(ents) > 1 || (link == ".gitignore" && string(b) != "x\n") || (link == "policies" && len(ents) != 0) {
				t.Fatalf("init wrote through the link: %v, %q", ents, b)
			}
		})
	}
}

// TestInitAgentsMDOverLimit: init in a directory whose agents/ already holds so many
// agents that the generated AGENTS.md would pass its 64 KiB limit refuses (a larger one
// would refuse every run), and leaves the project as it was: the starter files it wrote
// are removed, no AGENTS.md or .gitignore is written.
func TestInitAgentsMDOverLimit(t *testing.T) {
	dir := t.TempDir()
	desc := strings.Repeat("d", 600)
	for i := range 150 {
		writeFile(t, dir, fmt.Sprintf("agents/a%03d.symbi", i), []byte(fmt.Sprintf(
			"metadata { description = %q, executor = \"orga\" }\nagent a%03d { capabilities = [\"answer\"] }\n", desc, i)))
	}
	created, err := Init(dir, slog.New(slog.DiscardHandler))
	if errcode.Of(err) != errcode.LimitExceeded || len(created) != 0 {
		t.Fatalf("Init = %v, %v; want limit_exceeded, nothing created", created, err)
	}
	for _, rel := range []string{"agents/assistant.symbi", "policies", "README.md", agentsMDName, ".gitignore"} {
		if _, serr := os.Lstat(filepath.Join(dir, rel)); !errors.Is(serr, fs.ErrNotExist) {
			t.Errorf("init refused (%v) but left %s", err, rel)
		}
	}
}

// TestInitStarterStemTaken: an agents/assistant.dsl takes the starter agent's stem (the
// two would be ambiguous, and assistant not invocable): init refuses, writing nothing.
func TestInitStarterStemTaken(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "agents/assistant.dsl", []byte("agent assistant { capabilities = [\"answer\"] }\n"))
	_, err := Init(dir, slog.New(slog.DiscardHandler))
	if errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("Init: %v; want invalid_request (agents/assistant.dsl already exists)", err)
	}
	if _, serr := os.Lstat(filepath.Join(dir, "agents/assistant.symbi")); !errors.Is(serr, fs.ErrNotExist) {
		t.Fatalf("init refused (%v) but wrote agents/assistant.symbi", err)
	}
}

// TestInitHardLinkedGitignore: a .gitignore that is a hard link (to a file elsewhere) is
// refused before anything is written, as files of more than one link are everywhere else:
// init would append to a file outside the project.
func TestInitHardLinkedGitignore(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "p"), filepath.Join(base, "outside")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.MkdirAll(outside, 0o755))
	target := filepath.Join(outside, "victim")
	must(t, os.WriteFile(target, []byte("do not touch\n"), 0o644))
	must(t, os.Link(target, filepath.Join(dir, ".gitignore")))
	if _, err := Init(dir, slog.New(slog.DiscardHandler)); errcode.Of(err) != errcode.ProtectedPath {
		t.Errorf("Init: %v; want protected_path", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "agents")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("init refused after creating agents/ (%v)", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "do not touch\n" {
		t.Fatalf("init wrote through a hard-linked .gitignore into a file outside the project: %q", b)
	}
}

// TestInitNonRegularGitignore: a .gitignore that is not a regular file (a directory, a
// FIFO) is refused before any file is created, like a symbolic link: a half-initialised
// project would be refused by the next init ("already exists").
func TestInitNonRegularGitignore(t *testing.T) {
	for _, kind := range []string{"directory", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			gi := filepath.Join(dir, ".gitignore")
			if kind == "directory" {
				must(t, os.Mkdir(gi, 0o755))
			} else {
				must(t, unix.Mkfifo(gi, 0o644))
			}
			_, err := Init(dir, slog.New(slog.DiscardHandler))
			if errcode.Of(err) != errcode.ProtectedPath {
				t.Fatalf("Init with a .gitignore that is a %s: %v; want protected_path", kind, err)
			}
			for _, rel := range []string{"agents", "policies", "README.md", agentsMDName} {
				if _, serr := os.Lstat(filepath.Join(dir, rel)); !errors.Is(serr, fs.ErrNotExist) {
					t.Errorf("init refused (%v) after creating %s", err, rel)
				}
			}
		})
	}
}

// TestInitOversizeGitignore: a .gitignore over 1 MiB is refused (limit_exceeded, "add the
// line by hand") leaving the project as it was, so that init, run again once the line is
// added, succeeds — not refused "already exists" by half a project.
func TestInitOversizeGitignore(t *testing.T) {
	dir := t.TempDir()
	gi := filepath.Join(dir, ".gitignore")
	if err := os.WriteFile(gi, []byte(strings.Repeat("# x\n", (maxGitignoreBytes/4)+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	created, err := Init(dir, slog.New(slog.DiscardHandler))
	if errcode.Of(err) != errcode.LimitExceeded {
		t.Fatalf("Init with a .gitignore over 1 MiB: %v; want limit_exceeded", err)
	}
	var left []string
	for _, rel := range []string{"agents", "policies", "README.md", agentsMDName} {
		if _, serr := os.Lstat(filepath.Join(dir, rel)); !errors.Is(serr, fs.ErrNotExist) {
			left = append(left, rel)
		}
	}
	if len(left) > 0 {
		t.Errorf("init refused the .gitignore (%v) but left %v (reported created: %v): a half-initialised project", err, left, created)
	}
	// The operator follows the advice: adds the line by hand and runs init again.
	if err := os.WriteFile(gi, []byte(".symbiont/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Init(dir, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("init after the .gitignore was fixed: %v", err)
	}
}

// TestInitAgentsNotADirectory: an agents/ or policies/ that is not a directory
// (a regular file, a FIFO) is a state of the user's project, not a bug in symbi; init
// must refuse it with a user-facing code naming it, as openParent already intends
// (protected_path: "... is a symbolic link or not a directory"), and change nothing.
// docs/errors.md: `internal` is "a bug or an unexpected system failure";
// error codes are stable and meaningful.
func TestInitAgentsNotADirectory(t *testing.T) {
	for _, d := range []string{"agents", "policies"} {
		t.Run(d, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, d), []byte("not a directory\n"), 0o644))
			created, err := Init(dir, slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatalf("init with %s/ a regular file succeeded: %v", d, created)
			}
			if c := errcode.Of(err); c == errcode.Internal || !strings.Contains(err.Error(), d) {
				t.Errorf("init with %s/ a regular file: %v; want a user-facing code (protected_path or invalid_request) naming %s, not internal", d, err, d)
			}
			if _, serr := os.Lstat(filepath.Join(dir, "README.md")); !errors.Is(serr, fs.ErrNotExist) {
				t.Errorf("init refused but wrote README.md")
			}
		})
	}
}

// TestInitStarterNotInvocable: docs/project.md, symbi init: "Afterwards `symbi
// agents list --project DIR` shows `assistant` as invocable." Init already refuses when
// the starter would not be usable for other reasons (an agents/assistant.dsl making it
// ambiguous; an AGENTS.md over its limit) and removes what it wrote; so it does when
// agents/ already holds 16 MiB of agent files named before "assistant", past which the
// registry's retention limit (project.md step 5) refuses assistant.symbi ("registry
// retention"): refused, naming the rule, with nothing left behind — or else the starter
// is invocable afterwards. (The same holds for an agents/ with more than 1,024 entries,
// where assistant.symbi may not be inspected.)
func TestInitStarterNotInvocable(t *testing.T) {
	dir := t.TempDir()
	for i := range 16 {
		head := fmt.Sprintf("agent a%02d {}\n//", i)
		src := append([]byte(head), bytes.Repeat([]byte("x"), AgentFileLimit-len(head)-1)...)
		src = append(src, '\n')
		writeFile(t, dir, fmt.Sprintf("agents/a%02d.symbi", i), src) // "a00".."a15" < "assistant"
	}
	created, err := Init(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		// A refusal is acceptable if it is clear and leaves nothing behind.
		if errcode.Of(err) == errcode.Internal {
			t.Errorf("init refused with internal: %v", err)
		}
		if _, serr := os.Lstat(filepath.Join(dir, "agents/assistant.symbi")); !errors.Is(serr, fs.ErrNotExist) {
			t.Errorf("init refused (%v) but left agents/assistant.symbi", err)
		}
		return
	}
	r, _ := loadRegistry(t, dir)
	if _, rerr := r.Resolve("assistant"); rerr != nil {
		t.Fatalf("init succeeded (created %v) but the starter agent is not invocable: %v", created, rerr)
	}
}

// TestInitDirIsAFile: when DIR itself is a regular file, init's refusal names DIR as
// what is not a directory, not AGENTS.md (a file init would write).
func TestInitDirIsAFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "proj")
	if err := os.WriteFile(dir, []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Init(dir, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("init into a regular file succeeded")
	}
	if strings.Contains(err.Error(), "AGENTS.md is not a directory") || !strings.Contains(err.Error(), dir+" is not a directory") || errcode.Of(err) != errcode.ProtectedPath {
		t.Errorf("init names the wrong path as the non-directory, or not as protected_path: %v", err)
	}
}

// TestInitGitignoreLookalikeEntry: init reads an existing .gitignore's lines as git reads
// patterns — only a trailing CR and trailing spaces dropped, the last line naming the
// directory deciding — so a line that merely looks like the entry (" .symbiont/",
// ".symbiont/<TAB>") or one a later "!.symbiont/" re-includes does not stop init appending
// .symbiont/: the private signing key stays out of git (docs/project.md).
func TestInitGitignoreLookalikeEntry(t *testing.T) {
	for name, line := range map[string]string{
		"leading space": " .symbiont/",
		"leading tab":   "\t.symbiont/",
		"trailing tab":  ".symbiont/\t",
		"re-included":   ".symbiont/\n!.symbiont/",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("node_modules/\n"+line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Init(dir, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatalf("Init: %v", err)
			}
			data, err := os.ReadFile(filepath.Join(dir, ".gitignore"))
			if err != nil {
				t.Fatal(err)
			}
			ignored := false
			for _, l := range strings.Split(string(data), "\n") {
				// What git makes of the line: trailing CR and trailing spaces dropped; the
				// last line naming the directory decides ("!" re-includes it).
				l = strings.TrimRight(strings.TrimSuffix(l, "\r"), " ")
				switch strings.TrimPrefix(l, "!") {
				case ".symbiont/", "/.symbiont/", ".symbiont", "/.symbiont":
					ignored = !strings.HasPrefix(l, "!")
				}
			}
			if !ignored {
				t.Errorf(".gitignore after init has no line git reads as .symbiont/ (the signing key is not ignored):\n%q", data)
			}
			// Where git is installed, ask it directly.
			if git, err := exec.LookPath("git"); err == nil {
				if out, err := exec.Command(git, "-C", dir, "init", "-q").CombinedOutput(); err != nil {
					t.Logf("git init: %v %s", err, out)
					return
				}
				if err := exec.Command(git, "-C", dir, "check-ignore", "-q", ".symbiont/governed/audit-signing.key").Run(); err != nil {
					t.Errorf("git check-ignore .symbiont/governed/audit-signing.key: %v (not ignored)", err)
				}
			}
		})
	}
}

// TestInitFailureLeavesNoStarterFiles: when writing one starter file fails (policies/ is
// immutable, as a policies/ not writable by this user would be), init removes the starter
// files and directories it wrote, as on its other refusals: the project is as it was, and
// init can be run again once the cause is mended. Needs root (or CAP_LINUX_IMMUTABLE) and
// chattr; skipped otherwise.
func TestInitFailureLeavesNoStarterFiles(t *testing.T) {
	chattr, err := exec.LookPath("chattr")
	if err != nil {
		t.Skip("no chattr")
	}
	dir := t.TempDir()
	pol := filepath.Join(dir, "policies")
	if err := os.Mkdir(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(chattr, "+i", pol).CombinedOutput(); err != nil {
		t.Skipf("cannot make policies/ immutable: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command(chattr, "-i", pol).Run() })

	created, err := Init(dir, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatalf("Init succeeded with an unwritable policies/: %v", created)
	}
	t.Logf("Init: %v (created %v)", err, created)
	for _, rel := range []string{"agents/assistant.symbi", "README.md", "AGENTS.md"} {
		if _, serr := os.Lstat(filepath.Join(dir, rel)); !errors.Is(serr, fs.ErrNotExist) {
			t.Errorf("after the failed init, %s is left behind (stat error %v)", rel, serr)
		}
	}
	if _, serr := os.Lstat(filepath.Join(dir, "agents")); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("after the failed init, the agents/ it made is left behind")
	}
}

// TestInitWriteFailureLeavesNoPartialFile: a starter file whose write fails part way (the
// file size limit here, as a full disk or a quota would) is removed with the others: the
// project is as it was, and init runs again once the cause is gone (docs/project.md). The
// write runs in a child process: RLIMIT_FSIZE is the process's.
func TestInitWriteFailureLeavesNoPartialFile(t *testing.T) {
	if dir := os.Getenv("SYMBI_TEST_INIT_CHILD"); dir != "" {
		initChildFSizeLimit(dir)
		return
	}
	dir := t.TempDir()
	initInChild(t, "^TestInitWriteFailureLeavesNoPartialFile$", dir, 64)
	for _, rel := range []string{"agents/assistant.symbi", "agents"} {
		if _, serr := os.Lstat(filepath.Join(dir, rel)); !errors.Is(serr, fs.ErrNotExist) {
			t.Errorf("after the failed init, %s is left behind (a partially written starter file): the project is not as it was", rel)
		}
	}
	if _, err := Init(dir, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("init run again, once the cause is gone, refuses: %v", err)
	}
}

// TestInitLateWriteFailureLeavesGitignore: a write that fails after the starter files were
// written — AGENTS.md, grown by the agents already in agents/ past the file size limit, or
// the line appended to an existing .gitignore — leaves the project as it was, the
// .gitignore byte for byte included (its line was appended before AGENTS.md was written,
// and stayed when init gave up).
func TestInitLateWriteFailureLeavesGitignore(t *testing.T) {
	if dir := os.Getenv("SYMBI_TEST_INIT_CHILD"); dir != "" {
		initChildFSizeLimit(dir)
		return
	}
	for _, tc := range []struct {
		name      string
		agents    int // agents already in agents/, each adding a line to AGENTS.md
		gitignore int // bytes of the existing .gitignore
	}{
		{"AGENTS.md past the limit", 20, 100},
		{"the .gitignore's line past the limit", 0, 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i := range tc.agents {
				writeFile(t, dir, fmt.Sprintf("agents/a%03d.symbi", i), []byte(fmt.Sprintf(
					"metadata { description = %q }\nagent a%03d { capabilities = [\"answer\"] }\n", strings.Repeat("d", 200), i)))
			}
			ignore := []byte(strings.Repeat("# x\n", tc.gitignore/4))
			writeFile(t, dir, ".gitignore", ignore)
			initInChild(t, "^TestInitLateWriteFailureLeavesGitignore$", dir, 4000)
			for _, rel := range []string{"agents/assistant.symbi", "policies", "README.md", agentsMDName} {
				if _, serr := os.Lstat(filepath.Join(dir, rel)); !errors.Is(serr, fs.ErrNotExist) {
					t.Errorf("after the failed init, %s is left behind", rel)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); !bytes.Equal(b, ignore) {
				t.Errorf("after the failed init, .gitignore is %d bytes ending %q; it was %d bytes", len(b), b[max(0, len(b)-20):], len(ignore))
			}
		})
	}
}

// initInChild runs the test run in a child process that runs Init in dir under a file
// size limit of limit bytes, and fails t if the child does (or Init did not fail there).
func initInChild(t *testing.T, run, dir string, limit int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), "SYMBI_TEST_INIT_CHILD="+dir, "SYMBI_TEST_INIT_FSIZE="+strconv.Itoa(limit))
	out, err := cmd.CombinedOutput()
	t.Logf("child: %v\n%s", err, out)
	if err != nil {
		t.Fatalf("child failed: %v", err)
	}
}

// initChildFSizeLimit runs Init in dir with the file size limit SYMBI_TEST_INIT_FSIZE
// gives and prints what it said.
func initChildFSizeLimit(dir string) {
	limit, err := strconv.ParseUint(os.Getenv("SYMBI_TEST_INIT_FSIZE"), 10, 64)
	if err != nil {
		fmt.Println("SYMBI_TEST_INIT_FSIZE:", err)
		os.Exit(1)
	}
	restore, err := proctest.LimitFileSize(limit)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	created, err := Init(dir, slog.New(slog.DiscardHandler))
	restore()
	fmt.Printf("Init under a %d-byte file size limit: created %v, err %v\n", limit, created, err)
	if err == nil {
		fmt.Println("init did not fail: the test cannot show anything")
		os.Exit(1)
	}
}
