package inference

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
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
// is replaced as sent and in the forms a JSON body or a quoted string writes it: escaped
// as encoding/json escapes it (with and without HTML escaping), with "/" escaped as
// "\/", with each of < > & ' " as \u00XX, with those escapes' hex digits in either case,
// and as strconv.Quote quotes it.
func redact(b []byte, key string) []byte {
	if key == "" {
		return b
	}
	for _, form := range keyForms(key) {
		b = bytes.ReplaceAll(b, []byte(form), []byte("[redacted]"))
	}
	return b
}

// keyForms returns key and each distinct escaped form of it redact replaces, longest
// first (so that no form is cut by a shorter one replaced before it).
func keyForms(key string) []string {
	forms := []string{key}
	add := func(f string) {
		if f != "" && !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	quoted := []string{strconv.Quote(key)}
	if j, err := json.Marshal(key); err == nil {
		quoted = append(quoted, string(j))
	}
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	if enc.Encode(key) == nil {
		quoted = append(quoted, strings.TrimSuffix(plain.String(), "\n"))
	}
	// Every character a JSON encoder may write as \u00XX (PHP's JSON_HEX_* options
	// escape the quotes and the apostrophe too), with the other escapes as encoding/json
	// writes them.
	var hexAll strings.Builder
	for _, r := range key {
		switch r {
		case '<', '>', '&', '\'', '"':
			fmt.Fprintf(&hexAll, `\u%04x`, r)
		case '\\':
			hexAll.WriteString(`\\`)
		default:
			hexAll.WriteRune(r)
		}
	}
	quoted = append(quoted, `"`+hexAll.String()+`"`)
	for _, q := range quoted {
		inner := strings.TrimSuffix(strings.TrimPrefix(q, `"`), `"`)
		for _, f := range []string{inner, strings.ReplaceAll(inner, "/", `\/`)} {
			add(f)
			add(upperHexEscapes(f)) // \u003C as PHP writes it
		}
	}
	slices.SortStableFunc(forms, func(a, b string) int { return len(b) - len(a) })
	return forms
}

// upperHexEscapes returns s with the hex digits of each \uXXXX escape in upper case.
func upperHexEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			copy(b[i+2:i+6], bytes.ToUpper(b[i+2:i+6]))
		}
		i++ // the escaped character is not an escape's start
	}
	return string(b)
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
