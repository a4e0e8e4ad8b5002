package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	st, err := os.Lstat(path)
	must(t, err)
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestWriteText(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		ws := tree(t)
		must(t, os.WriteFile(filepath.Join(ws, "private.txt"), []byte("old private\n"), 0o600))
		must(t, os.Chmod(filepath.Join(ws, "private.txt"), 0o4600)) // a set-id bit is dropped
		w := openWS(t, ws, walk)
		old := unix.Umask(0o077) // a new file is 0644 whatever the umask
		defer unix.Umask(old)
		tests := []struct {
			path    string
			file    string // the file written, relative to ws
			content string
			mode    os.FileMode
		}{
			{"new.txt", "new.txt", "brand new\n", 0o644},
			{filepath.Join(ws, "sub/new.txt"), "sub/new.txt", "in a subdirectory\n", 0o644},
			{"sub/../top.txt", "top.txt", "cleaned\n", 0o644},
			{"a.txt", "a.txt", "replaced\n", 0o644},
			{"private.txt", "private.txt", "new private\n", 0o600},
			{"empty.txt", "empty.txt", "", 0o644},
			{"exact.txt", "exact.txt", strings.Repeat("é", testLimit/2), 0o644}, // exactly the limit
		}
		for _, tt := range tests {
			size, sum, err := w.WriteText(tt.path, tt.content, testLimit)
			if err != nil {
				t.Fatalf("WriteText(%q): %v", tt.path, err)
			}
			if size != int64(len(tt.content)) || sum != sha(tt.content) {
				t.Errorf("WriteText(%q) = %d, %s; want %d, %s", tt.path, size, sum, len(tt.content), sha(tt.content))
			}
			full := filepath.Join(ws, tt.file)
			data, err := os.ReadFile(full)
			must(t, err)
			if string(data) != tt.content {
				t.Errorf("%s holds %q, want %q", tt.file, data, tt.content)
			}
			st, err := os.Lstat(full)
			must(t, err)
			if st.Mode() != tt.mode {
				t.Errorf("%s mode %v, want %v", tt.file, st.Mode(), tt.mode)
			}
			got, _, gsum, err := w.ReadText(tt.path, nil, nil, testLimit)
			if err != nil || got != tt.content || gsum != sum {
				t.Errorf("ReadText(%q) after the write = %q, %s, %v", tt.path, got, gsum, err)
			}
		}
		assertNoTemp(t, ws)
		assertNoTemp(t, filepath.Join(ws, "sub"))
	})
}

// assertNoTemp asserts that no temporary file of WriteText is left in dir.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".symbi-write-") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
}

func TestWriteTextRefusals(t *testing.T) {
	tests := []struct {
		path    string
		content string
		rule    error
		code    errcode.Code
	}{
		{"", "x", ErrBadPath, errcode.InvalidRequest},
		{"new\x00.txt", "x", ErrBadPath, errcode.InvalidRequest},
		{strings.Repeat("n", 300), "x", ErrBadPath, errcode.InvalidRequest},
		{".hidden", "x", ErrHidden, errcode.ProtectedPath},
		{"sub/.new", "x", ErrHidden, errcode.ProtectedPath},
		{"policies/new.cedar", "x", ErrPolicies, errcode.ProtectedPath},
		{"../outside/new.txt", "x", ErrOutside, errcode.ProtectedPath},
		{"../outside/secret.txt", "x", ErrOutside, errcode.ProtectedPath},
		{"sub/../../outside/secret.txt", "x", ErrOutside, errcode.ProtectedPath},
		{"/tmp/new.txt", "x", ErrOutside, errcode.ProtectedPath},
		{"OUTSIDE/secret.txt", "x", ErrOutside, errcode.ProtectedPath}, // replaced by the absolute path
		{"linkin", "x", ErrSymlink, errcode.ProtectedPath},
		{"linkout", "x", ErrSymlink, errcode.ProtectedPath},
		{"linkdir/b.txt", "x", ErrSymlink, errcode.ProtectedPath},
		{"linkdir/new.txt", "x", ErrSymlink, errcode.ProtectedPath},
		{"linkoutdir/secret.txt", "x", ErrSymlink, errcode.ProtectedPath},
		{"linkoutdir/new.txt", "x", ErrSymlink, errcode.ProtectedPath},
		{"up/outside/new.txt", "x", ErrSymlink, errcode.ProtectedPath},
		{"up/ws/new.txt", "x", ErrSymlink, errcode.ProtectedPath},
		{"hard1", "x", ErrHardLink, errcode.ProtectedPath},
		{"fifo", "x", ErrNotRegular, errcode.ProtectedPath},
		{"sock", "x", ErrNotRegular, errcode.ProtectedPath},
		{"sub", "x", ErrNotRegular, errcode.ProtectedPath},
		{".", "x", ErrNotRegular, errcode.ProtectedPath},
		{"WS", "x", ErrNotRegular, errcode.ProtectedPath}, // replaced by the workspace path
		{"missing/new.txt", "x", ErrNoParent, errcode.NotFound},
		{"sub/missing/new.txt", "x", ErrNoParent, errcode.NotFound},
		{"a.txt/new.txt", "x", ErrNoParent, errcode.NotFound},
		{"big.txt", strings.Repeat("a", testLimit+1), ErrTooLarge, errcode.LimitExceeded},
		{"new.txt", strings.Repeat("é", testLimit/2) + "a", ErrTooLarge, errcode.LimitExceeded},
		{"new.txt", "caf\xe9", ErrNotUTF8, errcode.InvalidRequest},
	}
	modes(t, func(t *testing.T, walk bool) {
		ws := tree(t)
		outside := filepath.Join(filepath.Dir(ws), "outside")
		before := snapshot(t, filepath.Dir(ws))
		w := openWS(t, ws, walk)
		for _, tt := range tests {
			path := tt.path
			path = strings.Replace(path, "OUTSIDE", outside, 1)
			if path == "WS" {
				path = ws
			}
			_, _, err := w.WriteText(path, tt.content, testLimit)
			checkRefusal(t, fmt.Sprintf("WriteText(%q)", path), err, tt.rule, tt.code)
		}
		// Nothing changed anywhere: no file written, replaced or left behind, no link
		// replaced.
		if after := snapshot(t, filepath.Dir(ws)); after != before {
			t.Errorf("the tree changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
}

// snapshot describes every entry under dir: path, type, links, inode and content.
func snapshot(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(path)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d %d", path, st.Mode(), sys.Nlink, sys.Ino)
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			fmt.Fprintf(&b, " -> %s", target)
		case st.Mode().IsRegular():
			data, _ := os.ReadFile(path)
			fmt.Fprintf(&b, " %q", data)
		}
		b.WriteByte('\n')
		return nil
	})
	must(t, err)
	return b.String()
}

// TestWriteTextAtomic replaces a file over and over while readers read it: every read
// sees one whole version, and a descriptor opened before a replacement keeps the old
// content (a new inode replaces the name; the old one is never written into).
func TestWriteTextAtomic(t *testing.T) {
	const size = 256 << 10
	versions := []string{strings.Repeat("a", size), strings.Repeat("b", size-1) + "\n"}
	modes(t, func(t *testing.T, walk bool) {
		ws := realTempDir(t)
		w := openWS(t, ws, walk)
		if _, _, err := w.WriteText("f.txt", versions[0], size); err != nil {
			t.Fatal(err)
		}
		held, err := os.Open(filepath.Join(ws, "f.txt"))
		must(t, err)
		defer held.Close()
		ino := inode(t, filepath.Join(ws, "f.txt"))

		var stop atomic.Bool
		var reads atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					got, _, sum, err := w.ReadText("f.txt", nil, nil, size)
					if err != nil {
						t.Errorf("read during replacement: %v", err)
						return
					}
					if got != versions[0] && got != versions[1] {
						t.Errorf("read a partial or mixed file: %d bytes", len(got))
						return
					}
					if sum != sha(got) {
						t.Errorf("digest %s does not match the content read", sum)
						return
					}
					reads.Add(1)
				}
			}()
		}
		const writes = 100
		for i := range writes {
			if _, _, err := w.WriteText("f.txt", versions[(i+1)%2], size); err != nil {
				t.Errorf("write %d: %v", i, err)
				break
			}
		}
		stop.Store(true)
		wg.Wait()
		if inode(t, filepath.Join(ws, "f.txt")) == ino {
			t.Error("the file was written in place, not replaced")
		}
		old, err := os.ReadFile("/proc/self/fd/" + fmt.Sprint(held.Fd()))
		must(t, err)
		if string(old) != versions[0] {
			t.Error("the replaced inode was written into")
		}
		assertNoTemp(t, ws)
		t.Logf("%d reads during %d writes", reads.Load(), writes)
	})
}

// TestSwapRace exchanges sub/ with a symbolic link to a directory outside the workspace
// while reads and writes of sub/b.txt loop: none may read or write outside.
func TestSwapRace(t *testing.T) {
	const rounds = 2000
	modes(t, func(t *testing.T, walk bool) {
		base := realTempDir(t)
		ws := filepath.Join(base, "ws")
		outside := filepath.Join(base, "outside")
		writeFile(t, outside, "b.txt", secret)
		writeFile(t, ws, "sub/b.txt", []byte("inner\n"))
		must(t, os.Symlink(outside, filepath.Join(ws, "swap")))
		w := openWS(t, ws, walk)
		rel, err := w.Rel("sub/b.txt")
		must(t, err)

		var stop atomic.Bool
		var swaps atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(ws, "sub"),
					unix.AT_FDCWD, filepath.Join(ws, "swap"), unix.RENAME_EXCHANGE)
				if err != nil {
					t.Errorf("exchange: %v", err)
					return
				}
				swaps.Add(1)
			}
		}()
		var ok, refused int
		for i := range rounds {
			var err error
			if i%2 == 0 {
				var content string
				content, _, _, err = w.ReadText(rel, nil, nil, testLimit)
				if strings.Contains(content, string(secret)) {
					stop.Store(true)
					wg.Wait()
					t.Fatal("read returned the secret outside the workspace")
				}
			} else {
				_, _, err = w.WriteText(rel, "inner\n", testLimit)
			}
			if err == nil {
				ok++
				continue
			}
			refused++
			if !errorsIsAny(err, ErrSymlink, ErrNotExist, ErrNoParent) {
				t.Errorf("unexpected refusal: %v", err)
			}
		}
		stop.Store(true)
		wg.Wait()
		if swaps.Load() == 0 {
			t.Fatal("the directory was never swapped")
		}
		if data, _ := os.ReadFile(filepath.Join(outside, "b.txt")); !bytes.Equal(data, secret) {
			t.Fatalf("a write reached outside the workspace: %q", data)
		}
		assertEntries(t, outside, "b.txt")
		t.Logf("%d ok, %d refused, %d swaps", ok, refused, swaps.Load())
	})
}
