package workspace

import (
	"os"
	"path/filepath"
	"testing"

	"symbi/internal/errcode"
)

// TestFollowProcSelf: the magic links of /proc (self, thread-self, and /dev/fd, /dev/stdin
// that lead there) lead where the process reading them is — symbi, not the agent whose
// tools a permission request is decided for. A path through /proc is outside: a link to
// /proc/self/cwd never makes Follow decide, inside the workspace, a path the agent's tool
// takes outside it or into its policies.
func TestFollowProcSelf(t *testing.T) {
	base := realTempDir(t)
	ws := filepath.Join(base, "ws")
	must(t, os.MkdirAll(filepath.Join(ws, "sub"), 0o755))
	must(t, os.MkdirAll(filepath.Join(ws, "policies"), 0o755))
	must(t, os.Symlink("/proc/self/cwd/..", filepath.Join(ws, "up")))
	must(t, os.Symlink("/proc/self/cwd", filepath.Join(ws, "here")))
	w, err := Open(ws)
	must(t, err)
	defer w.Close()
	// The server's working directory is inside the workspace, below its top; the agent's
	// (and its tools') is the workspace itself.
	t.Chdir(filepath.Join(ws, "sub"))
	for _, tt := range []struct {
		path, agentSees string
	}{
		// For the agent, ws/up is ws/.. : escaped.txt is beside the workspace.
		{"up/escaped.txt", filepath.Join(base, "escaped.txt")},
		// For the agent, ws/here is ws: here/policies/p.cedar is the protected policies/p.cedar.
		{"here/policies/p.cedar", filepath.Join(ws, "policies/p.cedar")},
	} {
		got, err := w.Follow(tt.path)
		if err == nil {
			if cerr := w.CheckGoverned(got); cerr == nil {
				t.Errorf("Follow(%q) = %q, accepted (inside the workspace, not governed): the agent's tool, whose /proc/self is its own, reaches %s", tt.path, got, tt.agentSees)
			}
			continue
		}
		if errcode.Of(err) != errcode.ProtectedPath {
			t.Errorf("Follow(%q): %v", tt.path, err)
		}
	}
}
