package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

// TestForeignOwnerRefused: .symbiont, governed/ and the key owned by another user than
// the effective one are refused (audit_unavailable), whether the store may create or not.
// The test chowns, so it needs root (CI runs as root).
func TestForeignOwnerRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	const other = 54321
	tests := []struct {
		name  string
		chown func(dir string) string // returns the path chowned
		want  error
		text  string
	}{
		{".symbiont", func(dir string) string { return filepath.Join(dir, ".symbiont") }, ErrUnsafeDir, "owned by uid 54321"},
		{"governed", func(dir string) string { return filepath.Join(dir, ".symbiont", "governed") }, ErrUnsafeDir, "owned by uid 54321"},
		{"key", func(dir string) string { return filepath.Join(dir, ".symbiont", "governed", KeyFileName) }, ErrUnsafeKey, "owned by uid 54321"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, root := newProject(t)
			s, err := OpenStore(root, StoreOptions{Create: true})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			if err := os.Chown(tt.chown(dir), other, other); err != nil {
				t.Fatal(err)
			}
			for _, create := range []bool{false, true} {
				s, err := OpenStore(root, StoreOptions{Create: create})
				if err == nil {
					s.Close()
					t.Fatalf("create=%v: a store with %s owned by uid %d was accepted", create, tt.name, other)
				}
				if !errors.Is(err, tt.want) || errcode.Of(err) != errcode.AuditUnavailable || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("create=%v: %v; want %v, audit_unavailable, %q", create, err, tt.want, tt.text)
				}
			}
		})
	}
}

// TestSymbiontModeRefused: .symbiont with group or other permission bits is refused as
// governed/ is.
func TestSymbiontModeRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o750, 0o705, 0o701} {
		dir, root := newProject(t)
		s, err := OpenStore(root, StoreOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if err := os.Chmod(filepath.Join(dir, ".symbiont"), mode); err != nil {
			t.Fatal(err)
		}
		if s, err := OpenStore(root, StoreOptions{}); err == nil {
			s.Close()
			t.Fatalf(".symbiont mode %04o accepted", mode)
		} else if !errors.Is(err, ErrUnsafeDir) {
			t.Fatalf(".symbiont mode %04o: %v, want ErrUnsafeDir", mode, err)
		}
	}
}

// TestSymbiontSwappedForForeignDir: someone with write access to the project directory
// but not to .symbiont can rename
// .symbiont away (a rename within its parent needs no permission on .symbiont itself) and
// put a directory of its own in its place: the store must refuse it, and a writer already
// running must stop at its next fsync.
func TestSymbiontSwappedForForeignDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir, root := newProject(t)
	s := openStore(t, root)
	w, err := s.Create("agent", "run")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(Started{Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	sym := filepath.Join(dir, ".symbiont")
	if err := os.Rename(sym, filepath.Join(dir, ".symbiont-old")); err != nil {
		t.Fatal(err)
	}
	gov := filepath.Join(sym, "governed")
	if err := os.MkdirAll(gov, 0o700); err != nil {
		t.Fatal(err)
	}
	// The attacker's copy: same layout and modes, its own uid, even a hard link of
	// nothing — it cannot read the real key, so it plants its own.
	if err := os.WriteFile(filepath.Join(gov, KeyFileName), []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sym, gov, filepath.Join(gov, KeyFileName)} {
		if err := os.Chown(p, 54321, 54321); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); !errors.Is(err, errcode.AuditUnavailable) {
		t.Fatalf("Sync after .symbiont was swapped: %v, want audit_unavailable", err)
	}
	if s2, err := OpenStore(root, StoreOptions{Create: true}); err == nil {
		s2.Close()
		t.Fatal("a .symbiont owned by another user was accepted")
	} else if !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("OpenStore: %v, want ErrUnsafeDir", err)
	}
}

// TestKeyOverrideChecks: the key override (SYMBI_AUDIT_KEY_FILE) is checked like the
// project's own: owner, mode, link count.
func TestKeyOverrideChecks(t *testing.T) {
	_, root := newProject(t)
	keyDir := t.TempDir()
	keyFile := filepath.Join(keyDir, "k")
	s, err := OpenStore(root, StoreOptions{KeyFile: keyFile, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Chmod(keyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(root, StoreOptions{KeyFile: keyFile}); !errors.Is(err, ErrUnsafeKey) {
		t.Fatalf("override mode 0640: %v, want ErrUnsafeKey", err)
	}
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(keyFile, keyFile+".2"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(root, StoreOptions{KeyFile: keyFile}); !errors.Is(err, ErrUnsafeKey) {
		t.Fatalf("override with 2 links: %v, want ErrUnsafeKey", err)
	}
	os.Remove(keyFile + ".2")
	if os.Geteuid() == 0 {
		if err := os.Chown(keyFile, 54321, 54321); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenStore(root, StoreOptions{KeyFile: keyFile}); !errors.Is(err, ErrUnsafeKey) {
			t.Fatalf("override owned by another uid: %v, want ErrUnsafeKey", err)
		}
	}
}
