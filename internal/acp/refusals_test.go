package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/workspace"
)

// heardPermission is what the agent heard for its one permission request, and the
// request's permission_decided record.
func heardPermission(t *testing.T, e *env) (heard string, pd journal.PermissionDecided) {
	t.Helper()
	perms := e.eventsNamed("permission")
	if len(perms) != 1 {
		t.Fatalf("%d permission events, want 1", len(perms))
	}
	pds := ofType(e.entries(), journal.TypePermissionDecided)
	if len(pds) != 1 {
		t.Fatalf("%d permission_decided, want 1", len(pds))
	}
	return fmt.Sprint(perms[0]["outcome"]), data[journal.PermissionDecided](t, pds[0])
}

// TestOutsideNeverHeld: decide() — "Denied whatever the decider says, and
// never held at a gate: no approval can open a path outside the workspace." With a holder
// configured that approves everything (TestOutsideDeniedWhateverTheDecider has none,
// where a gate kept would go unnoticed), a gated decision on a path outside the
// workspace is denied and never held.
func TestOutsideNeverHeld(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": []string{"$CWD/up/elsewhere.txt"}}},
		map[string]any{"message": "done"},
	}})
	if err := os.Symlink("..", filepath.Join(e.dir, "up")); err != nil {
		t.Fatal(err)
	}
	e.cfg.Decide = func(policy.ToolUse) policy.Decision {
		return policy.Decision{Policies: []string{"g"}, Gate: "human", Reason: "held"}
	}
	var held atomic.Int64
	e.cfg.Hold = func(context.Context, Hold, func(journal.Record) error) HoldResult {
		held.Add(1)
		return HoldResult{Approved: true, Note: "approved"}
	}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	heard, pd := heardPermission(t, e)
	if n := held.Load(); n != 0 || heard != "reject_once" || pd.Decision != "deny" || len(pd.Outside) != 1 {
		t.Fatalf("a gated decision on a path outside the workspace: held %d times, the agent heard %q, permission_decided %+v; want never held, rejected, denied", n, heard, pd)
	}
	e.finishAndVerify(res)
}

// TestRejectedHoldDenied: hold() — "an approval turns d into an allow; a
// rejection or a wait without a decision leaves it a denial, with the reason among its
// errors". A person's rejection that comes with a note (approve_run requires a reason) is
// still a denial.
func TestRejectedHoldDenied(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/a.txt"}}},
		map[string]any{"message": "done"},
	}})
	e.cfg.Decide = func(policy.ToolUse) policy.Decision {
		return policy.Decision{Policies: []string{"review-edits"}, Gate: "review-edits", Reason: "held"}
	}
	e.cfg.Hold = func(context.Context, Hold, func(journal.Record) error) HoldResult {
		return HoldResult{Approved: false, Note: "rejected by bob: not safe"}
	}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	heard, pd := heardPermission(t, e)
	if heard != "reject_once" || pd.Decision != "deny" || !strings.Contains(strings.Join(pd.Errors, "; "), "rejected by bob") {
		t.Fatalf("a rejected hold: the agent heard %q, permission_decided %+v; want rejected, denied, the note among its errors", heard, pd)
	}
	e.finishAndVerify(res)
}

// TestFollowedPathsBound: Predecide — a request "whose locations lead to more
// than journal.MaxPaths paths (where their symbolic links lead included)" is denied before
// any policy. MaxPaths-1 plain locations and one through a link inside the workspace lead
// to MaxPaths+1 paths: denied undecided; one plain location fewer, MaxPaths paths: decided.
func TestFollowedPathsBound(t *testing.T) {
	for _, tc := range []struct {
		plain   int
		decided bool
	}{{journal.MaxPaths - 2, true}, {journal.MaxPaths - 1, false}} {
		t.Run(fmt.Sprint(tc.plain+2, " paths"), func(t *testing.T) {
			locs := []string{"$CWD/s/linked.go"}
			for i := range tc.plain {
				locs = append(locs, fmt.Sprintf("$CWD/src/f%d.go", i))
			}
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": locs}},
				map[string]any{"message": "done"},
			}})
			if err := os.Mkdir(filepath.Join(e.dir, "src"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("src", filepath.Join(e.dir, "s")); err != nil {
				t.Fatal(err)
			}
			var dec countingDecider
			e.cfg.Decide = func(tu policy.ToolUse) policy.Decision {
				d := dec.decide(tu)
				if strings.HasPrefix(tu.Paths[0], "s/") { // the link's own name: not under src/
					d = policy.Decision{Allow: true, Policies: []string{"edit-src"}}
				}
				return d
			}
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			heard, pd := heardPermission(t, e)
			if decided := len(dec.calls()) == 1; decided != tc.decided {
				t.Fatalf("%d locations leading to %d paths: the policy decided %v (the agent heard %q, %+v); want decided %v", len(locs), tc.plain+2, decided, heard, pd, tc.decided)
			}
			if !tc.decided && (pd.Decision != "deny" || heard != "reject_once") {
				t.Fatalf("%d paths, more than a record holds: heard %q, %+v, want denied", tc.plain+2, heard, pd)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestLocationBytesBound: Locate — "paths of more than maxLocationBytes
// together ... are malformed ACP". A permission request whose locations make exactly
// maxLocationBytes together is served; one byte more ends the run, malformed.
func TestLocationBytesBound(t *testing.T) {
	for _, extra := range []int{0, 1} {
		t.Run(fmt.Sprint("+", extra), func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{}})
			// 32 absolute paths under the workspace of 4,096 bytes each (a name of d/…),
			// the last one extra bytes longer or, at the limit, not.
			var locs []string
			total := 0
			for i := range maxLocationBytes / workspace.MaxPathBytes {
				prefix := fmt.Sprintf("%s/s%02d/", e.dir, i)
				n := workspace.MaxPathBytes - len(prefix)
				p := prefix + strings.Repeat("d/", n/2) + strings.Repeat("x", n%2)
				locs = append(locs, p)
				total += len(p)
			}
			if total != maxLocationBytes {
				t.Fatalf("built %d bytes of paths, want %d", total, maxLocationBytes)
			}
			if extra > 0 {
				locs = append(locs, "/") // one more byte
			}
			script := map[string]any{"record": e.record, "steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": locs}},
				map[string]any{"message": "done"},
			}}
			raw, _ := json.Marshal(script)
			if err := os.WriteFile(filepath.Join(e.aux, "script.json"), raw, 0o644); err != nil {
				t.Fatal(err)
			}
			res := e.run(nil)
			if extra == 0 {
				mustOutcome(t, res, OutcomeCompleted)
			} else {
				mustOutcome(t, res, OutcomeError)
				if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), fmt.Sprint(maxLocationBytes)) {
					t.Fatalf("paths of %d bytes together: %v, want malformed ACP naming %d", maxLocationBytes+1, res.Err, maxLocationBytes)
				}
			}
			e.finishAndVerify(res)
		})
	}
}

// TestFollowedPathTooLong: Locate — a path whose symbolic links lead to a
// path longer than workspace.MaxPathBytes is outside (no open could reach it): denied
// whatever the policy says.
func TestFollowedPathTooLong(t *testing.T) {
	deep := strings.Repeat("y/", 1500) // 3,000 bytes
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": []string{"$CWD/l/" + deep + "f"}}},
		map[string]any{"message": "done"},
	}})
	// l leads to 3,000 more bytes of names that do not exist: where the location leads is
	// ~6,000 bytes long.
	if err := os.Symlink(strings.Repeat("x/", 1500), filepath.Join(e.dir, "l")); err != nil {
		t.Fatal(err)
	}
	e.cfg.Decide = func(tu policy.ToolUse) policy.Decision {
		return policy.Decision{Allow: true, Policies: []string{"allow-all"}}
	}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	heard, pd := heardPermission(t, e)
	if heard != "reject_once" || pd.Decision != "deny" || len(pd.Outside) != 1 {
		t.Fatalf("a location whose link leads past %d bytes: heard %q, %+v; want denied, outside", workspace.MaxPathBytes, heard, pd)
	}
	e.finishAndVerify(res)
}

// liveRunner is the runner of e's config as a session in progress would have it:
// its session (fake-session-1) open, requests served; the decider counts its calls.
func liveRunner(t *testing.T, e *env) (*runner, *atomic.Int64) {
	t.Helper()
	var decided atomic.Int64
	e.cfg.Decide = func(tu policy.ToolUse) policy.Decision {
		decided.Add(1)
		return policy.Decision{Allow: true, Policies: []string{"allow-all"}}
	}
	r := newRunner(e.cfg)
	r.sid = "fake-session-1"
	r.open.Store(true)
	return r, &decided
}

// TestForeignSessionPermission: RequestPermission answers a request naming
// a session this run did not open with "unknown session" — no decision, nothing
// journaled.
func TestForeignSessionPermission(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{}})
	r, decided := liveRunner(t, e)
	kind := sdk.ToolKindEdit
	_, err := (&client{r}).RequestPermission(context.Background(), sdk.RequestPermissionRequest{
		SessionId: "another-session",
		ToolCall:  sdk.ToolCallUpdate{ToolCallId: "p1", Kind: &kind, Locations: []sdk.ToolCallLocation{{Path: filepath.Join(e.dir, "a.txt")}}},
		Options:   []sdk.PermissionOption{{OptionId: "allow", Kind: sdk.PermissionOptionKindAllowOnce, Name: "allow"}},
	})
	if err == nil || !strings.Contains(fmt.Sprint(err), "unknown session") || decided.Load() != 0 {
		t.Fatalf("a permission request for another session: err %v, %d decisions; want unknown session, none decided", err, decided.Load())
	}
	if pds := ofType(e.entries(), journal.TypePermissionDecided); len(pds) != 0 {
		t.Fatalf("a permission request for another session journaled as this run's: %s", pds[0].Data)
	}
}

// TestForeignSessionFS: an fs request naming a session this run did not
// open is answered "unknown session": no decision, nothing journaled, no file written.
func TestForeignSessionFS(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{}})
	r, decided := liveRunner(t, e)
	path := filepath.Join(e.dir, "planted.txt")
	_, err := (&client{r}).WriteTextFile(context.Background(), sdk.WriteTextFileRequest{SessionId: "another-session", Path: path, Content: "planted"})
	if err == nil || !strings.Contains(fmt.Sprint(err), "unknown session") || decided.Load() != 0 {
		t.Fatalf("a write for another session: err %v, %d decisions; want unknown session, none decided", err, decided.Load())
	}
	if _, err := os.Lstat(path); err == nil {
		t.Fatal("a write for another session wrote the file")
	}
	if es := e.entries(); len(es) != 0 {
		t.Fatalf("a write for another session journaled %d records as this run's: %s", len(es), es[0].Type)
	}
}

// checkLinesOf runs lines through the line check of a bare runner, as FuzzLines does,
// and returns how it ended: nil, or the abort's error.
func checkLinesOf(lines []string) error {
	r := &runner{aborted: make(chan struct{})}
	pr, pw := io.Pipe()
	go r.checkLines(strings.NewReader(strings.Join(lines, "\n")+"\n"), pw)
	io.Copy(io.Discard, pr)
	return r.abortedErr()
}

// TestUnansweredBound: checkLines — past maxUnanswered requests "read and not
// yet answered" the agent floods requests: malformed ACP. Exactly maxUnanswered
// unanswered requests pass; one more is refused.
func TestUnansweredBound(t *testing.T) {
	req := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"fs/read_text_file","params":{}}`, i+1))
		}
		return out
	}
	if err := checkLinesOf(req(maxUnanswered)); err != nil {
		t.Fatalf("%d unanswered requests: %v, want them passed", maxUnanswered, err)
	}
	err := checkLinesOf(req(maxUnanswered + 1))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(fmt.Sprint(err), "floods requests") {
		t.Fatalf("%d unanswered requests: %v, want malformed ACP: the agent floods requests", maxUnanswered+1, err)
	}
}

// TestToolCallsBound: announce — "maxToolCalls bounds the tool calls a
// session announces ...: past it the agent floods tool calls, which is malformed ACP".
// Exactly maxToolCalls distinct tool calls pass; one more is refused.
func TestToolCallsBound(t *testing.T) {
	calls := func(n int) []string {
		out := make([]string, n)
		for i := range n {
			out[i] = fmt.Sprintf(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"tool_call","toolCallId":"c%d","title":"t","kind":"read","status":"pending"}}}`, i)
		}
		return out
	}
	if err := checkLinesOf(calls(maxToolCalls)); err != nil {
		t.Fatalf("%d tool calls announced: %v, want them passed", maxToolCalls, err)
	}
	err := checkLinesOf(calls(maxToolCalls + 1))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("more than %d tool calls", maxToolCalls)) {
		t.Fatalf("%d tool calls announced: %v, want malformed ACP naming the bound", maxToolCalls+1, err)
	}
}
