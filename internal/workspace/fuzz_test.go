package workspace

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

func errorsIsAny(err error, rules ...error) bool {
	for _, r := range rules {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// FuzzRel asserts that Rel never returns a path that leads outside the workspace, that
// what it returns names the file the input names, that it is a fixed point, and that
// every refusal names a rule with its code. The seed corpus runs as an ordinary test.
func FuzzRel(f *testing.F) {
	const ws = "/srv/work/ws"
	for _, seed := range []string{
		"", ".", "..", "/", "a", "a/b", "./a", "a/..", "a/../..", "../a", "a/../../b",
		ws, ws + "/", ws + "/a", ws + "/..", ws + "/../ws/a", ws + "x/a", ws + "/../wsx",
		"/srv/work", "//srv/work/ws/a", "/etc/passwd", "a\x00b", "a//b/", ".hidden", "..a",
		"...", "a/.../b", "a\\..\\b", "\xff/..", " /..", "/srv/work/ws/./../../work/ws/a",
	} {
		f.Add(seed)
	}
	workspaces := []*Workspace{{path: ws}, {path: "/"}}
	f.Fuzz(func(t *testing.T, p string) {
		for _, w := range workspaces {
			rel, err := w.Rel(p)
			if err != nil {
				if rel != "" {
					t.Fatalf("Rel(%q) in %s returned %q with an error", p, w.path, rel)
				}
				switch {
				case errors.Is(err, ErrBadPath) && errcode.Of(err) == errcode.InvalidRequest:
				case errors.Is(err, ErrOutside) && errcode.Of(err) == errcode.ProtectedPath:
				default:
					t.Fatalf("Rel(%q) in %s error names no rule or the wrong code: %s", p, w.path, errcode.Text(err))
				}
				continue
			}
			// Clean, relative, free of NUL and of "..": a path that cannot leave.
			if rel == "" || strings.IndexByte(rel, 0) >= 0 || filepath.IsAbs(rel) || filepath.Clean(rel) != rel {
				t.Fatalf("Rel(%q) in %s = %q: not a clean relative path", p, w.path, rel)
			}
			for _, c := range strings.Split(rel, "/") {
				if c == ".." || c == "" || (c == "." && rel != ".") {
					t.Fatalf("Rel(%q) in %s = %q: component %q", p, w.path, rel, c)
				}
			}
			full := filepath.Join(w.path, rel)
			if !within(full, w.path) {
				t.Fatalf("Rel(%q) in %s = %q escapes", p, w.path, rel)
			}
			// It names what the input names, lexically.
			want := filepath.Clean(p)
			if !filepath.IsAbs(p) {
				want = filepath.Join(w.path, p)
			}
			if full != want {
				t.Fatalf("Rel(%q) in %s = %q names %q, want %q", p, w.path, rel, full, want)
			}
			// A fixed point: the result maps to itself, and so does its absolute form.
			if again, err := w.Rel(rel); err != nil || again != rel {
				t.Fatalf("Rel(Rel(%q)) in %s = %q, %v; want %q", p, w.path, again, err, rel)
			}
			if again, err := w.Rel(full); err != nil || again != rel {
				t.Fatalf("Rel(%q) in %s = %q, %v; want %q", full, w.path, again, err, rel)
			}
		}
	})
}

// FuzzReadText asserts that no path, through either resolution, reads the secret stored
// outside the workspace, and that every refusal names a rule.
func FuzzReadText(f *testing.F) {
	ws := tree(f)
	for _, seed := range []string{
		"a.txt", "linkout", "linkoutdir/secret.txt", "up/outside/secret.txt", "up/wsx/secret.txt",
		"../outside/secret.txt", "..", "/", "", "linkdir/b.txt", "sub/../../outside/b.txt",
		"fifo", "sock", "exact.txt", ws + "/../outside/secret.txt", ws + "x/secret.txt",
		filepath.Dir(ws) + "/outside/secret.txt",
	} {
		f.Add(seed)
	}
	modes := []*Workspace{openWS(f, ws, false), openWS(f, ws, true)}
	rules := []error{ErrBadPath, ErrOutside, ErrHidden, ErrPolicies, ErrSymlink, ErrHardLink, ErrNotRegular, ErrNotUTF8,
		ErrTooLarge, ErrUnreadable, ErrNotExist}
	f.Fuzz(func(t *testing.T, p string) {
		for _, w := range modes {
			content, _, _, err := w.ReadText(p, nil, nil, 1<<10)
			if strings.Contains(content, string(secret)) {
				t.Fatalf("ReadText(%q) returned the secret", p)
			}
			if err != nil && !errorsIsAny(err, rules...) {
				t.Fatalf("ReadText(%q) error names no rule: %v", p, err)
			}
		}
	})
}
