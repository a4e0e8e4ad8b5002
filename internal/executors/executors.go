// Package executors is the operator's registration of the coding agents a delegated run
// may start (symbi mcp --executors FILE). A project file never chooses a program to run:
// a definition's metadata { executor = "name" } only names one of these.
//
// # The file
//
// One JSON object, at most MaxFileBytes, strictly read (no member name twice, no
// floating-point number, nothing after it, no unknown member):
//
//	{"executors": {
//	  "claude_code": {"command": ["claude-agent-acp"], "pin_mode": "default"},
//	  "codex":       {"command": ["codex-acp"], "pin_mode": "read-only"},
//	  "gemini":      {"command": ["gemini", "--experimental-acp"]}
//	}}
//
// A name is 1 to 64 of a-z, 0-9, '_' and '-', starting with a letter. command is the argv,
// run without a shell: 1 to MaxArgs strings, each without a NUL byte, at most MaxArgBytes.
// command[0] is an absolute path, or a bare name looked up in the absolute entries of the
// server's PATH (relative and empty entries are skipped: the working directory never
// supplies a program); it must be a regular, executable file. pin_mode, optional, is the
// ACP session mode the run pins before its prompt (the run fails when the agent does not
// offer it).
//
// The file itself must be a regular file (not a symbolic link) that neither group nor
// others may write: it decides what programs the server runs.
package executors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/opfile"
	"symbi/internal/strictjson"
)

// Limits.
const (
	MaxFileBytes = 1 << 20
	MaxExecutors = 64
	MaxArgs      = 64
	MaxArgBytes  = 4 << 10
	MaxNameBytes = 64
	MaxModeBytes = 128
	FlagName     = "--executors"
	pathEnvName  = "PATH"
)

// Conversational is the metadata executor of a conversational agent (the DSL's "orga"):
// no coding agent may be registered under it.
const Conversational = "orga"

// ErrInvalid is wrapped by every refusal of an executors file.
var ErrInvalid = errors.New("invalid executors file")

// Executor is one registered coding agent.
type Executor struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`            // command[0] absolute
	PinMode string   `json:"pin_mode,omitempty"` // the ACP session mode pinned before the prompt
}

// Registry is the registered executors, by name. The zero value has none.
type Registry struct {
	byName map[string]*Executor
}

// Get returns the executor called name.
func (r *Registry) Get(name string) (*Executor, bool) {
	if r == nil {
		return nil, false
	}
	e, ok := r.byName[name]
	return e, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// fileForm is the file's JSON form.
type fileForm struct {
	Executors map[string]struct {
		Command []*string       `json:"command"`  // nil: null, refused
		PinMode json.RawMessage `json:"pin_mode"` // nil: absent; null refused
	} `json:"executors"`
}

// Load reads and checks the executors file at path; getenv supplies PATH.
func Load(path string, getenv func(string) string) (*Registry, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, getenv)
}

// readFile reads path without following a symbolic link, refusing a file group or others
// may write.
func readFile(path string) ([]byte, error) {
	f, err := opfile.Open(path, unix.O_RDONLY, "it decides what programs the server runs (chmod go-w)")
	if err != nil {
		return nil, invalid("%s %s: %v", FlagName, path, err)
	}
	defer f.Close()
	data, err := opfile.Read(f, MaxFileBytes)
	if err != nil {
		return nil, invalid("%s %s: %v", FlagName, path, err)
	}
	return data, nil
}

// Parse checks the JSON text of an executors file.
func Parse(data []byte, getenv func(string) string) (*Registry, error) {
	if !json.Valid(data) {
		return nil, invalid("not valid JSON")
	}
	if !utf8.Valid(data) {
		// encoding/json would read the bad bytes as U+FFFD: the agent would run with
		// other bytes than the file holds.
		return nil, invalid("not valid UTF-8")
	}
	// Member names spelled exactly: a "Command" beside "command" would run what a reader
	// of the file does not see.
	if err := strictjson.Check(data, strictjson.Options{IntegersOnly: true, Single: true, NoLoneSurrogates: true, ExactNames: strictjson.NamesOf(reflect.TypeFor[fileForm]())}); err != nil {
		return nil, invalid("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileForm
	if err := dec.Decode(&f); err != nil {
		return nil, invalid("%v", err)
	}
	if f.Executors == nil {
		return nil, invalid(`want {"executors": {"<name>": {"command": [...]}, ...}}`)
	}
	if len(f.Executors) > MaxExecutors {
		return nil, invalid("%d executors, more than %d", len(f.Executors), MaxExecutors)
	}
	r := &Registry{byName: map[string]*Executor{}}
	// In the order of their names: of several bad executors, the refusal names the same
	// one every time.
	for _, name := range slices.Sorted(maps.Keys(f.Executors)) {
		e := f.Executors[name]
		if !validName(name) {
			return nil, invalid("executor name %s: want 1 to %d of a-z, 0-9, '_' and '-', starting with a letter", errcode.Quote(name), MaxNameBytes)
		}
		if name == Conversational {
			return nil, invalid("executor name %q is reserved: an agent naming it is conversational (a model answers), so this coding agent would never run", name)
		}
		command := make([]string, len(e.Command))
		for i, a := range e.Command {
			if a == nil {
				return nil, invalid("executor %s: command[%d] is null, not a string", name, i)
			}
			command[i] = *a
		}
		argv, err := checkCommand(name, command, getenv(pathEnvName))
		if err != nil {
			return nil, err
		}
		var pin string
		if e.PinMode != nil {
			if string(e.PinMode) == "null" || json.Unmarshal(e.PinMode, &pin) != nil || pin == "" {
				return nil, invalid("executor %s: pin_mode is %s, not a mode id (leave it out for none)", name, errcode.Quote(string(e.PinMode)))
			}
		}
		switch {
		case len(pin) > MaxModeBytes:
			return nil, invalid("executor %s: pin_mode is %d bytes, more than %d", name, len(pin), MaxModeBytes)
		case strings.ContainsFunc(pin, unicode.IsControl):
			return nil, invalid("executor %s: pin_mode holds a control character: not a mode id", name)
		}
		r.byName[name] = &Executor{Name: name, Command: argv, PinMode: pin}
	}
	return r, nil
}

// checkCommand checks argv and resolves argv[0].
func checkCommand(name string, argv []string, pathEnv string) ([]string, error) {
	switch {
	case len(argv) == 0:
		return nil, invalid("executor %s: command is empty", name)
	case len(argv) > MaxArgs:
		return nil, invalid("executor %s: %d arguments, more than %d", name, len(argv), MaxArgs)
	}
	for i, a := range argv {
		switch {
		case a == "" && i == 0:
			return nil, invalid("executor %s: command[0] is empty", name)
		case len(a) > MaxArgBytes:
			return nil, invalid("executor %s: command[%d] is %d bytes, more than %d", name, i, len(a), MaxArgBytes)
		case strings.ContainsRune(a, 0):
			return nil, invalid("executor %s: command[%d] holds a NUL byte", name, i)
		}
	}
	prog, err := lookPath(argv[0], pathEnv)
	if err != nil {
		return nil, invalid("executor %s: %v", name, err)
	}
	out := append([]string{prog}, argv[1:]...)
	return out, nil
}

// lookPath resolves prog: an absolute path in its clean form as it is, a bare name in the
// absolute entries of pathEnv. A relative path with a slash is refused, and so is an
// absolute one with ".", ".." or a doubled or trailing "/".
func lookPath(prog, pathEnv string) (string, error) {
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			return "", fmt.Errorf("command[0] %q is a relative path; give an absolute path or a bare name found in PATH", prog)
		}
		// The path checked is the path run: a ".." after a symbolic link leads the kernel
		// elsewhere than the lexically cleaned path, so only the clean form is taken.
		if clean := filepath.Clean(prog); clean != prog {
			return "", fmt.Errorf("command[0] %q is not in its clean form; write %q", prog, clean)
		}
		if err := executable(prog); err != nil {
			return "", err
		}
		return prog, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // never the working directory
		}
		if hasDotDot(dir) {
			// filepath.Join cleans the entry: after a symbolic link, ".." leads the
			// kernel elsewhere than the cleaned path, so the file checked would not be
			// the file a shell with this PATH runs. Such an entry is not searched.
			continue
		}
		p := filepath.Join(dir, prog)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command[0] %q was not found as an executable file in the absolute entries of PATH (those without a .. element)", prog)
}

// hasDotDot reports whether the path dir has a ".." element.
func hasDotDot(dir string) bool {
	for _, e := range strings.Split(dir, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}

// executable checks that p is a regular file someone may execute.
func executable(p string) error {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return fmt.Errorf("command[0] %s: %v", p, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("command[0] %s is not a regular file", p)
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("command[0] %s is not executable", p)
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > MaxNameBytes || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func invalid(format string, args ...any) error {
	return errcode.Errorf(errcode.InvalidRequest, "%w: "+format, append([]any{ErrInvalid}, args...)...)
}
