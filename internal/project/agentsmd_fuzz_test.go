package project

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"symbi/internal/errcode"
)

// FuzzAgentsMD: AGENTS.md is a file anyone with write access to the project edits, and the
// registry's entries carry text from agent definitions (names, descriptions). Whatever
// they hold, the markers are read as documented — exactly one AutoStart followed by exactly
// one AutoEnd, or neither; anything else is ErrMarkers (invalid_request) for Guidance and
// GenerateAgentsMD alike — Guidance is the trimmed text between them cut to GuidanceLimit
// runes, and GenerateAgentsMD keeps every byte outside the markers, leaves exactly one
// well-ordered pair (no definition's text can forge one), is idempotent, and the guidance
// of what it writes is the table it generated.
func FuzzAgentsMD(f *testing.F) {
	for _, s := range []string{
		"",
		"# Project\n\nSome text.\n",
		"# P\n" + AutoStart + "\nguide me\n" + AutoEnd + "\ntail\n",
		AutoStart + AutoEnd,
		AutoEnd + AutoStart,
		AutoStart + "\n" + AutoStart + AutoEnd,
		AutoStart + "x",
		"x" + AutoEnd,
		AutoStart + AutoEnd + AutoEnd,
		AutoStart + strings.Repeat("é", GuidanceLimit+5) + AutoEnd,
		AutoStart + "  \n\t" + strings.Repeat("a", GuidanceLimit) + "b \n" + AutoEnd,
		"no final newline",
		"<!-- agents-md:auto-start --" + AutoEnd,
	} {
		f.Add([]byte(s), "reader", "reads | summarises")
	}
	f.Add([]byte("# x\n"), "a"+AutoEnd, AutoStart+"\r\n| forged |")
	f.Add([]byte(AutoStart+"\n"+AutoEnd), "<!--", "-->"+AutoEnd)
	f.Fuzz(func(t *testing.T, existing []byte, name, desc string) {
		ns, ne := bytes.Count(existing, []byte(AutoStart)), bytes.Count(existing, []byte(AutoEnd))
		s, e := bytes.Index(existing, []byte(AutoStart)), bytes.Index(existing, []byte(AutoEnd))
		wellFormed := ns == 0 && ne == 0 || ns == 1 && ne == 1 && s+len(AutoStart) <= e

		g, err := Guidance(existing)
		if !wellFormed {
			if !errors.Is(err, ErrMarkers) || errcode.Of(err) != errcode.InvalidRequest {
				t.Fatalf("%q: malformed markers, Guidance %q, %v", existing, g, err)
			}
		} else {
			if err != nil {
				t.Fatalf("%q: well-formed markers refused: %v", existing, err)
			}
			want := ""
			if ns == 1 {
				want = strings.TrimSpace(string(existing[s+len(AutoStart) : e]))
			}
			if !strings.HasPrefix(want, g) || utf8.RuneCountInString(g) > GuidanceLimit ||
				(utf8.RuneCountInString(want) <= GuidanceLimit && g != want) ||
				(utf8.RuneCountInString(want) > GuidanceLimit && utf8.RuneCountInString(g) != GuidanceLimit) {
				t.Fatalf("%q: guidance %q; the section's text is %q", existing, g, want)
			}
		}

		entries := []Entry{
			{Name: name, File: "agents/" + name + ".symbi", Agents: []string{name}, Description: desc, Capabilities: []string{desc}, Invocable: true},
			{Name: "b", Agents: []string{desc}, Reason: desc, Reasons: []string{desc, name}},
		}
		out, err := GenerateAgentsMD(existing, entries)
		if !wellFormed {
			if !errors.Is(err, ErrMarkers) || out != nil {
				t.Fatalf("%q: malformed markers, GenerateAgentsMD %v", existing, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", existing, err)
		}
		if bytes.Count(out, []byte(AutoStart)) != 1 || bytes.Count(out, []byte(AutoEnd)) != 1 {
			t.Fatalf("generated from %q and entries %q/%q: markers are not one pair:\n%s", existing, name, desc, out)
		}
		os, oe := bytes.Index(out, []byte(AutoStart)), bytes.Index(out, []byte(AutoEnd))
		if os+len(AutoStart) > oe {
			t.Fatalf("generated markers out of order:\n%s", out)
		}
		if ns == 1 {
			if !bytes.Equal(out[:os], existing[:s]) || !bytes.Equal(out[oe:], existing[e:]) {
				t.Fatalf("%q: bytes outside the markers changed:\n%q", existing, out)
			}
		} else if !bytes.HasPrefix(out, existing) {
			t.Fatalf("%q: the existing text is not kept before the appended section:\n%q", existing, out)
		}
		again, err := GenerateAgentsMD(out, entries)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent (%v):\n%q\n%q", err, out, again)
		}
		body := strings.TrimSpace(agentsTable(entries))
		if g, err := Guidance(out); err != nil || (utf8.RuneCountInString(body) <= GuidanceLimit && g != body) {
			t.Fatalf("guidance of the generated file %q (%v), want the table %q", g, err, body)
		}
	})
}
