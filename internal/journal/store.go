package journal

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// Errors of the key and the governed directory, checked with errors.Is. Every error
// OpenStore returns also carries errcode.AuditUnavailable.
var (
	ErrUnsafeDir = errors.New("governed directory refused")
	ErrUnsafeKey = errors.New("signing key refused")
	ErrNoKey     = errors.New("no signing key")
)

// StoreOptions configure OpenStore.
type StoreOptions struct {
	KeyFile string // SYMBI_AUDIT_KEY_FILE override: key outside the project ("" = <governed>/audit-signing.key)
	Create  bool   // create the directory and key when absent
}

// Store is a checked governed directory and the project's signing key.
type Store struct {
	dir  *os.File
	root *os.File // the project directory, a duplicate of the caller's descriptor
	path string
	key  ed25519.PrivateKey
}

// OpenStore opens <root>/.symbiont/governed without following symlinks, creating it 0700
// when opts.Create is set, checks that it and .symbiont are real directories owned by the
// effective user with no group or other permission bits, and loads (or atomically creates) the signing
// key, checking it. Failures carry errcode.AuditUnavailable and say which check failed.
// The caller closes the Store.
func OpenStore(root *os.File, opts StoreOptions) (*Store, error) {
	base, err := filepath.Abs(root.Name())
	if err != nil {
		return nil, errcode.Wrap(errcode.AuditUnavailable, err)
	}
	sym, err := openDir(int(root.Fd()), ".symbiont", filepath.Join(base, ".symbiont"), opts.Create)
	if err != nil {
		return nil, err
	}
	defer unix.Close(sym)
	// .symbiont holds the ledger and governed/: whoever may write it may remove or replace
	// either.
	if err := CheckDir(sym, filepath.Join(base, ".symbiont")); err != nil {
		return nil, err
	}
	path := filepath.Join(base, ".symbiont", "governed")
	gfd, err := openDir(sym, "governed", path, opts.Create)
	if err != nil {
		return nil, err
	}
	dir := os.NewFile(uintptr(gfd), path)
	if err := CheckDir(gfd, path); err != nil {
		dir.Close()
		return nil, err
	}
	rootFD, err := unix.FcntlInt(root.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		dir.Close()
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: duplicate the project descriptor: %w", ErrUnsafeDir, err)
	}
	s := &Store{dir: dir, root: os.NewFile(uintptr(rootFD), base), path: path}
	if opts.KeyFile == "" {
		s.key, err = loadKey(gfd, KeyFileName, filepath.Join(path, KeyFileName), opts.Create)
	} else {
		s.key, err = loadKeyFile(opts.KeyFile, opts.Create)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// locate returns the identity of the file name in <root>/.symbiont/governed as it is now,
// resolved from the project's pinned descriptor without following any symbolic link: a
// .symbiont or governed moved away and replaced (by a symlink to where it went, say) no
// longer leads to the run's file.
func locate(root *os.File, name string) (*unix.Stat_t, error) {
	gov, err := governedDir(root)
	if err != nil {
		return nil, err
	}
	defer unix.Close(gov)
	var st unix.Stat_t
	if err := unix.Fstatat(gov, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf(".symbiont/governed/%s: %w", name, err)
	}
	return &st, nil
}

// openDir opens name under dirfd as a directory without following a symlink, creating it
// 0700 when create is set.
func openDir(dirfd int, name, path string, create bool) (int, error) {
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			return fd, nil
		}
		switch {
		case errors.Is(err, unix.ENOENT) && create && attempt == 0:
			if err := unix.Mkdirat(dirfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, errcode.Errorf(errcode.AuditUnavailable, "%w: cannot create %s: %w", ErrUnsafeDir, path, err)
			}
		case errors.Is(err, unix.ENOENT):
			// Nothing refused: there is no store yet, so no key.
			return -1, errcode.Errorf(errcode.AuditUnavailable, "%w yet: %s does not exist", ErrNoKey, path)
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return -1, errcode.Errorf(errcode.AuditUnavailable, "%w: %s is a symlink or not a directory", ErrUnsafeDir, path)
		default:
			return -1, errcode.Errorf(errcode.AuditUnavailable, "%w: cannot open %s: %w", ErrUnsafeDir, path, err)
		}
	}
}

// CheckDir requires of the directory open as fd (path names it in errors) what the
// governed directory and .symbiont must be: a directory owned by the effective user, with
// no group or other permission bits. Failures wrap ErrUnsafeDir and carry
// errcode.AuditUnavailable.
func CheckDir(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "%w: stat %s: %w", ErrUnsafeDir, path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return errcode.Errorf(errcode.AuditUnavailable, "%w: %s is not a directory", ErrUnsafeDir, path)
	case int(st.Uid) != os.Geteuid():
		return errcode.Errorf(errcode.AuditUnavailable, "%w: %s is owned by uid %d, not the effective user %d", ErrUnsafeDir, path, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return errcode.Errorf(errcode.AuditUnavailable, "%w: %s has mode %04o; group and other must have no permissions (chmod 700)", ErrUnsafeDir, path, st.Mode&0o7777)
	}
	return nil
}

// loadKeyFile loads the key named by an override path; the final component must not be a
// symlink.
func loadKeyFile(file string, create bool) (ed25519.PrivateKey, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, errcode.Wrap(errcode.AuditUnavailable, err)
	}
	parent, err := unix.Open(filepath.Dir(abs), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: cannot open the directory of %s: %w", ErrUnsafeKey, abs, err)
	}
	defer unix.Close(parent)
	return loadKey(parent, filepath.Base(abs), abs, create)
}

// loadKey reads and checks the key file name under dirfd, creating it when absent and
// create is set.
func loadKey(dirfd int, name, path string, create bool) (ed25519.PrivateKey, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		if !create {
			return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s does not exist", ErrNoKey, path)
		}
		if err := createKey(dirfd, name, path); err != nil {
			return nil, err
		}
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s is a symlink", ErrUnsafeKey, path)
	}
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: cannot open %s: %w", ErrUnsafeKey, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: stat %s: %w", ErrUnsafeKey, path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s is not a regular file", ErrUnsafeKey, path)
	case st.Nlink != 1:
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s has %d hard links, want 1", ErrUnsafeKey, path, st.Nlink)
	case int(st.Uid) != os.Geteuid():
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s is owned by uid %d, not the effective user %d", ErrUnsafeKey, path, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s has mode %04o; group and other must have no permissions (chmod 600)", ErrUnsafeKey, path, st.Mode&0o7777)
	}
	seed, err := io.ReadAll(io.LimitReader(f, ed25519.SeedSize+1))
	if err != nil {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: read %s: %w", ErrUnsafeKey, path, err)
	}
	if len(seed) != ed25519.SeedSize {
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s must hold exactly %d bytes (the raw Ed25519 seed), not %s", ErrUnsafeKey, path, ed25519.SeedSize, sizeText(len(seed)))
	}
	if allZero(seed) {
		// Not a seed anyone generated: what a file system leaves of a file whose data never
		// reached the disk, or a placeholder. Its key is public knowledge.
		return nil, errcode.Errorf(errcode.AuditUnavailable, "%w: %s holds %d zero bytes, not a key (a zero-filled file: restore the key from a backup)", ErrUnsafeKey, path, ed25519.SeedSize)
	}
	return keyFromSeed(seed), nil
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func sizeText(n int) string {
	if n > ed25519.SeedSize {
		return fmt.Sprintf("more than %d", ed25519.SeedSize)
	}
	return fmt.Sprint(n)
}

// createKey writes a fresh seed to a temporary file and renames it to name without
// replacing: when another creator got there first, its key stands and ours is discarded.
func createKey(dirfd int, name, path string) error {
	var seed [ed25519.SeedSize]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "%w: generate key: %w", ErrUnsafeKey, err)
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "%w: generate key: %w", ErrUnsafeKey, err)
	}
	tmp := "." + name + ".tmp-" + hex.EncodeToString(nonce[:])
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "%w: create %s: %w", ErrUnsafeKey, path, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(seed[:])
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat2(dirfd, tmp, dirfd, name, unix.RENAME_NOREPLACE)
		if errors.Is(werr, unix.EEXIST) {
			werr = nil // a concurrent creator won; its key is the key
		} else if werr == nil {
			werr = unix.Fsync(dirfd)
			if werr != nil {
				return errcode.Errorf(errcode.AuditUnavailable, "%w: sync directory of %s: %w", ErrUnsafeKey, path, werr)
			}
			return nil
		}
	}
	unix.Unlinkat(dirfd, tmp, 0)
	if werr != nil {
		return errcode.Errorf(errcode.AuditUnavailable, "%w: create %s: %w", ErrUnsafeKey, path, werr)
	}
	return nil
}

// PublicKey returns the project's public key.
func (s *Store) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Dir returns the absolute path of the governed directory.
func (s *Store) Dir() string { return s.path }

// SigningKey returns the project's private signing key, for the project ledger, which
// the same key signs. Callers must not let it leave the process.
func (s *Store) SigningKey() ed25519.PrivateKey { return s.key }

// governedDir opens <root>/.symbiont/governed without following any symbolic link.
func governedDir(root *os.File) (int, error) {
	sym, err := unix.Openat(int(root.Fd()), ".symbiont", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf(".symbiont: %w", err)
	}
	defer unix.Close(sym)
	gov, err := unix.Openat(sym, "governed", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf(".symbiont/governed: %w", err)
	}
	return gov, nil
}

// FreeBytes returns the space available to the server on the governed directory's file
// system (what statfs reports as available to unprivileged users).
func (s *Store) FreeBytes() (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(s.dir.Fd()), &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", s.path, err)
	}
	unit := uint64(st.Frsize) // statvfs counts blocks in fragment-size units
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	return st.Bavail * unit, nil
}

// Close releases the store's descriptors. Writers already created stay usable.
func (s *Store) Close() error {
	if s.root != nil {
		s.root.Close()
	}
	return s.dir.Close()
}
