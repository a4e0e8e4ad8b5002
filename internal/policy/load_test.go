package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	permitAll   = "@id(\"all\")\npermit (principal, action == Action::\"respond\", resource);\n"
	forbidKeys  = "@id(\"keys\")\nforbid (principal, action, resource) when { context.response like \"*BEGIN PRIVATE KEY*\" };\n"
	unnamedRule = "// comment\n\n  permit (principal, action, resource);\n"
)

// makeProject builds a project directory from a map of relative path → content and
// applies setup for the special cases, then returns the directory path.
func makeProject(t testing.TB, files map[string]string, setup func(t testing.TB, dir string)) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if setup != nil {
		setup(t, dir)
	}
	return dir
}

// loadDir pins dir and loads its policies.
func loadDir(t testing.TB, dir string) *Set {
	t.Helper()
	root, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	return Load(root)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoadModes(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		setup   func(t testing.TB, dir string)
		mode    Mode
		problem string // substring of Reason in deny_all
		pos     [2]int // line, column of the first problem, when positioned
	}{
		{name: "no policies directory", mode: ModeDefault},
		{name: "empty policies directory", setup: func(t testing.TB, d string) { must(t, os.Mkdir(filepath.Join(d, "policies"), 0o755)) }, mode: ModeDefault},
		{name: "only non-cedar files", files: map[string]string{"policies/README.md": "x", "policies/symbi.cedarschema": "entity A;", "policies/a.cedar.bak": "junk"}, mode: ModeDefault},
		{name: "empty mcp-server directory", files: map[string]string{"policies/mcp-server/notes.txt": "x"}, mode: ModeDefault},
		{name: "one permit", files: map[string]string{"policies/a.cedar": permitAll}, mode: ModeCedar},
		{name: "only surface policies", files: map[string]string{"policies/mcp-server/a.cedar": permitAll}, mode: ModeCedar},
		{name: "an empty file beside policies", files: map[string]string{"policies/a.cedar": permitAll, "policies/b.cedar": "// nothing yet\n"}, mode: ModeCedar},
		{name: "configured set with no policies", files: map[string]string{"policies/a.cedar": "// nothing\n", "policies/mcp-server/b.cedar": ""}, mode: ModeDenyAll, problem: "hold no policies"},
		{name: "malformed file", files: map[string]string{"policies/a.cedar": permitAll, "policies/b.cedar": "permit (principal, action, resource)\nwhen { 1 + };\n"}, mode: ModeDenyAll, problem: "policies/b.cedar:2:13: parse error near", pos: [2]int{2, 13}},
		{name: "unterminated string", files: map[string]string{"policies/a.cedar": "permit (principal, action, resource) when { \"abc };"}, mode: ModeDenyAll, problem: "literal not terminated", pos: [2]int{1, 45}},
		{name: "malformed surface file", files: map[string]string{"policies/a.cedar": permitAll, "policies/mcp-server/b.cedar": "forbid ("}, mode: ModeDenyAll, problem: "policies/mcp-server/b.cedar:1:9:"},
		{name: "non-UTF-8 file", files: map[string]string{"policies/a.cedar": "permit (principal, action, resource)\n// caf\xe9\n;"}, mode: ModeDenyAll, problem: "policies/a.cedar:2:7: invalid UTF-8", pos: [2]int{2, 7}},
		{name: "duplicate id", files: map[string]string{"policies/a.cedar": permitAll, "policies/mcp-server/b.cedar": permitAll}, mode: ModeDenyAll, problem: `duplicate policy id "all" (also in policies/a.cedar)`},
		{name: "empty id", files: map[string]string{"policies/a.cedar": "@id(\"\") permit (principal, action, resource);"}, mode: ModeDenyAll, problem: "empty @id"},
		{name: "an id at its limit", files: map[string]string{"policies/a.cedar": "@id(\"" + strings.Repeat("i", MaxIDBytes) + "\") permit (principal, action, resource);"}, mode: ModeCedar},
		{name: "an id over its limit", files: map[string]string{"policies/a.cedar": "@id(\"" + strings.Repeat("i", MaxIDBytes+1) + "\") permit (principal, action, resource);"}, mode: ModeDenyAll, problem: "an @id of 257 bytes, more than 256"},
		{name: "no id, a long file name", files: map[string]string{"policies/" + strings.Repeat("a", 249) + ".cedar": "permit (principal, action, resource);"}, mode: ModeCedar},
		{name: "gate in another case", files: map[string]string{"policies/a.cedar": permitAll + "\n@Gate(\"human\") @id(\"review\") forbid (principal, action, resource);"}, mode: ModeDenyAll, problem: "annotation @Gate: symbi reads @gate"},
		{name: "a gate's id with a comma", files: map[string]string{"policies/a.cedar": permitAll + "\n@gate(\"human\") @id(\"a,b\") forbid (principal, action, resource);"}, mode: ModeDenyAll, problem: `policy "a,b": the @id of a @gate policy holds no comma`},
		{name: "a gate without an id in a file whose name has a comma", files: map[string]string{"policies/a.cedar": permitAll, "policies/review,strict.cedar": "@gate(\"human\") forbid (principal, action, resource);"}, mode: ModeDenyAll, problem: "has no @id, and the id made from its file name holds the file name's comma"},
		{name: "a comma in an ungated id", files: map[string]string{"policies/a.cedar": "@id(\"a,b\") permit (principal, action, resource);"}, mode: ModeCedar},
		{name: "gate misspelt, plural", files: map[string]string{"policies/a.cedar": permitAll + "\n@gates(\"human\") @id(\"review\") forbid (principal, action, resource);"}, mode: ModeDenyAll, problem: "annotation @gates: symbi reads @gate"},
		{name: "gate misspelt, swapped", files: map[string]string{"policies/a.cedar": permitAll + "\n@gaet(\"human\") @id(\"review\") forbid (principal, action, resource);"}, mode: ModeDenyAll, problem: "annotation @gaet: symbi reads @gate"},
		{name: "gate misspelt, one letter", files: map[string]string{"policies/a.cedar": permitAll + "\n@Gaze(\"human\") @id(\"review\") forbid (principal, action, resource);"}, mode: ModeDenyAll, problem: "annotation @Gaze: symbi reads @gate"},
		{name: "gate misspelt, short", files: map[string]string{"policies/a.cedar": permitAll + "\n@gte(\"human\") @id(\"review\") forbid (principal, action, resource);"}, mode: ModeDenyAll, problem: "annotation @gte: symbi reads @gate"},
		{name: "other annotations kept", files: map[string]string{"policies/a.cedar": "@advice(\"x\") @gateway(\"y\") @date(\"z\") @gatekeeper(\"w\") permit (principal, action, resource);"}, mode: ModeCedar},
		{name: "id in another case", files: map[string]string{"policies/a.cedar": "@ID(\"x\") permit (principal, action, resource);"}, mode: ModeDenyAll, problem: "annotation @ID: symbi reads @id"},
		{name: "symlink to a valid file", files: map[string]string{"elsewhere.txt": permitAll}, setup: func(t testing.TB, d string) {
			must(t, os.Mkdir(filepath.Join(d, "policies"), 0o755))
			must(t, os.Symlink("../elsewhere.txt", filepath.Join(d, "policies/a.cedar")))
		}, mode: ModeDenyAll, problem: "policies/a.cedar: is a symbolic link"},
		{name: "dangling symlink", files: map[string]string{"policies/a.cedar": permitAll}, setup: func(t testing.TB, d string) {
			must(t, os.Symlink("missing.cedar", filepath.Join(d, "policies/b.cedar")))
		}, mode: ModeDenyAll, problem: "policies/b.cedar: is a symbolic link"},
		{name: "directory named x.cedar", files: map[string]string{"policies/a.cedar": permitAll, "policies/x.cedar/inner.cedar": permitAll}, mode: ModeDenyAll, problem: "policies/x.cedar: is a directory"},
		{name: "fifo named x.cedar", files: map[string]string{"policies/a.cedar": permitAll}, setup: func(t testing.TB, d string) {
			must(t, syscall.Mkfifo(filepath.Join(d, "policies/x.cedar"), 0o644))
		}, mode: ModeDenyAll, problem: "policies/x.cedar: is not a regular file"},
		{name: "hard link", files: map[string]string{"policies/a.cedar": permitAll}, setup: func(t testing.TB, d string) {
			must(t, os.Link(filepath.Join(d, "policies/a.cedar"), filepath.Join(d, "copy")))
		}, mode: ModeDenyAll, problem: "policies/a.cedar: has 2 hard links"},
		{name: "policies is a symlink", files: map[string]string{"real/a.cedar": permitAll}, setup: func(t testing.TB, d string) {
			must(t, os.Symlink("real", filepath.Join(d, "policies")))
		}, mode: ModeDenyAll, problem: "policies: is a symbolic link"},
		{name: "policies is a file", files: map[string]string{"policies": permitAll}, mode: ModeDenyAll, problem: "policies: is not a directory"},
		{name: "mcp-server is a symlink", files: map[string]string{"policies/a.cedar": permitAll, "real/b.cedar": forbidKeys}, setup: func(t testing.TB, d string) {
			must(t, os.Symlink("../real", filepath.Join(d, "policies/mcp-server")))
		}, mode: ModeDenyAll, problem: "policies/mcp-server: is a symbolic link"},
		{name: "mcp-server is a dangling symlink", files: map[string]string{"policies/a.cedar": permitAll}, setup: func(t testing.TB, d string) {
			must(t, os.Symlink("nowhere", filepath.Join(d, "policies/mcp-server")))
		}, mode: ModeDenyAll, problem: "policies/mcp-server: is a symbolic link"},
		{name: "mcp-server is a file", files: map[string]string{"policies/a.cedar": permitAll, "policies/mcp-server": forbidKeys}, mode: ModeDenyAll, problem: "policies/mcp-server: is not a directory"},
		// Entries that look like policies but would not be loaded stop the set: a forbid
		// moved or renamed by mistake must not open the gate.
		{name: "policy moved into a subdirectory", files: map[string]string{"policies/respond.cedar": permitAll, "policies/secrets/secrets.cedar": forbidKeys},
			mode: ModeDenyAll, problem: "policies/secrets: is a directory the loader does not read: policies are read only from policies/*.cedar and policies/mcp-server/*.cedar (run-access policies from policies/access/*.cedar)"},
		{name: "policy renamed in upper case", files: map[string]string{"policies/respond.cedar": permitAll, "policies/secrets.CEDAR": forbidKeys},
			mode: ModeDenyAll, problem: `policies/secrets.CEDAR: looks like a policy file but is not loaded: only names ending in ".cedar" (lower case)`},
		{name: "policy renamed in mixed case", files: map[string]string{"policies/respond.cedar": permitAll, "policies/secrets.Cedar": forbidKeys},
			mode: ModeDenyAll, problem: "policies/secrets.Cedar: looks like a policy file"},
		{name: "surface policy in mixed case", files: map[string]string{"policies/respond.cedar": permitAll, "policies/mcp-server/size.CeDaR": forbidKeys},
			mode: ModeDenyAll, problem: "policies/mcp-server/size.CeDaR: looks like a policy file"},
		{name: "subdirectory of mcp-server", files: map[string]string{"policies/respond.cedar": permitAll, "policies/mcp-server/more/x.cedar": forbidKeys},
			mode: ModeDenyAll, problem: "policies/mcp-server/more: is a directory the loader does not read"},
		{name: "surface directory in another case", files: map[string]string{"policies/respond.cedar": permitAll, "policies/MCP-Server/x.cedar": forbidKeys},
			mode: ModeDenyAll, problem: "policies/MCP-Server: is a directory the loader does not read"},
		{name: "empty subdirectory", files: map[string]string{"policies/respond.cedar": permitAll}, setup: func(t testing.TB, d string) {
			must(t, os.Mkdir(filepath.Join(d, "policies/old"), 0o755))
		}, mode: ModeDenyAll, problem: "policies/old: is a directory the loader does not read"},
		{name: "symlink to a directory", files: map[string]string{"policies/respond.cedar": permitAll, "elsewhere/x.cedar": forbidKeys}, setup: func(t testing.TB, d string) {
			must(t, os.Symlink("../elsewhere", filepath.Join(d, "policies/more")))
		}, mode: ModeDenyAll, problem: "policies/more: is a symbolic link the loader does not read"},
		{name: "file over the size limit", files: map[string]string{"policies/a.cedar": permitAll + strings.Repeat("/", MaxFileBytes)}, mode: ModeDenyAll, problem: "limit exceeded: larger than 1048576 bytes"},
		{name: "files over the total limit", files: map[string]string{"policies/a.cedar": permitAll}, setup: func(t testing.TB, d string) {
			// Seventeen files just under 1 MiB each: each within its own limit, more than
			// 16 MiB together.
			pad := "// " + strings.Repeat("x", MaxFileBytes-8) + "\n"
			for i := range MaxTotalBytes/MaxFileBytes + 1 {
				must(t, os.WriteFile(filepath.Join(d, "policies", fmt.Sprintf("pad%02d.cedar", i)), []byte(pad), 0o644))
			}
		}, mode: ModeDenyAll, problem: "limit exceeded: policy files total more than 16777216 bytes"},
		{name: "too many directory entries", files: map[string]string{"policies/a.cedar": permitAll}, setup: func(t testing.TB, d string) {
			for i := range MaxDirEntries {
				must(t, os.WriteFile(filepath.Join(d, "policies", fmt.Sprintf("note%04d.txt", i)), nil, 0o644))
			}
		}, mode: ModeDenyAll, problem: "limit exceeded: more than 1024 directory entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadDir(t, makeProject(t, tt.files, tt.setup))
			if s.Mode != tt.mode {
				t.Fatalf("mode %q, want %q (reason %q)", s.Mode, tt.mode, s.Reason)
			}
			if tt.mode != ModeDenyAll {
				if s.Reason != "" || len(s.Problems) != 0 {
					t.Fatalf("reason %q, problems %v in mode %s", s.Reason, s.Problems, s.Mode)
				}
				return
			}
			if !strings.Contains(s.Reason, tt.problem) {
				t.Fatalf("reason %q does not contain %q", s.Reason, tt.problem)
			}
			if len(s.PolicyIDs()) != 0 {
				t.Fatalf("deny_all set keeps policies %v", s.PolicyIDs())
			}
			if tt.pos != [2]int{} {
				if got := [2]int{s.Problems[0].Line, s.Problems[0].Column}; got != tt.pos {
					t.Fatalf("position %v, want %v", got, tt.pos)
				}
			}
			d := s.Decide(Request{Action: ActionRespond, Agent: "a", RunID: "r", Response: "hello", Surface: Surface, Caller: "stdio"})
			if d.Allow || !strings.Contains(d.Reason, "deny_all") {
				t.Fatalf("deny_all decided %+v", d)
			}
		})
	}
}

// TestLoadUnreadable: a policy file that cannot be opened makes the set deny_all, naming
// it. As root (CI runs as root) the file's mode restricts nothing: the load then runs on a
// thread of its own whose DAC override capabilities are dropped, which dies with it.
func TestLoadUnreadable(t *testing.T) {
	dir := makeProject(t, map[string]string{"policies/a.cedar": permitAll}, nil)
	must(t, os.Chmod(filepath.Join(dir, "policies/a.cedar"), 0))
	var s *Set
	if os.Geteuid() != 0 {
		s = loadDir(t, dir)
	} else {
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capget(&hdr, &data[0]); err != nil {
				done <- err
				return
			}
			data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
			if err := unix.Capset(&hdr, &data[0]); err != nil {
				done <- err
				return
			}
			root, err := os.Open(dir)
			if err != nil {
				done <- err
				return
			}
			defer root.Close()
			s = Load(root)
			done <- nil
		}()
		must(t, <-done)
	}
	if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "policies/a.cedar: cannot open") {
		t.Fatalf("mode %s reason %q", s.Mode, s.Reason)
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	dir := makeProject(t, map[string]string{
		"policies/a.cedar":            "permit (",
		"policies/b.cedar":            permitAll,
		"policies/mcp-server/c.cedar": "forbid (principal, action, resource) when { 1 + };",
	}, nil)
	s := loadDir(t, dir)
	var got []string
	for _, p := range s.Problems {
		got = append(got, p.String())
	}
	want := []string{
		`policies/a.cedar:1:9: parse error near "": exact got  want principal`,
		`policies/mcp-server/c.cedar:1:50: parse error near ";": invalid primary`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems\n%q\nwant\n%q", got, want)
	}
	if !strings.HasSuffix(s.Reason, "(and 1 more problems)") {
		t.Fatalf("reason %q", s.Reason)
	}
	if !slices.Equal(s.Files, []string{"policies/a.cedar", "policies/b.cedar", "policies/mcp-server/c.cedar"}) {
		t.Fatalf("files %v", s.Files)
	}
}

func TestLoadOrderAndIDs(t *testing.T) {
	dir := makeProject(t, map[string]string{
		"policies/b.cedar":            "@id(\"b-rule\") permit (principal, action, resource);\n" + unnamedRule,
		"policies/a.cedar":            unnamedRule,
		"policies/mcp-server/0.cedar": forbidKeys,
	}, nil)
	s := loadDir(t, dir)
	if s.Mode != ModeCedar {
		t.Fatalf("mode %s: %s", s.Mode, s.Reason)
	}
	wantFiles := []string{"policies/a.cedar", "policies/b.cedar", "policies/mcp-server/0.cedar"}
	if !slices.Equal(s.Files, wantFiles) {
		t.Fatalf("files %v, want %v", s.Files, wantFiles)
	}
	wantIDs := []string{"policies/a.cedar:3:3", "b-rule", "policies/b.cedar:4:3", "keys"}
	if !slices.Equal(s.PolicyIDs(), wantIDs) {
		t.Fatalf("ids %v, want %v", s.PolicyIDs(), wantIDs)
	}
	ps := s.Policies()
	if ps[3].Effect != "forbid" || ps[3].File != "policies/mcp-server/0.cedar" || ps[3].Line != 1 || ps[0].Effect != "permit" {
		t.Fatalf("policies %+v", ps)
	}
}

// digestOf computes the documented digest layout independently.
func digestOf(files [][2]string) string {
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f[0]))
		h.Write([]byte{0})
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f[1])))
		h.Write(n[:])
		h.Write([]byte(f[1]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestDigest(t *testing.T) {
	base := map[string]string{"policies/a.cedar": permitAll, "policies/mcp-server/b.cedar": forbidKeys}
	want := digestOf([][2]string{{"policies/a.cedar", permitAll}, {"policies/mcp-server/b.cedar", forbidKeys}})
	first := loadDir(t, makeProject(t, base, nil))
	again := loadDir(t, makeProject(t, base, nil))
	if first.Digest != want || again.Digest != want {
		t.Fatalf("digest %s / %s, want %s", first.Digest, again.Digest, want)
	}
	if d := loadDir(t, t.TempDir()).Digest; d != digestOf(nil) {
		t.Fatalf("default digest %s", d)
	}
	changes := []struct {
		name  string
		files map[string]string
	}{
		{"content changed", map[string]string{"policies/a.cedar": permitAll + " ", "policies/mcp-server/b.cedar": forbidKeys}},
		{"file renamed", map[string]string{"policies/a2.cedar": permitAll, "policies/mcp-server/b.cedar": forbidKeys}},
		{"file moved to the surface directory", map[string]string{"policies/mcp-server/a.cedar": permitAll, "policies/mcp-server/b.cedar": forbidKeys}},
		{"file added", map[string]string{"policies/a.cedar": permitAll, "policies/c.cedar": "", "policies/mcp-server/b.cedar": forbidKeys}},
		{"file removed", map[string]string{"policies/a.cedar": permitAll}},
		{"bytes moved between files", map[string]string{"policies/a.cedar": permitAll + forbidKeys[:3], "policies/mcp-server/b.cedar": forbidKeys[3:]}},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			if d := loadDir(t, makeProject(t, c.files, nil)).Digest; d == want {
				t.Fatalf("digest did not change")
			}
		})
	}
}

func TestLoadLeavesRootUsable(t *testing.T) {
	dir := makeProject(t, map[string]string{"policies/a.cedar": permitAll}, nil)
	root, err := os.Open(dir)
	must(t, err)
	defer root.Close()
	for range 3 {
		if s := Load(root); s.Mode != ModeCedar {
			t.Fatalf("mode %s: %s", s.Mode, s.Reason)
		}
	}
	if _, err := root.ReadDir(-1); err != nil {
		t.Fatalf("root unusable after Load: %v", err)
	}
	if s := Load(nil); s.Mode != ModeDenyAll {
		t.Fatalf("nil root: mode %s", s.Mode)
	}
}

// TestMisplacedPolicies: a policy whose action scope names only actions its set does not
// decide — a respond forbid moved into policies/access/, an access forbid into policies/,
// an action misspelt — would never apply, and a forbid so placed would deny nothing: it is
// a problem, and its set denies everything until it is fixed, saying where it belongs.
func TestMisplacedPolicies(t *testing.T) {
	for _, tt := range []struct {
		name, file, text string
		access           bool   // the access set has the problem (else the respond set)
		want             string // in the problem
	}{
		{"a respond forbid in access", "policies/access/secrets.cedar", `@id("no-private-keys") forbid (principal, action == Action::"respond", resource) when { context.response like "*PRIVATE KEY*" };`, true, "policy no-private-keys names only actions this set does not decide (respond): it would never apply here; it belongs in policies/ (respond and use_tool)"},
		{"an access forbid in policies", "policies/runs.cedar", `@id("mallory-reads-nothing") forbid (principal == Caller::"mallory", action == Action::"read_run", resource);`, false, "policy mallory-reads-nothing names only actions this set does not decide (read_run): it would never apply here; it belongs in policies/access/ (run access)"},
		{"a misspelt action", "policies/respond.cedar", `@id("typo") forbid (principal, action in [Action::"respnd"], resource);`, false, "policy typo names only actions this set does not decide (respnd)"},
		{"a misspelt action type", "policies/respond.cedar", `@id("typo") forbid (principal, action == Actions::"respond", resource);`, false, "policy typo names no Action entity in its action scope (a misspelt type?): it would never apply"},
		{"a misspelt action type, access", "policies/access/runs.cedar", `@id("typo") forbid (principal, action == Actions::"read_run", resource);`, true, "policy typo names no Action entity in its action scope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := makeProject(t, map[string]string{
				"policies/respond.cedar": `@id("respond") permit (principal, action == Action::"respond", resource);` + "\n",
				tt.file:                  tt.text + "\n",
			}, nil)
			if tt.file == "policies/respond.cedar" {
				dir = makeProject(t, map[string]string{tt.file: `@id("respond") permit (principal, action == Action::"respond", resource);` + "\n" + tt.text + "\n"}, nil)
			}
			respond, access := loadDir(t, dir), loadAccessDir(t, dir)
			bad, good := respond, access
			if tt.access {
				bad, good = access, respond
			}
			if bad.Mode != ModeDenyAll || !strings.Contains(bad.Reason, tt.want) {
				t.Fatalf("mode %s, reason %q; want deny_all with %q", bad.Mode, bad.Reason, tt.want)
			}
			if good.Mode == ModeDenyAll {
				t.Fatalf("the other set: %s", good.Reason)
			}
		})
	}
}

// TestTotalLimitStopsReading: past MaxTotalBytes (16 MiB) of policy text the set is
// deny_all, and the files after the one that passed the limit are not read: 80 files of
// 1 MiB cost about the 17 read, not 80 (nor a digest input holding them all).
func TestTotalLimitStopsReading(t *testing.T) {
	line := "// " + strings.Repeat("x", 1020) + "\n"
	body := strings.Repeat(line, MaxFileBytes/len(line))
	files := map[string]string{}
	for i := range 80 {
		files[fmt.Sprintf("policies/p%03d.cedar", i)] = body
	}
	s, alloc := loadMeasured(t, makeProject(t, files, nil))
	if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "limit exceeded") {
		t.Fatalf("mode %s, reason %q: want deny_all for more than %d bytes", s.Mode, s.Reason, MaxTotalBytes)
	}
	if alloc > 200<<20 {
		t.Errorf("Load allocated %d MiB for 80 files of 1 MiB; it stops reading at %d MiB", alloc>>20, MaxTotalBytes>>20)
	}
}

// TestParseProblemPosition: a string escape Cedar refuses, of which cedar-go's error gives
// no position, is reported at its line and column all the same.
func TestParseProblemPosition(t *testing.T) {
	for _, esc := range []string{`\u{D800}`, `\u{110000}`, `\q`, `\u{}`, `\u{1234567}`} {
		src := permitAll + "\n@id(\"x\")\nforbid (principal, action, resource) when { context.response like \"*" + esc + "*\" };\n"
		s := loadDir(t, makeProject(t, map[string]string{"policies/p.cedar": src}, nil))
		if s.Mode != ModeDenyAll || len(s.Problems) == 0 {
			t.Fatalf("%s: mode %s, problems %v: want deny_all", esc, s.Mode, s.Problems)
		}
		// At the escape (5:69), or at its string (5:67) where cedar-go says so itself.
		if p := s.Problems[0]; p.Line != 5 || p.Column != 69 && p.Column != 67 {
			t.Errorf("%s: problem %q: want it at 5:69, the escape", esc, p.String())
		}
	}
}

// TestParseProblemPositionAfterGoodEscapes: the escape reported is the one Cedar refuses,
// not an earlier one it accepts (\x41, \u{1_F600}, \* in a like pattern).
func TestParseProblemPositionAfterGoodEscapes(t *testing.T) {
	src := permitAll + "\n@id(\"x\")\nforbid (principal, action, resource) when {\n  context.response == \"\\x41 \\u{1_F600}\" || context.response like \"\\**\" ||\n  context.response == \"\\u{D800}\" };\n"
	s := loadDir(t, makeProject(t, map[string]string{"policies/p.cedar": src}, nil))
	if s.Mode != ModeDenyAll || len(s.Problems) == 0 {
		t.Fatalf("mode %s, problems %v: want deny_all", s.Mode, s.Problems)
	}
	if p := s.Problems[0]; p.Line != 7 {
		t.Errorf("problem %q: want it on line 7, the \\u{D800}", p.String())
	}
}

// TestNonUTF8FileNameRefused: the ids of a file's policies without @id carry its name,
// and a decision's ids are journaled as JSON text, where invalid bytes become U+FFFD:
// two such files' policies would be recorded under one id. A *.cedar name that is not
// valid UTF-8 puts the set in deny_all, naming the file.
func TestNonUTF8FileNameRefused(t *testing.T) {
	dir := makeProject(t, map[string]string{
		"policies/\xfe.cedar": "permit (principal, action == Action::\"respond\", resource);\n",
		"policies/\xff.cedar": "forbid (principal, action == Action::\"respond\", resource) when { context.response like \"*secret*\" };\n",
	}, nil)
	s := loadDir(t, dir)
	if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "is not valid UTF-8") || !strings.Contains(s.Reason, `"\xfe.cedar"`) {
		t.Fatalf("mode %s (%s); want deny_all naming the file", s.Mode, s.Reason)
	}
}

// TestMisspeltEntityTypeInScope: a scope naming an entity type no request of the set
// carries (Respnse, Agnet, a Caller in the respond set) or a Tool id that is no tool kind
// would never apply: a forbid so written denies nothing, unsaid. The set is deny_all,
// naming the policy and what it names.
func TestMisspeltEntityTypeInScope(t *testing.T) {
	for _, forbid := range []string{
		`@id("no-secrets") forbid (principal, action == Action::"respond", resource is Respnse) when { context.response like "*SECRET*" };`,
		`@id("no-secrets") forbid (principal is Agnet, action == Action::"respond", resource) when { context.response like "*SECRET*" };`,
		`@id("no-secrets") forbid (principal in Agnet::"a", action == Action::"respond", resource) when { context.response like "*SECRET*" };`,
		`@id("no-secrets") forbid (principal, action == Action::"use_tool", resource == Tool::"exectue") when { context.response like "*SECRET*" };`,
		`@id("no-secrets") forbid (principal is Caller, action == Action::"respond", resource) when { context.response like "*SECRET*" };`,
	} {
		s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": permitAll + "\n" + forbid + "\n"}, nil))
		if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "policy no-secrets: its ") || !strings.Contains(s.Reason, "it would never apply") {
			t.Errorf("%s\n  mode %s (%s); want deny_all naming the policy and the type", strings.TrimSpace(forbid), s.Mode, s.Reason)
		}
		if d := s.Decide(request("a", "the SECRET is 42")); d.Allow {
			t.Errorf("%s\n  released the text the forbid was written to withhold: %+v", strings.TrimSpace(forbid), d)
		}
	}
}
