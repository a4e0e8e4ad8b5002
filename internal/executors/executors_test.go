package executors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

// binDir makes a directory with an executable "agent-acp", a non-executable "notexec" and
// a directory "adir", and returns it.
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent-acp"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notexec"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestParse(t *testing.T) {
	bin := binDir(t)
	env := func(path string) func(string) string {
		return func(k string) string {
			if k == "PATH" {
				return path
			}
			return ""
		}
	}
	abs := filepath.Join(bin, "agent-acp")
	tests := []struct {
		name string
		path string // PATH
		json string
		want map[string]Executor
		err  string
	}{
		{"a bare name found in PATH", "/nonexistent:" + bin, `{"executors":{"claude_code":{"command":["agent-acp","--flag"],"pin_mode":"default"}}}`,
			map[string]Executor{"claude_code": {Name: "claude_code", Command: []string{abs, "--flag"}, PinMode: "default"}}, ""},
		{"an absolute path", "", `{"executors":{"codex":{"command":["` + abs + `"]}}}`,
			map[string]Executor{"codex": {Name: "codex", Command: []string{abs}}}, ""},
		{"no executors", "", `{"executors":{}}`, map[string]Executor{}, ""},
		{"a relative PATH entry is never searched", ".:" + "rel/bin", `{"executors":{"a":{"command":["agent-acp"]}}}`, nil, "absolute entries of PATH"},
		{"a relative command path", bin, `{"executors":{"a":{"command":["./agent-acp"]}}}`, nil, "relative path"},
		{"a command path through ..", "", `{"executors":{"a":{"command":["` + bin + `/adir/../agent-acp"]}}}`, nil, "is not in its clean form; write \"" + abs + "\""},
		{"a command path through .", "", `{"executors":{"a":{"command":["` + bin + `/./agent-acp"]}}}`, nil, "is not in its clean form"},
		{"a command path with a doubled /", "", `{"executors":{"a":{"command":["` + bin + `//agent-acp"]}}}`, nil, "is not in its clean form"},
		{"not executable", "", `{"executors":{"a":{"command":["` + filepath.Join(bin, "notexec") + `"]}}}`, nil, "not executable"},
		{"a directory", "", `{"executors":{"a":{"command":["` + filepath.Join(bin, "adir") + `"]}}}`, nil, "not a regular file"},
		{"missing", "", `{"executors":{"a":{"command":["/nonexistent/x"]}}}`, nil, "no such file"},
		{"empty command", bin, `{"executors":{"a":{"command":[]}}}`, nil, "command is empty"},
		{"no command", bin, `{"executors":{"a":{}}}`, nil, "command is empty"},
		{"an empty program", bin, `{"executors":{"a":{"command":[""]}}}`, nil, "command[0] is empty"},
		{"a NUL byte in an argument", bin, `{"executors":{"a":{"command":["agent-acp","x\u0000y"]}}}`, nil, "command[1] holds a NUL byte"},
		{"a bad name", bin, `{"executors":{"Claude":{"command":["agent-acp"]}}}`, nil, "executor name"},
		{"a name with a slash", bin, `{"executors":{"a/b":{"command":["agent-acp"]}}}`, nil, "executor name"},
		{"the conversational executor's name", bin, `{"executors":{"orga":{"command":["agent-acp"]}}}`, nil, `executor name "orga" is reserved`},
		{"a long bad name, quoted clipped", bin, `{"executors":{"` + strings.Repeat("N", 10000) + `":{"command":["agent-acp"]}}}`, nil, `NNN"…(10000 bytes in all)`},
		{"an unknown member", bin, `{"executors":{"a":{"command":["agent-acp"],"shell":true}}}`, nil, "unknown field"},
		{"an unknown top-level member", bin, `{"executors":{},"extra":1}`, nil, "unknown field"},
		{"a member twice", bin, `{"executors":{"a":{"command":["agent-acp"]},"a":{"command":["agent-acp"]}}}`, nil, "duplicate member"},
		{"command as a string", bin, `{"executors":{"a":{"command":"agent-acp --x"}}}`, nil, "cannot unmarshal"},
		{"no executors member", bin, `{}`, nil, `want {"executors"`},
		{"an argument at its limit", bin, `{"executors":{"a":{"command":["agent-acp","` + strings.Repeat("x", MaxArgBytes) + `"]}}}`,
			map[string]Executor{"a": {Name: "a", Command: []string{abs, strings.Repeat("x", MaxArgBytes)}}}, ""},
		{"an argument over its limit", bin, `{"executors":{"a":{"command":["agent-acp","` + strings.Repeat("x", MaxArgBytes+1) + `"]}}}`, nil, "command[1] is 4097 bytes, more than 4096"},
		{"too many arguments", bin, `{"executors":{"a":{"command":["agent-acp"` + strings.Repeat(`,"x"`, MaxArgs) + `]}}}`, nil, "65 arguments, more than 64"},
		{"a mode at its limit", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":"` + strings.Repeat("m", MaxModeBytes) + `"}}}`,
			map[string]Executor{"a": {Name: "a", Command: []string{abs}, PinMode: strings.Repeat("m", MaxModeBytes)}}, ""},
		{"a mode over its limit", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":"` + strings.Repeat("m", MaxModeBytes+1) + `"}}}`, nil, "pin_mode is 129 bytes, more than 128"},
		// A null is no string: read as "", the agent would get an argument the file does not
		// show, and a null pin_mode would silently mean "no pin".
		{"a null argument", bin, `{"executors":{"a":{"command":["agent-acp",null]}}}`, nil, "command[1] is null"},
		{"a null pin_mode", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":null}}}`, nil, `pin_mode is "null"`},
		// Invalid UTF-8 would be read as U+FFFD: the agent would run with other bytes than
		// the file holds (as a lone surrogate escape, refused by strict JSON).
		{"invalid UTF-8 in an argument", bin, "{\"executors\":{\"a\":{\"command\":[\"agent-acp\",\"--deny-tool=\xff\"]}}}", nil, "not valid UTF-8"},
		{"invalid UTF-8 in pin_mode", bin, "{\"executors\":{\"a\":{\"command\":[\"agent-acp\"],\"pin_mode\":\"read\xffonly\"}}}", nil, "not valid UTF-8"},
		// pin_mode, when given, is a mode id: a non-empty string without a control
		// character; left out means none.
		{"an empty pin_mode", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":""}}}`, nil, "pin_mode"},
		{"a NUL in pin_mode", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":"a\u0000b"}}}`, nil, "pin_mode holds a control character"},
		{"a NEL in pin_mode", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":"a\u0085b"}}}`, nil, "pin_mode holds a control character"},
		{"a newline in pin_mode", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":"a\nb"}}}`, nil, "pin_mode holds a control character"},
		{"a number pin_mode", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":1}}}`, nil, "pin_mode"},
		{"an object pin_mode", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":{}}}}`, nil, "pin_mode"},
		{"a pin_mode with an escape", bin, `{"executors":{"a":{"command":["agent-acp"],"pin_mode":"re\u0061d-only"}}}`,
			map[string]Executor{"a": {Name: "a", Command: []string{abs}, PinMode: "read-only"}}, ""},
		{"not JSON", bin, `{"executors":`, nil, "not valid JSON"},
		{"trailing data", bin, `{"executors":{}} {}`, nil, "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.json), env(tt.path))
			if tt.err != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v; want ErrInvalid (invalid_request) containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Names(), sortedKeys(tt.want)) {
				t.Fatalf("names %v", r.Names())
			}
			for name, want := range tt.want {
				got, ok := r.Get(name)
				if !ok || got.Name != want.Name || !slices.Equal(got.Command, want.Command) || got.PinMode != want.PinMode {
					t.Fatalf("%s: %+v, want %+v", name, got, want)
				}
			}
		})
	}
}

func sortedKeys(m map[string]Executor) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestLoadFile(t *testing.T) {
	bin := binDir(t)
	getenv := func(string) string { return bin }
	good := `{"executors":{"a":{"command":["agent-acp"]}}}`
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if r, err := Load(write("ok.json", 0o644), getenv); err != nil || len(r.Names()) != 1 {
		t.Fatalf("a 0644 file: %v", err)
	}
	for _, tc := range []struct {
		path func() string
		want string
	}{
		{func() string { return write("gw.json", 0o664) }, "group or others write"},
		{func() string { return write("ow.json", 0o646) }, "group or others write"},
		{func() string {
			l := filepath.Join(dir, "link.json")
			os.Symlink(write("target.json", 0o644), l)
			return l
		}, "too many levels of symbolic links"},
		{func() string {
			p := filepath.Join(dir, "big.json")
			if err := os.WriteFile(p, append([]byte(good), bytes.Repeat([]byte(" "), MaxFileBytes)...), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, "more than 1048576 bytes"},
		{func() string { return dir }, "not a regular file"},
		{func() string { return filepath.Join(dir, "absent.json") }, "no such file"},
	} {
		if _, err := Load(tc.path(), getenv); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("error %v; want %q", err, tc.want)
		}
	}
	var nilReg *Registry
	if _, ok := nilReg.Get("a"); ok || nilReg.Names() != nil {
		t.Error("a nil registry has executors")
	}
}

// FuzzParse: no input panics, and whatever is accepted names only absolute, executable
// programs.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"executors":{"a":{"command":["/bin/sh","-c","x"]}}}`, `{"executors":{}}`, `{"executors":{"a":{"command":["sh"],"pin_mode":"m"}}}`, `{}`, `[`, `{"executors":{"a":{"command":["x"]},"a":{}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data, func(string) string { return "/bin:/usr/bin" })
		if err != nil {
			return
		}
		for _, n := range r.Names() {
			e, _ := r.Get(n)
			if !validName(n) || len(e.Command) == 0 || !filepath.IsAbs(e.Command[0]) || executable(e.Command[0]) != nil {
				t.Fatalf("accepted %+v", e)
			}
		}
	})
}

// TestParseCaseFoldedMember: the executors file decides what programs the server runs, and
// is read strictly: a member name in other capitals than the format's is refused —
// encoding/json would take "COMMAND" for "command", and of {"command": A, "Command": B}
// run B while a reader of the file sees A.
func TestParseCaseFoldedMember(t *testing.T) {
	bin := t.TempDir()
	for _, n := range []string{"shown", "hidden"} {
		if err := os.WriteFile(filepath.Join(bin, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shown, hidden := filepath.Join(bin, "shown"), filepath.Join(bin, "hidden")
	getenv := func(string) string { return "" }
	for name, doc := range map[string]string{
		"second spelling wins": `{"executors":{"a":{"command":["` + shown + `"],"Command":["` + hidden + `"]}}}`,
		"only a folded name":   `{"executors":{"a":{"COMMAND":["` + hidden + `"]}}}`,
		"folded top level":     `{"Executors":{"a":{"command":["` + hidden + `"]}}}`,
		"folded pin_mode":      `{"executors":{"a":{"command":["` + shown + `"],"pin_mode":"default","Pin_Mode":"bypassPermissions"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			r, err := Parse([]byte(doc), getenv)
			if err == nil {
				e, _ := r.Get("a")
				t.Fatalf("accepted a member name spelled otherwise than documented: %+v", e)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v, want ErrInvalid", err)
			}
		})
	}
}

// TestPinModeRefusalOneLine: a pin_mode that is not a non-empty string (or holds a
// control character) is refused, and the refusal quotes what was given on one line: raw
// JSON may hold line breaks between tokens, which would split the one-line refusal symbi
// mcp prints ("symbi mcp: <code>: <message>").
func TestPinModeRefusalOneLine(t *testing.T) {
	getenv := func(string) string { return "/bin:/usr/bin" }
	doc := "{\"executors\":{\"a\":{\"command\":[\"/bin/sh\"],\"pin_mode\":[\r\n\"read-only\"\n]}}}"
	_, err := Parse([]byte(doc), getenv)
	if err == nil {
		t.Fatal("accepted an array pin_mode")
	}
	if strings.ContainsAny(err.Error(), "\r\n\t") {
		t.Fatalf("refusal holds raw line breaks: %q", err.Error())
	}
}

// TestParseNamesFirstBadExecutor: of several bad executors, the refusal names the first
// by name, every time (a map's order would make it vary).
func TestParseNamesFirstBadExecutor(t *testing.T) {
	for range 20 {
		_, err := Parse([]byte(`{"executors":{"zeta":{"command":["nope-z"]},"alpha":{"command":["nope-a"]},"mid":{"command":["nope-m"]}}}`), func(string) string { return t.TempDir() })
		if err == nil || !strings.Contains(err.Error(), "alpha") || strings.Contains(err.Error(), "zeta") || strings.Contains(err.Error(), "mid") {
			t.Fatalf("refusal %v; want the one of alpha, the first by name", err)
		}
	}
}
