package project_test

// Tests of what the confined reader, symbi init and the AGENTS.md writer refuse, and of
// the limits they hold to the byte.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"symbi/internal/dsl"
	"symbi/internal/errcode"
	"symbi/internal/proctest"
	"symbi/internal/project"
)

// hangGuard bounds a wait that only a hang reaches; it is never an expectation of speed.
const hangGuard = 5 * time.Minute

// gitignoreLimit is the largest .gitignore init appends to (1 MiB, docs/project.md).
const gitignoreLimit = 1 << 20

// discardLog is a logger that writes nothing.
var discardLog = slog.New(slog.DiscardHandler)

// writeFile writes data to path, creating its parent directories.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// openProject opens dir as a project, closed when the test ends.
func openProject(t testing.TB, dir string) *project.Project {
	t.Helper()
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// openDirFD opens dir and returns its descriptor, closed when the test ends.
func openDirFD(t testing.TB, dir string) int {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return int(d.Fd())
}

// wantAbsent fails t for every rel that exists beneath dir.
func wantAbsent(t *testing.T, dir string, rels ...string) {
	t.Helper()
	for _, rel := range rels {
		if _, err := os.Lstat(filepath.Join(dir, rel)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists (stat error %v)", rel, err)
		}
	}
}

// countOpenFDs counts this process's open descriptors.
func countOpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// returnsInTime calls f in a goroutine and returns its error; it fails t, saying what
// hangs, if f has not returned within hangGuard.
func returnsInTime(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangGuard):
		t.Fatal(what + " hangs")
		return nil
	}
}

// inotifyWatch returns a non-blocking inotify descriptor watching path for the events of
// mask, closed when the test ends; it skips t where inotify is unavailable.
func inotifyWatch(t *testing.T, path string, mask uint32) int {
	t.Helper()
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(in) })
	if _, err := unix.InotifyAddWatch(in, path, mask); err != nil {
		t.Skipf("inotify watch: %v", err)
	}
	return in
}

// inotifyEvents calls fn with the mask and the name (its NUL padding trimmed) of each
// inotify event in buf.
func inotifyEvents(buf []byte, fn func(mask uint32, name []byte)) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
		fn(ev.Mask, bytes.TrimRight(name, "\x00"))
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
}

// dirWithFIFO returns a new directory holding a FIFO named name, which nothing writes.
func dirWithFIFO(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// wantAgentsMDAtLimit fails t unless dir's AGENTS.md is exactly AgentsMDLimit bytes.
func wantAgentsMDAtLimit(t *testing.T, dir string) {
	t.Helper()
	if st, err := os.Stat(filepath.Join(dir, "AGENTS.md")); err != nil || st.Size() != project.AgentsMDLimit {
		t.Fatalf("AGENTS.md: %v, %v; want exactly %d bytes", st, err, project.AgentsMDLimit)
	}
}

// TestReadNULFirstByte: a path whose very first byte is NUL is refused by the
// well-formed-path rule, as a NUL anywhere else is.
func TestReadNULFirstByte(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "x"), []byte("x"))
	p := openProject(t, dir)
	for _, rel := range []string{"\x00x", "\x00"} {
		if _, err := p.Read(rel, 64); !errors.Is(err, project.ErrBadPath) || errcode.Of(err) != errcode.ProtectedPath {
			t.Errorf("Read(%q): %v, want ErrBadPath (protected_path)", rel, err)
		}
	}
}

// TestOpenBeneathRefusesBadParts: OpenBeneath takes only one file name per part — no
// empty part, no "." or "..", no "/" or NUL — and at least one part; anything else is
// EINVAL in both resolutions, never an open (the walk would leave dirfd by "..").
func TestOpenBeneathRefusesBadParts(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "p")
	writeFile(t, filepath.Join(root, "a", "b"), []byte("inside"))
	writeFile(t, filepath.Join(base, "secret"), []byte("outside"))
	fd := openDirFD(t, root)
	for _, walk := range []bool{false, true} {
		for _, parts := range [][]string{nil, {}, {""}, {"a", ""}, {"."}, {"a", ".", "b"}, {".."}, {"..", "secret"}, {"a/b"}, {"a", "b\x00"}} {
			got, err := project.OpenBeneath(fd, parts, unix.O_RDONLY, walk)
			if err == nil {
				unix.Close(got)
			}
			if !errors.Is(err, unix.EINVAL) {
				t.Errorf("walk %v: OpenBeneath(%q) error %v, want EINVAL", walk, parts, err)
			}
		}
	}
}

// TestOpenBeneathPathFlag: with O_PATH in flags OpenBeneath adds no O_NOCTTY (openat2
// refuses O_PATH with any flag it ignores): a directory opens with O_PATH by either
// resolution, and a last component that is a symbolic link is opened as the link itself.
func TestOpenBeneathPathFlag(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	fd := openDirFD(t, root)
	for _, walk := range []bool{false, true} {
		for name, want := range map[string]uint32{"a": unix.S_IFDIR, "link": unix.S_IFLNK} {
			got, err := project.OpenBeneath(fd, []string{name}, unix.O_PATH, walk)
			if err != nil {
				t.Errorf("walk %v: OpenBeneath(%s, O_PATH): %v", walk, name, err)
				continue
			}
			var st unix.Stat_t
			err = unix.Fstat(got, &st)
			unix.Close(got)
			if err != nil || st.Mode&unix.S_IFMT != want {
				t.Errorf("walk %v: OpenBeneath(%s, O_PATH) opened mode %#o (%v), want %#o", walk, name, st.Mode&unix.S_IFMT, err, want)
			}
		}
	}
}

// TestWalkClosesDirectories: the walk closes every directory it opened on the way: a
// thousand opens of a nested file leave no descriptor behind.
func TestWalkClosesDirectories(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a", "b", "c", "f"), []byte("x"))
	fd := openDirFD(t, root)
	before := countOpenFDs(t)
	for range 1000 {
		got, err := project.OpenBeneath(fd, []string{"a", "b", "c", "f"}, unix.O_RDONLY, true)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(got)
	}
	if after := countOpenFDs(t); after > before+10 {
		t.Fatalf("%d descriptors open after 1,000 walks, %d before: the walk leaks its directories", after, before)
	}
}

// TestReadAtRefusesBadNames: ReadAt takes one file name: "", "." and a name with a NUL
// byte are refused by the well-formed-path rule, not opened.
func TestReadAtRefusesBadNames(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ok"), []byte("x"))
	fd := openDirFD(t, dir)
	for _, name := range []string{"", ".", "ok\x00", "\x00"} {
		if _, err := project.ReadAt(fd, name, "policies/"+name, 64); !errors.Is(err, project.ErrBadPath) {
			t.Errorf("ReadAt(%q): %v, want ErrBadPath", name, err)
		}
	}
}

// TestReadAtFIFO: ReadAt opens non-blocking: a FIFO without a writer is refused as not
// a regular file, not waited on.
func TestReadAtFIFO(t *testing.T) {
	dir := dirWithFIFO(t, "p.cedar")
	fd := openDirFD(t, dir)
	err := returnsInTime(t, "ReadAt of a FIFO", func() error {
		_, err := project.ReadAt(fd, "p.cedar", "policies/p.cedar", 64)
		return err
	})
	if !errors.Is(err, project.ErrNotRegular) {
		t.Fatalf("ReadAt of a FIFO: %v, want ErrNotRegular", err)
	}
}

// TestReadNameRereadsBounded: a file that has no link left once opened is opened again
// by its name, exactly maxReadAttempts (16) times in all; then the refusal wraps
// ErrReplaced and ErrUnreadable.
func TestReadNameRereadsBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "AGENTS.md")
	calls := 0
	open := func() (int, error) {
		calls++
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			return -1, err
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		return fd, os.Remove(path) // opened, then its last link removed
	}
	data, err := project.ReadName(open, "AGENTS.md", 64)
	if !errors.Is(err, project.ErrReplaced) || !errors.Is(err, project.ErrUnreadable) || data != nil {
		t.Fatalf("ReadName of a file removed each time it is opened: %q, %v; want ErrReplaced", data, err)
	}
	if calls != 16 {
		t.Fatalf("the file was opened %d times, want 16 (maxReadAttempts)", calls)
	}
}

// TestReadOpenedDescriptorChecks: ReadOpened refuses a descriptor of a symbolic link
// (opened with O_PATH|O_NOFOLLOW) by the symlink rule, and one that cannot be read (fstat or
// read fails) by the readable rule, never returning what it did not read.
func TestReadOpenedDescriptorChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	writeFile(t, file, []byte("content"))
	link := filepath.Join(dir, "link")
	if err := os.Symlink("f", link); err != nil {
		t.Fatal(err)
	}
	lfd, err := unix.Open(link, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := project.ReadOpened(lfd, "link", 64); !errors.Is(err, project.ErrSymlink) {
		t.Errorf("ReadOpened of a symbolic link's descriptor: %q, %v; want ErrSymlink", data, err)
	}
	// An O_PATH descriptor of a regular file of one link: fstat works, read(2) fails.
	pfd, err := unix.Open(file, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := project.ReadOpened(pfd, "f", 64); !errors.Is(err, project.ErrUnreadable) || data != nil {
		t.Errorf("ReadOpened of a descriptor read(2) refuses: %q, %v; want ErrUnreadable", data, err)
	}
	if data, err := project.ReadOpened(-1, "f", 64); !errors.Is(err, project.ErrUnreadable) || data != nil {
		t.Errorf("ReadOpened(-1): %q, %v; want ErrUnreadable", data, err)
	}
}

// TestReadNegativeLimit: a negative limit is the caller's bug (internal), not a file
// over its limit.
func TestReadNegativeLimit(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f"), nil)
	p := openProject(t, dir)
	if _, err := p.Read("f", -1); errcode.Of(err) != errcode.Internal || errors.Is(err, project.ErrTooLarge) {
		t.Fatalf("Read(f, -1): %v, want internal", err)
	}
}

// TestInitNamesNonDirectoryComponent: init refused because agents (or policies) is a
// regular file names that component after the project directory — "init DIR: agents is
// not a directory" — not the project directory itself.
func TestInitNamesNonDirectoryComponent(t *testing.T) {
	for _, d := range []string{"agents", "policies"} {
		dir := filepath.Join(t.TempDir(), "proj")
		writeFile(t, filepath.Join(dir, d), []byte("a file\n"))
		_, err := project.Init(dir, discardLog)
		want := "init " + dir + ": " + d + " is not a directory"
		if err == nil || !strings.Contains(err.Error(), want) || errcode.Of(err) != errcode.ProtectedPath {
			t.Errorf("Init with %s a regular file: %v; want protected_path %q", d, err, want)
		}
	}
}

// TestInitGitignoreAtLimit: a .gitignore of exactly 1 MiB gets the line appended; one
// byte more is refused (limit_exceeded) with the project unchanged.
func TestInitGitignoreAtLimit(t *testing.T) {
	exact := []byte(strings.Repeat("# x\n", gitignoreLimit/4))
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".gitignore"), exact)
	if _, err := project.Init(dir, discardLog); err != nil {
		t.Fatalf("Init with a .gitignore of exactly 1 MiB: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); !bytes.Equal(b, append(exact, ".symbiont/\n"...)) {
		t.Fatalf(".gitignore of exactly 1 MiB: %d bytes after init, want the line appended", len(b))
	}
	over := append(exact[:len(exact):len(exact)], '#')
	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, ".gitignore"), over)
	if _, err := project.Init(dir, discardLog); errcode.Of(err) != errcode.LimitExceeded {
		t.Fatalf("Init with a .gitignore of 1 MiB + 1 byte: %v, want limit_exceeded", err)
	}
	wantAbsent(t, dir, "agents", "policies", "README.md", "AGENTS.md")
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); !bytes.Equal(b, over) {
		t.Fatal("the refused .gitignore was changed")
	}
}

// TestInitGitignoreNoFinalNewline: the line is appended on a line of its own to a
// .gitignore whose last line has no newline ("node_modules/.symbiont/" would ignore nothing).
func TestInitGitignoreNoFinalNewline(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".gitignore"), []byte("node_modules/"))
	if _, err := project.Init(dir, discardLog); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(b) != "node_modules/\n.symbiont/\n" {
		t.Fatalf(".gitignore after init: %q, want %q", b, "node_modules/\n.symbiont/\n")
	}
}

// TestInitGitignoreAlreadyIgnored: a .gitignore with a line git reads as the entry —
// ".symbiont/", "/.symbiont/", ".symbiont" or "/.symbiont", with a CRLF ending or trailing
// spaces — is left byte for byte as it was.
func TestInitGitignoreAlreadyIgnored(t *testing.T) {
	for _, content := range []string{
		"a\n.symbiont/\nb\n", "/.symbiont/\n", ".symbiont\n", "/.symbiont", "x\r\n.symbiont/\r\n", ".symbiont/  \n",
		"!.symbiont/\n.symbiont/\n",
	} {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, ".gitignore"), []byte(content))
		if _, err := project.Init(dir, discardLog); err != nil {
			t.Fatalf("Init with .gitignore %q: %v", content, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(b) != content {
			t.Errorf(".gitignore %q that already ignores .symbiont/ became %q", content, b)
		}
	}
}

// TestInitRefusesGitignoreBeforeWriting: a .gitignore init will not append to — over
// 1 MiB, or a hard link — is refused before anything is written: not one file or
// directory is created in the project, even for a moment.
func TestInitRefusesGitignoreBeforeWriting(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, dir string){
		"over 1 MiB": func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, ".gitignore"), bytes.Repeat([]byte("#\n"), gitignoreLimit/2+1))
		},
		"a hard link": func(t *testing.T, dir string) {
			other := filepath.Join(t.TempDir(), "other")
			writeFile(t, other, []byte("x\n"))
			if err := os.Link(other, filepath.Join(dir, ".gitignore")); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(t, dir)
			in := inotifyWatch(t, dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MODIFY)
			if _, err := project.Init(dir, discardLog); err == nil {
				t.Fatal("Init succeeded")
			}
			buf := make([]byte, 4096)
			n, err := unix.Read(in, buf)
			if err != unix.EAGAIN {
				var names []string
				inotifyEvents(buf[:max(n, 0)], func(mask uint32, name []byte) {
					names = append(names, fmt.Sprintf("%#x %s", mask, name))
				})
				t.Fatalf("the refused init changed the project before refusing: %v (%v)", names, err)
			}
		})
	}
}

// TestInitChangedWhileRunning: init's checks as it writes hold when the project changes
// after its first checks (here while init opens the project directory): a .gitignore that
// has become a symbolic link or a hard link to a file elsewhere is not written through
// (protected_path), an AGENTS.md that has appeared is not overwritten, a policies/ that
// has become a symbolic link is not written through (protected_path); each time the
// starter files are removed again.
func TestInitChangedWhileRunning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(dir, outside string) error
		code   errcode.Code
	}{
		{"gitignore symlink", func(dir, outside string) error {
			return os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, ".gitignore"))
		}, errcode.ProtectedPath},
		{"gitignore hard link", func(dir, outside string) error {
			return os.Link(filepath.Join(outside, "target"), filepath.Join(dir, ".gitignore"))
		}, errcode.ProtectedPath},
		{"policies symlink", func(dir, outside string) error {
			return os.Symlink(filepath.Join(outside, "pol"), filepath.Join(dir, "policies"))
		}, errcode.ProtectedPath},
		{"AGENTS.md appears", func(dir, outside string) error {
			return os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte("mine\n"), 0o644)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, outside := filepath.Join(base, "p"), filepath.Join(base, "outside")
			writeFile(t, filepath.Join(outside, "target"), []byte("x\n"))
			if err := os.MkdirAll(filepath.Join(outside, "pol"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			var changed atomic.Bool
			var cerr error
			stop := fanHold(t, dir, unix.FAN_OPEN_PERM|unix.FAN_ONDIR, func() {
				cerr = tc.change(dir, outside)
				changed.Store(true)
			})
			created, err := project.Init(dir, discardLog)
			stop()
			if !changed.Load() || cerr != nil {
				t.Fatalf("the project was not changed while init ran: %v", cerr)
			}
			if err == nil {
				t.Fatalf("Init succeeded (created %v)", created)
			}
			if tc.code != "" && errcode.Of(err) != tc.code {
				t.Errorf("Init: %v, want %s", err, tc.code)
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "target")); string(b) != "x\n" {
				t.Errorf("init wrote into a file outside the project: %q", b)
			}
			if ents, _ := os.ReadDir(filepath.Join(outside, "pol")); len(ents) != 0 {
				t.Errorf("init wrote into a directory outside the project: %v", ents)
			}
			if tc.name == "AGENTS.md appears" {
				if b, _ := os.ReadFile(filepath.Join(dir, "AGENTS.md")); string(b) != "mine\n" {
					t.Errorf("init overwrote an AGENTS.md it did not create: %q", b)
				}
			}
			wantAbsent(t, dir, "agents/assistant.symbi", "README.md")
		})
	}
}

// TestInitGitignoreGrowsWhileRead: a .gitignore that grows past 1 MiB while init reads
// it (after its size was checked) is refused (limit_exceeded), the line not appended.
func TestInitGitignoreGrowsWhileRead(t *testing.T) {
	dir := t.TempDir()
	gi := filepath.Join(dir, ".gitignore")
	writeFile(t, gi, []byte("node_modules/\n"))
	appender, err := os.OpenFile(gi, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer appender.Close()
	grown := bytes.Repeat([]byte("#\n"), gitignoreLimit/2)
	var werr error
	stop := fanHold(t, gi, unix.FAN_ACCESS_PERM, func() {
		_, werr = appender.Write(grown)
	})
	_, err = project.Init(dir, discardLog)
	stop()
	if werr != nil {
		t.Fatal(werr)
	}
	if errcode.Of(err) != errcode.LimitExceeded {
		t.Fatalf("Init with a .gitignore grown past 1 MiB while read: %v, want limit_exceeded", err)
	}
	if b, _ := os.ReadFile(gi); !bytes.Equal(b, append([]byte("node_modules/\n"), grown...)) {
		t.Fatalf(".gitignore changed by the refused init (%d bytes, ending %q)", len(b), b[max(0, len(b)-20):])
	}
	wantAbsent(t, dir, "agents", "policies", "README.md", "AGENTS.md")
}

// childEnv names the project directory of a test run again in a child process.
const childEnv = "SYMBI_TEST_PROJECT_CHILD"

// runInChild runs the test run again in a child process with dir in childEnv and
// extra in its environment, and fails t if the child fails.
func runInChild(t *testing.T, run, dir string, extra ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"="+dir), extra...)
	out, err := cmd.CombinedOutput()
	t.Logf("child: %v\n%s", err, out)
	if err != nil {
		t.Fatalf("child failed: %v", err)
	}
}

// limitChildFileSize lowers the file size limit of the child process to the bytes given
// in SYMBI_TEST_PROJECT_FSIZE, and exits the child on failure.
func limitChildFileSize() (restore func()) {
	n, err := strconv.ParseUint(os.Getenv("SYMBI_TEST_PROJECT_FSIZE"), 10, 64)
	if err != nil {
		fmt.Println("SYMBI_TEST_PROJECT_FSIZE:", err)
		os.Exit(1)
	}
	restore, err = proctest.LimitFileSize(n)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	return restore
}

// TestInitPartialAppendTruncated: an append to an existing .gitignore that fails part
// way (the file size limit here, as a full disk) is taken back: no half line is left,
// the .gitignore is byte for byte as it was, and the starter files are removed.
func TestInitPartialAppendTruncated(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		restore := limitChildFileSize()
		created, err := project.Init(dir, discardLog)
		restore()
		fmt.Printf("Init: created %v, err %v\n", created, err)
		if err == nil {
			os.Exit(1)
		}
		return
	}
	const limit = 4000
	dir := t.TempDir()
	// The line (11 bytes) starts 4 bytes before the limit: 4 bytes are written, then EFBIG.
	old := []byte(strings.Repeat("# x\n", (limit-4)/4))
	writeFile(t, filepath.Join(dir, ".gitignore"), old)
	runInChild(t, "TestInitPartialAppendTruncated", dir, "SYMBI_TEST_PROJECT_FSIZE="+strconv.Itoa(limit))
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); !bytes.Equal(b, old) {
		t.Fatalf(".gitignore after the failed append: %d bytes ending %q; it was %d bytes", len(b), b[max(0, len(b)-12):], len(old))
	}
	wantAbsent(t, dir, "agents", "policies", "README.md", "AGENTS.md")
}

// TestInitFileModes: the files init creates are 0644 and its directories 0755, whatever
// the umask lets through (here none is masked): no starter policy or agent any user may
// rewrite.
func TestInitFileModes(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		syscall.Umask(0)
		if _, err := project.Init(dir, discardLog); err != nil {
			fmt.Println("Init:", err)
			os.Exit(1)
		}
		return
	}
	dir := filepath.Join(t.TempDir(), "proj")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runInChild(t, "TestInitFileModes", dir)
	for rel, want := range map[string]fs.FileMode{
		"agents": fs.ModeDir | 0o755, "policies": fs.ModeDir | 0o755, "agents/assistant.symbi": 0o644,
		"policies/respond.cedar": 0o644, "README.md": 0o644, "AGENTS.md": 0o644, ".gitignore": 0o644,
	} {
		st, err := os.Lstat(filepath.Join(dir, rel))
		if err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", rel, st.Mode(), err, want)
		}
	}
}

// writeAgents writes n agent files agents/aNNN.symbi into dir, each with a description of
// size bytes, the first one extra bytes longer.
func writeAgents(t *testing.T, dir string, n, size, extra int) {
	t.Helper()
	for i := range n {
		d := strings.Repeat("d", size)
		if i == 0 {
			d += strings.Repeat("d", extra)
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("agents/a%03d.symbi", i)), []byte(fmt.Sprintf(
			"metadata { description = %q, executor = \"orga\" }\nagent a%03d { capabilities = [\"answer\"] }\n", d, i)))
	}
}

// TestInitAgentsMDAtLimit: init writes an AGENTS.md of exactly AgentsMDLimit bytes; one
// byte more is refused (limit_exceeded) with the starter files removed.
func TestInitAgentsMDAtLimit(t *testing.T) {
	const n, size = 80, 600
	probe := t.TempDir()
	writeAgents(t, probe, n, size, 0)
	if _, err := project.Init(probe, discardLog); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(probe, "AGENTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	pad := project.AgentsMDLimit - len(md)
	if pad < 0 {
		t.Fatalf("the probe's AGENTS.md is %d bytes, over the limit", len(md))
	}
	exact := t.TempDir()
	writeAgents(t, exact, n, size, pad)
	if _, err := project.Init(exact, discardLog); err != nil {
		t.Fatalf("Init writing an AGENTS.md of exactly %d bytes: %v", project.AgentsMDLimit, err)
	}
	wantAgentsMDAtLimit(t, exact)
	over := t.TempDir()
	writeAgents(t, over, n, size, pad+1)
	if _, err := project.Init(over, discardLog); errcode.Of(err) != errcode.LimitExceeded {
		t.Fatalf("Init with an AGENTS.md one byte over the limit: %v, want limit_exceeded", err)
	}
	wantAbsent(t, over, "agents/assistant.symbi", "policies", "README.md", "AGENTS.md", ".gitignore")
}

// invocableEntry is one invocable entry with a description of size bytes.
func invocableEntry(size int) []project.Entry {
	return []project.Entry{{Name: "a", File: "agents/a.symbi", Agents: []string{"a"}, Description: strings.Repeat("d", size), Invocable: true}}
}

// TestUpdateAgentsMDAtLimit: agents-md generate writes an AGENTS.md of exactly
// AgentsMDLimit bytes; a result one byte longer is refused (limit_exceeded) and nothing
// is written.
func TestUpdateAgentsMDAtLimit(t *testing.T) {
	probe, err := project.GenerateAgentsMD(nil, invocableEntry(0))
	if err != nil {
		t.Fatal(err)
	}
	size := project.AgentsMDLimit - len(probe)
	dir := t.TempDir()
	p := openProject(t, dir)
	if _, err := p.UpdateAgentsMD(invocableEntry(size + 1)); errcode.Of(err) != errcode.LimitExceeded {
		t.Fatalf("UpdateAgentsMD one byte over the limit: %v, want limit_exceeded", err)
	}
	wantAbsent(t, dir, "AGENTS.md")
	if created, err := p.UpdateAgentsMD(invocableEntry(size)); err != nil || !created {
		t.Fatalf("UpdateAgentsMD of exactly the limit: created %v, %v", created, err)
	}
	wantAgentsMDAtLimit(t, dir)
}

// TestUpdateAgentsMDWriteFailureLeavesNoTemp: a write of AGENTS.md that fails (the file
// size limit here, as a full disk) removes its temporary file and leaves no AGENTS.md.
func TestUpdateAgentsMDWriteFailureLeavesNoTemp(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		p, err := project.Open(dir)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		restore := limitChildFileSize()
		_, err = p.UpdateAgentsMD(invocableEntry(10000))
		restore()
		fmt.Println("UpdateAgentsMD:", err)
		if err == nil {
			os.Exit(1)
		}
		return
	}
	dir := t.TempDir()
	runInChild(t, "TestUpdateAgentsMDWriteFailureLeavesNoTemp", dir, "SYMBI_TEST_PROJECT_FSIZE=4096")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("after the failed write the project holds %v (%v), want nothing", ents, err)
	}
}

// TestCellLineSeparators: a description with U+2028, U+2029 or another control
// character is written on one line of the table: each becomes a space.
func TestCellLineSeparators(t *testing.T) {
	out, err := project.GenerateAgentsMD(nil, []project.Entry{{Name: "a", File: "agents/a.symbi", Description: "one\u2028two\u2029three\u0085four", Invocable: true}})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out, "\u2028\u2029\u0085") || !bytes.Contains(out, []byte("| one two three four |")) {
		t.Fatalf("the description is not kept to one line:\n%q", out)
	}
}

// TestRegistryAgentsFIFO: an agents/ that is a FIFO is refused as not a directory
// (ErrNotRegular), not waited on.
func TestRegistryAgentsFIFO(t *testing.T) {
	dir := dirWithFIFO(t, "agents")
	p := openProject(t, dir)
	err := returnsInTime(t, "LoadRegistry with agents/ a FIFO", func() error {
		_, err := p.LoadRegistry(discardLog)
		return err
	})
	if !errors.Is(err, project.ErrNotRegular) {
		t.Fatalf("LoadRegistry with agents/ a FIFO: %v, want ErrNotRegular", err)
	}
}

// TestRegistryDelegatedMode: an agent naming a registered executor is listed in the
// delegated mode with its executor, and AGENTS.md says it runs by start_run only.
func TestRegistryDelegatedMode(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agents/coder.symbi"), []byte("metadata { executor = \"claude_code\" }\nagent coder { capabilities = [\"code\"] }\n"))
	p := openProject(t, dir)
	r, err := p.LoadRegistry(discardLog, dsl.Options{Executors: func(n string) bool { return n == "claude_code" }})
	if err != nil {
		t.Fatal(err)
	}
	e := r.Entries()
	if len(e) != 1 || !e[0].Invocable || e[0].Mode != project.ModeDelegated || e[0].Executor != "claude_code" {
		t.Fatalf("entries %+v, want coder invocable, delegated to claude_code", e)
	}
	md, err := project.GenerateAgentsMD(nil, e)
	if err != nil || !bytes.Contains(md, []byte("yes, delegated to claude_code: `start_run` only")) {
		t.Fatalf("AGENTS.md does not say coder is delegated (%v):\n%s", err, md)
	}
}

// TestRegistryStopsReadingPastRetention: the workers stop taking files once the bytes
// read pass the retention limit, so the files past it in name order are never opened but
// for at most one more per worker: of 22 files of 1 MiB, read by two workers, at most 18
// are opened (16 fill the limit, a 17th passes it, one more may be in flight).
func TestRegistryStopsReadingPastRetention(t *testing.T) {
	const workers, files = 2, 22
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(workers))
	dir := t.TempDir()
	for i := range files {
		head := fmt.Sprintf("agent r%02d {}\n//", i)
		src := append([]byte(head), bytes.Repeat([]byte("x"), project.AgentFileLimit-len(head)-1)...)
		writeFile(t, filepath.Join(dir, fmt.Sprintf("agents/r%02d.symbi", i)), append(src, '\n'))
	}
	in := inotifyWatch(t, filepath.Join(dir, "agents"), unix.IN_OPEN)
	p := openProject(t, dir)
	r, err := p.LoadRegistry(discardLog)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Entries()); n != files {
		t.Fatalf("%d entries, want %d", n, files)
	}
	opened := map[string]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(in, buf)
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		inotifyEvents(buf[:n], func(mask uint32, name []byte) {
			if mask&unix.IN_Q_OVERFLOW != 0 {
				t.Fatal("inotify queue overflow")
			}
			if len(name) > 0 {
				opened[string(name)] = true
			}
		})
	}
	if len(opened) > project.RegistryRetainLimit/project.AgentFileLimit+workers {
		t.Fatalf("%d of the %d agent files were opened; past the retention limit at most one more per worker (%d) may be", len(opened), files, workers)
	}
}
