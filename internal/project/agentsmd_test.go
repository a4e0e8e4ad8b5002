package project

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"symbi/internal/errcode"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

var sampleEntries = []Entry{
	{Name: "cron", File: "agents/cron.symbi", Agents: []string{"cron"}, Reason: "3:1: schedule requires an executable route"},
	{Name: "reader", File: "agents/reader.symbi", Agents: []string{"reader"}, Description: "reads | summarises", Capabilities: []string{"read", "summarise"}, Invocable: true},
	{Name: "sneaky", File: "agents/sneaky.symbi", Agents: []string{"sneaky"}, Description: "ends early " + AutoEnd + "\nnew line", Invocable: true},
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		must(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestGenerateAgentsMD(t *testing.T) {
	const pre = "# Project\n\nHand-written guidance.\n\n"
	const post = "\n\n## More\nHand-written tail without newline"
	oldSection := AutoStart + "\nold table\n" + AutoEnd
	tests := []struct {
		name     string
		existing string
		prefix   string // bytes that must start the output
		suffix   string // bytes that must end the output
		golden   string
	}{
		{name: "empty", existing: "", prefix: "# AGENTS.md\n", golden: "agentsmd_new.golden"},
		{name: "no markers", existing: pre, prefix: pre},
		{name: "no markers, no final newline", existing: "text", prefix: "text\n\n"},
		{name: "replace", existing: pre + oldSection + post, prefix: pre + AutoStart, suffix: AutoEnd + post, golden: "agentsmd_replace.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := GenerateAgentsMD([]byte(tt.existing), sampleEntries)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(out), tt.prefix) || !strings.HasSuffix(string(out), tt.suffix) {
				t.Fatalf("surrounding text not kept:\n%s", out)
			}
			if n := strings.Count(string(out), AutoStart) + strings.Count(string(out), AutoEnd); n != 2 {
				t.Fatalf("output holds %d markers, want 2:\n%s", n, out)
			}
			if strings.Contains(string(out), "old table") {
				t.Fatalf("old section kept:\n%s", out)
			}
			again, err := GenerateAgentsMD(out, sampleEntries)
			if err != nil || !bytes.Equal(again, out) {
				t.Fatalf("regeneration not idempotent (err %v):\n%s", err, again)
			}
			g, err := Guidance(out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(g, "| reader | reader | reads \\| summarises | read, summarise | yes |") ||
				!strings.Contains(g, "no: 3:1: schedule requires an executable route") {
				t.Fatalf("guidance lacks the table:\n%s", g)
			}
			if tt.golden != "" {
				golden(t, tt.golden, out)
			}
		})
	}
}

func TestGenerateAgentsMDMalformedMarkers(t *testing.T) {
	for _, md := range []string{
		AutoStart + "\nno end\n",
		"no start\n" + AutoEnd,
		AutoEnd + "\n" + AutoStart,
		AutoStart + AutoStart + AutoEnd,
		AutoStart + AutoEnd + AutoStart + AutoEnd,
	} {
		_, err := GenerateAgentsMD([]byte(md), sampleEntries)
		if !errors.Is(err, ErrMarkers) || errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("GenerateAgentsMD(%q) error %v, want ErrMarkers", md, err)
		}
		if g, err := Guidance([]byte(md)); g != "" || !errors.Is(err, ErrMarkers) {
			t.Errorf("Guidance(%q) = %q, %v; want ErrMarkers", md, g, err)
		}
	}
}

func TestGuidance(t *testing.T) {
	long := strings.Repeat("é", GuidanceLimit+500)
	tests := []struct {
		name, md, want string
	}{
		{"no section", "# Just text\n", ""},
		{"trimmed", "x\n" + AutoStart + "\n  hello\n" + AutoEnd + "\ny", "hello"},
		{"cut to runes", AutoStart + long + AutoEnd, long[:2*GuidanceLimit]},
		{"exactly the limit", AutoStart + long[:2*GuidanceLimit] + AutoEnd, long[:2*GuidanceLimit]},
	}
	for _, tt := range tests {
		got, err := Guidance([]byte(tt.md))
		if got != tt.want || err != nil {
			t.Errorf("%s: Guidance = %q (%d runes), want %d runes", tt.name, got, utf8.RuneCountInString(got), utf8.RuneCountInString(tt.want))
		}
	}
}

func TestAgentsMD(t *testing.T) {
	root := t.TempDir()
	p := openProject(t, root, false)
	_, err := p.AgentsMD()
	if !errors.Is(err, errcode.NotFound) || !strings.Contains(err.Error(), "symbi agents-md generate") {
		t.Fatalf("missing AGENTS.md: error %v, want not_found with the hint", err)
	}
	writeFile(t, root, "AGENTS.md", bytes.Repeat([]byte("a"), AgentsMDLimit))
	if got, err := p.AgentsMD(); err != nil || len(got) != AgentsMDLimit {
		t.Fatalf("AGENTS.md of exactly the limit: %d bytes, %v", len(got), err)
	}
	writeFile(t, root, "AGENTS.md", bytes.Repeat([]byte("a"), AgentsMDLimit+1))
	if _, err := p.AgentsMD(); !errors.Is(err, errcode.LimitExceeded) {
		t.Fatalf("AGENTS.md over the limit: error %v, want limit_exceeded", err)
	}
	must(t, os.Remove(filepath.Join(root, "AGENTS.md")))
	writeFile(t, root, "elsewhere.md", []byte("x"))
	must(t, os.Symlink("elsewhere.md", filepath.Join(root, "AGENTS.md")))
	if _, err := p.AgentsMD(); !errors.Is(err, ErrSymlink) {
		t.Fatalf("AGENTS.md symlink: error %v, want ErrSymlink", err)
	}
}

func TestUpdateAgentsMD(t *testing.T) {
	root := t.TempDir()
	p := openProject(t, root, false)
	created, err := p.UpdateAgentsMD(sampleEntries)
	if err != nil || !created {
		t.Fatalf("first update: created %v, err %v", created, err)
	}
	const tail = "\nmy notes\n"
	md, err := os.ReadFile(filepath.Join(root, "AGENTS.md"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(root, "AGENTS.md"), append(md, tail...), 0o644))
	created, err = p.UpdateAgentsMD(sampleEntries[:1])
	if err != nil || created {
		t.Fatalf("second update: created %v, err %v", created, err)
	}
	md, err = os.ReadFile(filepath.Join(root, "AGENTS.md"))
	must(t, err)
	if !strings.HasSuffix(string(md), AutoEnd+"\n"+tail) || strings.Contains(string(md), "reader") {
		t.Fatalf("update did not replace only the section:\n%s", md)
	}
	if names, _ := filepath.Glob(filepath.Join(root, ".AGENTS.md.tmp-*")); len(names) != 0 {
		t.Fatalf("temporary files left: %v", names)
	}

	// A symlinked AGENTS.md is refused and its target left alone.
	must(t, os.Remove(filepath.Join(root, "AGENTS.md")))
	writeFile(t, root, "target.md", []byte("target\n"))
	must(t, os.Symlink("target.md", filepath.Join(root, "AGENTS.md")))
	if _, err := p.UpdateAgentsMD(sampleEntries); !errors.Is(err, ErrSymlink) {
		t.Fatalf("symlinked AGENTS.md: error %v, want ErrSymlink", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "target.md")); string(b) != "target\n" {
		t.Fatalf("symlink target changed: %q", b)
	}
}
