package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad writes arbitrary policy text to a project and checks the invariants
// of Load and Decide: the mode follows from the text, the digest follows the
// documented layout, and no decision allows with an evaluation error.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"", permitAll, forbidKeys, unnamedRule, permitAll + forbidKeys, "permit (",
		"@id(\"x\") permit (principal, action, resource) when { principal.owner == 1 };",
		"@id(\"a\") permit (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);",
		"forbid (principal, action, resource) unless { context.response like \"*\\*\\**\" };",
		"permit (principal, action, resource) when { context.response_bytes / 0 == 1 };",
		"caf\xe9",
	} {
		f.Add(seed, "text")
	}
	dir := f.TempDir()
	must(f, os.Mkdir(filepath.Join(dir, "policies"), 0o755))
	root, err := os.Open(dir)
	must(f, err)
	f.Cleanup(func() { root.Close() })
	f.Fuzz(func(t *testing.T, text, response string) {
		must(t, os.WriteFile(filepath.Join(dir, "policies", "f.cedar"), []byte(text), 0o644))
		s := Load(root)
		if want := digestOf([][2]string{{"policies/f.cedar", text}}); s.Digest != want {
			t.Fatalf("digest %s, want %s", s.Digest, want)
		}
		switch s.Mode {
		case ModeCedar:
			if len(s.PolicyIDs()) == 0 || s.Reason != "" {
				t.Fatalf("cedar mode with %d policies, reason %q", len(s.PolicyIDs()), s.Reason)
			}
		case ModeDenyAll:
			if s.Reason == "" || len(s.PolicyIDs()) != 0 {
				t.Fatalf("deny_all with reason %q and policies %v", s.Reason, s.PolicyIDs())
			}
		default:
			t.Fatalf("mode %q for a configured file", s.Mode)
		}
		d := s.Decide(request("fuzz", response))
		if d.Allow && (s.Mode != ModeCedar || len(d.Errors) > 0 || len(d.Policies) == 0) {
			t.Fatalf("allowed in mode %s: %+v", s.Mode, d)
		}
		if len(d.Errors) > 0 && len(d.Policies) != len(d.Errors) {
			t.Fatalf("errors without deciding ids: %+v", d)
		}
	})
}
