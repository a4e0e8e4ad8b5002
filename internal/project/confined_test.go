package project

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

const testLimit = 64

var secret = []byte("TOP-SECRET-OUTSIDE-THE-PROJECT")

// writeFile writes content to root/rel, creating parent directories.
func writeFile(t testing.TB, root, rel string, content []byte) {
	t.Helper()
	path := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// confinedTree builds a project with one file for every refusal rule, and a
// directory outside it holding the secret. It returns the project path.
func confinedTree(t testing.TB) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "proj")
	outside := filepath.Join(base, "outside")
	writeFile(t, outside, "secret.txt", secret)
	writeFile(t, outside, "a.symbi", secret)
	writeFile(t, root, "agents/a.symbi", []byte("agent a {}\n"))
	writeFile(t, root, "agents/.x.symbi", []byte("agent x {}\n"))
	writeFile(t, root, ".symbiont/governed/key", secret)
	writeFile(t, root, "policies/p.cedar", []byte("permit(principal, action, resource);\n"))
	writeFile(t, root, "docs/policies", []byte("not protected: only the first component is\n"))
	writeFile(t, root, "exact.txt", bytes.Repeat([]byte("é"), testLimit/2))
	writeFile(t, root, "big.txt", bytes.Repeat([]byte("a"), testLimit+1))
	writeFile(t, root, "bad.txt", []byte("caf\xe9\n"))
	writeFile(t, root, "hard1", []byte("linked\n"))
	must(t, os.Link(filepath.Join(root, "hard1"), filepath.Join(root, "hard2")))
	must(t, os.Symlink("agents/a.symbi", filepath.Join(root, "linkfile")))
	must(t, os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "linkout")))
	must(t, os.Symlink("agents", filepath.Join(root, "linkdir")))
	must(t, os.Symlink(outside, filepath.Join(root, "linkoutdir")))
	must(t, os.Symlink("..", filepath.Join(root, "up")))
	must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return root
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openProject(t testing.TB, dir string, walk bool) *Project {
	t.Helper()
	p, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	p.walk = walk
	t.Cleanup(func() { p.Close() })
	return p
}

// readModes runs f once with openat2 and once with the forced fallback walk.
func readModes(t *testing.T, f func(t *testing.T, walk bool)) {
	for _, walk := range []bool{false, true} {
		name := "openat2"
		if walk {
			name = "walk"
		}
		t.Run(name, func(t *testing.T) { f(t, walk) })
	}
}

func TestReadRefusals(t *testing.T) {
	root := confinedTree(t)
	tests := []struct {
		rel  string
		rule error
		code errcode.Code
	}{
		{"", ErrBadPath, errcode.ProtectedPath},
		{"agents//a.symbi", ErrBadPath, errcode.ProtectedPath},
		{"agents/", ErrBadPath, errcode.ProtectedPath},
		{"agents/a.symbi\x00", ErrBadPath, errcode.ProtectedPath},
		{"/etc/passwd", ErrAbsolute, errcode.ProtectedPath},
		{filepath.Join(root, "agents/a.symbi"), ErrAbsolute, errcode.ProtectedPath},
		{"..", ErrParent, errcode.ProtectedPath},
		{"../outside/secret.txt", ErrParent, errcode.ProtectedPath},
		{"agents/../agents/a.symbi", ErrParent, errcode.ProtectedPath},
		{"agents/..", ErrParent, errcode.ProtectedPath},
		{".symbiont/governed/key", ErrHidden, errcode.ProtectedPath},
		{"agents/.x.symbi", ErrHidden, errcode.ProtectedPath},
		{"agents/.", ErrNotRegular, errcode.ProtectedPath},
		{".", ErrBadPath, errcode.ProtectedPath},
		{"./.", ErrBadPath, errcode.ProtectedPath},
		{"./..", ErrParent, errcode.ProtectedPath},
		{"./.symbiont/governed/key", ErrHidden, errcode.ProtectedPath},
		{"./policies/p.cedar", ErrPolicies, errcode.ProtectedPath},
		{"./linkfile", ErrSymlink, errcode.ProtectedPath},
		{"policies/p.cedar", ErrPolicies, errcode.ProtectedPath},
		{"policies", ErrPolicies, errcode.ProtectedPath},
		{"linkfile", ErrSymlink, errcode.ProtectedPath},
		{"linkout", ErrSymlink, errcode.ProtectedPath},
		{"linkdir/a.symbi", ErrSymlink, errcode.ProtectedPath},
		{"linkoutdir/secret.txt", ErrSymlink, errcode.ProtectedPath},
		{"up/outside/secret.txt", ErrSymlink, errcode.ProtectedPath},
		{"hard1", ErrHardLink, errcode.ProtectedPath},
		{"hard2", ErrHardLink, errcode.ProtectedPath},
		{"agents", ErrNotRegular, errcode.ProtectedPath},
		{"fifo", ErrNotRegular, errcode.ProtectedPath},
		{"sock", ErrNotRegular, errcode.ProtectedPath},
		{"bad.txt", ErrNotUTF8, errcode.ProtectedPath},
		{"big.txt", ErrTooLarge, errcode.LimitExceeded},
		{"missing.txt", ErrNotExist, errcode.NotFound},
		{"agents/missing/a.symbi", ErrNotExist, errcode.NotFound},
		{"agents/a.symbi/x", ErrNotExist, errcode.NotFound},
	}
	readModes(t, func(t *testing.T, walk bool) {
		p := openProject(t, root, walk)
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%q", tt.rel), func(t *testing.T) {
				done := make(chan struct{})
				var data []byte
				var err error
				go func() {
					defer close(done)
					data, err = p.Read(tt.rel, testLimit)
				}()
				select {
				case <-done:
				case <-time.After(hangGuard):
					t.Fatalf("Read(%q) hangs", tt.rel)
				}
				if err == nil {
					t.Fatalf("Read(%q) = %q, want refusal %v", tt.rel, data, tt.rule)
				}
				if !errors.Is(err, tt.rule) {
					t.Errorf("Read(%q) error %v, want rule %v", tt.rel, err, tt.rule)
				}
				if got := errcode.Of(err); got != tt.code {
					t.Errorf("Read(%q) code %s, want %s (%v)", tt.rel, got, tt.code, err)
				}
				if bytes.Contains([]byte(err.Error()), secret) {
					t.Errorf("error leaks the secret: %v", err)
				}
			})
		}
	})
}

func TestReadAccepted(t *testing.T) {
	root := confinedTree(t)
	tests := []struct {
		rel  string
		want []byte
	}{
		{"agents/a.symbi", []byte("agent a {}\n")},
		{"exact.txt", bytes.Repeat([]byte("é"), testLimit/2)}, // exactly the limit
		{"docs/policies", []byte("not protected: only the first component is\n")},
		{"./agents/a.symbi", []byte("agent a {}\n")}, // a lone "." is the current directory
		{"agents/./a.symbi", []byte("agent a {}\n")},
		{"././agents/a.symbi", []byte("agent a {}\n")},
	}
	readModes(t, func(t *testing.T, walk bool) {
		p := openProject(t, root, walk)
		for _, tt := range tests {
			got, err := p.Read(tt.rel, testLimit)
			if err != nil {
				t.Fatalf("Read(%q): %v", tt.rel, err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("Read(%q) = %q, want %q", tt.rel, got, tt.want)
			}
		}
	})
}

func TestReadGrowsPastFstat(t *testing.T) {
	// A zero limit accepts only empty files.
	root := t.TempDir()
	writeFile(t, root, "empty", nil)
	writeFile(t, root, "one", []byte("x"))
	p := openProject(t, root, false)
	if got, err := p.Read("empty", 0); err != nil || len(got) != 0 {
		t.Fatalf("Read(empty, 0) = %q, %v", got, err)
	}
	if _, err := p.Read("one", 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Read(one, 0) error %v, want ErrTooLarge", err)
	}
}

func TestOpenPinsDirectory(t *testing.T) {
	readModes(t, func(t *testing.T, walk bool) {
		base := t.TempDir()
		dir := filepath.Join(base, "proj")
		writeFile(t, dir, "agents/a.symbi", []byte("original"))
		p := openProject(t, dir, walk)
		must(t, os.Rename(dir, filepath.Join(base, "moved")))
		writeFile(t, dir, "agents/a.symbi", []byte("impostor"))
		got, err := p.Read("agents/a.symbi", testLimit)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != "original" {
			t.Fatalf("read %q after replacing the directory, want the original", got)
		}
		if p.Path() != dir {
			t.Errorf("Path() = %q, want %q", p.Path(), dir)
		}
	})
}

func TestOpenRefusesNonDirectory(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "file", []byte("x"))
	// "" is refused too: filepath.Abs would make it the working directory.
	for _, dir := range []string{filepath.Join(root, "file"), filepath.Join(root, "missing"), ""} {
		if _, err := Open(dir); !errors.Is(err, errcode.NotFound) {
			t.Errorf("Open(%q) error %v, want not_found", dir, err)
		}
	}
}

// TestReadSwapRace swaps agents/ between a real directory and a symlink to a
// directory outside the project while reads loop; no read may return the secret.
func TestReadSwapRace(t *testing.T) {
	const reads = 10_000
	readModes(t, func(t *testing.T, walk bool) {
		base := t.TempDir()
		root := filepath.Join(base, "proj")
		outside := filepath.Join(base, "outside")
		writeFile(t, outside, "a.symbi", secret)
		writeFile(t, root, "agents/a.symbi", []byte("agent a {}\n"))
		must(t, os.Symlink(outside, filepath.Join(root, "swap")))
		p := openProject(t, root, walk)

		var stop atomic.Bool
		var swaps atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, "agents"),
					unix.AT_FDCWD, filepath.Join(root, "swap"), unix.RENAME_EXCHANGE)
				if err != nil {
					t.Errorf("exchange: %v", err)
					return
				}
				swaps.Add(1)
			}
		}()
		var ok, refused int
		for range reads {
			data, err := p.Read("agents/a.symbi", testLimit)
			if bytes.Contains(data, secret) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("read returned the secret outside the project")
			}
			if err == nil {
				ok++
				continue
			}
			refused++
			if !errors.Is(err, ErrSymlink) && !errors.Is(err, ErrNotExist) {
				t.Errorf("unexpected refusal: %v", err)
			}
		}
		stop.Store(true)
		wg.Wait()
		if swaps.Load() == 0 {
			t.Fatal("the directory was never swapped")
		}
		t.Logf("%d reads ok, %d refused, %d swaps", ok, refused, swaps.Load())
	})
}

// FuzzRead asserts that no relative path returns the secret stored outside the
// project, through either resolution, and that every refusal names a rule.
func FuzzRead(f *testing.F) {
	root := confinedTree(f)
	for _, seed := range []string{
		"agents/a.symbi", "linkout", "linkoutdir/secret.txt", "up/outside/secret.txt",
		"../outside/secret.txt", "..", "/", "", ".symbiont/governed/key", "linkdir/a.symbi",
		"agents/../../outside/a.symbi", "up/proj/agents/a.symbi", "fifo", "sock", "exact.txt",
	} {
		f.Add(seed)
	}
	modes := []*Project{openProject(f, root, false), openProject(f, root, true)}
	rules := []error{ErrBadPath, ErrAbsolute, ErrParent, ErrHidden, ErrPolicies, ErrSymlink,
		ErrEscape, ErrHardLink, ErrNotRegular, ErrNotUTF8, ErrUnreadable, ErrTooLarge, ErrNotExist}
	f.Fuzz(func(t *testing.T, rel string) {
		for _, p := range modes {
			data, err := p.Read(rel, 1<<10)
			if bytes.Contains(data, secret) {
				t.Fatalf("Read(%q) returned the secret", rel)
			}
			if err == nil {
				continue
			}
			named := false
			for _, r := range rules {
				named = named || errors.Is(err, r)
			}
			if !named {
				t.Fatalf("Read(%q) error names no rule: %v", rel, err)
			}
		}
	})
}

// hangGuard bounds a wait that only a hang reaches. It is never an expectation of speed:
// under -race on a busy machine the work it guards may take far longer than on an idle one.
const hangGuard = 5 * time.Minute

// TestLongNamesClipped: an error quotes at most 256 bytes of a caller's path or agent
// name, saying how long it was.
func TestLongNamesClipped(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "agents/a.symbi", []byte("agent a {}"))
	p := openProject(t, root, false)
	long := strings.Repeat("é", 50000) + ".symbi" // 100,006 bytes
	_, err := p.Read(long, 1<<20)
	if err == nil || len(err.Error()) > 1024 || !strings.Contains(err.Error(), "(100006 bytes in all)") {
		t.Errorf("Read of a 100 KB path: %d-byte error %.300q", len(err.Error()), err)
	}
	r, _ := loadRegistry(t, root)
	_, err = r.Resolve(long)
	if errcode.Of(err) != errcode.UnknownAgent || len(err.Error()) > 1024 || !strings.Contains(err.Error(), "bytes in all") {
		t.Errorf("Resolve of a 100 KB name: %d-byte error %.300q", len(err.Error()), err)
	}
	if !utf8.ValidString(err.Error()) {
		t.Errorf("the clipped name is cut inside a rune: %q", err)
	}
}
