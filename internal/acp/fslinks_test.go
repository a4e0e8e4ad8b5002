package acp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/journal"
)

// TestFSLinksRefusedBeforePolicy: a file an agent reads or writes through symbi follows
// the project reads' rules — no symbolic link on the way, no hard-linked file — and a
// request that breaks one is refused by its rule before any policy and without a gate, and
// journaled so: a read through a link (even one leading into .symbiont, the signing key) or
// of a hard-linked file never reaches the use_tool policy or a person.
func TestFSLinksRefusedBeforePolicy(t *testing.T) {
	cases := []struct {
		name, read string
	}{
		{"a link into .symbiont (the signing key)", "$CWD/alias/governed/audit-signing.key"},
		{"a link to a directory inside the workspace", "$CWD/s2/a.go"},
		{"a hard-linked file", "$CWD/src/b.go"},
	}
	var steps []any
	for _, c := range cases {
		steps = append(steps, map[string]any{"read": c.read, "expect_error": true})
	}
	steps = append(steps, map[string]any{"message": "done"})
	e := newEnv(t, map[string]any{"steps": steps})
	for rel, content := range map[string]string{".symbiont/governed/audit-signing.key": "protected\n", "src/a.go": "package a\n", "src/b.go": "package b\n"} {
		p := filepath.Join(e.dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".symbiont", filepath.Join(e.dir, "alias")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src", filepath.Join(e.dir, "s2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(e.dir, "src/b.go"), filepath.Join(e.dir, "b-elsewhere.go")); err != nil {
		t.Fatal(err)
	}
	decisions, held := gateAll(e)
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	decided := decisions()
	for _, d := range decided {
		t.Errorf("the use_tool policy decided %q (and a person was asked to approve it): a symlinked or hard-linked path is to be refused by its rule before any policy and without a gate", d.Paths)
	}
	if n := held(); n != 0 {
		t.Errorf("%d of these requests were held at a human gate", n)
	}
	pds := ofType(e.entries(), journal.TypePermissionDecided)
	if len(pds) != len(cases) {
		t.Fatalf("%d permission_decided, want %d", len(pds), len(cases))
	}
	for i, c := range cases {
		pd := data[journal.PermissionDecided](t, pds[i])
		if pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], "refused by rule") {
			t.Errorf("%s: permission_decided %+v, want a deny naming the rule", c.name, pd)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, ".symbiont/governed/audit-signing.key")); string(b) != "protected\n" {
		t.Errorf("the key now holds %q", b)
	}
}
