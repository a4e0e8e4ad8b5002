package policy

import (
	"strings"
	"testing"
)

// TestGates: a deny whose deciding policies are all @gate("human") forbids carries the
// gate; an ungated forbid beside it, an evaluation error or no permit does not; a
// malformed gate makes the set deny_all.
func TestGates(t *testing.T) {
	const permit = `@id("respond") permit (principal, action == Action::"respond", resource);` + "\n"
	const gated = `@gate("human") @id("customer-names") forbid (principal, action == Action::"respond", resource) when { context.response like "*ACME*" };` + "\n"
	const secrets = `@id("no-secrets") forbid (principal, action == Action::"respond", resource) when { context.response like "*SECRET*" };` + "\n"
	const gated2 = `@gate("human") @id("long") forbid (principal, action == Action::"respond", resource) when { context.response_bytes > 20 };` + "\n"
	s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": permit + gated + secrets + gated2}, nil))
	if s.Mode != ModeCedar {
		t.Fatalf("mode %s: %s", s.Mode, s.Reason)
	}
	tests := []struct {
		text  string
		allow bool
		gate  string
	}{
		{"fine", true, ""},
		{"about ACME", false, "customer-names"},
		{"about ACME, a long answer", false, "customer-names,long"},
		{"ACME SECRET", false, ""}, // an ungated forbid matched too: a plain denial
		{"SECRET", false, ""},
	}
	for _, tt := range tests {
		d := s.Decide(request("assistant", tt.text))
		if d.Allow != tt.allow || d.Gate != tt.gate {
			t.Errorf("%q: %+v, want allow=%v gate=%q", tt.text, d, tt.allow, tt.gate)
		}
		if tt.gate != "" && !strings.Contains(d.Reason, "held for human approval") {
			t.Errorf("%q: reason %q", tt.text, d.Reason)
		}
	}

	// No permit at all: the deny is not a gate's, even if a gated forbid also matched.
	noPermit := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": gated}, nil))
	if d := noPermit.Decide(request("a", "ACME")); d.Allow || d.Gate != "customer-names" {
		// Cedar reports the matching forbid as the deciding policy: the gate holds it.
		t.Errorf("gated forbid without a permit: %+v", d)
	}
	if d := noPermit.Decide(request("a", "other")); d.Allow || d.Gate != "" {
		t.Errorf("no permit matched: %+v", d)
	}
	// An evaluation error in a gated forbid denies, ungated.
	broken := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": permit + `@gate("human") @id("broken") forbid (principal, action == Action::"respond", resource) when { context.nope == 1 };`}, nil))
	if d := broken.Decide(request("a", "x")); d.Allow || d.Gate != "" || len(d.Errors) == 0 {
		t.Errorf("evaluation error in a gated forbid: %+v", d)
	}

	for name, src := range map[string]string{
		"unknown gate":    `@gate("robot") @id("g") forbid (principal, action, resource);`,
		"gate on permit":  `@gate("human") @id("g") permit (principal, action, resource);`,
		"empty gate":      `@gate("") @id("g") forbid (principal, action, resource);`,
		"gate upper case": `@gate("Human") @id("g") forbid (principal, action, resource);`,
	} {
		s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": permit + src}, nil))
		if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "@gate") {
			t.Errorf("%s: mode %s, reason %q", name, s.Mode, s.Reason)
		}
	}
}
