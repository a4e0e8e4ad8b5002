package inference

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRedact: redactEscaped finds the key exactly where a reading of the text with its
// escapes of ASCII characters read, matched left to right, finds it (the oracle below keeps
// the whole text read in memory; redactEscaped keeps only the key's length), and redact
// leaves the key in none of its forms.
func FuzzRedact(f *testing.F) {
	f.Add([]byte(`{"error":"key sk-a\/b\u002Bc\"d\\e given"}`), `sk-a/b+c"d\e`)
	f.Add([]byte(`\\\\\u005c\u005C\\`), `\\`)
	f.Add([]byte(`aaab\u0061aab aab`), `aab`)
	f.Add([]byte(`\u00`), `x`)
	f.Add([]byte(`sk-end\\"`), `sk-end\`)
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		if key == "" || len(key) > 64 {
			return
		}
		for i := 0; i < len(key); i++ {
			if key[i] <= ' ' || key[i] >= 0x7f { // the key checks refuse such a key
				return
			}
		}
		want := b
		if bytes.IndexByte(b, '\\') >= 0 { // without an escape there is nothing to read
			want = redactEscapedOracle(b, key)
		}
		if got := redactEscaped(b, key); !bytes.Equal(got, want) {
			t.Fatalf("redactEscaped(%q, %q) = %q, want %q", b, key, got, want)
		}
		if strings.ContainsAny(key, `[redacted]\`) {
			// The mark itself would spell the key; or replacing the key as it is takes a
			// backslash from an escape next to it, and the text left reads differently.
			return
		}
		got := redact(b, key)
		if bytes.Contains(got, []byte(key)) || !bytes.Equal(redactEscapedOracle(got, key), got) {
			t.Fatalf("redact(%q, %q) = %q: the key is left in some form", b, key, got)
		}
	})
}

// redactEscapedOracle is redactEscaped written plainly: the whole text read, escapes and
// all, then searched.
func redactEscapedOracle(b []byte, key string) []byte {
	var dec []byte
	var from []int
	for i := 0; i < len(b); {
		c, n := unescapeASCII(b[i:])
		dec = append(dec, c)
		from = append(from, i)
		i += n
	}
	from = append(from, len(b))
	var out []byte
	last, found := 0, false
	for i := 0; ; {
		j := bytes.Index(dec[i:], []byte(key))
		if j < 0 {
			break
		}
		found = true
		out = append(append(out, b[last:from[i+j]]...), "[redacted]"...)
		last = from[i+j+len(key)]
		i += j + len(key)
	}
	if !found {
		return b
	}
	return append(out, b[last:]...)
}
