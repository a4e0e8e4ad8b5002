package errcode_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"symbi/internal/errcode"
)

func TestCodes(t *testing.T) {
	base := errcode.Errorf(errcode.ProtectedPath, "path %q has a symlink component", "agents/x")
	wrapped := fmt.Errorf("reading agents: %w", base)
	tests := []struct {
		name string
		err  error
		code errcode.Code
		text string
	}{
		{"direct", base, errcode.ProtectedPath, `protected_path: path "agents/x" has a symlink component`},
		{"wrapped", wrapped, errcode.ProtectedPath, `protected_path: reading agents: path "agents/x" has a symlink component`},
		{"plain", errors.New("boom"), errcode.Internal, "internal: boom"},
		{"wrap", errcode.Wrap(errcode.Timeout, errors.New("deadline 3s passed")), errcode.Timeout, "timeout: deadline 3s passed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errcode.Of(tt.err); got != tt.code {
				t.Errorf("Of = %q, want %q", got, tt.code)
			}
			if !errors.Is(tt.err, tt.code) && tt.code != errcode.Internal {
				t.Errorf("errors.Is(err, %q) = false", tt.code)
			}
			if errors.Is(tt.err, errcode.NotFound) {
				t.Errorf("errors.Is(err, not_found) = true")
			}
			if got := errcode.Text(tt.err); got != tt.text {
				t.Errorf("Text = %q, want %q", got, tt.text)
			}
		})
	}
	if errcode.Wrap(errcode.Internal, nil) != nil || errcode.Of(nil) != "" {
		t.Error("nil handling")
	}
}

func TestQuote(t *testing.T) {
	short := "agents/a.symbi"
	if errcode.Quote(short) != `"agents/a.symbi"` || errcode.Clip(short) != short {
		t.Errorf("short text changed: %s %s", errcode.Quote(short), errcode.Clip(short))
	}
	long := strings.Repeat("é", 1000) // 2,000 bytes; a rune boundary every 2
	q, c := errcode.Quote("x"+long), errcode.Clip("x"+long)
	if len(q) > errcode.MaxQuoted+64 || !strings.HasSuffix(q, "…(2001 bytes in all)") || !utf8.ValidString(q) {
		t.Errorf("Quote of 2,001 bytes: %q", q)
	}
	if len(c) > errcode.MaxQuoted+64 || !strings.HasSuffix(c, "…(2001 bytes in all)") || !utf8.ValidString(c) || strings.HasPrefix(c, `"`) {
		t.Errorf("Clip of 2,001 bytes: %q", c)
	}
}
