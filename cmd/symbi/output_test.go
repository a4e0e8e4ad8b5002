package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/loopback"
)

func TestTerminalSafe(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain text\tand tab\n", "plain text\tand tab\n"},
		{"red \x1b[31mtext", `red \u001b[31mtext`},
		{"bell\a cr\r del\x7f", `bell\u0007 cr\u000d del\u007f`},
		{"csi \u009b2J", `csi \u009b2J`},
		{"bad \xff byte", "bad \ufffd byte"},
		{"héllo, 世界", "héllo, 世界"},
	} {
		var b bytes.Buffer
		w := &terminalSafe{w: &b}
		// One byte at a time: a rune cut between writes is kept whole.
		for i := range len(tt.in) {
			w.Write([]byte{tt.in[i]})
		}
		w.flush()
		if b.String() != tt.want {
			t.Errorf("%q: got %q, want %q", tt.in, b.String(), tt.want)
		}
	}
	// JSON stays JSON, and decodes to the same text.
	raw, _ := json.Marshal(map[string]string{"s": "a\u009bb\x1bc"})
	var b bytes.Buffer
	(&terminalSafe{w: &b}).Write(raw)
	var back map[string]string
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back["s"] != "a\u009bb\x1bc" {
		t.Errorf("JSON through the filter: %s (%v)", b.Bytes(), err)
	}
}

// TestAuditShowEscapesProviderText: a provider's finish reason with an escape sequence
// reaches the journal as it came (it is evidence) but never the terminal raw.
func TestAuditShowEscapesProviderText(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t, loopback.WithReply(loopback.Reply{Text: "fine", FinishReason: "stop\x1b[2J\x1b]0;pwned\a"}))
	s := startSymbi(t, dir, modelEnv(model), nil)
	if res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hi"}); res.IsError {
		t.Fatal(text(res))
	}
	files := journals(t, dir)
	for _, args := range [][]string{{"audit", "show", files[0]}, {"audit", "show", "--json", files[0]}} {
		code, out, errOut := runCLI(t, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if strings.ContainsAny(out, "\x1b\a") || !strings.Contains(out, `\u001b[2J`) {
			t.Errorf("%v prints the escape sequence raw or not at all:\n%q", args, out)
		}
	}
}

// TestAuditShowForgedLineBreaks: audit show does not verify, so a forged line's type,
// time or field names may hold line breaks; none prints a line of its own.
func TestAuditShowForgedLineBreaks(t *testing.T) {
	const forged = "9    2026-01-01T00:00:00.000Z terminated reason=completed released=true"
	line := `{"payload":{"v":1,"run_id":"r","seq":0,"prev":"` + strings.Repeat("0", 64) + `","time":"t\n` + forged +
		`","agent_id":"a","type":"started\n` + forged + `","data":{"x\n` + forged + `":1}},"signature":"` + strings.Repeat("A", 86) + "==\"}\n"
	path := filepath.Join(t.TempDir(), "forged.jsonl")
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "audit", "show", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "9 ") {
			t.Fatalf("a forged field printed a line of its own:\n%s", out)
		}
	}
	if !strings.Contains(out, `\n9`) {
		t.Fatalf("the forged fields are not shown escaped:\n%s", out)
	}
}
