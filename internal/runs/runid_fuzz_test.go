package runs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/runs"
)

// FuzzRunIDArgument: every tool taking a run_id reads it from any caller. Whatever the
// argument, Status and Events never panic and answer as documented (docs/runs.md, and
// TestRunIDArgument's table): a string that is not ASCII letters, digits, '-' and '_', 1
// to MaxRunIDBytes bytes, is invalid_request before anything is looked up; a well-formed
// unknown id is run_not_found (ErrNotFound); the recorded run is found. A refusal is one
// line and quotes at most errcode.MaxQuoted bytes of the argument (each escaped at most as \xNN).
func FuzzRunIDArgument(f *testing.F) {
	p := newTestProject(f, fuzzKeySeed)
	known := "01900000-0000-7000-8000-000000000001"
	p.runWithID(f, "alpha", known, runs.StatusCompleted)
	m := p.open(f)
	for _, s := range []string{known, strings.ToUpper(known), known + "\n", "../" + known, "", ".", "a.b", "a/b", "*",
		"a\x00b", "ü", strings.Repeat("a", runs.MaxRunIDBytes), strings.Repeat("a", runs.MaxRunIDBytes+1), "alpha", "-", "_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		well := len(id) >= 1 && len(id) <= runs.MaxRunIDBytes && strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == ""
		_, serr := m.Status(id)
		_, eerr := m.Events(context.Background(), id, 0, 1, 0)
		for name, err := range map[string]error{"Status": serr, "Events": eerr} {
			switch {
			case !well:
				if errcode.Of(err) != errcode.InvalidRequest {
					t.Fatalf("%s(%q): %v (%s), want invalid_request", name, id, err, errcode.Of(err))
				}
			case id == known:
				if err != nil {
					t.Fatalf("%s of the recorded run: %v", name, err)
				}
			default:
				if errcode.Of(err) != errcode.RunNotFound || !errors.Is(err, runs.ErrNotFound) {
					t.Fatalf("%s(%q): %v (%s), want run_not_found", name, id, err, errcode.Of(err))
				}
			}
			if err != nil && (strings.ContainsAny(err.Error(), "\n\r") || len(err.Error()) > 4*errcode.MaxQuoted+256) {
				t.Fatalf("%s(%q): refusal %q is not one bounded line", name, id, err)
			}
		}
	})
}
