package acp

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"symbi/internal/journal"
	"symbi/internal/policy"
)

// rawToolCall is a session/update tool_call line whose sessionUpdate value is written
// with the JSON escapes esc (e.g. `tool\u005fcall`): the same message to every JSON
// reader, the ACP SDK included.
func rawToolCall(esc, kind, location string) json.RawMessage {
	locations := ""
	if location != "" {
		locations = `,"locations":[{"path":"` + location + `"}]`
	}
	return json.RawMessage(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"fake-session-1",` +
		`"update":{"sessionUpdate":"` + esc + `","toolCallId":"t1","title":"Edit file","kind":"` + kind + `","status":"pending"` +
		locations + `}}}`)
}

// TestEscapedToolCallIsAnnounced: a permission request is decided on the tool call it
// names as announced — its kind and every path it was announced with — however the
// announcement is spelt, read as the SDK reads it: a sessionUpdate value written with
// JSON escapes ("tool\u005fcall") is a tool_call, and a member named like sessionUpdate
// but for case is not read. (The request was decided as Tool::"other" with no path, and
// allowed, for an edit of /etc/passwd.)
func TestEscapedToolCallIsAnnounced(t *testing.T) {
	// The last case spells the value plainly but adds a member named like sessionUpdate
	// but for case, which the SDK's discriminator (a map lookup) does not read.
	for _, esc := range []string{`tool_call`, `tool\u005fcall`, `\u0074ool_call`, `tool_call","SessionUpdate":"plan`} {
		t.Run(esc, func(t *testing.T) {
			if got := sdkReads(t, rawToolCall(esc, "edit", "/etc/passwd")); got == nil {
				t.Fatalf("the ACP SDK does not read %s as a tool_call", esc)
			}
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"raw": rawToolCall(esc, "edit", "/etc/passwd")},
				map[string]any{"permission": map[string]any{"tool_call_id": "t1", "title": "Edit file"}},
				map[string]any{"message": "done"},
			}})
			var seen func() []policy.ToolUse
			e.cfg.Decide, seen = recording(allowKinds("other"))
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pds := ofType(e.entries(), journal.TypePermissionDecided)
			if len(pds) != 1 {
				t.Fatalf("%d permission_decided", len(pds))
			}
			pd := data[journal.PermissionDecided](t, pds[0])
			if pd.Decision != "deny" {
				t.Errorf("sessionUpdate %s: permission for t1, announced as an edit of /etc/passwd, decided %q as kind %q with paths %q outside %q (policies %q): the announcement was not read",
					esc, pd.Decision, pd.Kind, pd.Paths, pd.Outside, pd.PolicyIDs)
			}
			for _, u := range seen() {
				if u.Kind == "other" && len(u.Paths) == 0 && len(u.Outside) == 0 {
					t.Errorf("sessionUpdate %s: the policy was asked about Tool::%q with no paths", esc, u.Kind)
				}
			}
		})
	}
}

// TestEscapedToolCallKeepsKind: the rule "a tool call keeps its kind" holds
// whatever the spelling of the announcement's sessionUpdate value.
func TestEscapedToolCallKeepsKind(t *testing.T) {
	for _, esc := range []string{`tool_call`, `tool\u005fcall`} {
		t.Run(esc, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"raw": rawToolCall(esc, "delete", "")},
				map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "read", "title": "Read a", "locations": []string{"$CWD/a.txt"}}},
				map[string]any{"message": "done"},
			}})
			e.cfg.Decide = allowKinds("read", "delete")
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pds := ofType(e.entries(), journal.TypePermissionDecided)
			if len(pds) != 1 {
				t.Fatalf("%d permission_decided", len(pds))
			}
			pd := data[journal.PermissionDecided](t, pds[0])
			if pd.Decision != "deny" || !slices.ContainsFunc(pd.Errors, func(s string) bool { return strings.Contains(s, "a tool call keeps its kind") }) {
				t.Errorf("sessionUpdate %s: permission_decided %+v: want a refusal by rule \"a tool call keeps its kind\"", esc, pd)
			}
		})
	}
}

// sdkReads returns the tool call the ACP SDK reads in the line (nil when none).
func sdkReads(t *testing.T, line json.RawMessage) *sdk.SessionUpdateToolCall {
	t.Helper()
	var m struct {
		Params sdk.SessionNotification `json:"params"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("the SDK's types do not read the line: %v", err)
	}
	return m.Params.Update.ToolCall
}

// TestEmptyToolCallID: a tool_call whose toolCallId is "" is read by the ACP SDK (and
// would be journaled as a tool_call of kind edit with its paths), but no request can name
// it apart from any other: it is malformed ACP — announce skipped it, and a permission
// request naming toolCallId "" was decided without the announced kind and paths
// (Tool::"other", no path). A permission request naming toolCallId "" is malformed too.
func TestEmptyToolCallID(t *testing.T) {
	line := json.RawMessage(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1",` +
		`"update":{"sessionUpdate":"tool_call","toolCallId":"","title":"Edit file","kind":"edit","status":"pending",` +
		`"locations":[{"path":"/etc/passwd"}]}}}`)
	if got := sdkReads(t, line); got == nil || got.Kind != sdk.ToolKindEdit {
		t.Fatalf("the SDK does not read the line as an edit tool_call: %+v", got)
	}
	r := newRunner(Config{})
	r.sid = "s1"
	_, _, m := notMessage(line)
	n := notification(m)
	if n == nil {
		t.Fatal("notification() does not read the line")
	}
	if err := r.announce(n); !errors.Is(err, ErrMalformed) {
		kind, _, locs, _ := r.toolCall(sdk.ToolCallUpdate{ToolCallId: ""})
		t.Errorf("announce: %v, want malformed ACP (a permission request for it is decided with kind %v and locations %v)", err, kind, locs)
	}
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "id": 900, "method": "session/request_permission", "params": map[string]any{
			"sessionId": "fake-session-1", "toolCall": map[string]any{"toolCallId": "", "title": "Edit file"},
			"options": []any{map[string]any{"optionId": "allow", "kind": "allow_once", "name": "Allow"},
				map[string]any{"optionId": "reject", "kind": "reject_once", "name": "Reject"}}}}},
		map[string]any{"message": "done"},
	}})
	e.cfg.Decide = allowKinds("other")
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), "empty toolCallId") {
		t.Errorf("err %v; want malformed ACP naming the empty toolCallId", res.Err)
	}
	if x := ofType(e.entries(), journal.TypePermissionDecided); len(x) > 0 {
		t.Errorf("permission_decided journaled: %s", x[0].Data)
	}
	e.finishAndVerify(res)
}
