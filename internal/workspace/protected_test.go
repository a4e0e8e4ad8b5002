package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/project"
)

// protectedTree builds a workspace that holds a project (proj, with its .symbiont and
// policies) and has a .symbiont, a .git and a policies directory of its own; every
// protected file holds the secret. It returns the workspace and the project paths.
func protectedTree(t *testing.T) (ws, proj string) {
	t.Helper()
	ws = filepath.Join(realTempDir(t), "ws")
	proj = filepath.Join(ws, "proj")
	for _, rel := range []string{
		".symbiont/governed/other-run.jsonl", ".symbiont/governed/audit-signing.key", ".git/config",
		"src/.env", "policies/tools.cedar", "proj/policies/tools.cedar", "proj/policies/access/a.cedar",
		"proj/.symbiont/governed/other-run.jsonl",
	} {
		writeFile(t, ws, rel, secret)
	}
	for _, rel := range []string{"src/a.go", "src/policies/notes.txt", "policy/a.txt", "proj/src/a.go",
		"proj/src/policies/notes.txt", "proj/policiesx/a.txt"} {
		writeFile(t, ws, rel, []byte("ordinary\n"))
	}
	return ws, proj
}

// TestProtectedNames: the confined reader and writer refuse, with the project's rules,
// a hidden component anywhere (the journals and the signing key under .symbiont, .git)
// and anything at or under a policies directory — the workspace's top-level one, and the
// project's when the workspace contains it — whatever form the path takes.
func TestProtectedNames(t *testing.T) {
	tests := []struct {
		path string
		rule error // nil: served
	}{
		{".symbiont/governed/other-run.jsonl", ErrHidden},
		{".symbiont/governed/audit-signing.key", ErrHidden},
		{".symbiont/governed/new.jsonl", ErrHidden},
		{".git/config", ErrHidden},
		{"src/.env", ErrHidden},
		{"src/../.symbiont/governed/other-run.jsonl", ErrHidden},
		{"WS/.git/config", ErrHidden},
		{"proj/.symbiont/governed/other-run.jsonl", ErrHidden},
		{"policies/tools.cedar", ErrPolicies},
		{"./policies/tools.cedar", ErrPolicies},
		{"policies/new.cedar", ErrPolicies},
		{"policies", ErrPolicies},
		{"proj/policies/tools.cedar", ErrPolicies},
		{"proj/policies/access/a.cedar", ErrPolicies},
		{"proj/src/../policies/new.cedar", ErrPolicies},
		{"WS/proj/policies/tools.cedar", ErrPolicies},
		{"src/a.go", nil},
		{"src/policies/notes.txt", nil},
		{"policy/a.txt", nil},
		{"proj/src/a.go", nil},
		{"proj/src/policies/notes.txt", nil},
		{"proj/policiesx/a.txt", nil},
	}
	for _, op := range []string{"read", "write"} {
		t.Run(op, func(t *testing.T) {
			modes(t, func(t *testing.T, walk bool) {
				ws, proj := protectedTree(t)
				w, err := Open(ws, Options{Project: proj})
				must(t, err)
				w.walk = walk
				t.Cleanup(func() { w.Close() })
				for _, tt := range tests {
					path := strings.Replace(tt.path, "WS", ws, 1)
					before := snapshot(t, ws)
					var err error
					var content string
					if op == "read" {
						content, _, _, err = w.ReadText(path, nil, nil, testLimit)
					} else {
						_, _, err = w.WriteText(path, "overwritten\n", testLimit)
					}
					if tt.rule == nil {
						if err != nil {
							t.Errorf("%s %q: %v", op, path, err)
						}
						continue
					}
					if content != "" {
						t.Errorf("%s %q returned %q", op, path, content)
					}
					checkRefusal(t, fmt.Sprintf("%s %q", op, path), err, tt.rule, errcode.ProtectedPath)
					if after := snapshot(t, ws); after != before {
						t.Errorf("%s %q changed the tree:\nbefore:\n%s\nafter:\n%s", op, path, before, after)
					}
				}
			})
		})
	}
}

// TestProtectedProject: the project's policies directory is protected where the workspace
// holds it — the workspace itself, an ancestor, or neither (a workspace inside the
// project, or beside it) — and the rules are the project's own (errors.Is matches either
// package's name).
func TestProtectedProject(t *testing.T) {
	ws, proj := protectedTree(t)
	tests := []struct {
		name    string
		ws      string
		project string
		path    string
		rule    error
	}{
		{"no project given", ws, "", "proj/policies/tools.cedar", nil},
		{"the workspace holds the project", ws, proj, "proj/policies/tools.cedar", project.ErrPolicies},
		{"the workspace is the project", proj, proj, "policies/tools.cedar", project.ErrPolicies},
		{"the workspace is inside the project", filepath.Join(proj, "src"), proj, "policies/notes.txt", project.ErrPolicies},
		{"the project is elsewhere", filepath.Join(ws, "src"), proj, "a.go", nil},
		{"through the project's absolute path", ws, proj, filepath.Join(proj, "policies/tools.cedar"), project.ErrPolicies},
		{"hidden, whatever the project", filepath.Join(ws, "src"), "", ".env", project.ErrHidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := Open(tt.ws, Options{Project: tt.project})
			must(t, err)
			defer w.Close()
			_, _, _, err = w.ReadText(tt.path, nil, nil, testLimit)
			if tt.rule == nil {
				if err != nil {
					t.Fatalf("read %q: %v", tt.path, err)
				}
				return
			}
			checkRefusal(t, fmt.Sprintf("read %q", tt.path), err, tt.rule, errcode.ProtectedPath)
		})
	}
	// A project that does not resolve is an error, not a workspace without protection.
	if _, err := Open(ws, Options{Project: filepath.Join(ws, "missing")}); errcode.Of(err) != errcode.Internal {
		t.Fatalf("Open with a missing project: %v, want internal", err)
	}
	// Through a symbolic link to the project, the same directory is protected.
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(proj, link))
	w, err := Open(ws, Options{Project: link})
	must(t, err)
	defer w.Close()
	_, _, _, err = w.ReadText("proj/policies/tools.cedar", nil, nil, testLimit)
	checkRefusal(t, "read through a linked project", err, ErrPolicies, errcode.ProtectedPath)
}
