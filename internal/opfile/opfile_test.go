package opfile

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpen: a regular file not writable by group or others opens; a symbolic link, a
// directory, a FIFO, a group- or other-writable file and a missing file are refused, each
// with its reason; O_CREAT creates the file 0600.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("data"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"regular", good, ""},
		{"symbolic link", link, "too many levels of symbolic links"},
		{"directory", dir, "not a regular file"},
		{"fifo", fifo, "not a regular file"},
		{"group writable", write("gw", 0o620), "mode 0620 lets group or others write it; WHY"},
		{"other writable", write("ow", 0o602), "mode 0602 lets group or others write it; WHY"},
		{"missing", filepath.Join(dir, "none"), "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Open(tt.path, unix.O_RDONLY, "WHY")
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
		})
	}
	created := filepath.Join(dir, "new")
	f, err := Open(created, unix.O_RDWR|unix.O_CREAT, "WHY")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, err := os.Stat(created); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("created: %v, %v", st.Mode(), err)
	}
}

// TestRead: up to the limit is read whole; one byte more is ErrTooLarge.
func TestRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	for _, n := range []int{0, 10, 11} {
		if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		data, err := Read(f, 10)
		f.Close()
		switch {
		case n <= 10 && (err != nil || len(data) != n):
			t.Fatalf("%d bytes: %d, %v", n, len(data), err)
		case n > 10 && !errors.Is(err, ErrTooLarge):
			t.Fatalf("%d bytes: %v, want ErrTooLarge", n, err)
		}
	}
}

// TestOpenRefusesFileOwnedByAnotherUser: an operator file owned by another user than the
// server's (or root) is refused whatever its mode: its owner could rewrite it, and with it
// what programs the server runs or who may call it.
func TestOpenRefusesFileOwnedByAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	const nobody = 65534
	dir := t.TempDir()
	p := filepath.Join(dir, "executors.json")
	if err := os.WriteFile(p, []byte(`{"executors":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p, unix.O_RDONLY, "WHY")
	if err == nil {
		f.Close()
		t.Fatalf("opened an operator file owned by uid %d, who may rewrite it", nobody)
	}
	if !strings.Contains(err.Error(), "owned by another user (uid 65534)") || !strings.Contains(err.Error(), "WHY") {
		t.Fatalf("refusal %q does not say the file is another user's, and why it matters", err)
	}
}

// TestSocketRefusedAsNotRegular: an operator file "must be a regular file"
// (docs/executors.md "a regular file"). A unix socket, whose open fails ENXIO, is refused
// as not a regular file, as a FIFO, directory or device is.
func TestSocketRefusedAsNotRegular(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "executors.json")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := Open(sock, unix.O_RDONLY, "WHY")
	if err == nil {
		f.Close()
		t.Fatal("opened a socket")
	}
	if !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("refusal %q does not say the file is not a regular file", err)
	}
}

// TestSymlinkRefusalNamesSymlink: the file must be "reached without following
// a symbolic link". A single symlink is refused as one — ELOOP's own text, "too many
// levels of symbolic links", would mislead — as the journal's key loader says it.
func TestSymlinkRefusalNamesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.json")
	if err := os.WriteFile(target, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "executors.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	f, err := Open(link, unix.O_RDONLY, "WHY")
	if err == nil {
		f.Close()
		t.Fatal("opened through a symbolic link")
	}
	if !strings.Contains(err.Error(), "is a symbolic link") {
		t.Fatalf("refusal %q does not say the file is a symbolic link", err)
	}
}
