package dsl

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Unquote decodes a string literal's source text (with its quotes): the escapes are \"
// \\ \/ \' \n \r \t \0 \uXXXX and \u{X…}; raw newlines are kept.
func Unquote(lit string) (string, error) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", fmt.Errorf("%q is not a string literal", lit)
	}
	body := lit[1 : len(lit)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return body, nil
	}
	var b strings.Builder
	b.Grow(len(body))
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		n, ok := escapeLen([]byte(body[i:]))
		if !ok {
			return "", fmt.Errorf("invalid escape sequence at byte %d of %q", i, lit)
		}
		switch e := body[i+1]; e {
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case '0':
			b.WriteByte(0)
		case 'u':
			hex := body[i+2 : i+n]
			hex = strings.Trim(hex, "{}")
			b.WriteRune(hexValue([]byte(hex)))
		default:
			b.WriteByte(e)
		}
		i += n
	}
	if !utf8.ValidString(b.String()) {
		return "", fmt.Errorf("string literal %q decodes to invalid UTF-8", lit)
	}
	return b.String(), nil
}
