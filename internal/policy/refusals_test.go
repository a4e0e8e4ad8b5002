package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"symbi/internal/digest"
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

// respondPermit permits every respond; the tests below add what they judge.
const respondPermit = "@id(\"respond\") permit (principal, action == Action::\"respond\", resource);\n"

// TestExactlyMaxDirEntriesLoads pins that a directory of exactly MaxDirEntries entries is within the limit.
func TestExactlyMaxDirEntriesLoads(t *testing.T) {
	dir := makeProject(t, map[string]string{"policies/a.cedar": permitAll}, func(t testing.TB, d string) {
		for i := range MaxDirEntries - 1 {
			must(t, os.WriteFile(filepath.Join(d, "policies", fmt.Sprintf("note%04d.txt", i)), nil, 0o644))
		}
	})
	if s := loadDir(t, dir); s.Mode != ModeCedar {
		t.Fatalf("a directory of exactly %d entries: mode %s (%s), want cedar", MaxDirEntries, s.Mode, s.Reason)
	}
}

// TestNestedSurfaceAndAccessNamesRefused pins that "mcp-server" and "access" are set directories only directly under policies/: a subdirectory so named deeper down stops the set.
func TestNestedSurfaceAndAccessNamesRefused(t *testing.T) {
	for _, sub := range []string{"policies/mcp-server/mcp-server", "policies/mcp-server/access"} {
		s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": permitAll, sub + "/x.cedar": forbidKeys}, nil))
		if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, sub+": is a directory the loader does not read") {
			t.Errorf("%s/x.cedar: mode %s (%s), want deny_all naming %s", sub, s.Mode, s.Reason, sub)
		}
	}
	s := loadAccessDir(t, makeProject(t, map[string]string{
		"policies/access/a.cedar":        `@id("all") permit (principal, action, resource);`,
		"policies/access/access/x.cedar": `@id("ban") forbid (principal, action, resource);`,
	}, nil))
	if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "policies/access/access: is a directory the loader does not read") {
		t.Errorf("policies/access/access/x.cedar: mode %s (%s), want deny_all", s.Mode, s.Reason)
	}
}

// digestEntry is one file's part of the digest input; content nil is a file not read whole (length 2^64-1).
func digestEntry(name string, content []byte) []byte {
	var n [8]byte
	size := uint64(len(content))
	if content == nil {
		size = ^uint64(0)
	}
	binary.BigEndian.PutUint64(n[:], size)
	out := append([]byte(name), 0)
	out = append(out, n[:]...)
	return append(out, content...)
}

// TestUnreadableFileDigest pins that a file that could not be read contributes its name and the length 2^64-1 with no content.
func TestUnreadableFileDigest(t *testing.T) {
	dir := makeProject(t, map[string]string{"policies/a.cedar": permitAll, "elsewhere.txt": forbidKeys}, func(t testing.TB, d string) {
		must(t, os.Symlink("../elsewhere.txt", filepath.Join(d, "policies/b.cedar")))
	})
	s := loadDir(t, dir)
	h := sha256.New()
	h.Write(digestEntry("policies/a.cedar", []byte(permitAll)))
	h.Write(digestEntry("policies/b.cedar", nil))
	if want := hex.EncodeToString(h.Sum(nil)); s.Mode != ModeDenyAll || s.Digest != want {
		t.Fatalf("mode %s, digest %s; want deny_all, digest %s (b.cedar as unreadable)", s.Mode, s.Digest, want)
	}
}

// TestFilesPastTotalLimitDigestedUnread pins that once the total passes MaxTotalBytes the files after are not read and each counts in the digest as unreadable.
func TestFilesPastTotalLimitDigestedUnread(t *testing.T) {
	head := "permit (principal, action == Action::\"respond\", resource);\n// "
	body := head + strings.Repeat("x", MaxFileBytes-len(head)-1) + "\n" // exactly MaxFileBytes
	files := map[string]string{}
	h := sha256.New()
	n := MaxTotalBytes / MaxFileBytes
	for i := range n {
		name := fmt.Sprintf("policies/p%02d.cedar", i)
		files[name] = body
		h.Write(digestEntry(name, []byte(body)))
	}
	// The file that passes the limit is read whole (and digested so); the one after is not read.
	over := fmt.Sprintf("policies/p%02d.cedar", n)
	after := fmt.Sprintf("policies/p%02d.cedar", n+1)
	files[over], files[after] = "//", "//"
	h.Write(digestEntry(over, []byte("//")))
	h.Write(digestEntry(after, nil))
	s := loadDir(t, makeProject(t, files, nil))
	if want := hex.EncodeToString(h.Sum(nil)); s.Mode != ModeDenyAll || s.Digest != want {
		t.Fatalf("mode %s (%.80s), digest %s; want deny_all and digest %s (%s unread)", s.Mode, s.Reason, s.Digest, want, after)
	}
	if len(s.Problems) != 1 || s.Problems[0].File != over {
		t.Fatalf("problems %v: want only the limit, at %s", s.Problems, over)
	}
}

// TestFileOneByteOverLimitRefused pins that a policy file of MaxFileBytes+1 bytes is refused.
func TestFileOneByteOverLimitRefused(t *testing.T) {
	body := permitAll + "// " + strings.Repeat("x", MaxFileBytes-len(permitAll)-3) // exactly MaxFileBytes
	if s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": body}, nil)); s.Mode != ModeCedar {
		t.Fatalf("a file of exactly %d bytes: mode %s (%s)", MaxFileBytes, s.Mode, s.Reason)
	}
	s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": body + "x"}, nil))
	if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "limit exceeded: larger than 1048576 bytes") {
		t.Fatalf("a file of %d bytes: mode %s (%s), want deny_all, larger than", MaxFileBytes+1, s.Mode, s.Reason)
	}
}

// TestUnknownModeDenies pins that a set in a mode Decide and DecideAccess do not know denies.
func TestUnknownModeDenies(t *testing.T) {
	s := &Set{Mode: "bogus"}
	if d := s.Decide(request("a", "hello")); d.Allow || !strings.Contains(d.Reason, "unknown policy mode") {
		t.Errorf("Decide in an unknown mode: %+v", d)
	}
	if d := s.DecideAccess(startAccess("alice", "reviewer")); d.Allow || !strings.Contains(d.Reason, "unknown policy mode") {
		t.Errorf("DecideAccess in an unknown mode: %+v", d)
	}
}

// TestEmptyActionDenied pins that a request naming no action is denied, even under a permit of every action.
func TestEmptyActionDenied(t *testing.T) {
	s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": `permit (principal, action, resource);`}, nil))
	r := request("a", "hello")
	r.Action = ""
	if d := s.Decide(r); d.Allow || !strings.Contains(d.Reason, "names no action") {
		t.Fatalf("a request with no action: %+v", d)
	}
}

// TestEmptySurfaceDenied pins that a respond request naming no surface is denied whatever the policies say.
func TestEmptySurfaceDenied(t *testing.T) {
	for name, s := range map[string]*Set{
		"default":   loadDir(t, t.TempDir()),
		"permitAll": loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": `permit (principal, action, resource);`}, nil)),
	} {
		r := request("helper", "hello")
		r.Surface = ""
		if d := s.Decide(r); d.Allow || !strings.Contains(d.Reason, "no surface or no caller") {
			t.Errorf("%s: a request with no surface: %+v", name, d)
		}
	}
}

// TestRespondContextCaller pins that context.caller and context.caller_auth of respond are the request's caller and its authentication.
func TestRespondContextCaller(t *testing.T) {
	s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": `@id("alice") permit (principal, action == Action::"respond", resource) when { context.caller == "alice" && context.caller_auth == "token" };`}, nil))
	r := request("a", "hello")
	r.Caller, r.CallerAuth = "alice", "token"
	if d := s.Decide(r); !d.Allow {
		t.Errorf("alice over token: %+v", d)
	}
	r.Caller = "bob"
	if d := s.Decide(r); d.Allow {
		t.Errorf("bob: %+v", d)
	}
}

// TestUseToolContext pins each context member of a use_tool request: run_id, title, paths, top_dirs, workspace, raw_input_sha256.
func TestUseToolContext(t *testing.T) {
	raw := digest.SHA256Hex([]byte(`{"cmd":"x"}`))
	conds := map[string]string{
		"run_id":           `context.run_id == "run-7"`,
		"title":            `context.title == "Edit main"`,
		"paths":            `context.paths.contains("src/a.go") && context.paths.contains("README.md")`,
		"top_dirs":         `context.top_dirs == [".", "src"]`,
		"workspace":        `context.workspace == "/work/ws"`,
		"raw_input_sha256": `context.raw_input_sha256 == "` + raw + `"`,
		"caller_auth":      `context.caller_auth == "jwt"`,
	}
	for member, cond := range conds {
		t.Run(member, func(t *testing.T) {
			src := `@id("p") permit (principal, action == Action::"use_tool", resource == Tool::"edit") when { ` + cond + ` };`
			s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": src}, nil))
			if s.Mode != ModeCedar {
				t.Fatalf("mode %s: %s", s.Mode, s.Reason)
			}
			r := toolRequest("edit", "src/a.go", "README.md")
			r.RunID, r.CallerAuth = "run-7", "jwt"
			r.Tool.Title, r.Tool.RawInputSHA256 = "Edit main", raw
			if d := s.Decide(r); !d.Allow {
				t.Fatalf("use_tool with %s: %+v, want allowed by p", cond, d)
			}
		})
	}
}

// TestExactlyMaxDecidingGatedHolds pins that exactly MaxDeciding deciding gated forbids still hold the answer at the gate.
func TestExactlyMaxDecidingGatedHolds(t *testing.T) {
	var b strings.Builder
	b.WriteString(respondPermit)
	for i := range MaxDeciding {
		fmt.Fprintf(&b, "@gate(\"human\") @id(\"g%03d\") forbid (principal, action == Action::\"respond\", resource);\n", i)
	}
	s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": b.String()}, nil))
	d := s.Decide(request("assistant", "text"))
	if d.Allow || len(d.Policies) != MaxDeciding || strings.Count(d.Gate, ",") != MaxDeciding-1 || len(d.Errors) != 0 {
		t.Fatalf("%d gated forbids: allow %v, %d ids, %d gate commas, errors %q, reason %.80q", MaxDeciding, d.Allow, len(d.Policies), strings.Count(d.Gate, ","), d.Errors, d.Reason)
	}
}

// erringSet returns a set of a broad permit and n forbids e000… that each err on every answer.
func erringSet(t *testing.T, n int) *Set {
	t.Helper()
	var b strings.Builder
	b.WriteString(respondPermit)
	for i := range n {
		fmt.Fprintf(&b, "@id(\"e%03d\") forbid (principal, action == Action::\"respond\", resource) when { ip(context.response).isLoopback() };\n", i)
	}
	return loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": b.String()}, nil))
}

// TestEvalErrorsCapAtBoundary pins that maxErrors evaluation errors are listed whole, and one more is cut with a note saying so.
func TestEvalErrorsCapAtBoundary(t *testing.T) {
	if d := erringSet(t, maxErrors).Decide(request("a", "text")); d.Allow || len(d.Errors) != maxErrors || strings.HasPrefix(d.Errors[maxErrors-1], "symbi:") {
		t.Fatalf("%d errors: %q", maxErrors, d.Errors)
	}
	d := erringSet(t, maxErrors+1).Decide(request("a", "text"))
	if d.Allow || len(d.Errors) != maxErrors+1 || d.Errors[maxErrors] != "symbi: and 1 more evaluation errors, not listed" || len(d.Policies) != maxErrors+1 {
		t.Fatalf("%d errors: %d ids, errors %q", maxErrors+1, len(d.Policies), d.Errors)
	}
}

// TestReasonListsAtMostMaxDeciding pins that an evaluation-error reason names at most MaxDeciding policies.
func TestReasonListsAtMostMaxDeciding(t *testing.T) {
	d := erringSet(t, MaxDeciding+44).Decide(request("a", "text"))
	if d.Allow || !strings.Contains(d.Reason, fmt.Sprintf("e%03d", MaxDeciding-1)) || strings.Contains(d.Reason, fmt.Sprintf("e%03d", MaxDeciding)) {
		t.Fatalf("reason %.120q…: want e000 to e%03d named and no more", d.Reason, MaxDeciding-1)
	}
}

// TestEvalErrorKindsAfterEntity pins the kinds told from Cedar's messages that begin with an entity: a missing entity, an entity's missing attribute, and an overflow.
func TestEvalErrorKindsAfterEntity(t *testing.T) {
	for _, tt := range []struct{ cond, kind string }{
		{`Agent::"ghost".file == "x"`, "an entity that does not exist"},
		{`resource.nope == 1`, "an entity that does not exist"},
		{`principal.nope == "x"`, "a missing attribute"},
		{`context.response_bytes * 9223372036854775807 > 0`, "an overflow"},
	} {
		src := respondPermit + "@id(\"erring\") forbid (principal, action == Action::\"respond\", resource) when { " + tt.cond + " };\n"
		s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": src}, nil))
		d := s.Decide(request("assistant", "some text"))
		if d.Allow || len(d.Errors) != 1 || !strings.HasPrefix(d.Errors[0], "erring: "+tt.kind+" (") {
			t.Errorf("%s: errors %q, want erring: %s", tt.cond, d.Errors, tt.kind)
		}
	}
}

// TestTooManyDecidingExplainsInErrors pins that a deny for more than MaxDeciding deciding policies says why in its errors, which the journal records.
func TestTooManyDecidingExplainsInErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString(respondPermit)
	for i := range MaxDeciding + 1 {
		fmt.Fprintf(&b, "@gate(\"human\") @id(\"g%03d\") forbid (principal, action == Action::\"respond\", resource);\n", i)
	}
	d := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": b.String()}, nil)).Decide(request("a", "text"))
	if d.Allow || d.Gate != "" || len(d.Errors) == 0 || !strings.HasPrefix(d.Errors[0], "symbi: denied: 257 policies decided this request, more than the 256") {
		t.Fatalf("errors %q, gate %.20q", d.Errors, d.Gate)
	}
}

// TestAccessPrincipalAuth pins that the access principal's auth attribute is the caller's authentication.
func TestAccessPrincipalAuth(t *testing.T) {
	s := loadAccessDir(t, makeProject(t, map[string]string{"policies/access/a.cedar": `@id("jwt-reads") permit (principal, action == Action::"read_run", resource) when { principal.auth == "jwt" };`}, nil))
	r := runAccess(ActionReadRun, "alice", "bob")
	r.CallerAuth = "jwt"
	if d := s.DecideAccess(r); !d.Allow {
		t.Errorf("a jwt caller: %+v", d)
	}
	r.CallerAuth = "token"
	if d := s.DecideAccess(r); d.Allow {
		t.Errorf("a token caller: %+v", d)
	}
}

// TestScopeIsInChecked pins that both the type and the entity of an "is … in …" scope are checked against the set's model.
func TestScopeIsInChecked(t *testing.T) {
	for _, src := range []string{
		`@id("x") forbid (principal is Agnet in Agent::"a", action == Action::"respond", resource);`,
		`@id("x") forbid (principal is Agent in Agnet::"a", action == Action::"respond", resource);`,
		`@id("x") forbid (principal, action == Action::"use_tool", resource is Tool in Tool::"exectue");`,
	} {
		s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": permitAll, "policies/b.cedar": src}, nil))
		if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "would never apply") {
			t.Errorf("%s: mode %s (%s), want deny_all", src, s.Mode, s.Reason)
		}
	}
}

// TestScopeModelsExact pins that each set's scopes admit only its own entity types: Run is no respond resource, Agent no access principal.
func TestScopeModelsExact(t *testing.T) {
	s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": permitAll + `@id("r") forbid (principal, action == Action::"respond", resource is Run);`}, nil))
	if s.Mode != ModeDenyAll || !strings.Contains(s.Reason, "resource scope names the entity type Run") {
		t.Errorf("respond set, resource is Run: mode %s (%s)", s.Mode, s.Reason)
	}
	a := loadAccessDir(t, makeProject(t, map[string]string{"policies/access/a.cedar": `@id("r") forbid (principal is Agent, action == Action::"read_run", resource);`}, nil))
	if a.Mode != ModeDenyAll || !strings.Contains(a.Reason, "principal scope names the entity type Agent") {
		t.Errorf("access set, principal is Agent: mode %s (%s)", a.Mode, a.Reason)
	}
}

// TestNestingCountsKeywordsAndMinus pins that "has", "is" and a unary "-" each count as an operator of the nesting bound.
func TestNestingCountsKeywordsAndMinus(t *testing.T) {
	// In when { … } the "{" is one level; each repeat adds two operators.
	for _, rep := range []string{"x has a || ", "principal is Agent || "} {
		half := (MaxNesting - 1) / 2
		if _, _, err := checkNesting([]byte(respondHead + strings.Repeat(rep, half) + "true };")); err != nil {
			t.Errorf("%d × %q: %v, want accepted", half, rep, err)
		}
		if _, _, err := checkNesting([]byte(respondHead + strings.Repeat(rep, half+1) + "true };")); err == nil {
			t.Errorf("%d × %q: accepted, want refused", half+1, rep)
		}
	}
	if _, _, err := checkNesting([]byte(respondHead + strings.Repeat("-", MaxNesting) + "1 == 1 };")); err == nil {
		t.Errorf("%d unary \"-\": accepted, want refused", MaxNesting)
	}
}

// TestNestingLineCommentAndEscapes pins that a quote inside a // comment, and an escaped quote inside a string, hide nothing from the nesting count.
func TestNestingLineCommentAndEscapes(t *testing.T) {
	bangs := strings.Repeat("!", MaxNesting+10)
	for name, src := range map[string]string{
		"a quote in a line comment":    respondHead + "// a \"quote\n" + bangs + "true };",
		"an escaped quote in a string": respondHead + `context.response == "\"" && ` + bangs + `true && context.response == "x" };`,
	} {
		if _, _, err := checkNesting([]byte(src)); err == nil {
			t.Errorf("%s: accepted, want refused", name)
		}
		if s := loadDir(t, makeProject(t, map[string]string{"policies/p.cedar": src}, nil)); s.Mode != ModeDenyAll {
			t.Errorf("%s: loaded as %s, want deny_all", name, s.Mode)
		}
	}
}

// TestIndexAfterLiteralCounts pins that a "[" after a literal is an index access, counted like one after a name.
func TestIndexAfterLiteralCounts(t *testing.T) {
	// "{" is one level, each access one more, the last access's bracket one more.
	n := MaxNesting - 1
	if _, _, err := checkNesting([]byte(respondHead + "1" + strings.Repeat(`["a"]`, n) + " == 1 };")); err == nil {
		t.Errorf("1 followed by %d index accesses: accepted, want refused", n)
	}
	if _, _, err := checkNesting([]byte(respondHead + "1" + strings.Repeat(`["a"]`, n-1) + " == 1 };")); err != nil {
		t.Errorf("1 followed by %d index accesses: %v, want accepted", n-1, err)
	}
}

// TestCommaRestartsAfterBracket pins that a "," restarts its level's count even after a bracket closed within the element.
func TestCommaRestartsAfterBracket(t *testing.T) {
	elem := strings.Repeat("!", 4000) + "(true)"
	src := respondHead + "[" + elem + ", " + elem + ", " + elem + "] == [] };"
	if _, _, err := checkNesting([]byte(src)); err != nil {
		t.Fatalf("three set elements of 4,000 operators each: %v, want accepted", err)
	}
}

// TestNestingPositionInCharacters pins that a nesting refusal's column counts characters, not bytes.
func TestNestingPositionInCharacters(t *testing.T) {
	prefix := respondHead + `context.response == "ééé" && ` // "{", ".", "==" and "&&": four levels
	src := prefix + strings.Repeat("!", MaxNesting+10) + "true };"
	line, col, err := checkNesting([]byte(src))
	want := utf8.RuneCountInString(prefix) + (MaxNesting - 4) + 1 // the "!" that makes MaxNesting+1 levels
	if err == nil || line != 1 || col != want {
		t.Fatalf("position %d:%d (%v), want 1:%d", line, col, err, want)
	}
}

// TestBadEscapePositions pins the position reported for escapes cedar-go refuses without one: \x above 7F, and \* outside a like pattern.
func TestBadEscapePositions(t *testing.T) {
	for _, esc := range []string{`\x80`, `\*`} {
		src := permitAll + "\n@id(\"x\")\nforbid (principal, action, resource) when { context.response == \"ab" + esc + "\" };\n"
		s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": src}, nil))
		if s.Mode != ModeDenyAll || len(s.Problems) == 0 || s.Problems[0].Line != 5 || s.Problems[0].Column != 68 {
			t.Errorf("%s: mode %s, problems %v; want deny_all at 5:68", esc, s.Mode, s.Problems)
		}
	}
	like := permitAll + "@id(\"x\") forbid (principal, action, resource) when { context.response like \"a\\*b\" };\n"
	if s := loadDir(t, makeProject(t, map[string]string{"policies/a.cedar": like}, nil)); s.Mode != ModeCedar {
		t.Errorf(`\* in a like pattern: mode %s (%s)`, s.Mode, s.Reason)
	}
}
