package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	cedar "github.com/cedar-policy/cedar-go"
	"golang.org/x/sys/unix"

	"symbi/internal/project"
)

// loader accumulates the state of one Load.
type loader struct {
	// decides are the actions the set being loaded decides: a policy whose action scope
	// names none of them (only the other set's) is a problem — a forbid moved into the
	// wrong directory would otherwise deny nothing, unsaid.
	decides  []string
	model    model // what the set's requests carry: a scope naming anything else is a problem
	set      *Set
	digest   hash.Hash // SHA-256 of the digest input, written file by file; nil before the first
	total    int
	ids      map[string]string // policy id → file that declared it
	problems []Problem
}

// Load reads the project's policies relative to root, the project's pinned
// directory descriptor, and returns the resulting Set. It never fails: anything
// configured that cannot be used yields a Set in deny_all mode with a Reason.
func Load(root *os.File) *Set {
	l := &loader{set: &Set{}, ids: map[string]string{}, decides: []string{ActionRespond, ActionUseTool}, model: respondModel}
	l.load(root)
	return l.finish()
}

// finish computes the digest and the mode of the loaded set.
func (l *loader) finish() *Set {
	s := l.set
	if l.digest == nil {
		l.digest = sha256.New()
	}
	s.Digest = hex.EncodeToString(l.digest.Sum(nil))
	switch {
	case len(l.problems) > 0:
		s.Mode = ModeDenyAll
		s.Problems = l.problems
		s.Reason = l.problems[0].String()
		if n := len(l.problems); n > 1 {
			s.Reason += fmt.Sprintf(" (and %d more problems)", n-1)
		}
		s.policies, s.compiled = nil, nil
	case len(s.Files) == 0:
		s.Mode = ModeDefault
	case len(s.policies) == 0:
		s.Mode = ModeDenyAll
		s.Reason = "the policy files hold no policies: " + strings.Join(s.Files, ", ")
		for _, f := range s.Files {
			s.Problems = append(s.Problems, Problem{File: f, Message: "holds no policy, and no other file of the set does: a set of none is unusable"})
		}
	default:
		s.Mode = ModeCedar
	}
	return s
}

func (l *loader) fail(file string, format string, args ...any) {
	l.problems = append(l.problems, Problem{File: file, Message: fmt.Sprintf(format, args...)})
}

// load reads the respond and use_tool policies: policies/*.cedar, then
// policies/mcp-server/*.cedar.
func (l *loader) load(root *os.File) {
	dir, ok := l.openPolicies(root)
	if !ok {
		return
	}
	defer dir.Close()
	names, hasSurface, ok := l.list(dir, Dir)
	if !ok {
		return
	}
	l.readFiles(dir, Dir, names)
	if hasSurface {
		l.loadSub(dir, surfaceEntry, SurfaceDir)
	}
}

// loadAccess reads the run-access policies: policies/access/*.cedar only.
func (l *loader) loadAccess(root *os.File) {
	dir, ok := l.openPolicies(root)
	if !ok {
		return
	}
	defer dir.Close()
	l.loadSub(dir, accessEntry, AccessDir)
}

// openPolicies opens policies/ under the project's directory descriptor. ok is false
// when it is missing or unusable (a problem is then recorded).
func (l *loader) openPolicies(root *os.File) (*os.File, bool) {
	rootFD, err := dupFD(root)
	if err != nil {
		l.fail(Dir, "cannot use the project directory descriptor: %v", err)
		return nil, false
	}
	defer unix.Close(rootFD)
	dir, ok := l.openDir(rootFD, Dir, Dir)
	return dir, ok && dir != nil
}

// loadSub reads the *.cedar files of the subdirectory name of dir, when it exists.
func (l *loader) loadSub(dir *os.File, name, rel string) {
	sub, ok := l.openDir(int(dir.Fd()), name, rel)
	if !ok || sub == nil {
		return
	}
	defer sub.Close()
	names, _, ok := l.list(sub, rel)
	if !ok {
		return
	}
	l.readFiles(sub, rel, names)
}

// dupFD returns a close-on-exec duplicate of f's descriptor, so that Load never
// changes or closes the caller's file.
func dupFD(f *os.File) (int, error) {
	if f == nil {
		return -1, errors.New("no directory")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(raw uintptr) {
		fd, dupErr = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	return fd, dupErr
}

// openDir opens the directory entry name under parent without following a
// symbolic link. A missing entry returns (nil, true); anything unusable records a
// problem and returns (nil, false).
func (l *loader) openDir(parent int, name, rel string) (*os.File, bool) {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), rel), true
	case errors.Is(err, unix.ENOENT):
		return nil, true
	case errors.Is(err, unix.ELOOP):
		l.fail(rel, "is a symbolic link; policy directories must be real directories")
	case errors.Is(err, unix.ENOTDIR):
		var st unix.Stat_t
		if unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			l.fail(rel, "is a symbolic link; policy directories must be real directories")
		} else {
			l.fail(rel, "is not a directory")
		}
	default:
		l.fail(rel, "cannot open directory: %v", err)
	}
	return nil, false
}

// list returns the sorted *.cedar names in dir and whether dir has an entry named
// mcp-server (only meaningful for policies/).
func (l *loader) list(dir *os.File, rel string) (names []string, hasSurface, ok bool) {
	entries, err := dir.ReadDir(MaxDirEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		l.fail(rel, "cannot list directory: %v", err)
		return nil, false, false
	}
	if len(entries) > MaxDirEntries {
		l.fail(rel, "limit exceeded: more than %d directory entries", MaxDirEntries)
		return nil, false, false
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".cedar") && !utf8.ValidString(name):
			// Its policies' ids carry the name, and a decision's ids are journaled as
			// JSON text: two such names could be recorded as one.
			l.fail(rel, "the policy file name %q is not valid UTF-8: a decision records its policies' ids, which carry the file's name; rename it", name)
		case strings.HasSuffix(name, ".cedar"):
			names = append(names, name)
		case rel == Dir && name == surfaceEntry:
			hasSurface = true
		case rel == Dir && name == accessEntry:
			// The run-access policies, a set of their own (LoadAccess).
		case strings.HasSuffix(strings.ToLower(name), ".cedar"):
			// An operator who renamed or moved a forbid by mistake must not open the gate:
			// what looks like a policy but would not be loaded stops the set.
			l.fail(rel+"/"+name, "looks like a policy file but is not loaded: only names ending in \".cedar\" (lower case) are read; rename it, or move it out of %s", Dir)
		case e.Type()&(fs.ModeDir|fs.ModeSymlink) != 0:
			l.fail(rel+"/"+name, "is a %s the loader does not read: policies are read only from %s/*.cedar and %s/*.cedar (run-access policies from %s/*.cedar); move its policies there, or it out of %s",
				entryKind(e.Type()), Dir, SurfaceDir, AccessDir, Dir)
		}
	}
	slices.Sort(names)
	return names, hasSurface, true
}

func entryKind(t fs.FileMode) string {
	if t&fs.ModeSymlink != 0 {
		return "symbolic link"
	}
	return "directory"
}

// readFiles reads and parses each named file of dir, in order.
func (l *loader) readFiles(dir *os.File, rel string, names []string) {
	for _, name := range names {
		file := rel + "/" + name
		l.set.Files = append(l.set.Files, file)
		if data, ok := l.read(int(dir.Fd()), name, file); ok {
			l.parse(file, data)
		}
	}
}

// digestFile appends one file's contribution to the digest input.
func (l *loader) digestFile(file string, data []byte, readable bool) {
	var n [8]byte
	size := uint64(len(data))
	if !readable {
		size = ^uint64(0)
	}
	binary.BigEndian.PutUint64(n[:], size)
	if l.digest == nil {
		l.digest = sha256.New()
	}
	l.digest.Write([]byte(file))
	l.digest.Write([]byte{0})
	l.digest.Write(n[:])
	l.digest.Write(data)
}

// read opens name under dirFD without following a symbolic link and returns its
// bytes if it is a usable policy file. It adds the file to the digest: with its
// content when the whole file was read, else as unreadable.
func (l *loader) read(dirFD int, name, file string) ([]byte, bool) {
	if l.total > MaxTotalBytes {
		// The set is deny_all already (the limit's problem is recorded): the files past
		// it are not read, each in the digest as unreadable.
		l.digestFile(file, nil, false)
		return nil, false
	}
	data, complete := l.readContent(dirFD, name, file)
	l.digestFile(file, data, complete)
	if !complete {
		return nil, false
	}
	l.total += len(data)
	if l.total > MaxTotalBytes {
		l.fail(file, "limit exceeded: policy files total more than %d bytes", MaxTotalBytes)
		return nil, false
	}
	if !utf8.Valid(data) {
		line, col := firstInvalidUTF8(data)
		l.problems = append(l.problems, Problem{File: file, Line: line, Column: col, Message: "invalid UTF-8"})
		return nil, false
	}
	return data, true
}

// readContent returns the whole content of a regular, singly linked file of at
// most MaxFileBytes, read by the project's confined-read rules (project.ReadAt), or
// records why it cannot and returns false.
func (l *loader) readContent(dirFD int, name, file string) ([]byte, bool) {
	data, err := project.ReadAt(dirFD, name, file, MaxFileBytes)
	if err == nil {
		return data, true
	}
	var st unix.Stat_t
	statErr := unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, project.ErrSymlink):
		l.fail(file, "is a symbolic link; policy files must be regular files")
	case errors.Is(err, project.ErrNotRegular) && statErr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		l.fail(file, "is a directory; policy files must be regular files")
	case errors.Is(err, project.ErrNotRegular):
		l.fail(file, "is not a regular file")
	case errors.Is(err, project.ErrHardLink) && statErr == nil:
		l.fail(file, "has %d hard links; policy files must have exactly one", st.Nlink)
	case errors.Is(err, project.ErrTooLarge):
		l.fail(file, "limit exceeded: larger than %d bytes", MaxFileBytes)
	default:
		l.fail(file, "cannot open: %v", err)
	}
	return nil, false
}

// firstInvalidUTF8 returns the 1-based line and column (in characters) of the
// first invalid UTF-8 byte of data.
func firstInvalidUTF8(data []byte) (line, col int) {
	line, col = 1, 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		data = data[size:]
	}
	return line, col
}

// parsePos finds the position in a cedar-go parser error ("<input>:L:C").
var parsePos = regexp.MustCompile(`<input>:(\d+):(\d+):? ?`)

// parse adds the policies of one file to the set, or records why it cannot.
func (l *loader) parse(file string, data []byte) {
	if line, col, err := checkNesting(data); err != nil {
		l.problems = append(l.problems, Problem{File: file, Line: line, Column: col, Message: err.Error()})
		return
	}
	list, err := cedar.NewPolicyListFromBytes(file, data)
	if err != nil {
		pp := parseProblem(file, err)
		if pp.Line == 0 {
			// cedar-go gives no position for an escape it refuses: find it.
			pp.Line, pp.Column = firstBadEscape(data)
		}
		l.problems = append(l.problems, pp)
		return
	}
	for _, p := range list {
		pos := p.Position()
		// Annotation names are exact: a mis-cased or misspelt @Gate (@gates) would
		// otherwise leave a plain forbid (a review turned into a denial, unsaid), a
		// mis-cased @ID a made-up id.
		if bad, meant := misspelledAnnotation(p.Annotations()); bad != "" {
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("annotation @%s: symbi reads @%s, spelled exactly so", bad, meant)})
			continue
		}
		id := fmt.Sprintf("%s:%d:%d", file, pos.Line, pos.Column) // a file name is bounded (NAME_MAX)
		v, explicit := p.Annotations()["id"]
		if explicit {
			id = string(v)
		}
		if id == "" {
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column, Message: "empty @id annotation"})
			continue
		}
		if explicit && len(id) > MaxIDBytes {
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("an @id of %d bytes, more than %d: a decision records its policies' ids", len(id), MaxIDBytes)})
			continue
		}
		if prev, dup := l.ids[id]; dup {
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("duplicate policy id %q (also in %s)", id, prev)})
			continue
		}
		l.ids[id] = file
		effect := "permit"
		if p.Effect() == cedar.Forbid {
			effect = "forbid"
		}
		gate, hasGate := p.Annotations()["gate"]
		switch {
		case !hasGate:
		case string(gate) != GateHuman:
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("policy %s: @gate(%q) is not a gate symbi knows (the one gate is @gate(%q))", id, string(gate), GateHuman)})
			continue
		case effect != "forbid":
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column,
				Message: fmt.Sprintf("policy %s: @gate goes on a forbid (it turns that denial into a wait for a person); on a permit it would mean nothing", id)})
			continue
		case strings.Contains(id, ","):
			// A wait names its gating policies comma-separated: "a,b" would read as two.
			msg := fmt.Sprintf("policy %q: the @id of a @gate policy holds no comma (a wait names its gating policies comma-separated)", id)
			if !explicit {
				msg = fmt.Sprintf("the @gate policy at %s has no @id, and the id made from its file name holds the file name's comma (a wait names its gating policies comma-separated): give it an @id without a comma, or rename the file", id)
			}
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column, Message: msg})
			continue
		}
		if names, all := scopeActions(p); !all && !slices.ContainsFunc(names, func(a string) bool { return slices.Contains(l.decides, a) }) {
			where := "policies/access/ (run access)"
			if !slices.Contains(l.decides, ActionRespond) {
				where = "policies/ (respond and use_tool)"
			}
			msg := fmt.Sprintf("policy %s names only actions this set does not decide (%s): it would never apply here; it belongs in %s", id, strings.Join(names, ", "), where)
			if len(names) == 0 {
				msg = fmt.Sprintf("policy %s names no Action entity in its action scope (a misspelt type?): it would never apply", id)
			}
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column, Message: msg})
			continue
		}
		if why := l.model.scopeProblem(p); why != "" {
			l.problems = append(l.problems, Problem{File: file, Line: pos.Line, Column: pos.Column, Message: fmt.Sprintf("policy %s: %s", id, why)})
			continue
		}
		l.set.policies = append(l.set.policies, Policy{ID: id, File: file, Line: pos.Line, Column: pos.Column, Effect: effect, Gate: string(gate)})
		l.set.compiled = append(l.set.compiled, p)
	}
}

// parseProblem turns a cedar-go parse error into a positioned Problem.
func parseProblem(file string, err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "parser error: ")
	m := parsePos.FindStringSubmatchIndex(msg)
	if m == nil {
		return Problem{File: file, Message: msg}
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	rest := msg[m[1]:]
	if strings.HasPrefix(rest, `"`) {
		rest = "near " + rest
	}
	prefix := strings.TrimSuffix(strings.TrimSpace(msg[:m[0]]), " at")
	if prefix != "" {
		rest = prefix + " " + rest
	}
	return Problem{File: file, Line: line, Column: col, Message: rest}
}

// misspelledAnnotation returns an annotation name that is "id" or "gate" in another
// case, or begins with its g and is one edit away from "gate" (@gates, @gated, @gaet,
// @gte; not @date or @gateway), and the name it stands for ("" when none is). Of
// several, the first in byte order is told.
func misspelledAnnotation(annotations cedar.Annotations) (bad, meant string) {
	names := make([]string, 0, len(annotations))
	for k := range annotations {
		names = append(names, string(k))
	}
	slices.Sort(names)
	for _, n := range names {
		if n == "id" || n == "gate" {
			continue
		}
		switch lower := strings.ToLower(n); {
		case lower == "id":
			return n, "id"
		case lower == "gate" || strings.HasPrefix(lower, "g") && oneEditFrom(lower, "gate"):
			return n, "gate"
		}
	}
	return "", ""
}

// oneEditFrom reports whether s is want with one byte added, removed or changed, or two
// neighbouring bytes swapped.
func oneEditFrom(s, want string) bool {
	switch {
	case len(s) == len(want):
		diff := []int{}
		for i := range s {
			if s[i] != want[i] {
				diff = append(diff, i)
			}
		}
		return len(diff) == 1 ||
			len(diff) == 2 && diff[1] == diff[0]+1 && s[diff[0]] == want[diff[1]] && s[diff[1]] == want[diff[0]]
	case len(s) == len(want)+1:
		s, want = want, s
		fallthrough
	case len(s)+1 == len(want):
		for i := range want { // remove want[i]
			if want[:i]+want[i+1:] == s {
				return true
			}
		}
	}
	return false
}
