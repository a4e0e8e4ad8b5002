package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/auth"
)

func TestTokenAdd(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	code, out, errOut := runCLI(t, "", "token", "add", "--file", file, "ci-bot")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	token := strings.TrimSpace(out)
	if !strings.HasPrefix(token, auth.TokenPrefix) || len(token) != len(auth.TokenPrefix)+43 || out != token+"\n" {
		t.Fatalf("stdout %q: want the token alone", out)
	}
	if !strings.Contains(errOut, "shown only this once") {
		t.Fatalf("stderr %q: want the note", errOut)
	}
	data, _ := os.ReadFile(file)
	if strings.Contains(string(data), token) || !strings.HasPrefix(string(data), "ci-bot sha256:") {
		t.Fatalf("file:\n%s", data)
	}
	tokens, err := auth.LoadTokens(file)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := tokens.Verify(context.Background(), token, nil)
	if c, ok := auth.FromTokenInfo(ti); err != nil || !ok || c.ID != "ci-bot" {
		t.Fatalf("Verify: %+v, %v", c, err)
	}
	if code, out, _ := runCLI(t, "", "token", "add", "--file", file, "other"); code != 0 || strings.TrimSpace(out) == token {
		t.Fatalf("a second token: exit %d, %q", code, out)
	}

	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"name taken", []string{"--file", file, "ci-bot"}, 1, `invalid_request: ` + file + `: caller id "ci-bot" already has a token`},
		{"reserved name", []string{"--file", file, "stdio"}, 1, "reserved"},
		{"invalid name", []string{"--file", file, "a b"}, 1, "is not a caller id"},
		{"no file", []string{"ci-bot"}, 2, "--file is required"},
		{"no name", []string{"--file", file}, 2, "want one NAME argument"},
		{"two names", []string{"--file", file, "a", "b"}, 2, "want one NAME argument"},
		{"unknown flag", []string{"--nope", "--file", file, "a"}, 2, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, "", append([]string{"token", "add"}, tt.args...)...)
			if code != tt.code || out != "" || !strings.Contains(errOut, tt.msg) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, errOut, tt.code, tt.msg)
			}
		})
	}
	os.Chmod(file, 0o666)
	if code, _, errOut := runCLI(t, "", "token", "add", "--file", file, "third"); code != 1 || !strings.Contains(errOut, "lets group or others write it") {
		t.Fatalf("a writable file: exit %d, %q", code, errOut)
	}
	if code, out, _ := runCLI(t, "", "token", "add", "--help"); code != 0 || !strings.HasPrefix(out, "usage: symbi token add") {
		t.Fatalf("--help: exit %d, stdout %q", code, out)
	}
}
