package project

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// The rules a confined read can refuse by. Every error returned by Read wraps exactly
// one of them (test with errors.Is) together with its errcode: ErrTooLarge carries
// errcode.LimitExceeded, ErrNotExist errcode.NotFound, all others
// errcode.ProtectedPath.
var (
	ErrBadPath    = errors.New(`refused by rule "well-formed path": empty path, empty component, no name but "." or a NUL byte`)
	ErrAbsolute   = errors.New(`refused by rule "relative paths only": the path is absolute`)
	ErrParent     = errors.New(`refused by rule "no parent references": the path contains ".."`)
	ErrHidden     = errors.New(`refused by rule "no hidden components": a component starts with "."`)
	ErrPolicies   = errors.New(`refused by rule "policies are protected": the first component is "policies"`)
	ErrSymlink    = errors.New(`refused by rule "no symlinks": the path contains a symbolic link`)
	ErrEscape     = errors.New(`refused by rule "beneath the project": the path resolves outside the project`)
	ErrHardLink   = errors.New(`refused by rule "single link": the file has more than one hard link`)
	ErrNotRegular = errors.New(`refused by rule "regular files only": not a regular file`)
	ErrNotUTF8    = errors.New(`refused by rule "UTF-8 only": the content is not valid UTF-8`)
	ErrUnreadable = errors.New(`refused by rule "readable": the file cannot be opened or read`)
	ErrTooLarge   = errors.New(`refused by rule "size limit": the file is larger than the limit`)
	ErrNotExist   = errors.New("no such file in the project")
	// ErrReplaced is wrapped, with ErrUnreadable, by the error of a file that has no link
	// left once opened: it was replaced (renamed over) or removed while it was read. A
	// reader that opens it by name again reads the file now there (ReadAt, Project.Read
	// and the workspace do, a few times).
	ErrReplaced = errors.New("the file was replaced or removed while it was read")
)

// maxReadAttempts bounds the reads of a file replaced while it is read.
const maxReadAttempts = 16

// refuse builds the error for rel refused by rule, with the rule's errcode.
func refuse(rel string, rule error, detail error) error {
	code := errcode.ProtectedPath
	switch rule {
	case ErrTooLarge:
		code = errcode.LimitExceeded
	case ErrNotExist:
		code = errcode.NotFound
	}
	if detail != nil {
		return errcode.Errorf(code, "%s: %w (%v)", errcode.Quote(rel), rule, detail)
	}
	return errcode.Errorf(code, "%s: %w", errcode.Quote(rel), rule)
}

// checkPath applies the lexical rules to rel and returns its components.
func checkPath(rel string) ([]string, error) {
	if rel == "" || strings.IndexByte(rel, 0) >= 0 {
		return nil, refuse(rel, ErrBadPath, nil)
	}
	if rel[0] == '/' {
		return nil, refuse(rel, ErrAbsolute, nil)
	}
	all := strings.Split(rel, "/")
	for _, c := range all {
		if c == ".." {
			return nil, refuse(rel, ErrParent, nil)
		}
	}
	// A lone "." is the current directory, not a hidden name: it is dropped lexically,
	// so "./agents/a.symbi" reads agents/a.symbi.
	parts := make([]string, 0, len(all))
	for _, c := range all {
		switch {
		case c == "":
			return nil, refuse(rel, ErrBadPath, nil)
		case c == ".":
			continue
		case c[0] == '.':
			return nil, refuse(rel, ErrHidden, nil)
		}
		parts = append(parts, c)
	}
	if len(parts) == 0 {
		return nil, refuse(rel, ErrBadPath, nil)
	}
	if parts[0] == "policies" {
		return nil, refuse(rel, ErrPolicies, nil)
	}
	return parts, nil
}

// openErr maps an open error to a rule.
func openErr(rel string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return refuse(rel, ErrNotExist, nil)
	case errors.Is(err, unix.ELOOP):
		return refuse(rel, ErrSymlink, nil)
	case errors.Is(err, unix.EXDEV):
		return refuse(rel, ErrEscape, nil)
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV), errors.Is(err, unix.EOPNOTSUPP):
		// open(2) of a unix socket fails with ENXIO; of a missing device, ENXIO/ENODEV.
		return refuse(rel, ErrNotRegular, err)
	default:
		return refuse(rel, ErrUnreadable, err)
	}
}

// open resolves the checked components beneath the pinned root with flags added to
// O_NOFOLLOW|O_CLOEXEC|O_NOCTTY and returns the descriptor.
func (p *Project) open(rel string, parts []string, flags int) (int, error) {
	fd, err := OpenBeneath(p.fd, parts, flags, p.walk)
	if err != nil {
		return -1, openErr(rel, err)
	}
	return fd, nil
}

// OpenBeneath opens the path made of parts beneath the directory dirfd the way the
// confined reader does, without following a symbolic link anywhere, and returns the
// descriptor; flags are added to O_NOFOLLOW|O_CLOEXEC, and O_NOCTTY unless they hold
// O_PATH. Each part must be one
// file name: not empty, not "." or "..", without "/" or a NUL byte (EINVAL otherwise),
// and there must be at least one.
//
// It uses openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS. When
// walk is set, or where openat2 is unavailable (ENOSYS, or EPERM from a sandbox), it
// walks instead: each directory component is opened with openat(O_PATH|O_NOFOLLOW) and
// checked with fstat, the last one opened with O_NOFOLLOW. Errors are the system's, so
// callers map them to their own rules: ELOOP for a symbolic link in the path, ENOTDIR for
// a component that is not a directory, ENOENT, EXDEV for a resolution that would leave
// dirfd. As with openat, O_PATH|O_NOFOLLOW opens a last component that is a symbolic link
// itself: callers that pass it check the result with fstat. It serves the workspace's
// confined reader and writer as well as the project's.
func OpenBeneath(dirfd int, parts []string, flags int, walk bool) (int, error) {
	if len(parts) == 0 {
		return -1, unix.EINVAL
	}
	for _, c := range parts {
		if c == "" || c == "." || c == ".." || strings.ContainsAny(c, "/\x00") {
			return -1, unix.EINVAL
		}
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY // openat2 refuses O_PATH with any flag it ignores
	}
	if !walk {
		fd, err := openBeneath(dirfd, strings.Join(parts, "/"), flags)
		if !errors.Is(err, errNoOpenat2) {
			return fd, err
		}
	}
	return walkOpen(dirfd, parts, flags)
}

var errNoOpenat2 = errors.New("openat2 unavailable")

// openBeneath opens path with openat2 confined beneath dirfd without following any
// link. It returns errNoOpenat2 when the kernel or a sandbox refuses openat2 itself.
func openBeneath(dirfd int, path string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	var err error
	for range 16 {
		var fd int
		fd, err = unix.Openat2(dirfd, path, &how)
		switch err {
		case nil:
			return fd, nil
		case unix.EINTR, unix.EAGAIN:
			// EAGAIN: a concurrent rename raced the lookup; retry as openat2(2) advises.
			continue
		case unix.ENOSYS, unix.EPERM:
			return -1, errNoOpenat2
		default:
			return -1, err
		}
	}
	return -1, err
}

// walkOpen is the fallback: it opens each directory component with
// openat(O_PATH|O_NOFOLLOW), which opens a link itself, checks with fstat that it is a directory
// and not a link, and opens the last component with O_NOFOLLOW. The components are
// already free of "..", "." and "/", so the walk cannot leave dirfd.
func walkOpen(dirfd int, parts []string, flags int) (int, error) {
	dir := dirfd
	closeDir := func() {
		if dir != dirfd {
			unix.Close(dir)
		}
	}
	defer func() { closeDir() }()
	for _, c := range parts[:len(parts)-1] {
		fd, err := openatRetry(dir, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			unix.Close(fd)
			return -1, unix.ELOOP
		default:
			unix.Close(fd)
			return -1, unix.ENOTDIR
		}
		closeDir()
		dir = fd
	}
	return openatRetry(dir, parts[len(parts)-1], flags)
}

func openatRetry(dir int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// Read reads the project file rel (a relative path with "/" separators) through the
// confined reader: at most limit bytes, UTF-8 checked. Refusals carry
// errcode.ProtectedPath, errcode.NotFound or errcode.LimitExceeded and wrap the Err*
// rule that refused.
func (p *Project) Read(rel string, limit int64) ([]byte, error) {
	if limit < 0 {
		return nil, errcode.Errorf(errcode.Internal, "read %q: negative limit %d", rel, limit)
	}
	parts, err := checkPath(rel)
	if err != nil {
		return nil, err
	}
	data, err := ReadName(func() (int, error) { return p.open(rel, parts, unix.O_RDONLY|unix.O_NONBLOCK) }, rel, limit)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		return nil, refuse(rel, ErrNotUTF8, nil)
	}
	return data, nil
}

// ReadAt reads name, a single path component, in the directory dirfd the way the
// confined reader reads a project file: never through a symlink, opened non-blocking, a
// regular file with exactly one link, at most limit bytes. It does not check UTF-8. rel
// names the file in errors, which wrap the rule that refused (ErrSymlink, ErrNotRegular,
// ErrHardLink, ErrTooLarge, ErrNotExist or ErrUnreadable) with its errcode. It serves
// readers of protected project files (the policy loader) that walk their own directories.
func ReadAt(dirfd int, name, rel string, limit int64) ([]byte, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, refuse(rel, ErrBadPath, nil)
	}
	return ReadName(func() (int, error) {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			return -1, openErr(rel, err)
		}
		return fd, nil
	}, rel, limit)
}

// ReadName reads a file by its name: open opens it (its errors returned as they are), and
// ReadOpened reads the descriptor. A file replaced (renamed over, as agents-md generate
// replaces AGENTS.md) or removed after the open has no link left (ErrReplaced): its name
// is opened and read again, up to maxReadAttempts times.
func ReadName(open func() (int, error), rel string, limit int64) ([]byte, error) {
	for attempt := 1; ; attempt++ {
		fd, err := open()
		if err != nil {
			return nil, err
		}
		data, err := ReadOpened(fd, rel, limit)
		if errors.Is(err, ErrReplaced) && attempt < maxReadAttempts {
			continue
		}
		return data, err
	}
}

// ReadOpened checks the opened descriptor fd — a regular file with one link, at most
// limit bytes — and reads it; it closes fd in every case. rel names the file in errors,
// which wrap the rule that refused (ErrSymlink, ErrNotRegular, ErrHardLink, ErrTooLarge
// or ErrUnreadable; ErrReplaced too for a file with no link left) with its errcode. It
// never returns more than limit bytes, however the file grows while it is read. It does
// not check UTF-8.
func ReadOpened(fd int, rel string, limit int64) ([]byte, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, refuse(rel, ErrUnreadable, err)
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return nil, refuse(rel, ErrSymlink, nil)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, refuse(rel, ErrNotRegular, fmt.Errorf("file type %s", fileType(st.Mode)))
	case st.Nlink == 0:
		return nil, errcode.Errorf(errcode.ProtectedPath, "%s: %w (%w)", errcode.Quote(rel), ErrUnreadable, ErrReplaced)
	case st.Nlink != 1:
		return nil, refuse(rel, ErrHardLink, fmt.Errorf("%d links", st.Nlink))
	case st.Size > limit:
		return nil, refuse(rel, ErrTooLarge, fmt.Errorf("%d bytes, limit %d", st.Size, limit))
	}
	// The size may change after fstat: read to the end of the file, but at most one byte
	// past the limit, to notice. The descriptor is read directly into a buffer one byte
	// longer than fstat's size: a read that returns exactly that size, leaving the byte
	// free, found the end where fstat did (a file grown since fills the buffer), so a
	// file of unchanged size costs one read.
	data := make([]byte, 0, min(st.Size, limit)+1)
	for {
		if int64(len(data)) > limit {
			return nil, refuse(rel, ErrTooLarge, fmt.Errorf("more than %d bytes", limit))
		}
		if len(data) == cap(data) {
			data = slices.Grow(data, int(min(int64(len(data)), limit+1-int64(len(data)))))
		}
		// Never past limit+1, whatever capacity Grow gave: one byte more is all it takes
		// to know the file is too large.
		end := int(min(int64(cap(data)), limit+1))
		n, err := unix.Read(fd, data[len(data):end])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, refuse(rel, ErrUnreadable, err)
		case n == 0:
			return data, nil
		}
		data = data[:len(data)+n]
		if int64(len(data)) == st.Size && len(data) < end {
			return data, nil
		}
	}
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	default:
		return fmt.Sprintf("mode %#o", mode&unix.S_IFMT)
	}
}
