package project

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"symbi/internal/errcode"
)

// loadRegistry takes the snapshot of root and returns it with the log text.
func loadRegistry(t *testing.T, root string) (*Registry, string) {
	t.Helper()
	var logs bytes.Buffer
	p := openProject(t, root, false)
	r, err := p.LoadRegistry(slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("LoadRegistry: %v", err)
	}
	return r, logs.String()
}

func names(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

func TestRegistryResolve(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"agents/plain.symbi":  `metadata { description = "plain one" } agent plain { capabilities = ["read"] }`,
		"agents/helper.symbi": `agent assistant {}`, // filename alias
		"agents/two.symbi":    `agent two {} agent other {}`,
		"agents/multi.symbi":  `agent a {} agent b {}`,
		"agents/dup.symbi":    `agent dup {} agent dup {}`,
		"agents/x.symbi":      `agent x {}`,
		"agents/x.dsl":        `agent x {}`,
		"agents/legacy.dsl":   `agent legacy {}`,
		"agents/cron.symbi":   "agent cron {}\nschedule s { cron = \"* * * * *\" }\n",
		"agents/broken.symbi": "agent broken {\n",
		"agents/notes.txt":    "not an agent file",
	}
	for rel, src := range files {
		writeFile(t, root, rel, []byte(src))
	}
	r, _ := loadRegistry(t, root)
	wantNames := []string{"broken", "cron", "dup", "helper", "legacy", "multi", "plain", "two", "x", "x"}
	if got := names(r.Entries()); fmt.Sprint(got) != fmt.Sprint(wantNames) {
		t.Fatalf("entries %v, want %v", got, wantNames)
	}
	tests := []struct {
		stem      string
		code      errcode.Code
		reason    string // substring of the error
		declared  string // selected agent when resolved
		invocable bool
	}{
		{stem: "plain", declared: "plain", invocable: true},
		{stem: "helper", declared: "assistant", invocable: true},
		{stem: "assistant", code: errcode.UnknownAgent, reason: "no agent file"},
		{stem: "two", declared: "two", invocable: true},
		{stem: "other", code: errcode.UnknownAgent, reason: "no agent file"},
		{stem: "legacy", declared: "legacy", invocable: true},
		{stem: "multi", code: errcode.RefusedDefinition, reason: "selection"},
		{stem: "dup", code: errcode.RefusedDefinition, reason: "selection"},
		{stem: "x", code: errcode.UnknownAgent, reason: "ambiguous"},
		{stem: "cron", code: errcode.RefusedDefinition, reason: "rule 2 at 2:1"},
		{stem: "broken", code: errcode.RefusedDefinition, reason: "rule 1 at"},
		{stem: "notes", code: errcode.UnknownAgent, reason: "no agent file"},
		{stem: "", code: errcode.UnknownAgent, reason: "no agent file"},
	}
	for _, tt := range tests {
		a, err := r.Resolve(tt.stem)
		if tt.code != "" {
			if errcode.Of(err) != tt.code || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("Resolve(%q) error %v, want %s containing %q", tt.stem, err, tt.code, tt.reason)
			}
			continue
		}
		if err != nil {
			t.Errorf("Resolve(%q): %v", tt.stem, err)
			continue
		}
		if a.Admission.Agent != tt.declared || !a.Entry.Invocable || a.Entry.Reason != "" {
			t.Errorf("Resolve(%q) selected %q (entry %+v), want %q", tt.stem, a.Admission.Agent, a.Entry, tt.declared)
		}
		if want := files[a.Entry.File]; string(a.Source) != want {
			t.Errorf("Resolve(%q) source %q, want %q", tt.stem, a.Source, want)
		}
	}
	for _, e := range r.Entries() {
		if e.Name == "x" && (e.Invocable || !strings.Contains(e.Reason, "agents/x.dsl and agents/x.symbi")) {
			t.Errorf("ambiguous entry %+v", e)
		}
		if e.Name == "plain" && (e.Description != "plain one" || fmt.Sprint(e.Capabilities) != "[read]") {
			t.Errorf("plain entry %+v", e)
		}
		if e.Name == "two" && fmt.Sprint(e.Agents) != "[two other]" {
			t.Errorf("two entry %+v", e)
		}
	}
}

func TestRegistryIsSnapshot(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "agents/a.symbi", []byte("agent a {}"))
	r, _ := loadRegistry(t, root)
	writeFile(t, root, "agents/b.symbi", []byte("agent b {}"))
	writeFile(t, root, "agents/a.symbi", []byte("agent a { capabilities = [\"changed\"] }"))
	if _, err := r.Resolve("b"); !errors.Is(err, errcode.UnknownAgent) {
		t.Errorf("file added after the snapshot resolved: %v", err)
	}
	a, err := r.Resolve("a")
	if err != nil || string(a.Source) != "agent a {}" {
		t.Errorf("Resolve(a) = %q, %v; want the source read at the snapshot", a.Source, err)
	}
}

// TestRegistryRefusesUnreadable: a file the confined reader refuses is listed, never
// invocable, with that rule as its reason; asking for it is answered with the rule (and
// its code), not "no agent file".
func TestRegistryRefusesUnreadable(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "agents/good.symbi", []byte("agent good {}"))
	writeFile(t, root, "agents/.hidden.symbi", []byte("agent hidden {}"))
	writeFile(t, root, "agents/latin1.symbi", []byte("agent latin1 {} // caf\xe9"))
	writeFile(t, root, "agents/huge.symbi", append([]byte("agent huge {}\n//"), bytes.Repeat([]byte("x"), AgentFileLimit)...))
	writeFile(t, root, "outside.symbi", []byte("agent linked {}"))
	must(t, os.Symlink("../outside.symbi", filepath.Join(root, "agents/linked.symbi")))
	must(t, os.Link(filepath.Join(root, "agents/good.symbi"), filepath.Join(root, "agents/hard.symbi")))
	must(t, os.Mkdir(filepath.Join(root, "agents/dir.symbi"), 0o755))

	r, logs := loadRegistry(t, root)
	// good.symbi has two links now (hard.symbi), so it is refused as well.
	want := map[string]struct {
		code errcode.Code
		rule string
	}{
		".hidden": {errcode.ProtectedPath, "no hidden components"},
		"latin1":  {errcode.ProtectedPath, "UTF-8 only"},
		"huge":    {errcode.LimitExceeded, "size limit"},
		"linked":  {errcode.ProtectedPath, "no symlinks"},
		"hard":    {errcode.ProtectedPath, "single link"},
		"good":    {errcode.ProtectedPath, "single link"},
		"dir":     {errcode.ProtectedPath, "regular files only"},
	}
	entries := r.Entries()
	if len(entries) != len(want) {
		t.Fatalf("entries %v, want the %d files, each refused", names(entries), len(want))
	}
	for _, e := range entries {
		w, ok := want[e.Name]
		if !ok || e.Invocable || !strings.Contains(e.Reason, w.rule) || len(e.Reasons) != 1 {
			t.Errorf("entry %+v, want refused by %q", e, w.rule)
		}
		_, err := r.Resolve(e.Name)
		if errcode.Of(err) != w.code || !strings.Contains(err.Error(), w.rule) || !strings.Contains(err.Error(), "not read at startup") {
			t.Errorf("Resolve(%s): %v, want %s naming %q", e.Name, err, w.code, w.rule)
		}
	}
	for _, want := range []string{
		`agents/.hidden.symbi`, `no hidden components`,
		`agents/latin1.symbi`, `UTF-8 only`,
		`agents/huge.symbi`, `limit_exceeded`,
		`agents/linked.symbi`, `no symlinks`,
		`agents/hard.symbi`, `agents/good.symbi`, `single link`,
		`agents/dir.symbi`, `regular files only`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, "level=WARN"); n != 7 {
		t.Errorf("%d warnings, want 7:\n%s", n, logs)
	}
}

// TestRegistryAmbiguousWithUnreadable: a stem present as two files is ambiguous even when
// one of them cannot be read — the other is not invocable in its place.
func TestRegistryAmbiguousWithUnreadable(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, root string){
		"a symlink": func(t *testing.T, root string) {
			writeFile(t, root, "outside.symbi", []byte("agent x {}"))
			must(t, os.Symlink("../outside.symbi", filepath.Join(root, "agents/x.symbi")))
		},
		"too large": func(t *testing.T, root string) {
			writeFile(t, root, "agents/x.symbi", append([]byte("agent x {}\n//"), bytes.Repeat([]byte("x"), AgentFileLimit)...))
		},
		"not UTF-8": func(t *testing.T, root string) {
			writeFile(t, root, "agents/x.symbi", []byte("agent x {} // caf\xe9"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, root, "agents/x.dsl", []byte("agent x {}"))
			setup(t, root)
			r, _ := loadRegistry(t, root)
			if _, err := r.Resolve("x"); errcode.Of(err) != errcode.UnknownAgent || !strings.Contains(err.Error(), "ambiguous") {
				t.Fatalf("Resolve(x): %v, want unknown_agent: ambiguous", err)
			}
		})
	}
}

func TestRegistryEntryLimit(t *testing.T) {
	root := t.TempDir()
	const files = RegistryMaxEntries + 6
	for i := range files {
		writeFile(t, root, fmt.Sprintf("agents/a%04d.symbi", i), []byte(fmt.Sprintf("agent a%04d {}", i)))
	}
	r, logs := loadRegistry(t, root)
	if got := len(r.Entries()); got != RegistryMaxEntries {
		t.Fatalf("%d entries, want %d of %d files", got, RegistryMaxEntries, files)
	}
	if !strings.Contains(logs, "more entries than are inspected") {
		t.Errorf("no warning about the ignored entries:\n%s", logs)
	}
	// A name not found may be among the entries not inspected: the answer says so.
	if _, err := r.Resolve("nowhere"); errcode.Of(err) != errcode.UnknownAgent || !strings.Contains(err.Error(), `rule "registry entries"`) {
		t.Errorf("Resolve(nowhere): %v, want unknown_agent naming the entries rule", err)
	}
	small, _ := loadRegistry(t, t.TempDir())
	if _, err := small.Resolve("nowhere"); errcode.Of(err) != errcode.UnknownAgent || strings.Contains(err.Error(), "registry entries") {
		t.Errorf("Resolve(nowhere) in a small registry: %v", err)
	}
}

func TestRegistryRetentionLimit(t *testing.T) {
	root := t.TempDir()
	// Seventeen files of exactly 1 MiB: sixteen fill the 16 MiB exactly; the
	// seventeenth would pass it.
	for i := range 17 {
		head := fmt.Sprintf("agent r%02d {}\n//", i)
		src := append([]byte(head), bytes.Repeat([]byte("x"), AgentFileLimit-len(head)-1)...)
		src = append(src, '\n')
		writeFile(t, root, fmt.Sprintf("agents/r%02d.symbi", i), src)
	}
	r, logs := loadRegistry(t, root)
	entries := r.Entries()
	if len(entries) != 17 || entries[15].Name != "r15" || !entries[15].Invocable {
		t.Fatalf("entries %v, want r00..r15 invocable, then r16", names(entries))
	}
	if e := entries[16]; e.Name != "r16" || e.Invocable || !strings.Contains(e.Reason, `rule "registry retention"`) {
		t.Fatalf("r16: %+v, want refused by the retention rule", e)
	}
	if _, err := r.Resolve("r16"); errcode.Of(err) != errcode.LimitExceeded || !strings.Contains(err.Error(), "registry retention") {
		t.Fatalf("Resolve(r16): %v, want limit_exceeded naming the retention rule", err)
	}
	if !strings.Contains(logs, "retention limit reached") || !strings.Contains(logs, "agents/r16.symbi") {
		t.Errorf("no retention warning naming r16:\n%s", logs)
	}
}

func TestRegistryAgentsDir(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		r, _ := loadRegistry(t, t.TempDir())
		if len(r.Entries()) != 0 {
			t.Fatalf("entries %v, want none", r.Entries())
		}
	})
	t.Run("file", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, "agents", []byte("agent a {}"))
		p := openProject(t, root, false)
		_, err := p.LoadRegistry(slog.New(slog.DiscardHandler))
		if !errors.Is(err, ErrNotRegular) {
			t.Fatalf("agents/ as a file: error %v, want ErrNotRegular", err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, "real/a.symbi", []byte("agent a {}"))
		must(t, os.Symlink("real", filepath.Join(root, "agents")))
		p := openProject(t, root, false)
		_, err := p.LoadRegistry(slog.New(slog.DiscardHandler))
		if !errors.Is(err, ErrSymlink) || !errors.Is(err, errcode.ProtectedPath) {
			t.Fatalf("symlinked agents/: error %v, want ErrSymlink", err)
		}
	})
}

// TestRegistryUnprintableNames: a file name that is not valid UTF-8, or holds a control
// character, is refused at registry time with its own reason, shown escaped, never read
// and never resolvable; AGENTS.md generated from the registry stays valid UTF-8.
func TestRegistryUnprintableNames(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"ok.symbi", "bad\xff.symbi", "tab\tname.symbi", "esc\x1b[31m.dsl", "rtl\u202egpj.symbi", "zero\u200bwidth.symbi"} {
		writeFile(t, root, "agents/"+name, []byte("agent a {}\n"))
	}
	r, logs := loadRegistry(t, root)
	got := map[string]Entry{}
	for _, e := range r.Entries() {
		if !utf8.ValidString(e.Name) || !utf8.ValidString(e.File) || strings.ContainsFunc(e.Name+e.File, unicode.IsControl) {
			t.Errorf("entry %q (%q) carries unprintable bytes", e.Name, e.File)
		}
		got[e.Name] = e
	}
	for _, esc := range []string{`bad\xff`, `tab\tname`, `esc\x1b[31m`, `rtl\u202egpj`, `zero\u200bwidth`} {
		e, ok := got[esc]
		if !ok {
			t.Errorf("no entry %q; entries %v", esc, names(r.Entries()))
			continue
		}
		if e.Invocable || !strings.Contains(e.Reason, `rule "printable file name"`) {
			t.Errorf("%s: invocable %v, reason %q", esc, e.Invocable, e.Reason)
		}
		a, err := r.Resolve(esc)
		if a != nil || !errors.Is(err, errcode.RefusedDefinition) {
			t.Errorf("Resolve(%q) = %v, %v; want no agent and refused_definition", esc, a, err)
		}
	}
	if e := got["ok"]; !e.Invocable {
		t.Errorf("ok.symbi is not invocable: %q", e.Reason)
	}
	if !strings.Contains(logs, "printable file name") {
		t.Errorf("no warning logged: %s", logs)
	}
	md, err := GenerateAgentsMD(nil, r.Entries())
	if err != nil || !utf8.Valid(md) || bytes.ContainsFunc(md, func(r rune) bool { return r != '\n' && unicode.IsControl(r) }) {
		t.Errorf("generated AGENTS.md is not printable UTF-8 (%v):\n%q", err, md)
	}
	p := openProject(t, root, false)
	if _, err := p.UpdateAgentsMD(r.Entries()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.AgentsMD(); err != nil {
		t.Errorf("AGENTS.md written from the registry cannot be read back: %v", err)
	}
}

// TestRegistryLoadIsDeterministic: files are read, parsed and admitted on all cores, but
// the snapshot and its warnings are those of a reading in name order, every time: here
// skipped, refused and retained files interleave up to the retention limit, which falls
// in the middle of the names.
func TestRegistryLoadIsDeterministic(t *testing.T) {
	root := t.TempDir()
	big := func(name string) []byte { // a valid agent file of 1 MiB
		head := fmt.Sprintf("agent %s {}\n//", name)
		return append(append([]byte(head), bytes.Repeat([]byte("x"), AgentFileLimit-len(head)-1)...), '\n')
	}
	for i := range 100 {
		name := fmt.Sprintf("f%02d", i)
		switch i % 5 {
		case 0:
			writeFile(t, root, "agents/"+name+".symbi", big(name))
		case 1:
			writeFile(t, root, "agents/"+name+".symbi", []byte("agent "+name+" { capabilities = [\"x\"] }"))
		case 2:
			writeFile(t, root, "agents/"+name+".symbi", []byte("agent "+name+" {\n")) // a syntax error
		case 3:
			writeFile(t, root, "agents/"+name+".symbi", []byte("agent "+name+" {} // caf\xe9")) // not UTF-8: skipped
		case 4:
			writeFile(t, root, "agents/"+name+"\x01.symbi", []byte("agent "+name+" {}")) // unprintable: refused
		}
	}
	load := func() (string, string) {
		var logs bytes.Buffer
		h := slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
		r, err := openProject(t, root, false).LoadRegistry(slog.New(h))
		if err != nil {
			t.Fatal(err)
		}
		var entries strings.Builder
		for _, e := range r.Entries() {
			fmt.Fprintf(&entries, "%s %s %v %q\n", e.Name, e.File, e.Invocable, e.Reasons)
		}
		return entries.String(), logs.String()
	}
	entries, logs := load()
	// Fifteen 1 MiB files (f00, f05 … f70) and the small ones fill all but less than
	// 1 MiB of the limit: f75 would pass it. Every name before it is accounted for, in
	// order, and none after it.
	if !strings.Contains(logs, `skipped=25 first_skipped=agents/f75.symbi`) || !strings.Contains(entries, `f75 agents/f75.symbi false ["agent file agents/f75.symbi was not read at startup: refused by rule \"registry retention\"`) || !strings.Contains(entries, "f74") {
		t.Fatalf("retention did not stop at f75:\n%s\n%s", entries, logs)
	}
	if n := strings.Count(entries, `rule \"registry retention\"`); n != 20 {
		t.Errorf("%d files refused by the retention rule, want the 20 printable ones from f75 on:\n%s", n, entries)
	}
	if n := strings.Count(logs, "refusing agent file"); n != 30 {
		t.Errorf("%d refused files logged, want 30 (f03, f04, f08, f09 … f73, f74):\n%s", n, logs)
	}
	for range 10 {
		if e, l := load(); e != entries || l != logs {
			t.Fatalf("a load differs from the first:\n%s\n%s\nfirst:\n%s\n%s", e, l, entries, logs)
		}
	}
}

// TestPrepareRegistry: agents/ is listed at PrepareRegistry and its files read only once
// the load starts — by Load, or by the first call that needs them, which waits; every
// caller then sees LoadRegistry's snapshot. Stop before a load prevents it (an empty
// snapshot); after one, it waits for it.
func TestPrepareRegistry(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		writeFile(t, root, "agents/"+n+".symbi", []byte("agent "+n+" {}"))
	}
	writeFile(t, root, "agents/d.symbi", []byte("agent d {\n")) // refused
	want, _ := loadRegistry(t, root)
	discard := slog.New(slog.DiscardHandler)

	t.Run("lazy", func(t *testing.T) {
		r, err := openProject(t, root, false).PrepareRegistry(discard)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.Ready():
			t.Fatal("the registry was read before Load")
		default:
		}
		writeFile(t, root, "agents/late.symbi", []byte("agent late {}")) // not listed
		t.Cleanup(func() { os.Remove(filepath.Join(root, "agents", "late.symbi")) })
		got := make(chan []Entry, 8)
		for range 8 {
			go func() { got <- r.Entries() }()
		}
		for range 8 {
			if e := <-got; fmt.Sprint(e) != fmt.Sprint(want.Entries()) {
				t.Fatalf("entries %v, want %v", e, want.Entries())
			}
		}
		if _, err := r.Resolve("late"); !errors.Is(err, errcode.UnknownAgent) {
			t.Fatalf("a file added after the listing resolved: %v", err)
		}
		r.Stop() // after the load: waits, changes nothing
		if len(r.Entries()) != 4 {
			t.Fatalf("after Stop: %v", r.Entries())
		}
	})
	t.Run("Load then Wait", func(t *testing.T) {
		r, err := openProject(t, root, false).PrepareRegistry(discard)
		if err != nil {
			t.Fatal(err)
		}
		r.Load()
		r.Load()
		<-r.Ready()
		if fmt.Sprint(r.Entries()) != fmt.Sprint(want.Entries()) {
			t.Fatalf("entries %v, want %v", r.Entries(), want.Entries())
		}
	})
	t.Run("Stop before Load", func(t *testing.T) {
		r, err := openProject(t, root, false).PrepareRegistry(discard)
		if err != nil {
			t.Fatal(err)
		}
		r.Stop()
		r.Load()
		if e := r.Entries(); len(e) != 0 {
			t.Fatalf("entries after Stop: %v", e)
		}
		if _, err := r.Resolve("a"); !errors.Is(err, errcode.UnknownAgent) {
			t.Fatalf("Resolve after Stop: %v", err)
		}
	})
}

// TestRegistryEscapedNameCollision: a non-UTF-8 file name is shown with Go string
// escapes (docs/project.md, The agent registry, step 3: "its name and file are shown
// with Go string escapes (bad\xff ...), so no listing ... receives the raw bytes").
// A printable file whose name is literally that escape (agents/bad\xff.symbi, with a
// backslash) then gets the same name and the same file as the refused one. Expected:
// the listing and Resolve agree — the printable agent is either resolvable (the escaped
// name cannot collide with a real one) or listed as not invocable with the reason
// Resolve gives; and no two entries have the same file (a name with a backslash is
// shown escaped too: "bad\\xff"). docs/mcp-tools.md (list_agents): each file's
// entry says "whether it is invocable"; project.md: "a stem present as both ... both
// entries are listed as not invocable with that reason".
func TestRegistryEscapedNameCollision(t *testing.T) {
	root := t.TempDir()
	src := []byte("agent x { capabilities = [\"answer\"] }\n")
	writeFile(t, root, `agents/bad\xff.symbi`, src) // printable: a backslash, x, f, f
	writeFile(t, root, "agents/bad\xff.symbi", src) // not UTF-8
	r, _ := loadRegistry(t, root)
	entries := r.Entries()
	files := map[string]int{}
	for _, e := range entries {
		files[e.File]++
	}
	for f, n := range files {
		if n > 1 {
			t.Errorf("%d entries have file %q; a listing cannot tell them apart: %+v", n, f, entries)
		}
	}
	a, err := r.Resolve(`bad\xff`)
	for _, e := range entries {
		if e.Name == `bad\xff` && e.Invocable && (err != nil || a == nil) {
			t.Errorf("entry %q (%s) is listed invocable but Resolve(%q) = %v", e.Name, e.File, `bad\xff`, err)
		}
	}
}
