package project

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cedar-policy/cedar-go"

	"symbi/internal/errcode"
)

func TestInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "project")
	created, err := Init(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := "[agents/assistant.symbi policies/respond.cedar README.md .gitignore AGENTS.md]"
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
