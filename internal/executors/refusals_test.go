package executors

// Limits and checks of the executors file, each at its bound.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

// parseWithPATH parses doc with PATH path.
func parseWithPATH(doc, path string) (*Registry, error) {
	return Parse([]byte(doc), func(k string) string {
		if k == "PATH" {
			return path
		}
		return ""
	})
}

// wantInvalid fails t unless err is an ErrInvalid refusal (invalid_request) containing want.
func wantInvalid(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !errors.Is(err, ErrInvalid) || errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v; want ErrInvalid containing %q", what, err, want)
	}
}

// TestExecutorCount: a file may register MaxExecutors (64) executors; one more is
// refused.
func TestExecutorCount(t *testing.T) {
	bin := binDir(t)
	doc := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"executors":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"e%02d":{"command":["agent-acp"]}`, i)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	r, err := parseWithPATH(doc(MaxExecutors), bin)
	if err != nil || len(r.Names()) != MaxExecutors {
		t.Fatalf("%d executors: %v", MaxExecutors, err)
	}
	_, err = parseWithPATH(doc(MaxExecutors+1), bin)
	wantInvalid(t, "65 executors", err, "65 executors, more than 64")
}

// TestArgCountAtLimit: a command of exactly MaxArgs (64) strings is accepted.
func TestArgCountAtLimit(t *testing.T) {
	bin := binDir(t)
	r, err := parseWithPATH(`{"executors":{"a":{"command":["agent-acp"`+strings.Repeat(`,"x"`, MaxArgs-1)+`]}}}`, bin)
	if err != nil {
		t.Fatalf("a command of %d strings: %v", MaxArgs, err)
	}
	if e, _ := r.Get("a"); len(e.Command) != MaxArgs {
		t.Fatalf("command of %d strings, want %d", len(e.Command), MaxArgs)
	}
}

// TestRelativePATHEntryNeverSearched: a bare name is never found through a relative
// entry of PATH, even when the working directory, which such an entry names, holds it.
func TestRelativePATHEntryNeverSearched(t *testing.T) {
	bin := binDir(t)
	for _, tc := range []struct{ wd, path string }{
		{bin, "."},
		{bin, "./"},
		{filepath.Dir(bin), filepath.Base(bin)},
		{filepath.Dir(bin), "./" + filepath.Base(bin)},
	} {
		t.Chdir(tc.wd)
		_, err := parseWithPATH(`{"executors":{"a":{"command":["agent-acp"]}}}`, tc.path)
		wantInvalid(t, "PATH "+tc.path+" in "+tc.wd, err, "absolute entries of PATH")
	}
}

// TestExecutableBySomeone: command[0] need only be executable by someone: a file only
// its group may execute is accepted.
func TestExecutableBySomeone(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "grp-acp")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o654); err != nil {
		t.Fatal(err)
	}
	if _, err := parseWithPATH(`{"executors":{"a":{"command":["`+p+`"]}}}`, ""); err != nil {
		t.Fatalf("a file of mode 0654: %v", err)
	}
}

// TestExecutorNames: a name is 1 to 64 of a-z, 0-9, '_' and '-', starting with a
// letter.
func TestExecutorNames(t *testing.T) {
	bin := binDir(t)
	for _, name := range []string{"a", "z", "a" + strings.Repeat("x", MaxNameBytes-1), "claude-code", "claude_code", "a09", "gemini-2"} {
		if _, err := parseWithPATH(`{"executors":{"`+name+`":{"command":["agent-acp"]}}}`, bin); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
	for _, name := range []string{"", "a" + strings.Repeat("x", MaxNameBytes), "1a", "_a", "-a", "~a", "{a", "a:b", "a{b", "a/b", "a.b", "aB", "a b"} {
		_, err := parseWithPATH(`{"executors":{"`+name+`":{"command":["agent-acp"]}}}`, bin)
		wantInvalid(t, fmt.Sprintf("name %q", name), err, "executor name")
	}
}

// TestPATHEntryWithDotDotNotSearched: a PATH entry D/link/../bin, where link is a
// symbolic link to D/real/sub, names D/real/bin to the kernel and D/bin when cleaned
// lexically. It is not searched: the program is found in neither, and never run as
// D/bin/agent, a file in no directory PATH names.
func TestPATHEntryWithDotDotNotSearched(t *testing.T) {
	d := t.TempDir()
	for _, dir := range []string{"real/sub", "real/bin", "bin"} {
		if err := os.MkdirAll(filepath.Join(d, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(d, "real/sub"), filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"real/bin/agent", "bin/agent"} {
		if err := os.WriteFile(filepath.Join(d, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entry := filepath.Join(d, "link") + "/../bin"
	r, err := parseWithPATH(`{"executors":{"a":{"command":["agent"]}}}`, entry)
	if err == nil {
		e, _ := r.Get("a")
		t.Fatalf("PATH=%s: command[0] resolved to %s; want the entry not searched", entry, e.Command[0])
	}
	wantInvalid(t, "PATH "+entry, err, "without a .. element")
	// The same directory named without "..", after the entry: found there.
	r, err = parseWithPATH(`{"executors":{"a":{"command":["agent"]}}}`, entry+":"+filepath.Join(d, "real/bin"))
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := r.Get("a"); e.Command[0] != filepath.Join(d, "real/bin/agent") {
		t.Fatalf("command[0] = %s, want %s", e.Command[0], filepath.Join(d, "real/bin/agent"))
	}
}
