package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/proctest"
)

// rawAgentVar, when set in the environment, makes this test binary a minimal ACP agent
// (rawAgent) instead of running tests: one that writes what the scripted fake agent
// cannot — updates during the handshake, a line after its answer in the same write.
const rawAgentVar = "SYMBI_ACP_TEST_RAW_AGENT"

func init() {
	if spec := os.Getenv(rawAgentVar); spec != "" {
		os.Exit(rawAgent(spec))
	}
}

// rawStep is what the raw agent does on one request method: write Before (each a JSON
// line), answer with Result (or a default), then write After — all in one write.
type rawStep struct {
	Before []json.RawMessage `json:"before,omitempty"`
	Result json.RawMessage   `json:"result,omitempty"` // absent: the default
	After  []json.RawMessage `json:"after,omitempty"`
}

func rawAgent(spec string) int {
	var script map[string]rawStep
	if err := json.Unmarshal([]byte(spec), &script); err != nil {
		return 2
	}
	defaults := map[string]string{
		"initialize":     `{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}`,
		"session/new":    `{"sessionId":"s1"}`,
		"session/prompt": `{"stopReason":"end_turn"}`,
	}
	w := bufio.NewWriter(os.Stdout)
	line := func(b []byte) {
		w.Write(b)
		w.WriteByte('\n')
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method == "" || len(m.ID) == 0 {
			continue // a response or a notification (session/cancel)
		}
		st := script[m.Method]
		for _, b := range st.Before {
			line(b)
		}
		res := st.Result
		if res == nil {
			if d, ok := defaults[m.Method]; ok {
				res = json.RawMessage(d)
			}
		}
		if res == nil {
			line([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"Method not found"}}`))
		} else {
			line([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + string(res) + `}`))
		}
		for _, b := range st.After {
			line(b)
		}
		w.Flush()
	}
	return 0
}

// rawEnv is an env whose agent is rawAgent with script.
func rawEnv(t *testing.T, script map[string]rawStep) *env {
	t.Helper()
	spec, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	return selfAgentEnv(t, rawAgentVar+"="+string(spec))
}

// selfAgentEnv is an env whose agent is this test binary, started with the environment
// variable setting (rawAgentVar's or idAgentVar's) that makes it one.
func selfAgentEnv(t *testing.T, setting string) *env {
	t.Helper()
	e := newEnv(t, map[string]any{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Executor.Command = []string{exe}
	e.cfg.Env = append(e.cfg.Env, setting)
	return e
}

func rawChunk(session, kind string, content any) json.RawMessage {
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
		"sessionId": session, "update": map[string]any{"sessionUpdate": kind, "content": content}}})
	if err != nil {
		panic(err)
	}
	return b
}

func textBlock(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

// journaledText is the text of the agent_message records, concatenated: those of the
// turn, or those journaled out of it.
func journaledText(t *testing.T, es []journal.Entry, outOfTurn bool) string {
	t.Helper()
	var b strings.Builder
	for _, x := range ofType(es, journal.TypeAgentMessage) {
		if m := data[journal.AgentMessage](t, x); m.OutOfTurn == outOfTurn {
			b.WriteString(m.Text)
		}
	}
	return b.String()
}

// TestForeignSessionUpdate: a session/update naming a session this run did not open (the
// agent's is fake-session-1) is malformed ACP: the run ends with an error, and neither its
// text nor its tool call is journaled as the run's or joins an answer.
func TestForeignSessionUpdate(t *testing.T) {
	foreign := func(kind string, update map[string]any) map[string]any {
		update["sessionUpdate"] = kind
		return map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "method": "session/update",
			"params": map[string]any{"sessionId": "another-session", "update": update}}}
	}
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"message": "ours "},
		foreign("tool_call", map[string]any{"toolCallId": "foreign-call", "title": "FOREIGN-CALL", "kind": "execute", "status": "pending"}),
		foreign("agent_message_chunk", map[string]any{"content": textBlock("FOREIGN-TEXT ")}),
		map[string]any{"message": "end"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), "a session/update for a session this run did not open") {
		t.Fatalf("err %v, want malformed ACP naming the session", res.Err)
	}
	es := e.entries()
	for _, x := range es {
		if strings.Contains(string(x.Data), "FOREIGN") {
			t.Fatalf("another session's update journaled as this run's: %s %s", x.Type, x.Data)
		}
	}
	e.finishAndVerify(res)
}

// TestTextBeforePrompt: message text the agent sends during session/new — before the
// prompt was sent, of no turn — is journaled as out of turn and is no part of the answer,
// "the agent's message text of the last turn".
func TestTextBeforePrompt(t *testing.T) {
	e := rawEnv(t, map[string]rawStep{
		"session/new": {Before: []json.RawMessage{rawChunk("s1", "agent_message_chunk", textBlock("PRE-PROMPT "))}},
		"session/prompt": {Before: []json.RawMessage{rawChunk("s1", "agent_message_chunk", textBlock("the answer"))},
			Result: json.RawMessage(`{"stopReason":"end_turn"}`)},
	})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if res.Text != "the answer" {
		t.Fatalf("answer %q, want the turn's text only", res.Text)
	}
	es := e.entries()
	if in, out := journaledText(t, es, false), journaledText(t, es, true); in != "the answer" || out != "PRE-PROMPT " {
		t.Fatalf("journaled %q in the turn and %q out of it", in, out)
	}
	e.finishAndVerify(res)
}

// TestTextAfterPromptAnswer: message text the agent sends after it answered session/prompt
// — its turn over — is no part of the answer, whatever the timing: the agent writes the
// answer and the late chunk in one write, and the end of the turn is taken in the order of
// its output. Journaled (when read before the session closes), it is out of turn.
func TestTextAfterPromptAnswer(t *testing.T) {
	e := rawEnv(t, map[string]rawStep{
		"session/prompt": {Before: []json.RawMessage{rawChunk("s1", "agent_message_chunk", textBlock("the answer"))},
			Result: json.RawMessage(`{"stopReason":"end_turn"}`),
			After:  []json.RawMessage{rawChunk("s1", "agent_message_chunk", textBlock(" AFTER-THE-TURN"))}},
	})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if res.Text != "the answer" {
		t.Fatalf("answer %q, want the turn's text only", res.Text)
	}
	es := e.entries()
	if in, out := journaledText(t, es, false), journaledText(t, es, true); in != "the answer" || (out != "" && out != " AFTER-THE-TURN") {
		t.Fatalf("journaled %q in the turn and %q out of it", in, out)
	}
	fin := data[journal.SessionFinished](t, es[len(es)-1])
	if fin.TextSHA256 != sha("the answer") {
		t.Fatalf("session_finished %+v", fin)
	}
	e.finishAndVerify(res)
}

// idAgentVar, when set, makes this test binary an ACP agent that plays with request ids
// (idAgent): with "prompt-named" it sends symbi a request whose method is "session/prompt"
// (an agent-to-client request symbi does not serve) before symbi's own prompt, then, once
// symbi has answered it, a message chunk — still before symbi sent its prompt; with
// "odd-id" it answers the prompt first under an id the SDK does not match to it (the
// prompt's id with a 1 in the 16th decimal place); with "long-id", under the prompt's id
// followed by "." and 5,000 zeros — more digits than the SDK canonicalises (4,096), so that
// it keys that answer by its text and drops it.
const idAgentVar = "SYMBI_ACP_TEST_ID_AGENT"

func init() {
	if os.Getenv(idAgentVar) != "" {
		os.Exit(idAgent())
	}
}

func idAgent() int {
	w := bufio.NewWriter(os.Stdout)
	line := func(s string) {
		w.WriteString(s)
		w.WriteByte('\n')
		w.Flush()
	}
	chunk := func(text string) string {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
			"sessionId": "s1", "update": map[string]any{"sessionUpdate": "agent_message_chunk",
				"content": map[string]any{"type": "text", "text": text}}}})
		return string(b)
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	answered := false
	mode := os.Getenv(idAgentVar)
	oddID, oddSuffix := mode == "odd-id" || mode == "long-id", ".0000000000000001"
	if mode == "long-id" {
		oddSuffix = "." + strings.Repeat("0", 5000)
	}
	var pendingNew json.RawMessage
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch {
		case m.Method == "" && string(m.ID) == "77":
			// symbi answered our request (method not found): text before the prompt.
			line(chunk("PRE-PROMPT "))
			answered = true
			if pendingNew != nil {
				line(`{"jsonrpc":"2.0","id":` + string(pendingNew) + `,"result":{"sessionId":"s1"}}`)
			}
		case oddID && m.Method == "initialize":
			line(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}}`)
		case oddID && m.Method == "session/new":
			line(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"sessionId":"s1"}}`)
		case oddID && m.Method == "session/prompt" && len(m.ID) > 0:
			// An answer whose id the SDK does not take for the prompt's (it matches ids by
			// their digits): dropped by the SDK, and not the end of the turn.
			line(chunk("the answer "))
			line(`{"jsonrpc":"2.0","id":` + string(m.ID) + oddSuffix + `,"result":{"stopReason":"end_turn"}}`)
			line(chunk("and more"))
			line(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"stopReason":"end_turn"}}`)
		case m.Method == "initialize":
			line(`{"jsonrpc":"2.0","id":77,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}`)
			line(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}}`)
		case m.Method == "session/new":
			if answered {
				line(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"sessionId":"s1"}}`)
			} else {
				pendingNew = m.ID
			}
		case m.Method == "session/prompt" && len(m.ID) > 0:
			line(chunk("the answer"))
			line(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"stopReason":"end_turn"}}`)
		}
	}
	return 0
}

// TestAgentRequestNamedPrompt: symbi's method-not-found answer to an agent's request named
// session/prompt quotes the method (`"data":{"method":"session/prompt"}`); it is not taken
// for symbi's prompt: text the agent sends after it, before symbi's prompt, is out of turn.
func TestAgentRequestNamedPrompt(t *testing.T) {
	e := selfAgentEnv(t, idAgentVar+"=prompt-named")
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if res.Text != "the answer" {
		t.Fatalf("answer %q, want the turn's text only (\"PRE-PROMPT \" was sent before symbi's prompt)", res.Text)
	}
	es := e.entries()
	if in, out := journaledText(t, es, false), journaledText(t, es, true); in != "the answer" || out != "PRE-PROMPT " {
		t.Fatalf("journaled %q in the turn and %q out of it", in, out)
	}
}

// TestChunkNotesInStep: a line is read for the turn as the SDK reads it. A thought whose
// update also carries "sessionupdate": "agent_message_chunk" (a struct decode matches keys
// case-insensitively, the SDK's update decoder exactly) is a thought to both: no message
// chunk takes a note that is not its own, and the turn's text is the answer.
func TestChunkNotesInStep(t *testing.T) {
	odd := json.RawMessage(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":` +
		`{"sessionUpdate":"agent_thought_chunk","sessionupdate":"agent_message_chunk","content":{"type":"text","text":"thinking"}}}}`)
	e := rawEnv(t, map[string]rawStep{
		"session/new": {Before: []json.RawMessage{odd}},
		"session/prompt": {Before: []json.RawMessage{rawChunk("s1", "agent_message_chunk", textBlock("the answer"))},
			Result: json.RawMessage(`{"stopReason":"end_turn"}`)},
	})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if res.Text != "the answer" {
		t.Fatalf("answer %q: the turn's text was filed by another line's note (journaled out of turn: %q)",
			res.Text, journaledText(t, e.entries(), true))
	}
	e.finishAndVerify(res)
}

// TestTurnEndsByThePromptsID: the turn ends with the answer the SDK matches to the prompt,
// ids compared by their digits as the SDK compares them, within its bounds: an answer with
// id <prompt id>.0000000000000001, or <prompt id>.000… with more zeros than the SDK
// canonicalises, is another id (the SDK drops it), and the text after it is still the
// turn's.
func TestTurnEndsByThePromptsID(t *testing.T) {
	for _, mode := range []string{"odd-id", "long-id"} {
		t.Run(mode, func(t *testing.T) {
			e := selfAgentEnv(t, idAgentVar+"="+mode)
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			if res.Text != "the answer and more" {
				t.Fatalf("answer %q, want the turn's text, \"the answer and more\" (out of turn: %q)", res.Text, journaledText(t, e.entries(), true))
			}
		})
	}
}

func TestSameID(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"3", true}, {" 3 ", true}, {"3.0", true}, {"30e-1", true}, {"0.3e1", true}, {"3E+0", true}, {"003", false},
		{`"3"`, false}, {"3.0000000000000001", false}, {"-3", false}, {"4", false}, {"30", false}, {"null", false},
		{"1e99999999999999999999", false}, {"", false}, {"{}", false},
		{"3." + strings.Repeat("0", 4095), true}, {"3." + strings.Repeat("0", 4096), false}, // the SDK's 4,096 digits
		{"3" + strings.Repeat("0", 4096) + "e-4096", false}, {"0.3e1", true}, {"3e4096", false}, {"3e4097", false},
		{"3" + strings.Repeat("0", 4095) + "e-4095", true}, {"0.000003e6", true}, {"3e-4096", false},
	} {
		if got := sameID(json.RawMessage(tc.raw), 3); got != tc.want {
			t.Errorf("sameID(%q, 3) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

// TestSessionUpdateRequest: a session/update sent as a request (with an id) is malformed
// ACP: it is a notification, and the SDK would hand it over out of the order of the
// agent's output.
func TestSessionUpdateRequest(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "id": 5, "method": "session/update", "params": map[string]any{
			"sessionId": "fake-session-1", "update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": textBlock("x")}}}},
		map[string]any{"message": "done"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), "a session/update sent as a request") {
		t.Fatalf("err %v", res.Err)
	}
	e.finishAndVerify(res)
}

// TestNonTextChunk: a message chunk whose content is not text — an embedded resource, an
// image — is no part of the answer (symbi journals and releases text) and is not dropped
// without a trace: the agent_message record counts it in other_blocks.
func TestNonTextChunk(t *testing.T) {
	block := func(content map[string]any) map[string]any {
		return map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "method": "session/update", "params": map[string]any{
			"sessionId": "fake-session-1", "update": map[string]any{"sessionUpdate": "agent_message_chunk", "content": content}}}}
	}
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"message": "see: "},
		block(map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "EMBEDDED"}}),
		block(map[string]any{"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}),
		map[string]any{"message": "done"},
	}})
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	if res.Text != "see: done" {
		t.Fatalf("answer %q", res.Text)
	}
	var other, chunks int64
	for _, x := range ofType(e.entries(), journal.TypeAgentMessage) {
		m := data[journal.AgentMessage](t, x)
		other, chunks = other+m.OtherBlocks, chunks+m.Chunks
		if strings.Contains(m.Text, "EMBEDDED") {
			t.Fatalf("a resource's text journaled as message text: %+v", m)
		}
	}
	if other != 2 || chunks != 4 {
		t.Fatalf("agent_message records count %d chunks, %d not text; want 4 and 2", chunks, other)
	}
	e.finishAndVerify(res)
}

// heldJournal holds its first append of a record of type typ until release is closed,
// having closed held.
type heldJournal struct {
	*journal.Writer
	typ           string
	once          sync.Once
	held, release chan struct{}
}

func (j *heldJournal) Append(r journal.Record) error {
	if r.Type() == j.typ {
		first := false
		j.once.Do(func() { first = true })
		if first {
			close(j.held)
			<-j.release
		}
	}
	return j.Writer.Append(r)
}

// TestUpdateFlood: an agent that sends updates faster than they can be journaled — here
// while the journal is held, so that none is — ends the run as flooding once more than
// updateQueue wait: the agent is killed, and the run ends with an error naming the flood.
func TestUpdateFlood(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"message": "a"},
		map[string]any{"thought": "b"}, // the message is journaled (held) when the thought comes
		map[string]any{"flood": 4 * updateQueue, "text": ""},
		map[string]any{"message": "done"},
	}})
	hj := &heldJournal{Writer: e.w, typ: journal.TypeAgentMessage, held: make(chan struct{}), release: make(chan struct{})}
	e.cfg.Journal = hj
	wait := startRun(context.Background(), e.cfg)
	<-hj.held
	e.waitEvent("start")
	pid := int(e.eventsNamed("start")[0]["pid"].(float64))
	for deadline := time.Now().Add(guard); proctest.Alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(hj.release)
			t.Fatalf("the agent %d is alive: the flood did not end the run", pid)
		}
	}
	close(hj.release)
	res := wait(t)
	mustOutcome(t, res, OutcomeError)
	if !strings.Contains(res.Err.Error(), fmt.Sprintf("the agent floods updates: more than %d wait to be journaled", updateQueue)) {
		t.Fatalf("err %v, want the flood named", res.Err)
	}
	e.finishAndVerify(res)
}
