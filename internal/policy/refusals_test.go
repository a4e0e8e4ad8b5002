package policy

import (
	"strings"
	"testing"
)

// TestAnyActionFromEveryPolicy: LoadAccess — "a policy whose action scope is
// unconstrained names every action" (Mentions). A bare-action forbid of mallory followed by
// a policy that names only read_run still makes start_run a Cedar decision: mallory may not
// start a run.
func TestAnyActionFromEveryPolicy(t *testing.T) {
	s := loadAccessDir(t, makeProject(t, map[string]string{
		"policies/access/a.cedar": `@id("ban-mallory") forbid (principal == Caller::"mallory", action, resource);`,
		"policies/access/b.cedar": `@id("reads") permit (principal, action == Action::"read_run", resource);`,
	}, nil))
	if s.Mode != ModeCedar {
		t.Fatalf("mode %s: %s", s.Mode, s.Reason)
	}
	for _, a := range AccessActions {
		if !s.Mentions(a) {
			t.Errorf("Mentions(%s) = false: the bare-action forbid in a.cedar mentions every action", a)
		}
	}
	if d := s.DecideAccess(startAccess("mallory", "reviewer")); d.Allow {
		t.Fatalf("mallory's start_run under a bare-action forbid of mallory: %+v, want a deny", d)
	}
}

// TestEmptyRunIDDenied: DecideAccess "fails closed: a request ... without
// its resource is denied". A Run with an empty id names no run: denied before any policy
// or default — here the default would otherwise let alice read "her" run.
func TestEmptyRunIDDenied(t *testing.T) {
	def := loadAccessDir(t, t.TempDir())
	for _, a := range []string{ActionReadRun, ActionCancelRun, ActionResolveRun, ActionApproveRun} {
		r := runAccess(a, "alice", "alice")
		if a == ActionApproveRun {
			r = runAccess(a, "bob", "alice")
		}
		r.Run.ID = ""
		if d := def.DecideAccess(r); d.Allow || !strings.Contains(d.Reason, "names no run") {
			t.Errorf("%s of a run with no id: %+v, want denied: names no run", a, d)
		}
	}
}

// TestTotalBytesBound: policy.go — "MaxTotalBytes = 16 << 20 // bytes over
// all policy files": files totalling exactly MaxTotalBytes load; one byte more is
// "limit exceeded" (deny_all).
func TestTotalBytesBound(t *testing.T) {
	head := "permit (principal, action == Action::\"respond\", resource);\n// "
	body := head + strings.Repeat("x", MaxFileBytes-len(head)-1) + "\n" // exactly MaxFileBytes
	files := map[string]string{}
	for i := range MaxTotalBytes / MaxFileBytes {
		files["policies/p"+string(rune('a'+i))+".cedar"] = body
	}
	if s := loadDir(t, makeProject(t, files, nil)); s.Mode != ModeCedar {
		t.Fatalf("policy files of exactly %d bytes in all: mode %s (%s), want cedar", MaxTotalBytes, s.Mode, s.Reason)
	}
	files["policies/zz.cedar"] = " "
	if s := loadDir(t, makeProject(t, files, nil)); s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "limit exceeded") {
		t.Fatalf("policy files of %d bytes in all, one past the limit: mode %s (%s), want deny_all, limit exceeded", MaxTotalBytes+1, s.Mode, s.Reason)
	}
}

// TestNestingBound: nesting.go — "refuses one whose expressions nest deeper
// than MaxNesting" (open brackets plus operators). In respondHead's when { … } the "{" is
// one level, so MaxNesting-1 "!" make exactly MaxNesting levels (accepted) and MaxNesting
// "!" one more (refused).
func TestNestingBound(t *testing.T) {
	for _, tc := range []struct {
		n       int
		refused bool
	}{{MaxNesting - 1, false}, {MaxNesting, true}} {
		src := respondHead + strings.Repeat("!", tc.n) + "true };"
		if _, _, err := checkNesting([]byte(src)); (err != nil) != tc.refused {
			t.Errorf("%d \"!\" inside when { }: checkNesting %v, want refused %v", tc.n, err, tc.refused)
		}
	}
}

// TestRespondNeedsCaller: Decide fails closed — invalid(): "denied: request
// names no surface or no caller". A respond request without a caller is denied whatever
// the policies say, as one without a surface is.
func TestRespondNeedsCaller(t *testing.T) {
	sets := map[string]*Set{
		"default":   loadDir(t, t.TempDir()),
		"permitAll": loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": `permit (principal, action, resource);`}, nil)),
	}
	for name, s := range sets {
		r := request("helper", "hello")
		r.Caller = ""
		if d := s.Decide(r); d.Allow || !strings.Contains(d.Reason, "no surface or no caller") {
			t.Errorf("%s: a respond request with no caller: %+v, want denied: names no surface or no caller", name, d)
		}
	}
}
