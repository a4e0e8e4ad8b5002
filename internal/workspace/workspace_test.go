package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

const testLimit = 64

var secret = []byte("TOP-SECRET-OUTSIDE-THE-WORKSPACE")

// hangGuard bounds a wait that only a hang reaches. It is never an expectation of speed:
// under -race on a busy machine the work it guards may take far longer than on an idle one.
const hangGuard = 5 * time.Minute

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeFile writes content to root/rel, creating parent directories.
func writeFile(t testing.TB, root, rel string, content []byte) {
	t.Helper()
	path := filepath.Join(root, rel)
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, content, 0o644))
}

// realTempDir is t.TempDir with its symbolic links resolved, so that it can be opened.
func realTempDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	return dir
}

// tree builds a workspace with one entry for every refusal rule next to a directory
// outside it that holds the secret, and returns the workspace path.
func tree(t testing.TB) string {
	t.Helper()
	base := realTempDir(t)
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	writeFile(t, outside, "secret.txt", secret)
	writeFile(t, outside, "b.txt", secret)
	writeFile(t, base, "wsx/secret.txt", secret) // shares the workspace's name as a prefix
	writeFile(t, ws, "a.txt", []byte("hello\n"))
	writeFile(t, ws, "sub/b.txt", []byte("inner\n"))
	writeFile(t, ws, ".hidden", []byte("hidden but inside\n"))
	writeFile(t, ws, "exact.txt", bytes.Repeat([]byte("é"), testLimit/2))
	writeFile(t, ws, "big.txt", bytes.Repeat([]byte("a"), testLimit+1))
	writeFile(t, ws, "bad.txt", []byte("caf\xe9\n"))
	writeFile(t, ws, "hard1", []byte("linked\n"))
	must(t, os.Link(filepath.Join(ws, "hard1"), filepath.Join(ws, "hard2")))
	must(t, os.Symlink("a.txt", filepath.Join(ws, "linkin")))
	must(t, os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(ws, "linkout")))
	must(t, os.Symlink("sub", filepath.Join(ws, "linkdir")))
	must(t, os.Symlink(outside, filepath.Join(ws, "linkoutdir")))
	must(t, os.Symlink("..", filepath.Join(ws, "up")))
	must(t, unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	l, err := net.Listen("unix", filepath.Join(ws, "sock"))
	must(t, err)
	t.Cleanup(func() { l.Close() })
	return ws
}

func openWS(t testing.TB, dir string, walk bool) *Workspace {
	t.Helper()
	w, err := Open(dir)
	must(t, err)
	w.walk = walk
	t.Cleanup(func() { w.Close() })
	return w
}

// modes runs f once with openat2 and once with the forced fallback walk.
func modes(t *testing.T, f func(t *testing.T, walk bool)) {
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) { f(t, walk) })
	}
}

// checkRefusal asserts that err wraps rule with code and does not leak the secret.
func checkRefusal(t *testing.T, what string, err error, rule error, code errcode.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded, want refusal %v", what, rule)
	}
	if !errors.Is(err, rule) {
		t.Errorf("%s error %v, want rule %v", what, err, rule)
	}
	if got := errcode.Of(err); got != code {
		t.Errorf("%s code %s, want %s (%v)", what, got, code, err)
	}
	if bytes.Contains([]byte(err.Error()), secret) {
		t.Errorf("%s error leaks the secret: %v", what, err)
	}
}

func TestResolve(t *testing.T) {
	base := realTempDir(t)
	root := filepath.Join(base, "root")
	other := filepath.Join(base, "other")
	must(t, os.MkdirAll(filepath.Join(root, "proj/sub"), 0o755))
	must(t, os.MkdirAll(filepath.Join(base, "rootx"), 0o755))
	must(t, os.MkdirAll(other, 0o755))
	writeFile(t, root, "file", []byte("x"))
	must(t, os.Symlink(filepath.Join(root, "proj"), filepath.Join(base, "link-in")))     // outside link to inside
	must(t, os.Symlink(other, filepath.Join(root, "link-out")))                          // inside link to outside
	must(t, os.Symlink(root, filepath.Join(base, "rootlink")))                           // a symlinked root
	must(t, os.Symlink(filepath.Join(root, "proj"), filepath.Join(root, "link-inside"))) // inside to inside
	must(t, os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(root, "dangling")))

	tests := []struct {
		name  string
		path  string
		roots []string
		want  string
		rule  error
	}{
		{"root itself", root, []string{root}, root, nil},
		{"inside", filepath.Join(root, "proj"), []string{root}, filepath.Join(root, "proj"), nil},
		{"unclean inside", root + "//proj/./sub/..", []string{root}, filepath.Join(root, "proj"), nil},
		{"second root", other, []string{root, other}, other, nil},
		{"symlinked workspace into a root", filepath.Join(base, "link-in"), []string{root}, filepath.Join(root, "proj"), nil},
		{"symlink inside to inside", filepath.Join(root, "link-inside/sub"), []string{root}, filepath.Join(root, "proj/sub"), nil},
		{"symlinked root", filepath.Join(root, "proj"), []string{filepath.Join(base, "rootlink")}, filepath.Join(root, "proj"), nil},
		{"workspace through symlinked root", filepath.Join(base, "rootlink/proj"), []string{root}, filepath.Join(root, "proj"), nil},
		{"filesystem root", other, []string{"/"}, other, nil},

		{"symlink inside a root to outside", filepath.Join(root, "link-out"), []string{root}, "", ErrWorkspaceNotInRoot},
		{"dotdot out of the root", filepath.Join(root, "..", "other"), []string{root}, "", ErrWorkspaceNotInRoot},
		{"name prefix is not inside", filepath.Join(base, "rootx"), []string{root}, "", ErrWorkspaceNotInRoot},
		{"parent of the root", base, []string{root}, "", ErrWorkspaceNotInRoot},
		{"relative", "root/proj", []string{root}, "", ErrWorkspaceNotAbsolute},
		{"empty", "", []string{root}, "", ErrWorkspaceNotAbsolute},
		{"NUL", root + "/proj\x00", []string{root}, "", ErrWorkspaceNotAbsolute},
		{"missing", filepath.Join(root, "missing"), []string{root}, "", ErrWorkspaceNotDir},
		{"dangling symlink", filepath.Join(root, "dangling"), []string{root}, "", ErrWorkspaceNotDir},
		{"a file", filepath.Join(root, "file"), []string{root}, "", ErrWorkspaceNotDir},
		{"no roots", root, nil, "", ErrBadRoot},
		{"missing root", root, []string{root, filepath.Join(base, "gone")}, "", ErrBadRoot},
		{"relative root", root, []string{"root"}, "", ErrBadRoot},
		{"file root", filepath.Join(root, "file"), []string{filepath.Join(root, "file")}, "", ErrBadRoot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.path, tt.roots)
			if tt.rule == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Resolve(%q, %q) = %q, %v; want %q", tt.path, tt.roots, got, err, tt.want)
				}
				// What Resolve returns, Open pins.
				w, err := Open(got)
				if err != nil {
					t.Fatalf("Open(%q): %v", got, err)
				}
				w.Close()
				return
			}
			checkRefusal(t, fmt.Sprintf("Resolve(%q, %q)", tt.path, tt.roots), err, tt.rule, errcode.InvalidRequest)
			if got != "" {
				t.Errorf("Resolve returned %q with an error", got)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	base := realTempDir(t)
	ws := filepath.Join(base, "ws")
	writeFile(t, ws, "a.txt", []byte("x"))
	must(t, os.Symlink(ws, filepath.Join(base, "link")))
	must(t, os.Symlink(base, filepath.Join(base, "linkbase")))
	tests := []struct {
		dir  string
		rule error
		code errcode.Code
	}{
		{ws, nil, ""},
		{"/", nil, ""},
		{filepath.Join(base, "link"), ErrSymlink, errcode.ProtectedPath},
		{filepath.Join(base, "linkbase/ws"), ErrSymlink, errcode.ProtectedPath},
		{filepath.Join(base, "missing"), ErrWorkspaceNotDir, errcode.NotFound},
		{filepath.Join(ws, "a.txt"), ErrWorkspaceNotDir, errcode.InvalidRequest},
		{filepath.Join(ws, "a.txt/x"), ErrWorkspaceNotDir, errcode.InvalidRequest},
		{"ws", ErrWorkspaceNotAbsolute, errcode.InvalidRequest},
		{"", ErrWorkspaceNotAbsolute, errcode.InvalidRequest},
		{ws + "/", ErrWorkspaceNotAbsolute, errcode.InvalidRequest},
		{ws + "/../ws", ErrWorkspaceNotAbsolute, errcode.InvalidRequest},
	}
	for _, tt := range tests {
		w, err := Open(tt.dir)
		if tt.rule == nil {
			if err != nil {
				t.Errorf("Open(%q): %v", tt.dir, err)
				continue
			}
			if w.Path() != tt.dir {
				t.Errorf("Path() = %q, want %q", w.Path(), tt.dir)
			}
			must(t, w.Close())
			continue
		}
		checkRefusal(t, fmt.Sprintf("Open(%q)", tt.dir), err, tt.rule, tt.code)
	}
}

func TestOpenPinsDirectory(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		base := realTempDir(t)
		ws := filepath.Join(base, "ws")
		writeFile(t, ws, "sub/a.txt", []byte("original"))
		w := openWS(t, ws, walk)
		must(t, os.Rename(ws, filepath.Join(base, "moved")))
		writeFile(t, ws, "sub/a.txt", []byte("impostor"))
		got, _, _, err := w.ReadText(filepath.Join(ws, "sub/a.txt"), nil, nil, testLimit)
		if err != nil || got != "original" {
			t.Fatalf("read %q, %v after replacing the directory, want the original", got, err)
		}
		if _, _, err := w.WriteText("sub/a.txt", "rewritten", testLimit); err != nil {
			t.Fatal(err)
		}
		if data, _ := os.ReadFile(filepath.Join(base, "moved/sub/a.txt")); string(data) != "rewritten" {
			t.Fatalf("the pinned directory holds %q after the write", data)
		}
		if data, _ := os.ReadFile(filepath.Join(ws, "sub/a.txt")); string(data) != "impostor" {
			t.Fatalf("the write went to the impostor: %q", data)
		}
	})
}

func TestClosed(t *testing.T) {
	w, err := Open(realTempDir(t))
	must(t, err)
	must(t, w.Close())
	if _, _, _, err := w.ReadText("a.txt", nil, nil, testLimit); err == nil {
		t.Error("ReadText after Close succeeded")
	}
	if _, _, err := w.WriteText("a.txt", "x", testLimit); err == nil {
		t.Error("WriteText after Close succeeded")
	}
}

func TestRel(t *testing.T) {
	// Rel is lexical: the workspace need not exist.
	const ws = "/nonexistent/ws"
	w := &Workspace{path: ws}
	tests := []struct {
		in   string
		want string
		rule error
		code errcode.Code
	}{
		{"a.txt", "a.txt", nil, ""},
		{"sub/b.txt", "sub/b.txt", nil, ""},
		{"./sub//b.txt/", "sub/b.txt", nil, ""},
		{"sub/../a.txt", "a.txt", nil, ""},
		{".hidden", ".hidden", nil, ""},
		{"..x", "..x", nil, ""},
		{"a\\..\\..\\b", "a\\..\\..\\b", nil, ""}, // backslash is a name byte on Linux
		{".", ".", nil, ""},
		{"sub/..", ".", nil, ""},
		{ws, ".", nil, ""},
		{ws + "/", ".", nil, ""},
		{ws + "/a.txt", "a.txt", nil, ""},
		{ws + "//sub/./b.txt", "sub/b.txt", nil, ""},
		{ws + "/sub/../a.txt", "a.txt", nil, ""},
		{ws + "/../ws/a.txt", "a.txt", nil, ""},
		{"//nonexistent/ws/a.txt", "a.txt", nil, ""},

		{"", "", ErrBadPath, errcode.InvalidRequest},
		{"a\x00b", "", ErrBadPath, errcode.InvalidRequest},
		{ws + "/a\x00", "", ErrBadPath, errcode.InvalidRequest},
		{"..", "", ErrOutside, errcode.ProtectedPath},
		{"../", "", ErrOutside, errcode.ProtectedPath},
		{"../ws/a.txt", "", ErrOutside, errcode.ProtectedPath},
		{"sub/../../a.txt", "", ErrOutside, errcode.ProtectedPath},
		{"./../a.txt", "", ErrOutside, errcode.ProtectedPath},
		{"/", "", ErrOutside, errcode.ProtectedPath},
		{"/etc/passwd", "", ErrOutside, errcode.ProtectedPath},
		{"/nonexistent", "", ErrOutside, errcode.ProtectedPath},
		{"/nonexistent/wsx/a.txt", "", ErrOutside, errcode.ProtectedPath},
		{"/nonexistent/w", "", ErrOutside, errcode.ProtectedPath},
		{ws + "/..", "", ErrOutside, errcode.ProtectedPath},
		{ws + "/../wsx", "", ErrOutside, errcode.ProtectedPath},
		{ws + "/sub/../../x", "", ErrOutside, errcode.ProtectedPath},
		{"nonexistent/ws/a.txt", "nonexistent/ws/a.txt", nil, ""}, // relative: taken from the workspace
		{strings.Repeat("a/", MaxPathBytes/2-1) + "bc", strings.Repeat("a/", MaxPathBytes/2-1) + "bc", nil, ""},
		{strings.Repeat("a/", MaxPathBytes/2) + "b", "", ErrBadPath, errcode.InvalidRequest},
		{ws + "/" + strings.Repeat("x", MaxPathBytes), "", ErrBadPath, errcode.InvalidRequest},
		{strings.Repeat("y", 2<<20), "", ErrBadPath, errcode.InvalidRequest},
		{"src/" + strings.Repeat("n", MaxNameBytes) + "/a", "src/" + strings.Repeat("n", MaxNameBytes) + "/a", nil, ""},
		{"src/" + strings.Repeat("n", MaxNameBytes+1) + "/a", "", ErrBadPath, errcode.InvalidRequest}, // NAME_MAX
		{ws + "/" + strings.Repeat("n", MaxNameBytes+1), "", ErrBadPath, errcode.InvalidRequest},
	}
	for _, tt := range tests {
		got, err := w.Rel(tt.in)
		if tt.rule == nil {
			if err != nil || got != tt.want {
				t.Errorf("Rel(%.80q) = %.80q, %v; want %.80q", tt.in, got, err, tt.want)
			}
			continue
		}
		if got != "" {
			t.Errorf("Rel(%.80q) returned %.80q with an error", tt.in, got)
		}
		checkRefusal(t, fmt.Sprintf("Rel(%.80q)", tt.in), err, tt.rule, tt.code)
	}

	// A workspace at the file system root holds every absolute path.
	root := &Workspace{path: "/"}
	for in, want := range map[string]string{"/": ".", "/etc/passwd": "etc/passwd", "/a/../b": "b", "/..": "."} {
		if got, err := root.Rel(in); err != nil || got != want {
			t.Errorf("Rel(%q) in / = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := root.Rel("../x"); !errors.Is(err, ErrOutside) {
		t.Errorf(`Rel("../x") in / error %v, want ErrOutside`, err)
	}
}

func TestReadTextRefusals(t *testing.T) {
	ws := tree(t)
	tests := []struct {
		path string
		rule error
		code errcode.Code
	}{
		{"", ErrBadPath, errcode.InvalidRequest},
		{"a.txt\x00", ErrBadPath, errcode.InvalidRequest},
		{"..", ErrOutside, errcode.ProtectedPath},
		{"../outside/secret.txt", ErrOutside, errcode.ProtectedPath},
		{"sub/../../outside/secret.txt", ErrOutside, errcode.ProtectedPath},
		{filepath.Join(ws, "../outside/secret.txt"), ErrOutside, errcode.ProtectedPath},
		{filepath.Join(filepath.Dir(ws), "outside/secret.txt"), ErrOutside, errcode.ProtectedPath},
		{filepath.Join(filepath.Dir(ws), "wsx/secret.txt"), ErrOutside, errcode.ProtectedPath},
		{"/etc/passwd", ErrOutside, errcode.ProtectedPath},
		{".hidden", ErrHidden, errcode.ProtectedPath},
		{"linkin", ErrSymlink, errcode.ProtectedPath},
		{"linkout", ErrSymlink, errcode.ProtectedPath},
		{"linkdir/b.txt", ErrSymlink, errcode.ProtectedPath},
		{filepath.Join(ws, "linkdir/b.txt"), ErrSymlink, errcode.ProtectedPath},
		{"linkoutdir/secret.txt", ErrSymlink, errcode.ProtectedPath},
		{"up/outside/secret.txt", ErrSymlink, errcode.ProtectedPath},
		{"up/ws/a.txt", ErrSymlink, errcode.ProtectedPath},
		{"hard1", ErrHardLink, errcode.ProtectedPath},
		{"hard2", ErrHardLink, errcode.ProtectedPath},
		{"fifo", ErrNotRegular, errcode.ProtectedPath},
		{"sock", ErrNotRegular, errcode.ProtectedPath},
		{"sub", ErrNotRegular, errcode.ProtectedPath},
		{".", ErrNotRegular, errcode.ProtectedPath},
		{ws, ErrNotRegular, errcode.ProtectedPath},
		{"big.txt", ErrTooLarge, errcode.LimitExceeded},
		{"bad.txt", ErrNotUTF8, errcode.InvalidRequest},
		{"missing.txt", ErrNotExist, errcode.NotFound},
		{"missing/a.txt", ErrNotExist, errcode.NotFound},
		{"a.txt/x", ErrNotExist, errcode.NotFound},
		{strings.Repeat("n", 300), ErrBadPath, errcode.InvalidRequest},
	}
	modes(t, func(t *testing.T, walk bool) {
		w := openWS(t, ws, walk)
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%.60q", tt.path), func(t *testing.T) {
				done := make(chan struct{})
				var content string
				var err error
				go func() {
					defer close(done)
					content, _, _, err = w.ReadText(tt.path, nil, nil, testLimit)
				}()
				select {
				case <-done:
				case <-time.After(hangGuard):
					t.Fatalf("ReadText(%q) hangs", tt.path)
				}
				if err == nil {
					t.Fatalf("ReadText(%q) = %q, want refusal %v", tt.path, content, tt.rule)
				}
				checkRefusal(t, fmt.Sprintf("ReadText(%q)", tt.path), err, tt.rule, tt.code)
			})
		}
	})
}

func TestReadTextAccepted(t *testing.T) {
	ws := tree(t)
	tests := []struct {
		path string
		want string
	}{
		{"a.txt", "hello\n"},
		{"./a.txt", "hello\n"},
		{"sub/b.txt", "inner\n"},
		{"sub/../a.txt", "hello\n"},
		{filepath.Join(ws, "sub/b.txt"), "inner\n"},
		{"exact.txt", strings.Repeat("é", testLimit/2)}, // exactly the limit
	}
	modes(t, func(t *testing.T, walk bool) {
		w := openWS(t, ws, walk)
		for _, tt := range tests {
			got, size, sum, err := w.ReadText(tt.path, nil, nil, testLimit)
			if err != nil {
				t.Fatalf("ReadText(%q): %v", tt.path, err)
			}
			if got != tt.want || size != int64(len(tt.want)) || sum != sha(tt.want) {
				t.Errorf("ReadText(%q) = %q, %d, %s; want %q, %d, %s", tt.path, got, size, sum, tt.want, len(tt.want), sha(tt.want))
			}
		}
	})
	// A zero limit accepts only empty files.
	w := openWS(t, ws, false)
	writeFile(t, ws, "empty", nil)
	if got, size, _, err := w.ReadText("empty", nil, nil, 0); err != nil || got != "" || size != 0 {
		t.Fatalf("ReadText(empty, 0) = %q, %d, %v", got, size, err)
	}
	if _, _, _, err := w.ReadText("a.txt", nil, nil, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadText(a.txt, 0) error %v, want ErrTooLarge", err)
	}
	if _, _, _, err := w.ReadText("a.txt", nil, nil, -1); errcode.Of(err) != errcode.Internal {
		t.Fatalf("ReadText with a negative limit: %v, want internal", err)
	}
}

func intp(n int) *int { return &n }

func TestReadTextLines(t *testing.T) {
	ws := realTempDir(t)
	const text = "one\ntwo\r\nthree\n\nfive"
	writeFile(t, ws, "t.txt", []byte(text))
	writeFile(t, ws, "nl.txt", []byte("a\nb\n"))
	writeFile(t, ws, "empty.txt", nil)
	w := openWS(t, ws, false)
	tests := []struct {
		file        string
		line, limit *int
		want        string
		rule        error
	}{
		{"t.txt", nil, nil, text, nil},
		{"t.txt", intp(1), nil, text, nil},
		{"t.txt", intp(2), nil, "two\r\nthree\n\nfive", nil},
		{"t.txt", intp(2), intp(1), "two\r\n", nil},
		{"t.txt", intp(2), intp(2), "two\r\nthree\n", nil},
		{"t.txt", nil, intp(1), "one\n", nil},
		{"t.txt", nil, intp(0), "", nil},
		{"t.txt", intp(4), intp(1), "\n", nil},
		{"t.txt", intp(5), nil, "five", nil},
		{"t.txt", intp(5), intp(10), "five", nil},
		{"t.txt", intp(6), nil, "", nil},
		{"t.txt", intp(1 << 40), intp(1 << 40), "", nil},
		{"t.txt", nil, intp(1 << 40), text, nil},
		{"nl.txt", intp(2), nil, "b\n", nil},
		{"nl.txt", intp(3), nil, "", nil},
		{"nl.txt", intp(3), intp(1), "", nil},
		{"empty.txt", intp(1), intp(1), "", nil},
		{"t.txt", intp(0), nil, "", ErrLineRange},
		{"t.txt", intp(-1), nil, "", ErrLineRange},
		{"t.txt", nil, intp(-1), "", ErrLineRange},
	}
	for _, tt := range tests {
		what := fmt.Sprintf("ReadText(%s, line %s, limit %s)", tt.file, show(tt.line), show(tt.limit))
		got, size, sum, err := w.ReadText(tt.file, tt.line, tt.limit, testLimit)
		if tt.rule != nil {
			checkRefusal(t, what, err, tt.rule, errcode.InvalidRequest)
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s = %q, %v; want %q", what, got, err, tt.want)
		}
		// size and digest are the whole file's.
		whole, _ := os.ReadFile(filepath.Join(ws, tt.file))
		if size != int64(len(whole)) || sum != sha(string(whole)) {
			t.Errorf("%s size %d digest %s, want the whole file's", what, size, sum)
		}
	}
	// Consecutive slices concatenate to the file.
	var b strings.Builder
	for line := 1; line <= 6; line += 2 {
		got, _, _, err := w.ReadText("t.txt", intp(line), intp(2), testLimit)
		must(t, err)
		b.WriteString(got)
	}
	if b.String() != text {
		t.Errorf("slices concatenate to %q, want %q", b.String(), text)
	}
}

// TestSwapAfterRel replaces a directory by a symbolic link between Rel and the read or
// write: the pinned, link-refusing resolution holds.
func TestSwapAfterRel(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		base := realTempDir(t)
		ws := filepath.Join(base, "ws")
		outside := filepath.Join(base, "outside")
		writeFile(t, outside, "b.txt", secret)
		writeFile(t, ws, "sub/b.txt", []byte("inner\n"))
		w := openWS(t, ws, walk)
		rel, err := w.Rel(filepath.Join(ws, "sub/b.txt"))
		if err != nil || rel != "sub/b.txt" {
			t.Fatalf("Rel = %q, %v", rel, err)
		}
		must(t, os.Rename(filepath.Join(ws, "sub"), filepath.Join(ws, "sub.old")))
		must(t, os.Symlink(outside, filepath.Join(ws, "sub")))
		content, _, _, err := w.ReadText(rel, nil, nil, testLimit)
		if strings.Contains(content, string(secret)) {
			t.Fatal("read through the swapped-in link")
		}
		checkRefusal(t, "ReadText after the swap", err, ErrSymlink, errcode.ProtectedPath)
		_, _, err = w.WriteText(rel, "overwrite", testLimit)
		checkRefusal(t, "WriteText after the swap", err, ErrSymlink, errcode.ProtectedPath)
		if data, _ := os.ReadFile(filepath.Join(outside, "b.txt")); !bytes.Equal(data, secret) {
			t.Fatalf("the file outside was changed: %q", data)
		}
		assertEntries(t, outside, "b.txt")
	})
}

// assertEntries asserts that dir holds exactly names (no temporary file is left over).
func assertEntries(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// TestCheckPlace: a workspace in the project's .symbiont, another hidden directory of the
// project or its policies directory — where an agent's tools would work on the journals,
// the ledger, the key or the policies while no path it names carries their names — is
// refused, and so is one holding the signing key outside a .symbiont directory.
func TestCheckPlace(t *testing.T) {
	base := realTempDir(t)
	proj := filepath.Join(base, "proj")
	for _, d := range []string{".symbiont/governed", ".git/hooks", "policies/access", "src/.cache", "keys", "parent-key"} {
		must(t, os.MkdirAll(filepath.Join(proj, d), 0o755))
	}
	must(t, os.Symlink(filepath.Join(proj, ".symbiont"), filepath.Join(base, "store-link")))
	tests := []struct {
		name, ws, key string
		why           string // "" for accepted
	}{
		{"the project", proj, "", ""},
		{"the project, its key in .symbiont", proj, filepath.Join(proj, ".symbiont/audit-signing.key"), ""},
		{"a subdirectory", filepath.Join(proj, "src"), "", ""},
		{"the project's parent", base, "", ""},
		{"a key outside the workspace", filepath.Join(proj, "src"), filepath.Join(proj, "keys/k"), ""},
		{"a key beside the project", proj, filepath.Join(base, "k"), ""},
		{"the audit store", filepath.Join(proj, ".symbiont"), "", "is in the project's hidden directory .symbiont"},
		{"inside the audit store", filepath.Join(proj, ".symbiont/governed"), "", "is in the project's hidden directory .symbiont"},
		{"the audit store by its resolved path", mustEval(t, filepath.Join(base, "store-link")), "", "is in the project's hidden directory .symbiont"},
		{"inside .git", filepath.Join(proj, ".git/hooks"), "", "is in the project's hidden directory .git"},
		{"a hidden directory deeper in the project", filepath.Join(proj, "src/.cache"), "", "is in the project's hidden directory .cache"},
		{"the policies", filepath.Join(proj, "policies"), "", "is in the project's policies directory"},
		{"inside the policies", filepath.Join(proj, "policies/access"), "", "is in the project's policies directory"},
		{"the key in the workspace", filepath.Join(proj, "keys"), filepath.Join(proj, "keys/k"), "holds the signing key"},
		{"the key below the workspace", proj, filepath.Join(proj, "keys/k"), "holds the signing key"},
		{"the key in the project's parent", base, filepath.Join(proj, "parent-key/k"), "holds the signing key"},
		{"the key named relatively", filepath.Join(proj, "keys"), "RELATIVE", "holds the signing key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.key
			if key == "RELATIVE" { // as SYMBI_AUDIT_KEY_FILE=k, the server started in the workspace
				t.Chdir(tt.ws)
				key = "k"
			}
			err := CheckPlace(tt.ws, proj, key)
			if tt.why == "" {
				if err != nil {
					t.Fatalf("CheckPlace(%q): %v", tt.ws, err)
				}
				return
			}
			checkRefusal(t, "CheckPlace", err, ErrWorkspaceGoverned, errcode.ProtectedPath)
			if !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("%v, want it to say %q", err, tt.why)
			}
		})
	}
}

func mustEval(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFollow: where a path leads after its symbolic links, the rest taken lexically.
func TestFollow(t *testing.T) {
	base := realTempDir(t)
	ws := filepath.Join(base, "ws")
	must(t, os.MkdirAll(filepath.Join(ws, "src/deep"), 0o755))
	writeFile(t, ws, "file", []byte("x"))
	for name, target := range map[string]string{
		"in": "src", "abs-in": filepath.Join(ws, "src"), "up": "..", "abs-out": "/etc",
		"dangling-in": "src/new", "dangling-out": "../new", "l1": "l2", "l2": "l1",
		"src/deep/back": "../..", "chain": "in/deep",
	} {
		must(t, os.Symlink(target, filepath.Join(ws, name)))
	}
	w, err := Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tests := []struct {
		rel, want string
		rule      error
	}{
		{".", ".", nil},
		{"src/a.go", "src/a.go", nil},
		{"missing/x/y", "missing/x/y", nil},
		{"file/x", "file/x", nil},
		{"in/a.go", "src/a.go", nil},
		{"abs-in/a.go", "src/a.go", nil},
		{"chain/x", "src/deep/x", nil},
		{"src/deep/back/file", "file", nil},
		{"dangling-in", "src/new", nil},
		{"chain/../x", "src/x", nil}, // ".." from where the link led, as the kernel takes it
		{"in/deep/../../file", "file", nil},
		{"WS/in/a.go", "src/a.go", nil}, // an absolute path, as sent
		{"missing/../up/x", "", ErrOutside},
		{"missing/../file", "", ErrOutside}, // where it leads depends on what is made there
		{"up/x", "", ErrOutside},
		{"abs-out/passwd", "", ErrOutside},
		{"dangling-out", "", ErrOutside},
		{"l1/x", "", ErrUnreadable},
	}
	for _, tt := range tests {
		got, err := w.Follow(strings.Replace(tt.rel, "WS", ws, 1))
		if tt.rule == nil {
			if err != nil || got != tt.want {
				t.Errorf("Follow(%q) = %q, %v; want %q", tt.rel, got, err, tt.want)
			}
			continue
		}
		checkRefusal(t, fmt.Sprintf("Follow(%q)", tt.rel), err, tt.rule, errcode.ProtectedPath)
	}
}

// TestProtectedNamesFoldCase: the protected names are compared without regard to case.
// On a case-insensitive file system (casefold ext4 or tmpfs, vfat, exfat, SMB) "Policies"
// is the policies directory and ".SYMBIONT" the audit store; refusing them in every case,
// whatever the file system, is the rule that cannot fail open.
func TestProtectedNamesFoldCase(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, tt := range []struct {
		rel  string
		want error
	}{
		{".SYMBIONT/governed/audit-signing.key", ErrAuditStore},
		{".Symbiont/ledger.jsonl", ErrAuditStore},
		{"sub/.symbioNT/x", ErrAuditStore},
		{"POLICIES/respond.cedar", ErrPolicies},
		{"Policies", ErrPolicies},
	} {
		if err := w.CheckGoverned(tt.rel); !errors.Is(err, tt.want) {
			t.Errorf("CheckGoverned(%q) = %v, want %v", tt.rel, err, tt.want)
		}
	}
	if _, _, err := w.WriteText("Policies/evil.cedar", "permit(principal, action, resource);\n", 1<<20); !errors.Is(err, ErrPolicies) {
		t.Errorf("WriteText(\"Policies/evil.cedar\") = %v, want ErrPolicies", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "Policies")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused write made Policies/: %v", err)
	}
	if !w.HoldsGoverned("POLICIES") {
		t.Error(`HoldsGoverned("POLICIES") = false; a move of it takes the policies on a case-insensitive file system`)
	}
	// A workspace at the project's POLICIES is its policies directory there.
	if err := os.Mkdir(filepath.Join(dir, "POLICIES"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := CheckPlace(filepath.Join(dir, "POLICIES"), dir, ""); !errors.Is(err, ErrWorkspaceGoverned) {
		t.Errorf("CheckPlace(<project>/POLICIES) = %v, want ErrWorkspaceGoverned", err)
	}
}

// TestProtectedNamesTrailingDots: vfat and exFAT look a name up without its trailing dots
// ("policies." is the policies directory there), and Windows servers behind SMB drop
// trailing dots and spaces: the protected names are refused in those spellings too, by
// the agent's gate, symbi's own writer and the workspace's place.
func TestProtectedNamesTrailingDots(t *testing.T) {
	dir := realTempDir(t)
	w, err := Open(dir)
	must(t, err)
	defer w.Close()
	for _, tt := range []struct {
		rel  string
		want error
	}{
		{"policies./respond.cedar", ErrPolicies},
		{"policies../respond.cedar", ErrPolicies},
		{"Policies. /respond.cedar", ErrPolicies},
		{".symbiont./governed/audit-signing.key", ErrAuditStore},
		{".SYMBIONT./ledger.jsonl", ErrAuditStore},
		{"sub/.symbiont /x", ErrAuditStore},
	} {
		if err := w.CheckGoverned(tt.rel); !errors.Is(err, tt.want) {
			t.Errorf("CheckGoverned(%q) = %v, want %v", tt.rel, err, tt.want)
		}
	}
	for _, ok := range []string{"policies.d/x", "policy./x", "src/symbiont./x"} {
		if err := w.CheckGoverned(ok); err != nil {
			t.Errorf("CheckGoverned(%q) = %v, want nil: not a protected name in any spelling", ok, err)
		}
	}
	if _, _, err := w.WriteText("policies./evil.cedar", "permit(principal, action, resource);\n", 1<<20); !errors.Is(err, ErrPolicies) {
		t.Errorf("WriteText(\"policies./evil.cedar\") = %v, want ErrPolicies", err)
	}
	proj := filepath.Join(dir, "proj")
	must(t, os.MkdirAll(filepath.Join(proj, "policies."), 0o755))
	if err := CheckPlace(filepath.Join(proj, "policies."), proj, ""); !errors.Is(err, ErrWorkspaceGoverned) {
		t.Errorf("CheckPlace(<project>/policies.) = %v, want ErrWorkspaceGoverned", err)
	}
}
