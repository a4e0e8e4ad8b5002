// Package workspace serves the file-system requests of a delegated agent
// (fs/read_text_file and fs/write_text_file of the Agent Client Protocol), confined to
// the run's workspace directory.
//
// # Choosing the workspace
//
// Resolve checks the workspace a caller names against the roots granted at start: the
// path must be absolute and, after resolving symbolic links, an existing directory equal
// to or inside one of the roots (themselves resolved). It returns the resolved path, which
// contains no symbolic link.
//
// # Pinning
//
// Open opens that path once as a directory descriptor, refusing a symbolic link in any of
// its components (so the directory Resolve checked is the one pinned, even if a link is
// swapped in between the two calls). Every later read and write resolves from the pinned
// descriptor: renaming or replacing the directory afterwards cannot redirect them.
//
// # Paths
//
// Rel maps a path an agent sends — absolute (as ACP sends them) or relative — to a clean
// relative path inside the workspace, lexically, before any file system access: an empty
// path, a NUL byte or more than MaxPathBytes bytes is refused (invalid_request), and so is
// any path that leads outside the workspace, by ".." or by being an absolute path
// elsewhere (protected_path). ".." components that stay inside are resolved lexically.
// The workspace itself is ".".
//
// # Protected names
//
// The reader and writer apply the project's confined reader's rules about names to what
// Rel returns (CheckNames): a hidden component anywhere (".symbiont" — the journals and
// the signing key —, ".git", "a/.env") is refused (project.ErrHidden), and so is anything
// at or under a policies directory: "policies" at the workspace's top, as in a project,
// and, when Options.Project names the project and the workspace contains it, the
// project's own policies directory ("proj/policies" in a workspace that is proj's
// parent) (project.ErrPolicies). Both are protected_path.
//
// # Reads and writes
//
// ReadText and WriteText accept what Rel and CheckNames accept and resolve the result with
// openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS beneath the pinned
// descriptor, or, where openat2 is unavailable, with a component walk using O_NOFOLLOW
// (project.OpenBeneath, shared with the project's confined reader). A symbolic link
// anywhere in the path is refused, even one that points inside the workspace. Reads accept
// a regular file with one link, at most the caller's byte limit, valid UTF-8. Writes
// create or replace a regular file with one link through a temporary file in the same
// directory and renameat, so a reader sees the old content or the new, never a part; the
// file and the directory are fsynced.
//
// Every error carries an errcode code and wraps one Err* rule (test with errors.Is):
// protected_path for a refused path (outside, hidden, under a policies directory, symbolic
// link, hard link, not a regular file, not readable or writable), not_found for a missing file or parent directory,
// limit_exceeded for a size over the limit, invalid_request for a malformed path, a bad
// line or limit, or content that is not UTF-8. The package is Linux only.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/project"
)

// The rules Resolve refuses a workspace by; its errors carry errcode.InvalidRequest.
var (
	ErrWorkspaceNotAbsolute = errors.New(`refused by rule "absolute workspace": the workspace path must be absolute, without a NUL byte`)
	ErrWorkspaceNotDir      = errors.New(`refused by rule "existing directory": the workspace must be an existing directory`)
	ErrWorkspaceNotInRoot   = errors.New(`refused by rule "inside a workspace root": after resolving symbolic links the workspace must be a granted root or inside one`)
	ErrBadRoot              = errors.New(`refused by rule "valid workspace roots": a workspace root must be an absolute path to an existing directory, and at least one must be granted`)
	// ErrWorkspaceGoverned refuses a workspace in which an agent's own tools would work on
	// the project's governance (CheckPlace).
	ErrWorkspaceGoverned = errors.New(`refused by rule "away from the governance": the workspace must not be in the project's .symbiont, its policies directory or another hidden directory of the project, nor hold the signing key outside a .symbiont directory`)
)

// CheckPlace refuses ws, a workspace Resolve returned, in which an agent's own tools would
// work on the project's governance: at or under a hidden directory of project
// (".symbiont" — the journals, the ledger, the key —, ".git") or its policies directory,
// where every path the agent names is inside the protected directory yet none carries its
// name; or holding keyFile (SYMBI_AUDIT_KEY_FILE; "" for the project's own, in .symbiont)
// on a path without a ".symbiont" component, the one name a permission request is always
// refused for. project and keyFile are resolved like ws; a key file that does not resolve
// is left to the journal store, which refuses it. Errors carry errcode.ProtectedPath and
// wrap ErrWorkspaceGoverned.
func CheckPlace(ws, project, keyFile string) error {
	refused := func(why string) error {
		return errcode.Errorf(errcode.ProtectedPath, "workspace %q %s: %w", ws, why, ErrWorkspaceGoverned)
	}
	proj, err := resolveDir(project)
	if err != nil {
		return errcode.Errorf(errcode.Internal, "workspace %q: project %q: %v", ws, project, err)
	}
	if within(ws, proj) && ws != proj {
		rel := strings.TrimPrefix(ws[len(proj):], "/")
		for _, c := range strings.Split(rel, "/") {
			if c[0] == '.' {
				return refused(fmt.Sprintf("is in the project's hidden directory %s", c))
			}
		}
		if underFold(rel, "policies") {
			return refused("is in the project's policies directory")
		}
	}
	if keyFile == "" {
		return nil
	}
	abs, err := filepath.Abs(keyFile) // as the journal store takes it
	if err != nil {
		return nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil || !within(dir, ws) {
		return nil
	}
	for _, c := range strings.Split(strings.TrimPrefix(dir[len(ws):], "/"), "/") {
		if sameName(c, ".symbiont") {
			return nil
		}
	}
	return refused(fmt.Sprintf("holds the signing key %s (SYMBI_AUDIT_KEY_FILE), which an agent's tools could read", keyFile))
}

// The rules Open, Rel, ReadText and WriteText refuse by. The rules about files are the
// project's confined reader's own (the same values), so errors.Is matches either name.
var (
	ErrBadPath  = errors.New(`refused by rule "well-formed path": the path is empty, contains a NUL byte or is too long`)
	ErrOutside  = errors.New(`refused by rule "inside the workspace": the path leads outside the workspace`)
	ErrHidden   = project.ErrHidden
	ErrPolicies = project.ErrPolicies
	// ErrAuditStore refuses, in a permission request, a path through a ".symbiont"
	// directory: the project's journals, ledger and signing key (CheckGoverned).
	ErrAuditStore = errors.New(`refused by rule "the audit store is protected": a component is ".symbiont"`)
	ErrSymlink    = project.ErrSymlink
	ErrHardLink   = project.ErrHardLink
	ErrNotRegular = project.ErrNotRegular
	ErrNotUTF8    = project.ErrNotUTF8
	ErrTooLarge   = project.ErrTooLarge
	ErrUnreadable = project.ErrUnreadable
	ErrUnwritable = errors.New(`refused by rule "writable": the file cannot be created or written`)
	ErrNotExist   = errors.New(`refused by rule "existing file": no such file in the workspace`)
	ErrNoParent   = errors.New(`refused by rule "existing parent": the parent directory does not exist in the workspace`)
	ErrLineRange  = errors.New(`refused by rule "line and limit": line is 1-based and limit is not negative`)
)

// Resolve returns the workspace for a run: path must be absolute and, after resolving
// symbolic links, an existing directory equal to or inside one of roots, which are
// absolute paths to existing directories, resolved the same way. It returns the
// resolved path, free of symbolic links, for Open. Every error carries
// errcode.InvalidRequest and wraps one of the ErrWorkspace* rules or ErrBadRoot.
func Resolve(path string, roots []string) (string, error) {
	if !filepath.IsAbs(path) || strings.IndexByte(path, 0) >= 0 {
		return "", errcode.Errorf(errcode.InvalidRequest, "workspace %q: %w", path, ErrWorkspaceNotAbsolute)
	}
	if len(roots) == 0 {
		return "", errcode.Errorf(errcode.InvalidRequest, "workspace %q: %w (none is granted)", path, ErrBadRoot)
	}
	resolved := make([]string, 0, len(roots))
	for _, r := range roots {
		rr, err := resolveDir(r)
		if err != nil {
			return "", errcode.Errorf(errcode.InvalidRequest, "workspace root %q: %w (%v)", r, ErrBadRoot, err)
		}
		resolved = append(resolved, rr)
	}
	real, err := resolveDir(path)
	if err != nil {
		return "", errcode.Errorf(errcode.InvalidRequest, "workspace %q: %w (%v)", path, ErrWorkspaceNotDir, err)
	}
	for _, r := range resolved {
		if within(real, r) {
			return real, nil
		}
	}
	if real != path {
		return "", errcode.Errorf(errcode.InvalidRequest, "workspace %q (resolved %q): %w", path, real, ErrWorkspaceNotInRoot)
	}
	return "", errcode.Errorf(errcode.InvalidRequest, "workspace %q: %w", path, ErrWorkspaceNotInRoot)
}

// resolveDir resolves the symbolic links of the absolute path dir and checks that it is
// a directory.
func resolveDir(dir string) (string, error) {
	if !filepath.IsAbs(dir) || strings.IndexByte(dir, 0) >= 0 {
		return "", errors.New("not an absolute path")
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", errors.New("not a directory")
	}
	return real, nil
}

// within reports whether the clean absolute path p is root or lies under it, lexically.
func within(p, root string) bool {
	if p == root || root == "/" {
		return true
	}
	return strings.HasPrefix(p, root) && p[len(root)] == '/'
}

// MaxPathBytes bounds a path an agent sends (PATH_MAX): Rel refuses a longer one.
const MaxPathBytes = 4096

// MaxNameBytes bounds one name of such a path (NAME_MAX): Rel refuses a longer one.
const MaxNameBytes = 255

// Workspace is an opened, pinned workspace directory. Its methods may be called
// concurrently; after Close they fail.
type Workspace struct {
	path string
	dir  *os.File
	// policies are the protected policies directories, relative to the workspace:
	// "policies", and the project's when the workspace contains the project.
	policies []string
	// walk forces the component-by-component fallback instead of openat2.
	walk bool
}

// Options are Open's optional settings.
type Options struct {
	// Project is the project directory (absolute). When the workspace contains it, its
	// policies directory is protected wherever it lies in the workspace.
	Project string
}

// Open pins dir, an absolute clean path without a symbolic link in any component (what
// Resolve returns): the directory is opened once (O_DIRECTORY) and moving or replacing it
// later cannot redirect reads or writes. A symbolic link in dir is refused
// (errcode.ProtectedPath), a missing directory is errcode.NotFound, a project that cannot
// be resolved errcode.Internal, any other refusal errcode.InvalidRequest.
func Open(dir string, opts ...Options) (*Workspace, error) {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || strings.IndexByte(dir, 0) >= 0 {
		return nil, errcode.Errorf(errcode.InvalidRequest, "workspace %q: %w (and clean)", dir, ErrWorkspaceNotAbsolute)
	}
	policies := []string{"policies"}
	for _, o := range opts {
		if o.Project == "" {
			continue
		}
		proj, err := resolveDir(o.Project)
		if err != nil {
			return nil, errcode.Errorf(errcode.Internal, "workspace %q: project %q: %v", dir, o.Project, err)
		}
		if within(proj, dir) && proj != dir {
			rel := strings.TrimPrefix(proj[len(dir):], "/")
			policies = append(policies, rel+"/policies")
		}
	}
	slash, err := openRetry(unix.AT_FDCWD, "/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, errcode.Errorf(errcode.Internal, "workspace %q: open /: %w", dir, err)
	}
	fd := slash
	if dir != "/" {
		fd, err = openDir(slash, strings.Split(dir[1:], "/"), false)
		unix.Close(slash)
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.ELOOP):
			return nil, errcode.Errorf(errcode.ProtectedPath, "workspace %q: %w (pass the path Resolve returns)", dir, ErrSymlink)
		case errors.Is(err, unix.ENOENT):
			return nil, errcode.Errorf(errcode.NotFound, "workspace %q: %w", dir, ErrWorkspaceNotDir)
		case errors.Is(err, unix.ENOTDIR):
			return nil, errcode.Errorf(errcode.InvalidRequest, "workspace %q: %w", dir, ErrWorkspaceNotDir)
		}
		return nil, errcode.Errorf(errcode.InvalidRequest, "workspace %q: %w (%v)", dir, ErrWorkspaceNotDir, err)
	}
	return &Workspace{path: dir, dir: os.NewFile(uintptr(fd), dir), policies: policies}, nil
}

// Path returns the absolute path of the workspace at open time.
func (w *Workspace) Path() string { return w.path }

// Close releases the pinned directory descriptor.
func (w *Workspace) Close() error {
	if err := w.dir.Close(); err != nil {
		return fmt.Errorf("close workspace %s: %w", w.path, err)
	}
	return nil
}

// withDir runs f with the pinned descriptor, which cannot be closed (and its number
// reused) while f runs.
func (w *Workspace) withDir(f func(dirfd int) error) error {
	rc, err := w.dir.SyscallConn()
	if err != nil {
		return errcode.Errorf(errcode.Internal, "workspace %s: %w", w.path, err)
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return errcode.Errorf(errcode.Internal, "workspace %s: %w", w.path, err)
	}
	return ferr
}

// Rel maps p, a path an agent sends, to a clean relative path inside the workspace with
// "/" separators, lexically, without touching the file system. An absolute p must be the
// workspace path (Path) or lie under it; a relative p is taken from the workspace. ".."
// components are resolved lexically and refused when they lead outside. The workspace
// itself maps to ".". An empty p, one with a NUL byte, one of more than MaxPathBytes
// bytes or with a name of more than MaxNameBytes is refused with ErrBadPath (errcode.InvalidRequest); a path outside with
// ErrOutside (errcode.ProtectedPath).
func (w *Workspace) Rel(p string) (string, error) {
	if len(p) > MaxPathBytes {
		return "", errcode.Errorf(errcode.InvalidRequest, "a path of %d bytes: %w (at most %d bytes)", len(p), ErrBadPath, MaxPathBytes)
	}
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", errcode.Errorf(errcode.InvalidRequest, "%q: %w", p, ErrBadPath)
	}
	for name := range strings.SplitSeq(p, "/") {
		if len(name) > MaxNameBytes {
			return "", errcode.Errorf(errcode.InvalidRequest, "a name of %d bytes in %s: %w (at most %d bytes a name)", len(name), errcode.Quote(p), ErrBadPath, MaxNameBytes)
		}
	}
	if p[0] == '/' {
		if rel, ok := w.relTo(filepath.Clean(p)); ok {
			return rel, nil
		}
		return "", errcode.Errorf(errcode.ProtectedPath, "%q: %w", p, ErrOutside)
	}
	c := filepath.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", errcode.Errorf(errcode.ProtectedPath, "%q: %w", p, ErrOutside)
	}
	return c, nil
}

// maxLinks bounds the symbolic links Follow follows in one path (Linux's own bound).
const maxLinks = 40

// Follow returns where p, a path as an agent sent it (absolute, or relative to the
// workspace; not cleaned first), leads in the file system as it is now: the
// workspace-relative path after following every symbolic link among its existing
// components (a dangling one too: writing through it creates its target) and taking each
// ".." from the directory reached, as the kernel does; what does not exist yet is taken
// lexically. An agent's own tools follow links; symbi's reader and writer refuse them, but
// a permission request is decided for the agent's tools, so it is decided on where its
// paths lead as well as on their names. A path that leads outside the workspace, or with
// a ".." after a component that does not exist (where it leads depends on what is made
// there later), is refused with ErrOutside; one whose links cannot be read or are too
// many with ErrUnreadable (both errcode.ProtectedPath): decide such a path as outside.
// A path that leads through /proc (directly, or by a link such as /dev/fd or /dev/stdin)
// is outside: its links lead where the process that reads them is. A link changed after
// the decision is not seen: the decision is taken on what is there.
func (w *Workspace) Follow(p string) (string, error) {
	cur, links := w.path, 0
	if strings.HasPrefix(p, "/") {
		cur = "/"
	}
	todo := strings.Split(p, "/")
	gone := false // a component does not exist: nor does anything beneath it
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch {
		case c == "" || c == ".":
			continue
		case c == ".." && gone:
			return "", refuse(errcode.ProtectedPath, p, ErrOutside, errors.New(`".." after a component that does not exist: where it leads depends on what is made there`))
		case c == "..":
			cur = filepath.Dir(cur)
			continue
		case gone:
			cur = filepath.Join(cur, c)
			continue
		}
		next := filepath.Join(cur, c)
		if next == "/proc" || strings.HasPrefix(next, "/proc/") {
			// /proc's links (self, cwd, fd/N, root) lead where the process reading them
			// is: symbi's reading here is not the agent's.
			return "", refuse(errcode.ProtectedPath, p, ErrOutside, errors.New("it leads through /proc, whose links lead elsewhere for each process"))
		}
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
			cur, gone = next, true // nothing there: the rest is taken lexically
			continue
		case err != nil:
			return "", refuse(errcode.ProtectedPath, p, ErrUnreadable, err)
		case fi.Mode()&fs.ModeSymlink == 0:
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", refuse(errcode.ProtectedPath, p, ErrUnreadable, fmt.Errorf("more than %d symbolic links", maxLinks))
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", refuse(errcode.ProtectedPath, p, ErrUnreadable, err)
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if real, ok := w.relTo(cur); ok {
		return real, nil
	}
	return "", refuse(errcode.ProtectedPath, p, ErrOutside, fmt.Errorf("its symbolic links lead to %s", errcode.Quote(cur)))
}

// relTo maps abs, a clean absolute path, to the workspace-relative path ("." for the
// workspace itself), or reports that it is outside.
func (w *Workspace) relTo(abs string) (string, bool) {
	switch {
	case abs == w.path:
		return ".", true
	case w.path == "/":
		return abs[1:], true
	case strings.HasPrefix(abs, w.path) && abs[len(w.path)] == '/':
		return abs[len(w.path)+1:], true
	}
	return "", false
}

// CheckNames applies the project's confined reader's rules about names to rel, a path
// Rel returned: a hidden component anywhere is refused with ErrHidden, a path at or under
// a protected policies directory with ErrPolicies (both errcode.ProtectedPath). ReadText
// and WriteText apply it; a caller deciding on a path before either (the ACP client's gate)
// applies it first, so that the refusal is decided and recorded before any policy.
func (w *Workspace) CheckNames(rel string) error {
	if rel == "." {
		return nil
	}
	for _, c := range strings.Split(rel, "/") {
		if c != "" && c[0] == '.' {
			return refuse(errcode.ProtectedPath, rel, ErrHidden, nil)
		}
	}
	return w.checkPolicies(rel)
}

// checkPolicies refuses rel at or under a protected policies directory (ErrPolicies),
// whatever the case of its names.
func (w *Workspace) checkPolicies(rel string) error {
	for _, p := range w.policies {
		if underFold(rel, p) {
			var detail error
			if p != "policies" {
				detail = fmt.Errorf("the project's policies directory %s", p)
			}
			return refuse(errcode.ProtectedPath, rel, ErrPolicies, detail)
		}
	}
	return nil
}

// CheckGoverned applies to rel, a path Rel returned that an agent's permission request
// names, the rules that keep an agent's own tools off the project's governance: a
// component ".symbiont" anywhere is refused with ErrAuditStore, a path at or under a
// protected policies directory with ErrPolicies (both errcode.ProtectedPath). Other hidden
// names (.git, .github) are left to the policy: an agent's tools may need them, while
// symbi's own file access (CheckNames) refuses them all.
func (w *Workspace) CheckGoverned(rel string) error {
	for _, c := range strings.Split(rel, "/") {
		if sameName(c, ".symbiont") {
			return refuse(errcode.ProtectedPath, rel, ErrAuditStore, nil)
		}
	}
	return w.checkPolicies(rel)
}

// HoldsGoverned reports whether rel, a path Rel returned, is the workspace itself or a
// directory above a protected policies directory or the project's audit store beside it:
// deleting or moving it would take the project's governance with it.
func (w *Workspace) HoldsGoverned(rel string) bool {
	if rel == "" || rel == "." {
		return true
	}
	for _, p := range w.policies {
		store := path.Join(path.Dir(p), ".symbiont")
		if rel != p && underFold(p, rel) || rel != store && underFold(store, rel) {
			return true
		}
	}
	return false
}

// underFold reports whether the slash-separated path rel is dir or lies under it, its
// names compared as sameName compares them.
func underFold(rel, dir string) bool {
	rs, ds := strings.Split(rel, "/"), strings.Split(dir, "/")
	if len(rs) < len(ds) {
		return false
	}
	for i, d := range ds {
		if !sameName(rs[i], d) {
			return false
		}
	}
	return true
}

// sameName reports whether the names a and b may be one directory entry on some file
// system: compared without regard to case (casefold ext4, vfat, exFAT, SMB: "Policies" is
// the policies directory) and without trailing dots and spaces (vfat and exFAT look
// "policies." up as "policies", and Windows servers behind SMB drop both). A protected
// name is protected in every spelling that can reach it, whatever the file system here.
func sameName(a, b string) bool {
	return strings.EqualFold(strings.TrimRight(a, ". "), strings.TrimRight(b, ". "))
}

// openDir opens the directory made of parts beneath dirfd without following a symbolic
// link and returns a descriptor for reading it (O_RDONLY|O_DIRECTORY). A symbolic link
// is ELOOP, something else than a directory ENOTDIR, whichever resolution ran.
func openDir(dirfd int, parts []string, walk bool) (int, error) {
	// O_PATH|O_NOFOLLOW opens a last component that is a link itself, so fstat tells a
	// link from a file: O_DIRECTORY would report both as ENOTDIR.
	pfd, err := project.OpenBeneath(dirfd, parts, unix.O_PATH, walk)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return -1, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return -1, unix.ELOOP
	default:
		return -1, unix.ENOTDIR
	}
	return openRetry(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
}

func openRetry(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// refuse builds the error for rel refused by rule with code.
func refuse(code errcode.Code, rel string, rule error, detail error) error {
	if detail != nil {
		return errcode.Errorf(code, "%q: %w (%v)", rel, rule, detail)
	}
	return errcode.Errorf(code, "%q: %w", rel, rule)
}

// openErr maps an error of project.OpenBeneath or openDir to a rule. notExist is the rule
// for a missing component.
func openErr(rel string, err error, notExist error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return refuse(errcode.NotFound, rel, notExist, nil)
	case errors.Is(err, unix.ELOOP):
		return refuse(errcode.ProtectedPath, rel, ErrSymlink, nil)
	case errors.Is(err, unix.EXDEV):
		return refuse(errcode.ProtectedPath, rel, ErrOutside, nil)
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV), errors.Is(err, unix.EOPNOTSUPP):
		// open(2) of a unix socket fails with ENXIO; of a missing device, ENXIO/ENODEV.
		return refuse(errcode.ProtectedPath, rel, ErrNotRegular, err)
	case errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.EINVAL):
		return refuse(errcode.InvalidRequest, rel, ErrBadPath, err)
	default:
		return refuse(errcode.ProtectedPath, rel, ErrUnreadable, err)
	}
}
