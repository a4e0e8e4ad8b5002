// Package errcode defines the stable error codes that symbi reports to MCP clients and
// people at a terminal, and an error type that carries one.
//
// Every tool error text has the form "<code>: <message>". Packages below the tool layer
// return errors that wrap an *Error (through fmt.Errorf("...: %w", err) or Wrap); the
// tool layer reads the code back with Of. A Code is itself an error value, so callers
// can test for a class of failure with errors.Is(err, errcode.ProtectedPath).
package errcode

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Code is a stable, documented error code (see docs/errors.md).
type Code string

// The codes. Extend only with reason, and document every addition in docs/errors.md.
const (
	InvalidRequest    Code = "invalid_request"
	UnknownAgent      Code = "unknown_agent"
	RefusedDefinition Code = "refused_definition"
	ProtectedPath     Code = "protected_path"
	NotFound          Code = "not_found"
	LimitExceeded     Code = "limit_exceeded"
	NoProvider        Code = "no_provider"
	AuditUnavailable  Code = "audit_unavailable"
	InferenceFailed   Code = "inference_failed"
	PolicyDenied      Code = "policy_denied"
	Cancelled         Code = "cancelled"
	Timeout           Code = "timeout"
	Busy              Code = "busy"
	RunNotFound       Code = "run_not_found"
	InvalidTransition Code = "invalid_transition"
	AccessDenied      Code = "access_denied"
	ApprovalRequired  Code = "approval_required"
	RateLimited       Code = "rate_limited"
	Internal          Code = "internal"
)

// Error implements error so that errors.Is(err, code) reports whether err carries code.
func (c Code) Error() string { return string(c) }

// Error is an error with a code. Its message does not repeat the code.
type Error struct {
	Code Code
	Err  error
}

// Error returns the message, without the code.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// Errorf returns an error with code and a formatted message; %w verbs wrap as usual.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// Wrap gives err a code. A nil err stays nil.
func Wrap(code Code, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Of returns the code of the outermost *Error in err's chain, or Internal when there is
// none. Of(nil) is "".
func Of(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Text formats err as a tool error text: "<code>: <message>".
func Text(err error) string {
	return fmt.Sprintf("%s: %s", Of(err), err.Error())
}

// MaxQuoted bounds the bytes of a caller's text quoted in a message (Quote).
const MaxQuoted = 256

// Quote is s quoted for an error message (as %q), cut after MaxQuoted bytes at a rune
// boundary with its length said: a message never echoes a caller's megabyte.
func Quote(s string) string {
	head, cut := prefix(s)
	if !cut {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s…(%d bytes in all)", strconv.Quote(head), len(s))
}

// Clip is Quote without the quotes, for text already safe to show (a JSON path).
func Clip(s string) string { return ClipTo(s, MaxQuoted) }

// ClipTo is Clip at max bytes: s, or its first max bytes (cut at a rune boundary) and
// its length.
func ClipTo(s string, max int) string {
	head, cut := prefixTo(s, max)
	if !cut {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes in all)", head, len(s))
}

// prefix returns at most MaxQuoted bytes of s, cut at a rune boundary, and whether it cut.
func prefix(s string) (string, bool) { return prefixTo(s, MaxQuoted) }

func prefixTo(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}
