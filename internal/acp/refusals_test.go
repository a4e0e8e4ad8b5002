package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/proctest"
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

// announceLine decodes the session/update msg as the line check does and announces it.
func announceLine(t *testing.T, r *runner, msg map[string]any) error {
	t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	why, _, m := notMessage(b)
	if why != "" {
		t.Fatalf("line %s is %s", b, why)
	}
	n := notification(m)
	if n == nil {
		t.Fatalf("line %s is no session/update the SDK reads", b)
	}
	return r.announce(n)
}

func toolCallLine(session, id string, kind string, paths []string) map[string]any {
	locs := []any{}
	for _, p := range paths {
		locs = append(locs, map[string]any{"path": p})
	}
	u := map[string]any{"sessionUpdate": "tool_call", "toolCallId": id, "title": "t", "locations": locs}
	if kind != "" {
		u["kind"] = kind
	}
	return map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{"sessionId": session, "update": u}}
}

// TestTerminalRequestAsNotification: a terminal request sent without an id is malformed
// ACP, like a permission or fs request: it cannot be answered.
func TestTerminalRequestAsNotification(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "method": "terminal/create",
			"params": map[string]any{"sessionId": "fake-session-1", "command": "sh"}}},
		map[string]any{"message": "done"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), "sent as a notification") {
		t.Fatalf("err %v; want malformed ACP naming a request sent as a notification", res.Err)
	}
	e.finishAndVerify(res)
}

// TestSDKUnreadableLineEndsRun: a line the ACP SDK reports it cannot parse (which it
// drops) ends the session as malformed ACP.
func TestSDKUnreadableLineEndsRun(t *testing.T) {
	r := newRunner(Config{})
	h := sdkLog{r: r, next: slog.DiscardHandler}
	if err := h.Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelError, "failed to parse incoming message", 0)); err != nil {
		t.Fatal(err)
	}
	if err := r.abortedErr(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("session error %v after an unparsable line; want ErrMalformed", err)
	}
}

// TestUpdateOfNoKindPassedOver: a session/update the SDK drops because it matches no
// kind it knows (a newer protocol's, or no object at all) is passed over; one it drops for
// another reason ends the session as malformed ACP.
func TestUpdateOfNoKindPassedOver(t *testing.T) {
	rec := func(why string) slog.Record {
		x := slog.NewRecord(time.Now(), slog.LevelError, "failed to handle notification", 0)
		x.AddAttrs(slog.String("method", sdk.ClientMethodSessionUpdate), slog.String("err", why))
		return x
	}
	r := newRunner(Config{})
	h := sdkLog{r: r, next: slog.DiscardHandler}
	if err := h.Handle(context.Background(), rec(`Invalid params: {"error":"no matching variant for union"}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.abortedErr(); err != nil {
		t.Fatalf("an update of no known kind ended the session: %v", err)
	}
	if got := r.notesHanded.Load(); got != 1 {
		t.Fatalf("%d updates counted as handed over, want 1", got)
	}
	if err := h.Handle(context.Background(), rec(`Invalid params: {"error":"invalid variant payload"}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.abortedErr(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an update the SDK could not decode: session error %v, want ErrMalformed", err)
	}

	// The same end to end: an update that is no object matches no kind.
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"message": "hi "},
		map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "method": "session/update",
			"params": map[string]any{"sessionId": "fake-session-1", "update": 5}}},
		map[string]any{"message": "done"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if res.Text != "hi done" {
		t.Fatalf("answer %q", res.Text)
	}
	e.finishAndVerify(res)
}

// TestAnnouncedLocationsExactBound: one tool call may be announced with paths of
// maxLocationBytes together, not one byte more.
func TestAnnouncedLocationsExactBound(t *testing.T) {
	// n paths of exactly size bytes, distinct.
	paths := func(prefix string, n, size int) []string {
		var out []string
		for i := range n {
			head := fmt.Sprintf("/w/%s%03d/", prefix, i)
			var b strings.Builder
			b.WriteString(head)
			for b.Len() < size {
				b.WriteString(strings.Repeat("a", min(200, size-b.Len())))
				if b.Len() < size {
					b.WriteString("/")
				}
			}
			out = append(out, b.String()[:size])
		}
		return out
	}
	full := paths("x", maxLocationBytes/locationPathBytes, locationPathBytes)
	r := newRunner(Config{})
	if err := announceLine(t, r, toolCallLine("s1", "c1", "read", full)); err != nil {
		t.Fatalf("a tool call announced with %d bytes of paths: %v; want it accepted", maxLocationBytes, err)
	}
	if err := announceLine(t, r, toolCallLine("s1", "c2", "read", append(full, "/"))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a tool call announced with %d bytes of paths: %v; want malformed ACP", maxLocationBytes+1, err)
	}
}

// locationPathBytes is the length of each path TestAnnouncedLocationsExactBound announces.
const locationPathBytes = 4096

// TestAnnouncedCallsKeyedBySession: a tool call another session announced is not
// this session's: a permission request naming its id inherits nothing from it.
func TestAnnouncedCallsKeyedBySession(t *testing.T) {
	r := newRunner(Config{})
	r.sid = "s1"
	if err := announceLine(t, r, toolCallLine("another-session", "c1", "execute", []string{"/etc/shadow"})); err != nil {
		t.Fatal(err)
	}
	read := sdk.ToolKindRead
	kind, _, locs, changed := r.toolCall(sdk.ToolCallUpdate{ToolCallId: "c1", Kind: &read})
	if changed != "" || kind == nil || *kind != sdk.ToolKindRead || len(locs) != 0 {
		t.Fatalf("request for c1 took another session's announcement: kind %v, locations %v, changed %q", kind, locs, changed)
	}
	if err := announceLine(t, r, toolCallLine("s1", "c1", "edit", []string{"/w/a"})); err != nil {
		t.Fatal(err)
	}
	kind, _, locs, _ = r.toolCall(sdk.ToolCallUpdate{ToolCallId: "c1"})
	if kind == nil || *kind != sdk.ToolKindEdit || len(locs) != 1 || locs[0].Path != "/w/a" {
		t.Fatalf("request for c1 did not take this session's announcement: kind %v, locations %v", kind, locs)
	}
}

// TestReannouncedPathCountedOnce: a path a tool call is announced with again is one
// path: it neither counts again toward the bound nor names the call's path twice.
func TestReannouncedPathCountedOnce(t *testing.T) {
	long := "/w/" + strings.Repeat("d/", 2040) // 4,083 bytes
	r := newRunner(Config{})
	r.sid = "s1"
	for i := range 2 * maxLocationBytes / len(long) {
		if err := announceLine(t, r, toolCallLine("s1", "c1", "read", []string{long})); err != nil {
			t.Fatalf("announcement %d of the same path: %v", i+1, err)
		}
	}
	_, _, locs, _ := r.toolCall(sdk.ToolCallUpdate{ToolCallId: "c1"})
	if len(locs) != 1 {
		t.Fatalf("the call names %d locations, want the one path once", len(locs))
	}
}

// TestPermissionBadPathDenied: a permission request naming a path that is not
// well-formed (a name over 255 bytes) is denied before any policy, whatever the policies
// permit of the rest.
func TestPermissionBadPathDenied(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "read", "title": "Read",
			"locations": []string{"$CWD/" + strings.Repeat("n", 256)}}, "expect": "reject"},
		map[string]any{"message": "done"},
	}})
	decide, seen := recording(allowKinds("read"))
	e.cfg.Decide = decide
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if n := len(seen()); n != 0 {
		t.Fatalf("the policies were asked %d times about a malformed path", n)
	}
	pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
	if pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], "well-formed path") {
		t.Fatalf("permission_decided %+v; want a deny by rule \"well-formed path\"", pd)
	}
	e.finishAndVerify(res)
}

// TestLongOptionIDNotAnswered: an allow-once option whose id is longer than a record's
// title bound is never the one answered: the request is answered cancelled, journaled a
// deny.
func TestLongOptionIDNotAnswered(t *testing.T) {
	long := strings.Repeat("a", journal.MaxTitleBytes+1)
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "read", "title": "Read",
			"options": []any{map[string]any{"id": long, "kind": "allow_once", "name": "Yes"},
				map[string]any{"id": "no", "kind": "reject_once", "name": "No"}}}, "expect": "cancelled"},
		map[string]any{"message": "not reached"},
	}})
	e.cfg.Decide = allowKinds("read")
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCancelled)
	pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
	if pd.Decision != "deny" || pd.OptionID != "" {
		t.Fatalf("permission_decided %+v; want a deny with no option answered", pd)
	}
	e.finishAndVerify(res)
}

// TestHoldJournalFailureEndsRun: a wait at a gate that fails for its journal or ledger
// (ErrJournal) ends the session with that error: the run is audit_failed, not carried on.
func TestHoldJournalFailureEndsRun(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit"}},
		map[string]any{"message": "done"},
	}})
	e.cfg.Decide = func(policy.ToolUse) policy.Decision {
		return policy.Decision{Policies: []string{"gate-all"}, Gate: "human", Reason: "held"}
	}
	ledgerDown := errors.New("the ledger refused the approval entry")
	e.cfg.Hold = func(context.Context, Hold, func(journal.Record) error) HoldResult {
		return HoldResult{Err: fmt.Errorf("%w: %w", ErrJournal, ledgerDown)}
	}
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !errors.Is(res.Err, ErrJournal) || !errors.Is(res.Err, ledgerDown) {
		t.Fatalf("err %v; want the hold's journal failure", res.Err)
	}
}

// TestRequestBeforeSessionOpenNotDecided: a permission request the agent sends before
// its session is open (here, before its answer to session/new) is never decided nor
// journaled.
func TestRequestBeforeSessionOpenNotDecided(t *testing.T) {
	req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 900, "method": "session/request_permission", "params": map[string]any{
		"sessionId": "", "toolCall": map[string]any{"toolCallId": "p1", "kind": "read", "title": "early"},
		"options": []any{map[string]any{"optionId": "allow", "kind": "allow_once", "name": "Allow"},
			map[string]any{"optionId": "reject", "kind": "reject_once", "name": "Reject"}}}})
	if err != nil {
		t.Fatal(err)
	}
	e := rawEnv(t, map[string]rawStep{"session/new": {Before: []json.RawMessage{req}}})
	decide, seen := recording(allowKinds("read"))
	e.cfg.Decide = decide
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if n := len(seen()); n != 0 {
		t.Fatalf("a request made before the session opened was decided (%d decisions)", n)
	}
	if x := ofType(e.entries(), journal.TypePermissionDecided); len(x) != 0 {
		t.Fatalf("permission_decided journaled for a request made before the session opened: %s", x[0].Data)
	}
	e.finishAndVerify(res)
}

// TestFSPathEndingInDotDotNamesDirectory: an fs path whose last name is ".." names a
// directory and is refused by that rule, before any policy.
func TestFSPathEndingInDotDotNamesDirectory(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"read": "$CWD/sub/..", "expect_error": true},
		map[string]any{"write": map[string]any{"path": "$CWD/sub/..", "content": "x"}, "expect_error": true},
		map[string]any{"message": "done"},
	}})
	if err := os.Mkdir(filepath.Join(e.dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	e.cfg.Decide = allowKinds("read", "edit")
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	pds := ofType(e.entries(), journal.TypePermissionDecided)
	if len(pds) != 2 {
		t.Fatalf("%d permission_decided, want 2", len(pds))
	}
	for _, ent := range pds {
		pd := data[journal.PermissionDecided](t, ent)
		if pd.Decision != "deny" || len(pd.Errors) != 1 || !strings.Contains(pd.Errors[0], "naming a directory") {
			t.Fatalf("permission_decided %+v; want a deny naming the directory rule", pd)
		}
	}
	e.finishAndVerify(res)
}

// opsJournal records the order of appends (by type) and syncs; fail, when set, is the
// error an append of that type gets; onAppend runs after each append.
type opsJournal struct {
	*journal.Writer
	mu       sync.Mutex
	ops      []string
	fail     map[string]error
	onAppend func(journal.Record)
	onSync   func()
}

func (o *opsJournal) Append(r journal.Record) error {
	o.mu.Lock()
	err := o.fail[r.Type()]
	o.ops = append(o.ops, "append "+r.Type())
	o.mu.Unlock()
	if err != nil {
		return err
	}
	if err := o.Writer.Append(r); err != nil {
		return err
	}
	if o.onAppend != nil {
		o.onAppend(r)
	}
	return nil
}

func (o *opsJournal) Sync() error {
	if o.onSync != nil {
		o.onSync()
	}
	o.mu.Lock()
	o.ops = append(o.ops, "sync")
	o.mu.Unlock()
	return o.Writer.Sync()
}

func (o *opsJournal) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.ops) == 0 {
		return ""
	}
	return o.ops[len(o.ops)-1]
}

// openRunner is a runner of e's configuration whose session "s1" is open — session_started
// journaled — without an agent process: its client's handlers are called directly.
func openRunner(t *testing.T, e *env, oj *opsJournal) (*runner, *client) {
	t.Helper()
	if err := e.w.Append(journal.SessionStarted{Executor: "fake", Command: []string{"/bin/true"}, Workspace: e.dir, ProtocolVersion: 1,
		SessionID: "s1", PromptSHA256: sha(""), PromptBytes: 0}); err != nil {
		t.Fatal(err)
	}
	oj.Writer = e.w
	e.cfg.Journal = oj
	r := newRunner(e.cfg)
	r.sid = "s1"
	r.open.Store(true)
	return r, &client{r}
}

// writeWS writes content to the file name in e's workspace.
func writeWS(t *testing.T, e *env, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFSReadDurableBeforeContent: an fs_read is journaled and synced before the agent
// gets the content.
func TestFSReadDurableBeforeContent(t *testing.T) {
	e := newEnv(t, map[string]any{})
	writeWS(t, e, "a.txt", "hello\n")
	oj := &opsJournal{}
	_, c := openRunner(t, e, oj)
	resp, err := c.ReadTextFile(context.Background(), sdk.ReadTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "a.txt")})
	if err != nil || resp.Content != "hello\n" {
		t.Fatalf("read: %q, %v", resp.Content, err)
	}
	if got := oj.last(); got != "sync" {
		t.Fatalf("the content was answered with the journal's last operation %q (ops %v); want the fs_read synced", got, oj.ops)
	}
}

// TestFSReadUnrecordedNotAnswered: a read whose fs_read cannot be journaled answers
// the agent an error, never the content, and ends the session (ErrJournal).
func TestFSReadUnrecordedNotAnswered(t *testing.T) {
	e := newEnv(t, map[string]any{})
	writeWS(t, e, "a.txt", "SECRET-CONTENT\n")
	oj := &opsJournal{fail: map[string]error{journal.TypeFSRead: errDisk}}
	r, c := openRunner(t, e, oj)
	resp, err := c.ReadTextFile(context.Background(), sdk.ReadTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "a.txt")})
	if err == nil || resp.Content != "" {
		t.Fatalf("read answered %q, %v; want an error and no content", resp.Content, err)
	}
	if !errors.Is(r.abortedErr(), ErrJournal) {
		t.Fatalf("session error %v; want ErrJournal", r.abortedErr())
	}
}

// TestFSWriteDurableBeforeChange: an fs_write is journaled and synced before the file
// changes.
func TestFSWriteDurableBeforeChange(t *testing.T) {
	e := newEnv(t, map[string]any{})
	writeWS(t, e, "a.txt", "old\n")
	var changedAtSync []string
	oj := &opsJournal{}
	oj.onSync = func() {
		oj.mu.Lock()
		defer oj.mu.Unlock()
		if len(oj.ops) > 0 && oj.ops[len(oj.ops)-1] == "append "+journal.TypeFSWrite {
			if b, _ := os.ReadFile(filepath.Join(e.dir, "a.txt")); string(b) != "old\n" {
				changedAtSync = append(changedAtSync, string(b))
			}
		}
	}
	_, c := openRunner(t, e, oj)
	if _, err := c.WriteTextFile(context.Background(), sdk.WriteTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "a.txt"), Content: "new\n"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "a.txt")); string(b) != "new\n" {
		t.Fatalf("a.txt is %q after the write", b)
	}
	oj.mu.Lock()
	defer oj.mu.Unlock()
	i := slices.Index(oj.ops, "append "+journal.TypeFSWrite)
	if i < 0 || i+1 >= len(oj.ops) || oj.ops[i+1] != "sync" || len(changedAtSync) != 0 {
		t.Fatalf("ops %v, file changed before the sync: %v; want fs_write synced before the file changes", oj.ops, changedAtSync)
	}
}

// TestFSNoAccessAfterCancel: a file request allowed and journaled while the session is
// being cancelled does not touch the file: the agent gets an error, no fs_read is made.
func TestFSNoAccessAfterCancel(t *testing.T) {
	e := newEnv(t, map[string]any{})
	writeWS(t, e, "a.txt", "hello\n")
	oj := &opsJournal{}
	r, c := openRunner(t, e, oj)
	oj.onAppend = func(rec journal.Record) {
		if _, ok := rec.(journal.PermissionDecided); ok {
			r.cancelOnce.Do(func() { close(r.cancelled) })
		}
	}
	resp, err := c.ReadTextFile(context.Background(), sdk.ReadTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "a.txt")})
	if err == nil || resp.Content != "" {
		t.Fatalf("read answered %q, %v after the cancel; want an error", resp.Content, err)
	}
	oj.mu.Lock()
	defer oj.mu.Unlock()
	if slices.Contains(oj.ops, "append "+journal.TypeFSRead) {
		t.Fatalf("ops %v: the file was read after the cancel", oj.ops)
	}
}

// TestFSSizeBoundExact: reads and writes take files of MaxFileBytes, not one byte
// more.
func TestFSSizeBoundExact(t *testing.T) {
	e := newEnv(t, map[string]any{})
	e.cfg.MaxFileBytes = 8
	writeWS(t, e, "eight", "12345678")
	writeWS(t, e, "nine", "123456789")
	_, c := openRunner(t, e, &opsJournal{})
	ctx := context.Background()
	if _, err := c.ReadTextFile(ctx, sdk.ReadTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "eight")}); err != nil {
		t.Errorf("read of 8 bytes: %v", err)
	}
	if resp, err := c.ReadTextFile(ctx, sdk.ReadTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "nine")}); err == nil {
		t.Errorf("read of 9 bytes answered %q, want a refusal", resp.Content)
	}
	if _, err := c.WriteTextFile(ctx, sdk.WriteTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "w8"), Content: "12345678"}); err != nil {
		t.Errorf("write of 8 bytes: %v", err)
	}
	if _, err := c.WriteTextFile(ctx, sdk.WriteTextFileRequest{SessionId: "s1", Path: filepath.Join(e.dir, "w9"), Content: "123456789"}); err == nil {
		t.Errorf("write of 9 bytes succeeded, want a refusal")
	}
	if _, err := os.Lstat(filepath.Join(e.dir, "w9")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("w9 exists (%v)", err)
	}
}

// TestTerminalCountsInFlight: a terminal request counts among the requests in flight:
// past maxRequests it ends the session as a flood, like any other.
func TestTerminalCountsInFlight(t *testing.T) {
	r := newRunner(Config{})
	c := &client{r}
	for range maxRequests {
		if _, err := r.serve(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.CreateTerminal(context.Background(), sdk.CreateTerminalRequest{SessionId: "s1", Command: "sh"})
	var re *sdk.RequestError
	if !errors.As(err, &re) || re.Code == -32601 {
		t.Fatalf("terminal/create past %d requests in flight answered %v; want the flood's error", maxRequests, err)
	}
	if !errors.Is(r.abortedErr(), ErrMalformed) {
		t.Fatalf("session error %v; want ErrMalformed (a flood)", r.abortedErr())
	}
}

// TestFSOutsideReason: an fs request outside the workspace is answered with the reason
// "the path is outside the workspace", whatever reason the decider gave.
func TestFSOutsideReason(t *testing.T) {
	e := newEnv(t, map[string]any{})
	_, c := openRunner(t, e, &opsJournal{})
	_, err := c.ReadTextFile(context.Background(), sdk.ReadTextFileRequest{SessionId: "s1", Path: "/etc/hostname"})
	var re *sdk.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("err %v, want a JSON-RPC error", err)
	}
	if d, _ := re.Data.(map[string]any); d == nil || d["reason"] != "the path is outside the workspace" {
		t.Fatalf("error data %v; want the outside reason", re.Data)
	}
}

// TestFSBeforeSessionOpenNotDecided: an fs request before the session is open is
// answered with an error, never decided nor journaled.
func TestFSBeforeSessionOpenNotDecided(t *testing.T) {
	e := newEnv(t, map[string]any{})
	writeWS(t, e, "a.txt", "hello\n")
	decide, seen := recording(allowKinds("read"))
	e.cfg.Decide = decide
	oj := &opsJournal{Writer: e.w}
	e.cfg.Journal = oj
	r := newRunner(e.cfg) // sid "", not open
	resp, err := (&client{r}).ReadTextFile(context.Background(), sdk.ReadTextFileRequest{SessionId: "", Path: filepath.Join(e.dir, "a.txt")})
	if err == nil || resp.Content != "" || len(seen()) != 0 {
		t.Fatalf("a read before the session opened: %q, %v, %d decisions; want an error, undecided", resp.Content, err, len(seen()))
	}
	if len(oj.ops) != 0 {
		t.Fatalf("journal operations %v before the session opened", oj.ops)
	}
}

// TestAnswerLimitExact: the answer may be MaxTextBytes long, not one byte more.
func TestAnswerLimitExact(t *testing.T) {
	for _, tt := range []struct {
		text string
		ok   bool
	}{{"1234567890", true}, {"12345678901", false}} {
		e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": tt.text}}})
		e.cfg.MaxTextBytes = 10
		res := e.run(nil)
		if tt.ok {
			mustOutcome(t, res, OutcomeCompleted)
			if res.Text != tt.text {
				t.Fatalf("answer %q", res.Text)
			}
		} else {
			mustOutcome(t, res, OutcomeError)
		}
		e.finishAndVerify(res)
	}
}

// TestMessageRecordsBounded: an agent_message record holds at most MaxChunkBytes of
// text, however long the chunk.
func TestMessageRecordsBounded(t *testing.T) {
	text := strings.Repeat("x", journal.MaxChunkBytes+1)
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": text}}})
	e.cfg.MaxTextBytes = 1 << 20
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	var total int64
	for _, x := range ofType(e.entries(), journal.TypeAgentMessage) {
		m := data[journal.AgentMessage](t, x)
		if m.Bytes > journal.MaxChunkBytes || int64(len(m.Text)) != m.Bytes {
			t.Fatalf("agent_message of %d bytes (text %d), over the bound of %d", m.Bytes, len(m.Text), journal.MaxChunkBytes)
		}
		total += m.Bytes
	}
	if total != int64(len(text)) {
		t.Fatalf("%d bytes journaled, want %d", total, len(text))
	}
	e.finishAndVerify(res)
}

// TestAppendedRecordsSyncedWhileRunning: records appended without a sync of their own
// (a tool_call) are made durable while the agent goes on working, without waiting for the
// session's end. Here the agent waits for a file that only such a sync creates.
func TestAppendedRecordsSyncedWhileRunning(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"tool_call": map[string]any{"id": "c1", "kind": "read", "title": "Read"}},
		map[string]any{"wait_file": "$CWD/synced"},
		map[string]any{"message": "done"},
	}})
	oj := &opsJournal{Writer: e.w}
	oj.onSync = func() {
		oj.mu.Lock()
		defer oj.mu.Unlock()
		if slices.Contains(oj.ops, "append "+journal.TypeToolCall) {
			_ = os.WriteFile(filepath.Join(e.dir, "synced"), nil, 0o600)
		}
	}
	e.cfg.Journal = oj
	// A hang guard, not an expectation: the records are synced within about a second.
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	res := e.run(ctx)
	mustOutcome(t, res, OutcomeCompleted)
	e.finishAndVerify(res)
}

// TestChunkWithoutNoteIsMalformed: an agent_message_chunk handed over that the line
// check did not read (no turn noted for it) ends the session as malformed ACP instead of
// joining the answer.
func TestChunkWithoutNoteIsMalformed(t *testing.T) {
	r := newRunner(Config{})
	r.sid = "s1"
	_ = (&client{r}).SessionUpdate(context.Background(), sdk.SessionNotification{SessionId: "s1",
		Update: sdk.UpdateAgentMessageText("unread")})
	if !errors.Is(r.abortedErr(), ErrMalformed) {
		t.Fatalf("session error %v; want ErrMalformed", r.abortedErr())
	}
	if n := len(r.updates); n != 0 {
		t.Fatalf("%d updates queued for the journal", n)
	}
}

// TestProtocolVersionChecked: an agent that answers initialize with another protocol
// version fails the session before it opens.
func TestProtocolVersionChecked(t *testing.T) {
	e := rawEnv(t, map[string]rawStep{"initialize": {Result: json.RawMessage(`{"protocolVersion":2,"agentCapabilities":{},"authMethods":[]}`)}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !strings.Contains(res.Err.Error(), "protocol version 2") {
		t.Fatalf("err %v; want the protocol version named", res.Err)
	}
	if x := ofType(e.entries(), journal.TypeSessionStarted); len(x) != 0 {
		t.Fatalf("session_started journaled: %s", x[0].Data)
	}
	e.finishAndVerify(res)
}

// TestPinRefusedFailsRun: an agent that offers the pinned mode but refuses to set it
// fails the session before the prompt.
func TestPinRefusedFailsRun(t *testing.T) {
	e := rawEnv(t, map[string]rawStep{"session/new": {Result: json.RawMessage(
		`{"sessionId":"s1","modes":{"currentModeId":"default","availableModes":[{"id":"default","name":"Default"},{"id":"read-only","name":"Read only"}]}}`)}})
	e.cfg.Executor.PinMode = "read-only"
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !strings.Contains(res.Err.Error(), "session/set_mode") {
		t.Fatalf("err %v; want session/set_mode named", res.Err)
	}
	if x := ofType(e.entries(), journal.TypeSessionStarted); len(x) != 0 {
		t.Fatalf("session_started journaled: %s", x[0].Data)
	}
	e.finishAndVerify(res)
}

// TestSDKQueueOverflowEndsHandOverWait: once the SDK says it dropped a notification
// (its queue overflowed), the wait for the notifications to be handed over ends at once:
// the dropped ones will never come.
func TestSDKQueueOverflowEndsHandOverWait(t *testing.T) {
	r := newRunner(Config{})
	r.notesRead.Store(5)
	h := sdkLog{r: r, next: slog.DiscardHandler}
	if err := h.Handle(context.Background(), slog.NewRecord(time.Now(), slog.LevelError, "failed to queue notification", 0)); err != nil {
		t.Fatal(err)
	}
	if !r.handedOver(0, nil) {
		t.Fatal("the hand-over wait goes on for notifications the SDK said it dropped")
	}
}

// TestCancelIgnoredEndsBySIGTERM: an agent that ignores session/cancel gets SIGTERM
// after the grace period, before any SIGKILL.
func TestCancelIgnoredEndsBySIGTERM(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"hang": true, "ignore_cancel": true}}})
	// Configuration: the agent, which exits on SIGTERM, has this long to do so.
	e.cfg.Grace = 2 * time.Second
	r := newRunner(e.cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result, 1)
	go func() { done <- r.run(ctx) }()
	e.waitEvent("prompt")
	cancel()
	res := <-done
	mustOutcome(t, res, OutcomeCancelled)
	ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the agent ended %v (err %v); want by SIGTERM", r.cmd.ProcessState, res.Err)
	}
	e.finishAndVerify(res)
}

// TestFollowedPathLengthExact: where a location's links lead may be MaxPathBytes long,
// not one byte more (it is outside then).
func TestFollowedPathLengthExact(t *testing.T) {
	e := newEnv(t, map[string]any{})
	target := strings.Repeat("x/", 1000) // 2,000 bytes of names that do not exist
	if err := os.Symlink(target, filepath.Join(e.dir, "l")); err != nil {
		t.Fatal(err)
	}
	fits := "l/" + strings.Repeat("y/", 1047) + "ff" // leads to 4,096 bytes
	over := "l/" + strings.Repeat("y/", 1048) + "f"  // leads to 4,097 bytes
	l, err := Locate(e.ws, []string{fits})
	if err != nil || len(l.Paths) != 2 || len(l.Paths[1]) != 4096 || len(l.Outside) != 0 {
		t.Fatalf("a location leading to 4,096 bytes: %+v, %v; want it inside, decided on both paths", l.Outside, err)
	}
	l, err = Locate(e.ws, []string{over})
	if err != nil || len(l.Paths) != 0 || len(l.Outside) != 1 {
		t.Fatalf("a location leading to 4,097 bytes: paths %d, outside %d, %v; want it outside", len(l.Paths), len(l.Outside), err)
	}
}

// TestLocateCountsWhereLinksLead: the bound on a request's paths counts where their
// links lead too: locations small together, leading to long paths, are malformed ACP.
func TestLocateCountsWhereLinksLead(t *testing.T) {
	e := newEnv(t, map[string]any{})
	if err := os.Symlink(strings.Repeat("x/", 1900), filepath.Join(e.dir, "l")); err != nil {
		t.Fatal(err)
	}
	loc := "l/f" // 3 bytes that lead to 3,801
	var locs []string
	for range 40 {
		locs = append(locs, loc)
	}
	if _, err := Locate(e.ws, locs); !errors.Is(err, ErrMalformed) {
		t.Fatalf("40 locations leading to %d bytes together: %v; want malformed ACP", 40*3801, err)
	}
	if _, err := Locate(e.ws, locs[:30]); err != nil {
		t.Fatalf("30 such locations (%d bytes together): %v", 30*3804, err)
	}
}

// TestSessionFinishedSynced: session_finished is synced before Run returns, for a
// session that ran and for one that could not be opened.
func TestSessionFinishedSynced(t *testing.T) {
	for _, tt := range []struct {
		name   string
		script map[string]any
		broken bool
	}{
		{"completed", map[string]any{"steps": []any{map[string]any{"message": "done"}}}, false},
		{"never opened", map[string]any{"steps": []any{}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.script)
			if tt.broken {
				e.cfg.Executor.Command = []string{filepath.Join(e.aux, "no-such-agent")}
			}
			oj := &opsJournal{Writer: e.w}
			e.cfg.Journal = oj
			res := e.run(nil)
			oj.mu.Lock()
			ops := slices.Clone(oj.ops)
			oj.mu.Unlock()
			if len(ops) < 2 || ops[len(ops)-2] != "append "+journal.TypeSessionFinished || ops[len(ops)-1] != "sync" {
				t.Fatalf("journal operations %v (outcome %s); want session_finished appended, then synced, last", ops, res.Outcome)
			}
		})
	}
}

// TestNoRecordAfterClose: once the session is closed, an in-session record is refused
// with ErrSessionOver, nothing appended.
func TestNoRecordAfterClose(t *testing.T) {
	e := newEnv(t, map[string]any{})
	oj := &opsJournal{}
	r, _ := openRunner(t, e, oj)
	r.close(0, nil)
	n := len(oj.ops)
	err := r.record(journal.ApprovalRequested{Gate: "human", RequestID: "perm-1", Kind: "edit", Title: "late"}, true)
	if !errors.Is(err, ErrSessionOver) {
		t.Fatalf("a record after the close: %v; want ErrSessionOver", err)
	}
	if len(oj.ops) != n {
		t.Fatalf("journal operations after the close: %v", oj.ops[n:])
	}
}

// TestLocateNamesFirstBadPath: a request's error for paths that are not well-formed
// names the first of them.
func TestLocateNamesFirstBadPath(t *testing.T) {
	e := newEnv(t, map[string]any{})
	first, second := "a\x00b", strings.Repeat("n", 300)
	l, err := Locate(e.ws, []string{first, second})
	if err != nil || len(l.Bad) != 2 || l.BadErr == nil {
		t.Fatalf("Locate: %+v, %v", l, err)
	}
	if !strings.Contains(l.BadErr.Error(), `"a\x00b"`) || strings.Contains(l.BadErr.Error(), "300 bytes") {
		t.Fatalf("BadErr %v; want the first bad path's error", l.BadErr)
	}
}

// TestRunEndSparesOtherRuns: a run's end kills its own processes that left its group,
// never those of another run still going.
func TestRunEndSparesOtherRuns(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	a := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"spawn_background": []string{"setsid", "sleep", "1000"}, "pid_file": pidFile},
		map[string]any{"wait_file": "$CWD/release"},
		map[string]any{"message": "a done"},
	}})
	b := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": "b done"}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aDone := make(chan Result, 1)
	go func() { aDone <- Run(ctx, a.cfg) }()
	// A's child has left A's group: an event, waited for.
	var pid int
	for deadline := time.Now().Add(guard); ; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("run A's child never left its group")
		}
		p, err := proctest.ReadPID(pidFile)
		starts := a.eventsNamed("start")
		if err != nil || len(starts) == 0 {
			continue
		}
		if pgid, err := syscall.Getpgid(p); err == nil && pgid != int(starts[0]["pgid"].(float64)) {
			pid = p
			break
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // the child this test started
	resB := b.run(nil)
	mustOutcome(t, resB, OutcomeCompleted)
	if !proctest.Alive(pid) || killPending(pid) {
		t.Fatalf("run B's end killed run A's child %d", pid)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "release"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	resA := <-aDone
	mustOutcome(t, resA, OutcomeCompleted)
	if proctest.Alive(pid) && !killPending(pid) {
		t.Fatalf("run A's child %d outlives run A", pid)
	}
}

// errAgentVar, when set in the environment, makes this test binary an ACP agent that
// answers session/prompt with the JSON-RPC error the variable holds (errAgent).
const errAgentVar = "SYMBI_ACP_TEST_ERR_AGENT"

func init() {
	if spec := os.Getenv(errAgentVar); spec != "" {
		os.Exit(errAgent(spec))
	}
}

func errAgent(errJSON string) int {
	answers := map[string]string{
		"initialize":  `{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}`,
		"session/new": `{"sessionId":"s1"}`,
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method == "" || len(m.ID) == 0 {
			continue
		}
		if res, ok := answers[m.Method]; ok {
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", m.ID, res)
		} else {
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"error":%s}`+"\n", m.ID, errJSON)
		}
	}
	return 0
}

// TestAgentErrorWordsStayOut: the message and data of a JSON-RPC error the agent
// answers stay out of the run's error — whatever its code, and even when its message is
// the standard one of its code — unless they are the standard message and the SDK's own
// data.
func TestAgentErrorWordsStayOut(t *testing.T) {
	const secret = "the secret is 4821"
	for _, tt := range []struct {
		name, err string
	}{
		{"own message, standard code", `{"code":-32603,"message":"` + secret + `"}`},
		{"standard message, data a string", `{"code":-32603,"message":"Internal error","data":"` + secret + `"}`},
		{"standard message, data an error member", `{"code":-32603,"message":"Internal error","data":{"error":"` + secret + `"}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := selfAgentEnv(t, errAgentVar+"="+tt.err)
			res := e.run(nil)
			mustOutcome(t, res, OutcomeError)
			if strings.Contains(res.Err.Error(), "4821") {
				t.Fatalf("the run's error carries the agent's words: %v", res.Err)
			}
			if !strings.Contains(res.Err.Error(), inLog) {
				t.Fatalf("err %v; want it to say where the words are", res.Err)
			}
			fin := data[journal.SessionFinished](t, ofType(e.entries(), journal.TypeSessionFinished)[0])
			if strings.Contains(fin.Error, "4821") {
				t.Fatalf("session_finished's error carries the agent's words: %s", fin.Error)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestSessionStartedDurableBeforePrompt: session_started is synced before the prompt
// is sent: at that sync the agent has not yet received it.
func TestSessionStartedDurableBeforePrompt(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{map[string]any{"message": "done"}}})
	oj := &opsJournal{Writer: e.w}
	var checked, early bool
	oj.onSync = func() {
		oj.mu.Lock()
		defer oj.mu.Unlock()
		if !checked && slices.Contains(oj.ops, "append "+journal.TypeSessionStarted) {
			checked = true
			early = len(e.eventsNamed("prompt")) > 0
		}
	}
	e.cfg.Journal = oj
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if !checked || early {
		t.Fatalf("session_started synced: %v; the agent had the prompt at its first sync: %v", checked, early)
	}
	e.finishAndVerify(res)
}

// TestPermissionInheritsTitle: a permission request that leaves out its tool call's
// title is decided on the title the call was announced with.
func TestPermissionInheritsTitle(t *testing.T) {
	r := newRunner(Config{})
	r.sid = "s1"
	if err := announceLine(t, r, toolCallLine("s1", "c1", "edit", nil)); err != nil { // title "t"
		t.Fatal(err)
	}
	_, title, _, _ := r.toolCall(sdk.ToolCallUpdate{ToolCallId: "c1"})
	if title == nil || *title != "t" {
		t.Fatalf("title %v; want the announced one", title)
	}
	own := "own"
	if _, title, _, _ = r.toolCall(sdk.ToolCallUpdate{ToolCallId: "c1", Title: &own}); title == nil || *title != own {
		t.Fatalf("title %v; want the request's own", title)
	}
}
