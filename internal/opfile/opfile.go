// Package opfile opens and reads the files an operator hands the server — the executors
// file, the token file — which decide what programs it runs and who may call it. Such a
// file must be a regular file, reached without following a symbolic link, owned by the
// server's user or by root, that neither group nor others may write; it is read up to a
// limit, past which it is refused.
package opfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// writeMask are the permission bits a file deciding what the server does must not have.
const writeMask = 0o022

// ErrTooLarge is returned by Read for a file larger than its limit.
var ErrTooLarge = errors.New("file too large")

// Open opens path with flags (creating it 0600 when they say so) without following a
// symbolic link, and refuses anything but a regular file, owned by the effective user or
// root, that neither group nor others may write: another user owning it could rewrite it
// whatever its mode. why ends the refusal of a file others may change: what the file
// decides, and its fix. Errors do not name path; the caller does.
func Open(path string, flags int, why string) (*os.File, error) {
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("is a symbolic link, not followed (%w)", err)
	case errors.Is(err, unix.ENXIO):
		return nil, fmt.Errorf("not a regular file (%w)", err) // a socket, or a FIFO without a reader
	case err != nil:
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	switch {
	case err != nil:
	case !st.Mode().IsRegular():
		err = errors.New("not a regular file")
	case st.Mode().Perm()&writeMask != 0:
		err = fmt.Errorf("mode %04o lets group or others write it; %s", st.Mode().Perm(), why)
	default:
		if sys, ok := st.Sys().(*syscall.Stat_t); !ok || (sys.Uid != uint32(os.Geteuid()) && sys.Uid != 0) {
			err = fmt.Errorf("owned by another user (uid %d), who could rewrite it; %s", owner(sys), why)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Read reads f from its offset, at most limit bytes; a longer file is an error wrapping
// ErrTooLarge.
func Read(f *os.File, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	}
	return data, nil
}

// owner is the owner's uid of a file's stat, or -1.
func owner(sys *syscall.Stat_t) int64 {
	if sys == nil {
		return -1
	}
	return int64(sys.Uid)
}
