package opfile

// Tests of what the operator-file opener closes on a refusal, lets through, and reports
// when a read fails.

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// writeWithMode writes "x" to path, creating it with perm, and then sets its mode to mode
// whatever the umask took from perm.
func writeWithMode(t *testing.T, path string, perm, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestOpenClosesRefused: a refused file's descriptor is closed: a thousand refusals
// leave no descriptor behind.
func TestOpenClosesRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gw")
	writeWithMode(t, p, 0o600, 0o620)
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(ents)
	}
	before := count()
	for range 1000 {
		if f, err := Open(p, unix.O_RDONLY, "WHY"); err == nil {
			f.Close()
			t.Fatal("opened a group-writable file")
		}
	}
	if after := count(); after > before+10 {
		t.Fatalf("%d descriptors open after 1,000 refusals, %d before", after, before)
	}
}

// TestReadError: a read that fails is an error, never the bytes read so far as the
// whole file.
func TestReadError(t *testing.T) {
	d, err := os.Open(t.TempDir()) // read(2) of a directory fails (EISDIR)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if data, err := Read(d, 10); err == nil {
		t.Fatalf("Read of an unreadable file: %q, nil error", data)
	}
}

// TestOwnerSelfOrRoot: a file owned by the effective user, or by root, opens (mode
// 0644): the owner check refuses only other users.
func TestOwnerSelfOrRoot(t *testing.T) {
	own := filepath.Join(t.TempDir(), "own")
	writeWithMode(t, own, 0o644, 0o644)
	paths := []string{own}
	// A file of root's that neither group nor others may write, when the system has one.
	for _, p := range []string{"/etc/passwd", "/etc/hostname", "/etc/os-release"} {
		st, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid == 0 && st.Mode().IsRegular() && st.Mode().Perm()&0o022 == 0 {
			paths = append(paths, p)
			break
		}
	}
	for _, p := range paths {
		f, err := Open(p, unix.O_RDONLY, "WHY")
		if err != nil {
			t.Errorf("Open(%s): %v", p, err)
			continue
		}
		f.Close()
	}
}
