package journal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// childKey opens (creating) the store of dir and prints its public key.
func childKey(dir string) int {
	root, err := os.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := OpenStore(root, StoreOptions{Create: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(hex.EncodeToString(s.PublicKey()))
	return 0
}

func TestOpenStoreCreates(t *testing.T) {
	dir, root := newProject(t)
	if _, err := OpenStore(root, StoreOptions{}); !errors.Is(err, errcode.AuditUnavailable) || !errors.Is(err, ErrNoKey) {
		t.Fatalf("without Create on an empty project: %v", err)
	}
	s := openStore(t, root)
	gov := filepath.Join(dir, ".symbiont", "governed")
	if s.Dir() != gov {
		t.Errorf("Dir() = %q, want %q", s.Dir(), gov)
	}
	for path, want := range map[string]os.FileMode{gov: os.ModeDir | 0o700, filepath.Join(gov, KeyFileName): 0o600} {
		st, err := os.Lstat(path)
		if err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v, err %v; want %v", path, st.Mode(), err, want)
		}
	}
	seed := mustRead(t, filepath.Join(gov, KeyFileName))
	if !bytes.Equal(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), s.PublicKey()) {
		t.Error("public key does not derive from the seed file")
	}
	again, err := OpenStore(root, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if !again.PublicKey().Equal(s.PublicKey()) {
		t.Error("reopening changed the key")
	}
	ents, _ := os.ReadDir(gov)
	if len(ents) != 1 {
		t.Errorf("governed holds %d entries, want only the key", len(ents))
	}
}

func TestKeyChecks(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, gov string)
		want  error
		text  string
	}{
		{"31 bytes", func(t *testing.T, gov string) { writeKey(t, gov, 31, 0o600) }, ErrUnsafeKey, "exactly 32 bytes"},
		{"33 bytes", func(t *testing.T, gov string) { writeKey(t, gov, 33, 0o600) }, ErrUnsafeKey, "exactly 32 bytes"},
		{"32 zero bytes", func(t *testing.T, gov string) {
			if err := os.WriteFile(filepath.Join(gov, KeyFileName), make([]byte, 32), 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeKey, "holds 32 zero bytes, not a key"},
		{"mode 0644", func(t *testing.T, gov string) { writeKey(t, gov, 32, 0o644) }, ErrUnsafeKey, "mode 0644"},
		{"mode 0640", func(t *testing.T, gov string) { writeKey(t, gov, 32, 0o640) }, ErrUnsafeKey, "mode 0640"},
		{"two links", func(t *testing.T, gov string) {
			writeKey(t, gov, 32, 0o600)
			if err := os.Link(filepath.Join(gov, KeyFileName), filepath.Join(gov, "other")); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeKey, "2 hard links"},
		{"symlink", func(t *testing.T, gov string) {
			other := filepath.Join(t.TempDir(), "seed")
			if err := os.WriteFile(other, make([]byte, 32), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, filepath.Join(gov, KeyFileName)); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeKey, "symlink"},
		{"directory", func(t *testing.T, gov string) {
			if err := os.Mkdir(filepath.Join(gov, KeyFileName), 0o700); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeKey, "not a regular file"},
		{"fifo", func(t *testing.T, gov string) {
			if err := unix.Mkfifo(filepath.Join(gov, KeyFileName), 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeKey, "not a regular file"},
		{"governed 0755", func(t *testing.T, gov string) {
			if err := os.Chmod(gov, 0o755); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeDir, "mode 0755"},
		{"governed symlink", func(t *testing.T, gov string) {
			real := t.TempDir()
			if err := os.Remove(gov); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, gov); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeDir, "symlink"},
		{".symbiont symlink", func(t *testing.T, gov string) {
			real := t.TempDir()
			if err := os.Mkdir(filepath.Join(real, "governed"), 0o700); err != nil {
				t.Fatal(err)
			}
			sym := filepath.Dir(gov)
			if err := os.RemoveAll(sym); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, sym); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeDir, "symlink"},
		{"governed is a file", func(t *testing.T, gov string) {
			if err := os.Remove(gov); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(gov, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrUnsafeDir, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, root := newProject(t)
			gov := filepath.Join(dir, ".symbiont", "governed")
			if err := os.MkdirAll(gov, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, gov)
			for _, create := range []bool{false, true} {
				s, err := OpenStore(root, StoreOptions{Create: create})
				if err == nil {
					s.Close()
					t.Fatalf("create=%v: accepted", create)
				}
				if !errors.Is(err, tt.want) || !errors.Is(err, errcode.AuditUnavailable) || !strings.Contains(err.Error(), tt.text) {
					t.Errorf("create=%v: error %q, want %v containing %q", create, err, tt.want, tt.text)
				}
			}
		})
	}
}

func writeKey(t *testing.T, gov string, n int, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(gov, KeyFileName)
	if err := os.WriteFile(p, bytes.Repeat([]byte{7}, n), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func TestKeyFileOverride(t *testing.T) {
	dir, root := newProject(t)
	if err := os.MkdirAll(filepath.Join(dir, ".symbiont", "governed"), 0o700); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "project.key")
	if _, err := OpenStore(root, StoreOptions{KeyFile: keyFile}); !errors.Is(err, ErrNoKey) {
		t.Fatalf("absent override without Create: %v", err)
	}
	s, err := OpenStore(root, StoreOptions{KeyFile: keyFile, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seed := mustRead(t, keyFile)
	if !bytes.Equal(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), s.PublicKey()) {
		t.Error("public key does not derive from the override file")
	}
	if _, err := os.Lstat(filepath.Join(s.Dir(), KeyFileName)); !os.IsNotExist(err) {
		t.Errorf("a key was created in the project too: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link.key")
	if err := os.Symlink(keyFile, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(root, StoreOptions{KeyFile: link}); !errors.Is(err, ErrUnsafeKey) {
		t.Errorf("symlinked override: %v", err)
	}
}

// TestConcurrentKeyCreators races 16 goroutines, then 16 processes, on fresh projects:
// every one must end with the same key, the one on disk.
func TestConcurrentKeyCreators(t *testing.T) {
	t.Run("goroutines", func(t *testing.T) {
		dir, _ := newProject(t)
		keys := make([]string, 16)
		errs := make([]error, 16)
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				root, err := os.Open(dir)
				if err != nil {
					errs[i] = err
					return
				}
				defer root.Close()
				s, err := OpenStore(root, StoreOptions{Create: true})
				if err != nil {
					errs[i] = err
					return
				}
				defer s.Close()
				keys[i] = hex.EncodeToString(s.PublicKey())
			}()
		}
		wg.Wait()
		checkOneKey(t, dir, keys, errs)
	})
	t.Run("processes", func(t *testing.T) {
		dir, _ := newProject(t)
		cmds := make([]*exec.Cmd, 16)
		outs := make([]*bytes.Buffer, 16)
		for i := range cmds {
			cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
			cmds[i].Env = append(os.Environ(), "JOURNAL_TEST_CHILD=key", "JOURNAL_TEST_DIR="+dir)
			outs[i] = new(bytes.Buffer)
			cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		}
		for _, c := range cmds {
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
		}
		keys := make([]string, 16)
		errs := make([]error, 16)
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				errs[i] = fmt.Errorf("%v: %s", err, outs[i])
			}
			keys[i] = strings.TrimSpace(outs[i].String())
		}
		checkOneKey(t, dir, keys, errs)
	})
}

func checkOneKey(t *testing.T, dir string, keys []string, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("creator %d: %v", i, err)
		}
	}
	gov := filepath.Join(dir, ".symbiont", "governed")
	seed := mustRead(t, filepath.Join(gov, KeyFileName))
	want := hex.EncodeToString(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
	for i, k := range keys {
		if k != want {
			t.Errorf("creator %d uses key %s, the file holds %s", i, k, want)
		}
	}
	ents, _ := os.ReadDir(gov)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("governed holds %v, want only the key", names)
	}
}
