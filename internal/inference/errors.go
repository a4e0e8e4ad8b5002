package inference

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"symbi/internal/errcode"
)

// ExcerptBytes bounds Error.Excerpt.
const ExcerptBytes = 512

// Kind classifies a failed call. A Kind is an error, so errors.Is(err, KindTimeout)
// reports whether err is an *Error of that kind.
type Kind string

// The kinds of failure.
const (
	KindTimeout         Kind = "timeout"           // the context's deadline passed
	KindCancelled       Kind = "cancelled"         // the context was cancelled
	KindStatus          Kind = "status"            // the provider answered a non-2xx status (redirects included)
	KindMalformed       Kind = "malformed"         // a 2xx body that is not the wire format's response
	KindNoContent       Kind = "no_content"        // a well-formed response without text
	KindTooLarge        Kind = "too_large"         // the response body passed MaxResponseBytes
	KindConnection      Kind = "connection"        // no response, or the body could not be read
	KindRequestTooLarge Kind = "request_too_large" // the request body would pass MaxRequestBytes; nothing was sent
)

// Error returns the kind's name.
func (k Kind) Error() string { return string(k) }

// Error describes a failed call. Functions of this package return it wrapped in an
// *errcode.Error carrying Code(); use errors.As to reach it.
type Error struct {
	Kind       Kind
	Status     int    // HTTP status, 0 when no response arrived
	RetryAfter string // the Retry-After header of a 429, verbatim (at most 64 bytes)
	Excerpt    string // start of the response body (at most ExcerptBytes, valid UTF-8)
	Err        error  // underlying cause, if any

	key string // the API key sent: Error never quotes it
}

// Code is the error code a client sees for this failure.
func (e *Error) Code() errcode.Code {
	switch e.Kind {
	case KindTimeout:
		return errcode.Timeout
	case KindCancelled:
		return errcode.Cancelled
	case KindRequestTooLarge:
		return errcode.LimitExceeded
	}
	return errcode.InferenceFailed
}

// Error describes the failure: its kind, status, cause and, for a non-2xx answer, an excerpt.
func (e *Error) Error() string {
	var b strings.Builder
	switch e.Kind {
	case KindTimeout:
		b.WriteString("provider did not answer before the deadline")
	case KindCancelled:
		b.WriteString("provider call cancelled")
	case KindStatus:
		if e.Status == 429 {
			fmt.Fprintf(&b, "provider rate limited the request (HTTP 429")
			if e.RetryAfter != "" {
				fmt.Fprintf(&b, ", Retry-After: %q", e.RetryAfter)
			}
			b.WriteString(")")
		} else {
			fmt.Fprintf(&b, "provider answered HTTP %d", e.Status)
		}
	case KindMalformed:
		b.WriteString("provider response is malformed")
	case KindNoContent:
		b.WriteString("provider response has no text content")
	case KindTooLarge:
		fmt.Fprintf(&b, "provider response body exceeds %d bytes", MaxResponseBytes)
	case KindConnection:
		b.WriteString("provider connection failed")
	case KindRequestTooLarge:
		b.WriteString("request body too large")
	default:
		fmt.Fprintf(&b, "provider call failed (%s)", e.Kind)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Excerpt != "" {
		fmt.Fprintf(&b, "; response excerpt: %q", e.Excerpt)
	}
	return string(redact([]byte(b.String()), e.key))
}

// redact returns b with every occurrence of the API key key replaced: an endpoint may
// echo the key it was sent, and errors reach the journal, the log and the caller. The key
// is found as sent and as a JSON string or a quoted string may write it: each of its
// characters as itself or escaped — \u00XX with the hex digits in either case (as
// encoding/json, PHP's JSON_HEX options, System.Text.Json or Gson escape what they
// escape), or \/, \" and \\ for /, " and \ — in any mix. It takes time linear in b.
func redact(b []byte, key string) []byte {
	if key == "" {
		return b
	}
	// The escaped forms first, then the key as it is: a key ending in \ echoed as \\
	// is replaced whole, with no stray backslash left.
	return bytes.ReplaceAll(redactEscaped(b, key), []byte(key), []byte("[redacted]"))
}

// redactEscaped returns b with each occurrence of key written with JSON escapes of its
// characters (one at least, or none) replaced. It reads b's characters once, escapes
// read, through a Knuth–Morris–Pratt matcher of key, remembering where in b the last
// len(key) characters began: memory as the key, not as b.
func redactEscaped(b []byte, key string) []byte {
	if bytes.IndexByte(b, '\\') < 0 {
		return b
	}
	// next[k] is the length of the longest proper prefix of key[:k+1] that is also its
	// suffix: where the match goes on after a mismatch.
	next := make([]int, len(key))
	for i, k := 1, 0; i < len(key); i++ {
		for k > 0 && key[i] != key[k] {
			k = next[k-1]
		}
		if key[i] == key[k] {
			k++
		}
		next[i] = k
	}
	began := make([]int, len(key)) // where in b each of the last len(key) characters began
	var out []byte
	last, k, n := 0, 0, 0 // b up to last is in out; k key bytes matched; n characters read
	for i := 0; i < len(b); {
		c, w := unescapeASCII(b[i:])
		began[n%len(key)] = i
		n++
		i += w
		for k > 0 && key[k] != c {
			k = next[k-1]
		}
		if key[k] == c {
			k++
		}
		if k == len(key) {
			start := began[(n-len(key))%len(key)]
			out = append(append(out, b[last:start]...), "[redacted]"...)
			last, k = i, 0
		}
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// unescapeASCII reads the character at the start of b (not empty): a JSON escape of an
// ASCII character (\uXXXX below U+0080, \/, \", \\) as that character, anything else as
// its first byte. It returns the character and the bytes it took.
func unescapeASCII(b []byte) (byte, int) {
	if b[0] != '\\' || len(b) < 2 {
		return b[0], 1
	}
	switch b[1] {
	case '/', '"', '\\':
		return b[1], 2
	case 'u':
		if len(b) >= 6 {
			if v, err := strconv.ParseUint(string(b[2:6]), 16, 16); err == nil && v < 0x80 {
				return byte(v), 6
			}
		}
	}
	return b[0], 1
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's Kind.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.Kind
}

// fail wraps e with its error code.
func fail(e *Error) error { return errcode.Wrap(e.Code(), e) }

func errRequestSize(n int) error {
	return fmt.Errorf("%d bytes, over the limit of %d", n, MaxRequestBytes)
}

// excerpt returns the start of body as valid UTF-8, at most ExcerptBytes long.
func excerpt(body []byte) string { return bounded(string(body), ExcerptBytes) }

// bounded returns at most n bytes of the start of s as valid UTF-8: a rune split by the
// cut is dropped and invalid bytes become U+FFFD.
func bounded(s string, n int) string {
	if len(s) > n {
		s = s[:n]
		for i := 1; i <= utf8.UTFMax && i <= len(s); i++ {
			if utf8.RuneStart(s[len(s)-i]) {
				if !utf8.FullRuneInString(s[len(s)-i:]) {
					s = s[:len(s)-i]
				}
				break
			}
		}
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
