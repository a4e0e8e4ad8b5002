package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printJSON writes v to the command's stdout as indented JSON (HTML characters not
// escaped). It reports false, after saying why on stderr, if v cannot be encoded.
func printJSON(e *env, cmd string, v any) bool {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(e.stderr, "symbi %s: %v\n", cmd, err)
		return false
	}
	return true
}

// forPeople returns e with stdout and stderr made safe for a terminal, and a flush to call
// when the command is done. Every command but symbi mcp (whose stdout is the protocol)
// prints through it, so text that came from a file, a journal or a provider cannot act on
// the terminal that shows it.
func (e *env) forPeople() (*env, func() error) {
	out, errw := &terminalSafe{w: e.stdout}, &terminalSafe{w: e.stderr}
	safe := *e
	safe.stdout, safe.stderr = out, errw
	return &safe, func() error {
		out.flush()
		errw.flush()
		return out.err
	}
}

// terminalSafe escapes the characters a terminal would act on instead of showing: C0
// controls other than tab and newline, DEL and the C1 controls become \u00XX, and bytes
// that are not UTF-8 become U+FFFD. The escapes are also valid inside JSON strings, and
// JSON encoding already escapes C0 controls, so --json output stays JSON.
type terminalSafe struct {
	w       io.Writer
	pending []byte // the start of a rune cut by the end of the last write
	err     error  // the first write that failed: the output is not whole
}

func (t *terminalSafe) Write(p []byte) (int, error) {
	buf := append(t.pending, p...)
	end := len(buf)
	// Keep an incomplete rune at the end for the next write.
	for i := 1; i < utf8.UTFMax && i <= len(buf); i++ {
		if utf8.RuneStart(buf[len(buf)-i]) {
			if !utf8.FullRune(buf[len(buf)-i:]) {
				end = len(buf) - i
			}
			break
		}
	}
	out := escapeForTerminal(buf[:end])
	t.pending = append([]byte(nil), buf[end:]...)
	if _, err := t.w.Write(out); err != nil {
		if t.err == nil {
			t.err = err
		}
		return 0, err
	}
	return len(p), nil
}

func (t *terminalSafe) flush() {
	if len(t.pending) > 0 {
		if _, err := t.w.Write(escapeForTerminal(t.pending)); err != nil && t.err == nil {
			t.err = err
		}
		t.pending = nil
	}
}

func escapeForTerminal(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1:
			out = utf8.AppendRune(out, utf8.RuneError)
		case r == '\t' || r == '\n':
			out = append(out, byte(r))
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// nameText returns a file name or an id for a report line: quoted when it holds a line
// break or another control character, so that it prints no report line of its own and
// reads as a name.
func nameText(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

// cellText returns s for one cell of a table or one "key: value" row a person reads: its
// line breaks and tabs written as \n, \r and \t, and every other control character as
// \u00XX (as the terminal filter shows it), so that no value — a description, a reason,
// a note — breaks its row or forges another (text/tabwriter also breaks a line at \f and
// a cell at \v).
func cellText(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
