package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// TestHoldsGovernedWorkspaceItself: the workspace itself (".") holds the governance, so
// a delete or move of it is refused.
func TestHoldsGovernedWorkspaceItself(t *testing.T) {
	w := openWS(t, realTempDir(t), false)
	for _, rel := range []string{".", ""} {
		if !w.HoldsGoverned(rel) {
			t.Errorf("HoldsGoverned(%q) = false, want true (the workspace itself)", rel)
		}
	}
	for _, rel := range []string{"src", "a/b", "policiesx"} {
		if w.HoldsGoverned(rel) {
			t.Errorf("HoldsGoverned(%q) = true, want false", rel)
		}
	}
}

// TestFollowProcItself: /proc itself is outside, even for a workspace that contains it.
func TestFollowProcItself(t *testing.T) {
	w, err := Open("/")
	must(t, err)
	t.Cleanup(func() { w.Close() })
	for _, p := range []string{"/proc", "proc", "/proc/", "/etc/../proc"} {
		if got, err := w.Follow(p); !errors.Is(err, ErrOutside) {
			t.Errorf("Follow(%q) = %q, %v; want ErrOutside", p, got, err)
		}
	}
}

// TestFollowLinkBound: Follow follows at most 40 symbolic links in one path, as Linux
// does; a 41st is refused as unreadable.
func TestFollowLinkBound(t *testing.T) {
	dir := realTempDir(t)
	writeFile(t, dir, "target", []byte("x"))
	// l0 -> l1 -> … -> l{n-1} -> target: following l0 takes n links.
	chain := func(prefix string, n int) string {
		for i := range n {
			next := "target"
			if i+1 < n {
				next = fmt.Sprintf("%s%d", prefix, i+1)
			}
			must(t, os.Symlink(next, filepath.Join(dir, fmt.Sprintf("%s%d", prefix, i))))
		}
		return prefix + "0"
	}
	w := openWS(t, dir, false)
	ok := chain("a", maxLinks)
	if got, err := w.Follow(ok); err != nil || got != "target" {
		t.Errorf("Follow through %d links = %q, %v; want target", maxLinks, got, err)
	}
	tooMany := chain("b", maxLinks+1)
	if got, err := w.Follow(tooMany); !errors.Is(err, ErrUnreadable) || errcode.Of(err) != errcode.ProtectedPath {
		t.Errorf("Follow through %d links = %q, %v; want ErrUnreadable (protected_path)", maxLinks+1, got, err)
	}
}

// TestCheckNamesAboveProjectPolicies: a path above the project's policies directory
// (the project directory in a workspace that contains it) is no policies path.
func TestCheckNamesAboveProjectPolicies(t *testing.T) {
	ws, proj := protectedTree(t)
	w, err := Open(ws, Options{Project: proj})
	must(t, err)
	t.Cleanup(func() { w.Close() })
	for _, rel := range []string{"proj", "PROJ", "proj/src"} {
		if err := w.CheckNames(rel); err != nil {
			t.Errorf("CheckNames(%q) = %v, want nil", rel, err)
		}
		if err := w.CheckGoverned(rel); err != nil {
			t.Errorf("CheckGoverned(%q) = %v, want nil", rel, err)
		}
	}
	if err := w.CheckNames("proj/policies/x.cedar"); !errors.Is(err, ErrPolicies) {
		t.Errorf("CheckNames(proj/policies/x.cedar) = %v, want ErrPolicies", err)
	}
}

// TestCheckNamesWorkspaceItself: the workspace itself (".") is no hidden name.
func TestCheckNamesWorkspaceItself(t *testing.T) {
	w := openWS(t, realTempDir(t), false)
	if err := w.CheckNames("."); err != nil {
		t.Errorf("CheckNames(\".\") = %v, want nil", err)
	}
}

// TestCheckFile: CheckFile refuses a hard-linked file and a symbolic link by their
// rules, and passes a file that does not exist yet and an ordinary file.
func TestCheckFile(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		dir := realTempDir(t)
		writeFile(t, dir, "plain.txt", []byte("x"))
		writeFile(t, dir, "hard1", []byte("x"))
		must(t, os.Link(filepath.Join(dir, "hard1"), filepath.Join(dir, "hard2")))
		must(t, os.Symlink("plain.txt", filepath.Join(dir, "link")))
		must(t, os.Symlink("nowhere", filepath.Join(dir, "dangling")))
		w := openWS(t, dir, walk)
		for _, p := range []string{"plain.txt", "new.txt", filepath.Join(dir, "new.txt")} {
			if err := w.CheckFile(p); err != nil {
				t.Errorf("CheckFile(%q) = %v, want nil", p, err)
			}
		}
		checkRefusal(t, "CheckFile(hard2)", w.CheckFile("hard2"), ErrHardLink, errcode.ProtectedPath)
		checkRefusal(t, "CheckFile(link)", w.CheckFile("link"), ErrSymlink, errcode.ProtectedPath)
		checkRefusal(t, "CheckFile(dangling)", w.CheckFile("dangling"), ErrSymlink, errcode.ProtectedPath)
	})
}

// TestWriteNotRecordedNotMade: a write whose record fails leaves the file as it was
// and returns the record's error.
func TestWriteNotRecordedNotMade(t *testing.T) {
	modes(t, func(t *testing.T, walk bool) {
		dir := realTempDir(t)
		writeFile(t, dir, "a.txt", []byte("old\n"))
		w := openWS(t, dir, walk)
		refused := errors.New("the journal refused the record")
		for _, name := range []string{"a.txt", "new.txt"} {
			_, _, err := w.WriteTextRecorded(name, "new\n", testLimit, func(int64, string) error { return refused })
			if !errors.Is(err, refused) {
				t.Errorf("WriteTextRecorded(%s) = %v, want the record's error", name, err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(b) != "old\n" {
			t.Errorf("a.txt = %q, %v; want it unchanged", b, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "new.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("new.txt exists (%v): an unrecorded write was made", err)
		}
		assertNoTemp(t, dir)
	})
}

// TestWriteDropsSetID: a replaced file keeps its permission bits, without the set-id
// and sticky bits.
func TestWriteDropsSetID(t *testing.T) {
	dir := realTempDir(t)
	writeFile(t, dir, "tool", []byte("old\n"))
	p := filepath.Join(dir, "tool")
	must(t, unix.Chmod(p, 0o6755))
	var st unix.Stat_t
	must(t, unix.Stat(p, &st))
	if st.Mode&0o6000 == 0 {
		t.Skip("the file system dropped the set-id bits at chmod")
	}
	w := openWS(t, dir, false)
	if _, _, err := w.WriteText("tool", "new\n", testLimit); err != nil {
		t.Fatal(err)
	}
	must(t, unix.Stat(p, &st))
	if got := st.Mode & 0o7777; got != 0o755 {
		t.Errorf("mode after the write = %#o, want %#o", got, 0o755)
	}
}

// TestRenameFailureLeavesNoTemp: a write whose rename fails (the name became a
// directory after the checks) leaves the directory without its temporary file.
func TestRenameFailureLeavesNoTemp(t *testing.T) {
	dir := realTempDir(t)
	w := openWS(t, dir, false)
	_, _, err := w.WriteTextRecorded("x", "content\n", testLimit, func(int64, string) error {
		return os.Mkdir(filepath.Join(dir, "x"), 0o755)
	})
	if err == nil {
		t.Fatal("the write over a directory succeeded")
	}
	assertNoTemp(t, dir)
}

// TestWriteErrCodes: a write that fails for lack of space or quota is limit_exceeded;
// one refused by permissions is protected_path.
func TestWriteErrCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		code errcode.Code
	}{
		{unix.ENOSPC, errcode.LimitExceeded}, {unix.EDQUOT, errcode.LimitExceeded}, {unix.EFBIG, errcode.LimitExceeded},
		{unix.EACCES, errcode.ProtectedPath}, {unix.EROFS, errcode.ProtectedPath},
		{unix.EISDIR, errcode.ProtectedPath},
	} {
		err := writeErr("f", c.err)
		if got := errcode.Of(err); got != c.code {
			t.Errorf("writeErr(%v) code %s, want %s", c.err, got, c.code)
		}
	}
}
