package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"symbi/internal/digest"
	"symbi/internal/errcode"
	"symbi/internal/project"
)

// newFileMode is the mode of a file WriteText creates, whatever the umask.
const newFileMode = 0o644

// parts splits path, as Rel and CheckNames accept it, into its components inside the
// workspace. The workspace itself ("." after Rel) is refused as not a regular file.
func (w *Workspace) parts(path string) (string, []string, error) {
	rel, err := w.Rel(path)
	if err != nil {
		return "", nil, err
	}
	if rel == "." {
		return "", nil, refuse(errcode.ProtectedPath, path, ErrNotRegular, errors.New("the workspace directory itself"))
	}
	if err := w.CheckNames(rel); err != nil {
		return "", nil, err
	}
	return rel, strings.Split(rel, "/"), nil
}

// CheckFile applies to path, before a file request is decided, the rules ReadText and
// WriteText apply when they open it (CheckNames first): no symbolic link on the way
// (ErrSymlink), and a file that exists has one link (ErrHardLink), so that such a request
// is refused by its rule before any policy or person is asked. A file that does not exist
// yet passes (a write may create it), and so does anything else that is not a regular file
// (the open refuses it); a path that cannot be walked (ENOTDIR, EACCES, too long) is
// refused now, by openErr's rules.
func (w *Workspace) CheckFile(path string) error {
	rel, parts, err := w.parts(path)
	if err != nil {
		return err
	}
	return w.withDir(func(dirfd int) error {
		fd, err := project.OpenBeneath(dirfd, parts, unix.O_PATH, w.walk)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil
		case err != nil:
			return openErr(rel, err, ErrNotExist)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return refuse(errcode.ProtectedPath, rel, ErrUnreadable, err)
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return refuse(errcode.ProtectedPath, rel, ErrSymlink, nil)
		case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1:
			return refuse(errcode.ProtectedPath, rel, ErrHardLink, fmt.Errorf("%d links", st.Nlink))
		}
		return nil
	})
}

// ReadText serves fs/read_text_file: it reads path (anything Rel and CheckNames accept,
// normally Rel's result) through the confined reader — no symbolic link anywhere, a regular file with
// one link, at most maxBytes bytes, valid UTF-8 — and returns the content, sliced when
// line or limit is set: from the 1-based line (default 1) at most limit lines (default
// all), each with its "\n" terminator, so consecutive slices concatenate to the file. A
// line past the end gives "". size and sha256hex (lower-case hex) are those of the whole
// file as read, whatever the slice. A file replaced between the open and the checks is
// opened again (a few times at most), so a concurrent WriteText is not mistaken for a
// hard link.
func (w *Workspace) ReadText(path string, line, limit *int, maxBytes int64) (content string, size int64, sha256hex string, err error) {
	if maxBytes < 0 {
		return "", 0, "", errcode.Errorf(errcode.Internal, "read %q: negative limit %d", path, maxBytes)
	}
	if (line != nil && *line < 1) || (limit != nil && *limit < 0) {
		return "", 0, "", refuse(errcode.InvalidRequest, path, ErrLineRange, fmt.Errorf("line %s, limit %s", show(line), show(limit)))
	}
	rel, parts, err := w.parts(path)
	if err != nil {
		return "", 0, "", err
	}
	var data []byte
	err = w.withDir(func(dirfd int) error {
		// A file replaced (renamed over, as WriteText does) after the open is read again
		// by its name rather than refused.
		var err error
		data, err = project.ReadName(func() (int, error) {
			// O_NONBLOCK: opening a FIFO must not wait for a writer; fstat refuses it next.
			fd, err := project.OpenBeneath(dirfd, parts, unix.O_RDONLY|unix.O_NONBLOCK, w.walk)
			if err != nil {
				return -1, openErr(rel, err, ErrNotExist)
			}
			return fd, nil
		}, rel, maxBytes)
		return err
	})
	if err != nil {
		return "", 0, "", err
	}
	if !utf8.Valid(data) {
		return "", 0, "", refuse(errcode.InvalidRequest, rel, ErrNotUTF8, nil)
	}
	return sliceLines(string(data), line, limit), int64(len(data)), digest.SHA256Hex(data), nil
}

func show(n *int) string {
	if n == nil {
		return "unset"
	}
	return fmt.Sprint(*n)
}

// sliceLines returns the lines of s from the 1-based line, at most limit of them, each
// with its "\n". Both are checked by the caller (line >= 1, limit >= 0).
func sliceLines(s string, line, limit *int) string {
	start := 0
	if line != nil {
		for n := 1; n < *line; n++ {
			i := strings.IndexByte(s[start:], '\n')
			if i < 0 {
				return ""
			}
			start += i + 1
		}
	}
	if limit == nil {
		return s[start:]
	}
	end := start
	for n := 0; n < *limit && end < len(s); n++ {
		i := strings.IndexByte(s[end:], '\n')
		if i < 0 {
			end = len(s)
			break
		}
		end += i + 1
	}
	return s[start:end]
}

// WriteText serves fs/write_text_file: it creates or replaces the file at path (anything
// Rel and CheckNames accept, normally Rel's result) with content, at most maxBytes bytes
// of valid UTF-8, and returns its size and SHA-256 (lower-case hex).
//
// The parent directory must exist and is reached beneath the pinned workspace without
// following a symbolic link. An existing file is replaced only if it is a regular file
// with one link (a symbolic link, a directory, a FIFO … is refused, never followed). The
// content goes to a new temporary file in the same directory, which is fsynced and
// renamed over the name (renameat), and the directory is fsynced: a reader sees the old
// file or the new, never a part. A new file gets mode 0644 whatever the umask; a replaced
// one keeps its permission bits (set-id and sticky bits are dropped). The replacement is a
// new inode owned by this process. When the directory fsync fails after the rename the
// file is in place although an error is returned.
func (w *Workspace) WriteText(path string, content string, maxBytes int64) (size int64, sha256hex string, err error) {
	return w.WriteTextRecorded(path, content, maxBytes, nil)
}

// WriteTextRecorded is WriteText that calls record, when not nil, with the content's size
// and SHA-256 once every check has passed and the new content is durable in its temporary
// file, and replaces the file only if record returns nil: a write is recorded before the
// file changes, or the file does not change. (Were the rename then to fail, the file is
// unchanged though recorded, and the error says so.)
func (w *Workspace) WriteTextRecorded(path string, content string, maxBytes int64, record func(size int64, sha256hex string) error) (size int64, sha256hex string, err error) {
	if maxBytes < 0 {
		return 0, "", errcode.Errorf(errcode.Internal, "write %q: negative limit %d", path, maxBytes)
	}
	rel, parts, err := w.parts(path)
	if err != nil {
		return 0, "", err
	}
	if int64(len(content)) > maxBytes {
		return 0, "", refuse(errcode.LimitExceeded, rel, ErrTooLarge, fmt.Errorf("%d bytes, limit %d", len(content), maxBytes))
	}
	if !utf8.ValidString(content) {
		return 0, "", refuse(errcode.InvalidRequest, rel, ErrNotUTF8, nil)
	}
	size, sha256hex = int64(len(content)), digest.SHA256Hex([]byte(content))
	commit := func() error {
		if record == nil {
			return nil
		}
		return record(size, sha256hex)
	}
	err = w.withDir(func(root int) error {
		dirfd := root
		if len(parts) > 1 {
			fd, err := openDir(root, parts[:len(parts)-1], w.walk)
			if err != nil {
				return openErr(rel, err, ErrNoParent)
			}
			defer unix.Close(fd)
			dirfd = fd
		}
		return replace(dirfd, parts[len(parts)-1], rel, content, commit)
	})
	if err != nil {
		return 0, "", err
	}
	return size, sha256hex, nil
}

// replace writes content to name in the directory dirfd through a temporary file and
// renameat, then fsyncs dirfd; commit runs between the temporary file's fsync and the
// rename, and an error from it leaves the file as it was.
func replace(dirfd int, name, rel, content string, commit func() error) error {
	mode := uint32(newFileMode)
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return openErr(rel, err, ErrNotExist)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return refuse(errcode.ProtectedPath, rel, ErrSymlink, nil)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return refuse(errcode.ProtectedPath, rel, ErrNotRegular, fmt.Errorf("file type %#o", st.Mode&unix.S_IFMT))
	case st.Nlink != 1:
		return refuse(errcode.ProtectedPath, rel, ErrHardLink, fmt.Errorf("%d links", st.Nlink))
	default:
		mode = st.Mode & 0o777
	}
	tmp, fd, err := createTemp(dirfd)
	if err != nil {
		return writeErr(rel, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	done := false
	defer func() {
		if !done {
			f.Close()
			unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	// Fchmod, not the creation mode, so that the umask does not apply.
	if err := unix.Fchmod(fd, mode); err != nil {
		return writeErr(rel, err)
	}
	if _, err := f.WriteString(content); err != nil {
		return writeErr(rel, err)
	}
	if err := f.Sync(); err != nil {
		return writeErr(rel, err)
	}
	if err := f.Close(); err != nil {
		return writeErr(rel, err)
	}
	if err := commit(); err != nil {
		return err
	}
	// A name changed since the check above is replaced as it stands: renameat never
	// follows a link nor writes into the inode it replaces; a directory fails (EISDIR).
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		done = true
		return writeErr(rel, fmt.Errorf("the file is unchanged: %w", err))
	}
	done = true
	if err := unix.Fsync(dirfd); err != nil {
		return writeErr(rel, fmt.Errorf("fsync directory: %w", err))
	}
	return nil
}

// createTemp creates a new empty file with a random name in dirfd, mode 0600 until
// changed, and returns its name and descriptor.
func createTemp(dirfd int) (string, int, error) {
	var err error
	for range 16 {
		var b [12]byte
		rand.Read(b[:])
		name := ".symbi-write-" + hex.EncodeToString(b[:]) + ".tmp"
		var fd int
		fd, err = unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0o600)
		switch err {
		case nil:
			return name, fd, nil
		case unix.EEXIST, unix.EINTR:
			continue
		default:
			return "", -1, err
		}
	}
	return "", -1, err
}

// writeErr maps a failure to create, write or rename the file to a rule.
func writeErr(rel string, err error) error {
	switch {
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTDIR):
		return refuse(errcode.ProtectedPath, rel, ErrNotRegular, err)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return refuse(errcode.LimitExceeded, rel, ErrUnwritable, err)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return refuse(errcode.ProtectedPath, rel, ErrUnwritable, err)
	default:
		return refuse(errcode.Internal, rel, ErrUnwritable, err)
	}
}
