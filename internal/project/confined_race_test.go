package project_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"symbi/internal/project"
)

// TestReadOpenedLimitProcFile: ReadOpened returns at most limit bytes, whatever fstat
// said: a /proc file's size is 0, and its reads return more (as a file growing after
// fstat does). Past the limit it is ErrTooLarge, never the bytes read.
func TestReadOpenedLimitProcFile(t *testing.T) {
	const name = "/proc/self/maps"
	full, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(full))
	for limit := int64(0); limit < total; limit += 1 + limit/16 {
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		data, err := project.ReadOpened(fd, "maps", limit)
		if err == nil && int64(len(data)) > limit {
			t.Fatalf("ReadOpened(limit %d) returned %d bytes without error", limit, len(data))
		}
	}
}

// TestReadGrownPastLimit: a project file (AGENTS.md, read for every run at most
// AgentsMDLimit bytes) that a concurrent writer appends to after the reader's fstat is
// refused with ErrTooLarge once it holds more than the limit, not returned whole. The
// append is made while the reader's first read(2) is held by a fanotify permission event.
func TestReadGrownPastLimit(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "AGENTS.md")
	const limit = project.AgentsMDLimit
	if err := os.WriteFile(md, bytes.Repeat([]byte("a"), 40000), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	appender, err := os.OpenFile(md, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer appender.Close()
	stop := fanHold(t, md, unix.FAN_ACCESS_PERM, func() {
		// The reader has taken fstat's size (40,000 bytes) and asked to read: the file
		// grows to 70,000 bytes before that read proceeds.
		if _, err := appender.Write(bytes.Repeat([]byte("b"), 30000)); err != nil {
			panic(err)
		}
	})
	data, err := p.Read("AGENTS.md", limit)
	stop()
	if !errors.Is(err, project.ErrTooLarge) {
		t.Fatalf("Read(AGENTS.md, %d) of a file grown to 70,000 bytes while read: %d bytes, %v; want ErrTooLarge", limit, len(data), err)
	}
}

// fanHold marks path for the fanotify permission event mask and calls onFirst when the
// first such event arrives, before allowing it (and every later one). It returns a stop
// function that ends the watcher.
func fanHold(t *testing.T, path string, mask uint64, onFirst func()) (stop func()) {
	t.Helper()
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE)
	if err != nil {
		t.Skipf("fanotify unavailable (needs CAP_SYS_ADMIN): %v", err)
	}
	f := os.NewFile(uintptr(fan), "fanotify")
	if err := unix.FanotifyMark(fan, unix.FAN_MARK_ADD, mask, unix.AT_FDCWD, path); err != nil {
		f.Close()
		t.Skipf("fanotify mark: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		first := true
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+24 <= n; {
				evLen := binary.NativeEndian.Uint32(buf[off:])
				fd := int32(binary.NativeEndian.Uint32(buf[off+16:]))
				if evLen == 0 {
					break
				}
				if first {
					first = false
					onFirst()
				}
				var resp [8]byte
				binary.NativeEndian.PutUint32(resp[0:], uint32(fd))
				binary.NativeEndian.PutUint32(resp[4:], unix.FAN_ALLOW)
				f.Write(resp[:])
				if fd >= 0 {
					unix.Close(int(fd))
				}
				off += int(evLen)
			}
		}
	}()
	return func() { f.Close(); wg.Wait() }
}

// TestReadReplacedWhileOpened: AGENTS.md replaced atomically (a new file renamed over it,
// as symbi agents-md generate does) while a run reads it — after the reader opened the old
// file, which has no link left when it is checked — is read again by its name: the old or
// the new content, not a refusal by the single-link rule the file does not break.
func TestReadReplacedWhileOpened(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(md, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	stop := fanHold(t, md, unix.FAN_OPEN_PERM, func() {
		// The reader is inside open(2) of the old AGENTS.md: replace it atomically.
		tmp := filepath.Join(dir, ".AGENTS.md.tmp")
		if err := os.WriteFile(tmp, []byte("new\n"), 0o644); err != nil {
			panic(err)
		}
		if err := os.Rename(tmp, md); err != nil {
			panic(err)
		}
	})
	data, rerr := p.Read("AGENTS.md", project.AgentsMDLimit)
	stop()
	if errors.Is(rerr, project.ErrHardLink) {
		t.Fatalf("Read of an atomically replaced AGENTS.md refused as a hard link: %v", rerr)
	}
	if rerr != nil {
		t.Fatalf("Read: %v", rerr)
	}
	if s := string(data); s != "old\n" && s != "new\n" {
		t.Fatalf("Read = %q, want the old or the new content", s)
	}
}
