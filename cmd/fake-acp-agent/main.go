// Command fake-acp-agent is a scripted coding agent speaking the Agent Client Protocol
// (ACP) on stdin/stdout, as the agent side, for tests of symbi's delegated runs. Real
// agents (Claude Code, Codex, …) need vendor credentials; this one does exactly what a
// JSON script tells it, so that one test drives one scenario.
//
// Usage:
//
//	fake-acp-agent [--script FILE]
//
// The script is the file named by --script, else by the environment variable
// FAKE_ACP_SCRIPT. Diagnostics go to stderr, each line prefixed "fake-acp-agent: ";
// stdout carries only ACP (newline-delimited JSON-RPC) unless a step writes garbage on
// purpose. The agent exits 0 when stdin closes.
//
// # Script
//
// A script is one JSON object; unknown fields are an error (exit 2):
//
//	{
//	  "steps": [ STEP, … ],              // run in order on every session/prompt
//	  "modes": ["default", "read-only", "plan"],  // offered by session/new (omit: no modes)
//	  "current_mode": "default",        // initial mode (default: the first of "modes")
//	  "require_mode": "read-only",      // a prompt arriving in another mode: exit 4
//	  "forbid_terminal": true,          // initialize offering terminal: exit 5
//	  "require_fs": true,               // initialize not offering fs read and write: exit 5
//	  "expect_prompt_contains": ["…"],  // a prompt lacking one of these texts: exit 3
//	  "ignore_sigterm": true,           // ignore SIGTERM (only SIGKILL ends it)
//	  "stall_at": "initialize",         // stall (see the step) when that request arrives,
//	                                    // before answering it: "initialize" or "session_new"
//	  "linger": true,                   // do not exit when stdin closes
//	  "record": "/abs/events.jsonl"     // append one JSON line per event (below)
//	}
//
// initialize answers protocol version 1, agentInfo {"name": "fake-acp-agent",
// "version": Version}, loadSession false (the SDK omits false fields) and no auth
// methods. session/new answers session ids "fake-session-1", "fake-session-2", … and,
// when "modes" is set, the mode state. session/set_mode accepts only an offered mode id
// (otherwise a JSON-RPC invalid-params error) and records it. session/load, session/list,
// session/resume, session/close and config options are not supported.
//
// # Steps
//
// Each step is an object with exactly one action key, plus the modifiers listed with that
// action. In every path (locations, read, write) the text "$CWD" is replaced by the
// session's cwd from session/new; nothing else is rewritten, so "$CWD/../x",
// "relative.txt" and "/etc/passwd" reach the client as written.
//
//	{"message": "text", "repeat": N}   agent_message_chunk (N times, default 1)
//	{"thought": "text", "repeat": N}   agent_thought_chunk (N times, default 1)
//	{"plan": [ENTRY, …]}               plan update; an ENTRY is "text" or
//	                                   {"content", "priority" (medium), "status" (pending)}
//	{"tool_call": {"id", "kind", "title", "status" (pending), "locations": [path, …],
//	               "raw_input": JSON, "raw_output": JSON, "content": "text"}}
//	                                   tool_call update ("content" becomes one text block)
//	{"tool_call_update": {"id", "status", "kind", "title", "locations", "raw_input",
//	               "raw_output", "content"}}
//	                                   tool_call_update; only the fields given are sent
//	{"permission": {"tool_call_id", "kind", "title", "locations": [path, …],
//	               "raw_input": JSON, "options": [{"id", "kind", "name"}, …]},
//	 "expect": OUTCOME}
//	                                   session/request_permission. Without "options" the
//	                                   standard four are offered, in this order:
//	                                     {"optionId": "allow",         "kind": "allow_once"}
//	                                     {"optionId": "allow-always",  "kind": "allow_always"}
//	                                     {"optionId": "reject",        "kind": "reject_once"}
//	                                     {"optionId": "reject-always", "kind": "reject_always"}
//	                                   (ids deliberately differ from kinds). The answer is
//	                                   recorded as its OUTCOME: the kind of the selected
//	                                   option, "cancelled", "unknown_option" (an id not
//	                                   offered) or "error" (a JSON-RPC error instead of an
//	                                   answer). With "expect" ("allow" means "allow_once",
//	                                   "reject" means "reject_once"; or allow_once,
//	                                   allow_always, reject_once, reject_always, cancelled,
//	                                   unknown_option, error) a different answer prints
//	                                   "expectation failed" to stderr and exits 3. The agent
//	                                   waits for the client's answer even after
//	                                   session/cancel; a "cancelled" answer ends the turn
//	                                   with stop reason cancelled.
//	{"read": path, "line": N, "limit": N, "expect_error": bool, "expect_content": "text"}
//	                                   fs/read_text_file; "expect_error" (when given) must
//	                                   match whether the client failed the request, and
//	                                   "expect_content" the content returned, else exit 3
//	{"write": {"path", "content"}, "expect_error": bool}
//	                                   fs/write_text_file, likewise
//	{"spawn_background": "sleep 1000" | ["sleep", "1000"], "pid_file": "/abs/file"}
//	                                   start a child (argv split on spaces, no shell; stdio
//	                                   /dev/null) in the agent's own process group, not
//	                                   waited for; its pid is written (atomically) to
//	                                   pid_file. Whoever runs the agent must kill it.
//	{"sleep": "1.5s"}                  pause (a Go duration); session/cancel cuts it short
//	{"wait_file": "$CWD/ready"}        pause until that file exists (checked every 10 ms);
//	                                   session/cancel cuts it short
//	{"hang": true, "ignore_cancel": bool}
//	                                   never finish the turn: on session/cancel answer the
//	                                   prompt with stop reason cancelled — or, with
//	                                   ignore_cancel, keep hanging regardless
//	{"crash": CODE}                    exit at once with that code
//	{"garbage": "bytes"}               write the text to stdout as is (plus a newline if
//	                                   it has none): not JSON-RPC
//	{"raw": JSON}                      write that JSON value as one line on stdout (e.g. a
//	                                   malformed or unsolicited JSON-RPC message)
//	{"flood": N, "text": "x"}          N agent_message_chunk updates ("text", default "x")
//	                                   as fast as the pipe takes them
//	{"stall": N}                       stop reading stdin for good and fill the stdin pipe
//	                                   (through a second write end opened on
//	                                   /proc/self/fd/0), so that every write the client
//	                                   makes to the agent blocks from now on — what an agent
//	                                   that stops reading while the client answers it comes
//	                                   to; then send N requests the client must answer
//	                                   (terminal/create), record "stall" and hang: the agent
//	                                   hears nothing more, session/cancel included
//	{"mode_update": "mode-id"}         the agent switches mode itself: current_mode_update
//	{"stop_reason": "end_turn"}        end the turn now with that stop reason (any string
//	                                   is sent as is: end_turn, max_tokens,
//	                                   max_turn_requests, refusal, cancelled, …)
//	{"error": {"code": N, "message": "text"}}
//	                                   end the turn with that JSON-RPC error
//
// When the steps run out the turn ends with end_turn. Once session/cancel has been
// received (the prompt context is cancelled) the next step boundary ends the turn with
// stop reason cancelled — except before a hang with ignore_cancel.
//
// # Exit codes
//
//	0  stdin closed
//	1  a step could not be carried out (spawn failed, pid file not written, …)
//	2  usage or script error
//	3  an expectation failed (permission outcome, fs result, prompt text)
//	4  the prompt arrived while the session was not in "require_mode"
//	5  the client's capabilities broke "forbid_terminal" or "require_fs"
//	N  {"crash": N}
//
// # Record
//
// With "record", each event is appended to that file as one JSON object per line, with
// "event" naming it: start (pid, pgid, cwd), initialize (protocol_version,
// client_capabilities, client_info), session_new (session_id, cwd), set_mode
// (session_id, mode), prompt (session_id, text), permission (tool_call_id, outcome,
// option_id), read (path, ok, content | error), write (path, ok, error), spawn (pid,
// argv), mode_update (session_id, mode), stall (at, requests), cancel (session_id),
// prompt_end (session_id, stop_reason | error), crash (code), exit (code, reason) and
// eof. The same lines go to stderr. acp-go-sdk cancels the prompt before it delivers
// session/cancel to the agent's handler, so a turn that ends cancelled waits (up to
// cancelRecordWait) for "cancel" to be recorded before it records "prompt_end" and
// answers: once the client has the answer it may close stdin, and the process would exit
// before the record.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/acp-go-sdk"
)

// Version is the agentInfo version reported by initialize.
const Version = "0.1.0"

const agentName = "fake-acp-agent"

// Exit codes.
const (
	exitStepFailed  = 1
	exitUsage       = 2
	exitExpectation = 3
	exitMode        = 4
	exitCapability  = 5
)

func main() {
	sc, err := loadScript(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", agentName, err)
		os.Exit(exitUsage)
	}
	if sc.IgnoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
	}
	rec := &recorder{path: sc.Record, stderr: os.Stderr}
	cwd, _ := os.Getwd()
	rec.event("start", obj{"pid": os.Getpid(), "pgid": pgid(), "cwd": cwd})
	// Not conn.SetLogger: it writes a field that the connection's goroutines, already
	// running, read without synchronisation (a data race under -race).
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", agentName))
	out := &lockedWriter{w: os.Stdout}
	ag := newAgent(sc, rec, out)
	conn := acp.NewAgentSideConnection(ag, out, ag.in)
	ag.setConn(conn)

	<-conn.Done()
	rec.event("eof", nil)
	if sc.Linger {
		for {
			time.Sleep(time.Hour)
		}
	}
	os.Exit(0)
}

func pgid() int {
	g, err := syscall.Getpgid(0)
	if err != nil {
		return -1
	}
	return g
}

// ---------------------------------------------------------------------------------------
// Script

type script struct {
	Steps                []step   `json:"steps"`
	Modes                []string `json:"modes"`
	CurrentMode          string   `json:"current_mode"`
	RequireMode          string   `json:"require_mode"`
	ForbidTerminal       bool     `json:"forbid_terminal"`
	RequireFS            bool     `json:"require_fs"`
	ExpectPromptContains []string `json:"expect_prompt_contains"`
	IgnoreSIGTERM        bool     `json:"ignore_sigterm"`
	StallAt              string   `json:"stall_at"`
	Linger               bool     `json:"linger"`
	Record               string   `json:"record"`
}

type step struct {
	// Actions: exactly one per step.
	Message         *string         `json:"message"`
	Thought         *string         `json:"thought"`
	Plan            *[]planEntry    `json:"plan"`
	ToolCall        *toolCall       `json:"tool_call"`
	ToolCallUpdate  *toolCallUpdate `json:"tool_call_update"`
	Permission      *permission     `json:"permission"`
	Read            *string         `json:"read"`
	Write           *writeFile      `json:"write"`
	SpawnBackground json.RawMessage `json:"spawn_background"`
	Sleep           *string         `json:"sleep"`
	WaitFile        *string         `json:"wait_file"`
	Hang            *bool           `json:"hang"`
	Crash           *int            `json:"crash"`
	Garbage         *string         `json:"garbage"`
	Raw             json.RawMessage `json:"raw"`
	Flood           *int            `json:"flood"`
	Stall           *int            `json:"stall"`
	ModeUpdate      *string         `json:"mode_update"`
	StopReason      *string         `json:"stop_reason"`
	Error           *rpcError       `json:"error"`

	// Modifiers.
	Repeat        *int    `json:"repeat"`
	Expect        *string `json:"expect"`
	ExpectError   *bool   `json:"expect_error"`
	ExpectContent *string `json:"expect_content"`
	Line          *int    `json:"line"`
	Limit         *int    `json:"limit"`
	PidFile       *string `json:"pid_file"`
	IgnoreCancel  *bool   `json:"ignore_cancel"`
	Text          *string `json:"text"`

	action   string   // the action's key, set by validate
	argv     []string // parsed spawn_background
	duration time.Duration
}

type planEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
}

func (p *planEntry) UnmarshalJSON(b []byte) error {
	if s := bytes.TrimSpace(b); len(s) > 0 && s[0] == '"' {
		return json.Unmarshal(s, &p.Content)
	}
	type plain planEntry
	var v plain
	if err := strictDecode(b, &v); err != nil {
		return err
	}
	*p = planEntry(v)
	return nil
}

type toolCall struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Title     string          `json:"title"`
	Status    string          `json:"status"`
	Locations []string        `json:"locations"`
	RawInput  json.RawMessage `json:"raw_input"`
	RawOutput json.RawMessage `json:"raw_output"`
	Content   *string         `json:"content"`
}

type toolCallUpdate struct {
	ID        string          `json:"id"`
	Kind      *string         `json:"kind"`
	Title     *string         `json:"title"`
	Status    *string         `json:"status"`
	Locations []string        `json:"locations"`
	RawInput  json.RawMessage `json:"raw_input"`
	RawOutput json.RawMessage `json:"raw_output"`
	Content   *string         `json:"content"`
}

type permission struct {
	ToolCallID string          `json:"tool_call_id"`
	Kind       string          `json:"kind"`
	Title      string          `json:"title"`
	Locations  []string        `json:"locations"`
	RawInput   json.RawMessage `json:"raw_input"`
	Options    []permOption    `json:"options"`
}

type permOption struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Name string `json:"name"`
}

type writeFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// standardOptions are offered when a permission step names none.
var standardOptions = []permOption{
	{ID: "allow", Kind: string(acp.PermissionOptionKindAllowOnce), Name: "Allow once"},
	{ID: "allow-always", Kind: string(acp.PermissionOptionKindAllowAlways), Name: "Always allow"},
	{ID: "reject", Kind: string(acp.PermissionOptionKindRejectOnce), Name: "Reject once"},
	{ID: "reject-always", Kind: string(acp.PermissionOptionKindRejectAlways), Name: "Always reject"},
}

// outcomes a permission step may expect; "allow" and "reject" are shorthands.
var outcomes = map[string]string{
	"allow":          "allow_once",
	"reject":         "reject_once",
	"allow_once":     "allow_once",
	"allow_always":   "allow_always",
	"reject_once":    "reject_once",
	"reject_always":  "reject_always",
	"cancelled":      "cancelled",
	"unknown_option": "unknown_option",
	"error":          "error",
}

func loadScript(args []string) (*script, error) {
	fs := flag.NewFlagSet(agentName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("script", "", "the JSON script file")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("usage: %s [--script FILE]: %v", agentName, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("usage: %s [--script FILE]: unexpected argument %q", agentName, fs.Arg(0))
	}
	if *path == "" {
		*path = os.Getenv("FAKE_ACP_SCRIPT")
	}
	if *path == "" {
		return nil, fmt.Errorf("no script: pass --script FILE or set FAKE_ACP_SCRIPT")
	}
	data, err := os.ReadFile(*path)
	if err != nil {
		return nil, fmt.Errorf("script: %v", err)
	}
	var sc script
	if err := strictDecode(data, &sc); err != nil {
		return nil, fmt.Errorf("script %s: %v", *path, err)
	}
	if err := sc.validate(); err != nil {
		return nil, fmt.Errorf("script %s: %v", *path, err)
	}
	return &sc, nil
}

// strictDecode decodes exactly one JSON value, refusing unknown fields.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func (sc *script) validate() error {
	if sc.CurrentMode != "" && !contains(sc.Modes, sc.CurrentMode) {
		return fmt.Errorf("current_mode %q is not one of modes %q", sc.CurrentMode, sc.Modes)
	}
	if sc.CurrentMode == "" && len(sc.Modes) > 0 {
		sc.CurrentMode = sc.Modes[0]
	}
	if sc.Record != "" && !filepath.IsAbs(sc.Record) {
		return fmt.Errorf("record %q: must be an absolute path", sc.Record)
	}
	if sc.StallAt != "" && sc.StallAt != "initialize" && sc.StallAt != "session_new" {
		return fmt.Errorf("stall_at %q: not initialize or session_new", sc.StallAt)
	}
	for i := range sc.Steps {
		if err := sc.Steps[i].validate(); err != nil {
			return fmt.Errorf("step %d: %v", i+1, err)
		}
	}
	return nil
}

func (s *step) validate() error {
	actions := []struct {
		name    string
		present bool
	}{
		{"message", s.Message != nil},
		{"thought", s.Thought != nil},
		{"plan", s.Plan != nil},
		{"tool_call", s.ToolCall != nil},
		{"tool_call_update", s.ToolCallUpdate != nil},
		{"permission", s.Permission != nil},
		{"read", s.Read != nil},
		{"write", s.Write != nil},
		{"spawn_background", s.SpawnBackground != nil},
		{"sleep", s.Sleep != nil},
		{"wait_file", s.WaitFile != nil},
		{"hang", s.Hang != nil},
		{"crash", s.Crash != nil},
		{"garbage", s.Garbage != nil},
		{"raw", s.Raw != nil},
		{"flood", s.Flood != nil},
		{"stall", s.Stall != nil},
		{"mode_update", s.ModeUpdate != nil},
		{"stop_reason", s.StopReason != nil},
		{"error", s.Error != nil},
	}
	var found []string
	for _, a := range actions {
		if a.present {
			found = append(found, a.name)
		}
	}
	if len(found) != 1 {
		return fmt.Errorf("a step needs exactly one action, found %d %q", len(found), found)
	}
	s.action = found[0]

	modifiers := []struct {
		name    string
		present bool
		allowed []string
	}{
		{"repeat", s.Repeat != nil, []string{"message", "thought"}},
		{"expect", s.Expect != nil, []string{"permission"}},
		{"expect_error", s.ExpectError != nil, []string{"read", "write"}},
		{"expect_content", s.ExpectContent != nil, []string{"read"}},
		{"line", s.Line != nil, []string{"read"}},
		{"limit", s.Limit != nil, []string{"read"}},
		{"pid_file", s.PidFile != nil, []string{"spawn_background"}},
		{"ignore_cancel", s.IgnoreCancel != nil, []string{"hang"}},
		{"text", s.Text != nil, []string{"flood"}},
	}
	for _, m := range modifiers {
		if m.present && !contains(m.allowed, s.action) {
			return fmt.Errorf("%q does not go with %q (only with %q)", m.name, s.action, m.allowed)
		}
	}

	switch s.action {
	case "message", "thought":
		if s.Repeat != nil && *s.Repeat < 1 {
			return fmt.Errorf("repeat must be at least 1")
		}
	case "plan":
		for i := range *s.Plan {
			e := &(*s.Plan)[i]
			if e.Priority == "" {
				e.Priority = string(acp.PlanEntryPriorityMedium)
			}
			if e.Status == "" {
				e.Status = string(acp.PlanEntryStatusPending)
			}
		}
	case "tool_call":
		if s.ToolCall.ID == "" {
			return fmt.Errorf("tool_call needs an id")
		}
	case "tool_call_update":
		if s.ToolCallUpdate.ID == "" {
			return fmt.Errorf("tool_call_update needs an id")
		}
	case "permission":
		if s.Permission.ToolCallID == "" {
			return fmt.Errorf("permission needs a tool_call_id")
		}
		for _, o := range s.Permission.Options {
			if o.ID == "" || o.Kind == "" {
				return fmt.Errorf("permission options need an id and a kind")
			}
		}
		if s.Expect != nil {
			if _, ok := outcomes[*s.Expect]; !ok {
				return fmt.Errorf("expect %q: not a permission outcome", *s.Expect)
			}
		}
	case "read":
		if *s.Read == "" {
			return fmt.Errorf("read needs a path")
		}
	case "write":
		if s.Write.Path == "" {
			return fmt.Errorf("write needs a path")
		}
	case "spawn_background":
		var one string
		if err := json.Unmarshal(s.SpawnBackground, &one); err == nil {
			s.argv = strings.Fields(one)
		} else if err := json.Unmarshal(s.SpawnBackground, &s.argv); err != nil {
			return fmt.Errorf("spawn_background: a command line or an argv array")
		}
		if len(s.argv) == 0 {
			return fmt.Errorf("spawn_background: empty command")
		}
		if s.PidFile != nil && !filepath.IsAbs(*s.PidFile) {
			return fmt.Errorf("pid_file %q: must be an absolute path", *s.PidFile)
		}
	case "sleep":
		d, err := time.ParseDuration(*s.Sleep)
		if err != nil || d < 0 {
			return fmt.Errorf("sleep %q: not a duration", *s.Sleep)
		}
		s.duration = d
	case "flood":
		if *s.Flood < 0 {
			return fmt.Errorf("flood must not be negative")
		}
	case "stall":
		if *s.Stall < 0 {
			return fmt.Errorf("stall must not be negative")
		}
	case "raw":
		if !json.Valid(s.Raw) {
			return fmt.Errorf("raw: not JSON")
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------------------
// Output and record

// lockedWriter serialises whole writes to stdout, so that garbage written by a step never
// lands inside a JSON-RPC message written by the SDK (which writes each message, newline
// included, in one Write call).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type obj = map[string]any

type recorder struct {
	mu     sync.Mutex
	path   string
	stderr io.Writer
}

func (r *recorder) event(name string, fields obj) {
	line := obj{"event": name}
	for k, v := range fields {
		line[k] = v
	}
	b, err := json.Marshal(line)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"event":%q,"marshal_error":%q}`, name, err.Error()))
	}
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.stderr, "%s: %s", agentName, b)
	if r.path == "" {
		return
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(r.stderr, "%s: record: %v\n", agentName, err)
		return
	}
	if _, err := f.Write(b); err != nil {
		fmt.Fprintf(r.stderr, "%s: record: %v\n", agentName, err)
	}
	if err := f.Close(); err != nil {
		fmt.Fprintf(r.stderr, "%s: record: %v\n", agentName, err)
	}
}

// ---------------------------------------------------------------------------------------
// Stalling

// stdinGate is the agent's stdin as the SDK reads it, until stall stops it: from then on
// no read returns.
type stdinGate struct {
	r       io.Reader
	mu      sync.Mutex
	idle    *sync.Cond // signalled when a read ends
	reading bool
	stopped bool
}

func newStdinGate(r io.Reader) *stdinGate {
	g := &stdinGate{r: r}
	g.idle = sync.NewCond(&g.mu)
	return g
}

func (g *stdinGate) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		for {
			time.Sleep(time.Hour) // a timer, not a channel: the runtime sees no deadlock
		}
	}
	g.reading = true
	g.mu.Unlock()
	n, err := g.r.Read(p)
	g.mu.Lock()
	g.reading = false
	g.idle.Broadcast()
	g.mu.Unlock()
	return n, err
}

// stall stops reading stdin for good, fills the stdin pipe, sends n requests of session
// sid the client must answer and records "stall" (at, requests).
func (a *fakeAgent) stall(at string, sid acp.SessionId, n int) {
	g := a.in
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	// A read under way ends once there is something to read: fill, wait for it, fill
	// again. Nothing reads the pipe after that.
	if err := fillStdin(); err != nil {
		a.exit(exitStepFailed, "stall: %v", err)
	}
	g.mu.Lock()
	for g.reading {
		g.idle.Wait()
	}
	g.mu.Unlock()
	if err := fillStdin(); err != nil {
		a.exit(exitStepFailed, "stall: %v", err)
	}
	for i := range n {
		line := fmt.Sprintf(`{"jsonrpc":"2.0","id":"stall-%d","method":"terminal/create","params":{"sessionId":%q,"command":"true"}}`+"\n", i, sid)
		if _, err := a.out.Write([]byte(line)); err != nil {
			a.exit(exitStepFailed, "stall: %v", err)
		}
	}
	a.rec.event("stall", obj{"at": at, "requests": n})
}

// fillStdin writes newlines into the pipe that is this process's stdin, through a second
// write end opened on /proc/self/fd/0, until not one more byte fits.
func fillStdin() error {
	fd, err := syscall.Open("/proc/self/fd/0", syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening a write end on stdin (a pipe?): %w", err)
	}
	defer syscall.Close(fd)
	chunk := bytes.Repeat([]byte("\n"), 4096)
	for len(chunk) > 0 {
		_, err := syscall.Write(fd, chunk)
		switch err {
		case nil:
		case syscall.EAGAIN:
			chunk = chunk[:len(chunk)/2] // a smaller write may still fit
		case syscall.EINTR:
		default:
			return err
		}
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// The agent

type session struct {
	id   acp.SessionId
	cwd  string
	mode string

	cancelOnce sync.Once
	cancelled  chan struct{} // closed once session/cancel has been recorded
}

// cancelRecordWait bounds how long a cancelled turn waits for its session/cancel to be
// recorded; a turn cancelled some other way ($/cancel_request) waits this long.
const cancelRecordWait = 10 * time.Second

type fakeAgent struct {
	sc  *script
	rec *recorder
	out *lockedWriter
	in  *stdinGate

	ready   chan struct{} // closed once conn is set
	conn    *acp.AgentSideConnection
	connCtx context.Context // cancelled when the client goes away

	mu       sync.Mutex
	sessions map[acp.SessionId]*session
	nextID   int
}

var _ acp.Agent = (*fakeAgent)(nil)

func newAgent(sc *script, rec *recorder, out *lockedWriter) *fakeAgent {
	return &fakeAgent{sc: sc, rec: rec, out: out, in: newStdinGate(os.Stdin), ready: make(chan struct{}), sessions: map[acp.SessionId]*session{}}
}

func (a *fakeAgent) setConn(c *acp.AgentSideConnection) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.Done()
		cancel()
	}()
	a.conn, a.connCtx = c, ctx
	close(a.ready)
}

func (a *fakeAgent) client() (*acp.AgentSideConnection, context.Context) {
	<-a.ready
	return a.conn, a.connCtx
}

// exit records why and ends the process.
func (a *fakeAgent) exit(code int, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	a.rec.event("exit", obj{"code": code, "reason": reason})
	a.rec.mu.Lock() // no record line may follow, nor be cut short
	fmt.Fprintf(os.Stderr, "%s: %s\n", agentName, reason)
	os.Exit(code)
}

func (a *fakeAgent) session(id acp.SessionId) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[id]
	if !ok {
		return nil, acp.NewInvalidParams(obj{"error": fmt.Sprintf("unknown session %q", id)})
	}
	return s, nil
}

func (a *fakeAgent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	a.rec.event("initialize", obj{
		"protocol_version":    p.ProtocolVersion,
		"client_capabilities": p.ClientCapabilities,
		"client_info":         p.ClientInfo,
	})
	caps := p.ClientCapabilities
	if a.sc.ForbidTerminal && caps.Terminal {
		a.exit(exitCapability, "capability violation: the client offers terminals (forbid_terminal)")
	}
	if a.sc.RequireFS && (!caps.Fs.ReadTextFile || !caps.Fs.WriteTextFile) {
		a.exit(exitCapability, "capability violation: the client does not offer fs read and write (require_fs): %+v", caps.Fs)
	}
	if a.sc.StallAt == "initialize" {
		a.stall("initialize", "", 0)
	}
	return acp.InitializeResponse{
		ProtocolVersion:   acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{LoadSession: false},
		AgentInfo:         &acp.Implementation{Name: agentName, Version: Version},
		AuthMethods:       []acp.AuthMethod{},
	}, nil
}

func (a *fakeAgent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (a *fakeAgent) NewSession(_ context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	a.mu.Lock()
	a.nextID++
	s := &session{id: acp.SessionId(fmt.Sprintf("fake-session-%d", a.nextID)), cwd: p.Cwd, mode: a.sc.CurrentMode, cancelled: make(chan struct{})}
	a.sessions[s.id] = s
	a.mu.Unlock()
	a.rec.event("session_new", obj{"session_id": s.id, "cwd": p.Cwd})
	if a.sc.StallAt == "session_new" {
		a.stall("session_new", s.id, 0)
	}
	resp := acp.NewSessionResponse{SessionId: s.id}
	if len(a.sc.Modes) > 0 {
		st := &acp.SessionModeState{CurrentModeId: acp.SessionModeId(a.sc.CurrentMode)}
		for _, m := range a.sc.Modes {
			st.AvailableModes = append(st.AvailableModes, acp.SessionMode{Id: acp.SessionModeId(m), Name: m})
		}
		resp.Modes = st
	}
	return resp, nil
}

func (a *fakeAgent) SetSessionMode(_ context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	if !contains(a.sc.Modes, string(p.ModeId)) {
		return acp.SetSessionModeResponse{}, acp.NewInvalidParams(obj{"error": fmt.Sprintf("mode %q is not offered (modes: %q)", p.ModeId, a.sc.Modes)})
	}
	a.mu.Lock()
	s.mode = string(p.ModeId)
	a.mu.Unlock()
	a.rec.event("set_mode", obj{"session_id": p.SessionId, "mode": p.ModeId})
	return acp.SetSessionModeResponse{}, nil
}

func (a *fakeAgent) Cancel(_ context.Context, p acp.CancelNotification) error {
	a.rec.event("cancel", obj{"session_id": p.SessionId})
	if s, err := a.session(p.SessionId); err == nil {
		s.cancelOnce.Do(func() { close(s.cancelled) })
	}
	return nil
}

func (a *fakeAgent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *fakeAgent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
}

func (a *fakeAgent) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionClose)
}

func (a *fakeAgent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

// Prompt runs the script's steps. ctx is cancelled by the SDK when session/cancel (or a
// $/cancel_request for this request) arrives, or when the client goes away.
func (a *fakeAgent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	s, err := a.session(p.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	var text strings.Builder
	for _, b := range p.Prompt {
		if b.Text != nil {
			text.WriteString(b.Text.Text)
		}
	}
	a.rec.event("prompt", obj{"session_id": s.id, "text": text.String()})
	a.mu.Lock()
	mode := s.mode
	a.mu.Unlock()
	if a.sc.RequireMode != "" && mode != a.sc.RequireMode {
		a.exit(exitMode, "mode violation: prompt arrived in mode %q, the script requires %q", mode, a.sc.RequireMode)
	}
	for _, want := range a.sc.ExpectPromptContains {
		if !strings.Contains(text.String(), want) {
			a.exit(exitExpectation, "expectation failed: the prompt lacks %q", want)
		}
	}

	resp, err := a.runSteps(ctx, s)
	if err == nil && resp.StopReason == acp.StopReasonCancelled && ctx.Err() != nil {
		_, connCtx := a.client()
		t := time.NewTimer(cancelRecordWait)
		select {
		case <-s.cancelled:
		case <-connCtx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if err != nil {
		a.rec.event("prompt_end", obj{"session_id": s.id, "error": err.Error()})
		return acp.PromptResponse{}, err
	}
	a.rec.event("prompt_end", obj{"session_id": s.id, "stop_reason": resp.StopReason})
	return resp, nil
}

var cancelled = acp.PromptResponse{StopReason: acp.StopReasonCancelled}

func (a *fakeAgent) runSteps(ctx context.Context, s *session) (acp.PromptResponse, error) {
	conn, connCtx := a.client()
	update := func(u acp.SessionUpdate) error {
		return conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: s.id, Update: u})
	}
	for i := range a.sc.Steps {
		st := &a.sc.Steps[i]
		if ctx.Err() != nil && !st.ignoresCancel() {
			return cancelled, nil
		}
		var err error
		switch st.action {
		case "message", "thought":
			n := 1
			if st.Repeat != nil {
				n = *st.Repeat
			}
			for j := 0; j < n && err == nil; j++ {
				if st.action == "message" {
					err = update(acp.UpdateAgentMessageText(*st.Message))
				} else {
					err = update(acp.UpdateAgentThoughtText(*st.Thought))
				}
			}
		case "plan":
			entries := []acp.PlanEntry{}
			for _, e := range *st.Plan {
				entries = append(entries, acp.PlanEntry{Content: e.Content, Priority: acp.PlanEntryPriority(e.Priority), Status: acp.PlanEntryStatus(e.Status)})
			}
			err = update(acp.SessionUpdate{Plan: &acp.SessionUpdatePlan{Entries: entries}})
		case "tool_call":
			err = update(a.toolCall(s, st.ToolCall))
		case "tool_call_update":
			err = update(a.toolCallUpdate(s, st.ToolCallUpdate))
		case "permission":
			if a.permission(connCtx, conn, s, st) == "cancelled" {
				return cancelled, nil
			}
		case "read":
			a.read(connCtx, conn, s, st)
		case "write":
			a.write(connCtx, conn, s, st)
		case "spawn_background":
			a.spawn(st)
		case "sleep":
			t := time.NewTimer(st.duration)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		case "wait_file":
			for path := expand(s, *st.WaitFile); ; {
				if _, err := os.Lstat(path); err == nil {
					break
				}
				t := time.NewTimer(10 * time.Millisecond)
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
					t.Stop()
				}
				break
			}
		case "hang":
			if !*st.Hang {
				continue
			}
			if st.ignoresCancel() {
				<-connCtx.Done()
				return acp.PromptResponse{}, errors.New("the client went away")
			}
			<-ctx.Done()
			return cancelled, nil
		case "crash":
			a.rec.event("crash", obj{"code": *st.Crash})
			a.rec.mu.Lock()
			os.Exit(*st.Crash)
		case "garbage":
			b := []byte(*st.Garbage)
			if !bytes.HasSuffix(b, []byte("\n")) {
				b = append(b, '\n')
			}
			_, err = a.out.Write(b)
		case "raw":
			var buf bytes.Buffer
			if err = json.Compact(&buf, st.Raw); err == nil {
				buf.WriteByte('\n')
				_, err = a.out.Write(buf.Bytes())
			}
		case "flood":
			text := "x"
			if st.Text != nil {
				text = *st.Text
			}
			for j := 0; j < *st.Flood && err == nil; j++ {
				err = update(acp.UpdateAgentMessageText(text))
			}
		case "stall":
			a.stall("prompt", s.id, *st.Stall)
			<-connCtx.Done() // never: the agent reads nothing more
			return acp.PromptResponse{}, errors.New("the client went away")
		case "mode_update":
			a.mu.Lock()
			s.mode = *st.ModeUpdate
			a.mu.Unlock()
			a.rec.event("mode_update", obj{"session_id": s.id, "mode": *st.ModeUpdate})
			err = update(acp.SessionUpdate{CurrentModeUpdate: &acp.SessionCurrentModeUpdate{CurrentModeId: acp.SessionModeId(*st.ModeUpdate)}})
		case "stop_reason":
			return acp.PromptResponse{StopReason: acp.StopReason(*st.StopReason)}, nil
		case "error":
			return acp.PromptResponse{}, &acp.RequestError{Code: st.Error.Code, Message: st.Error.Message}
		}
		if err != nil {
			if ctx.Err() != nil {
				return cancelled, nil
			}
			return acp.PromptResponse{}, err
		}
	}
	if ctx.Err() != nil {
		return cancelled, nil
	}
	return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil
}

// ignoresCancel tells a hang that outlasts session/cancel, even one received before it.
func (s *step) ignoresCancel() bool {
	return s.action == "hang" && *s.Hang && s.IgnoreCancel != nil && *s.IgnoreCancel
}

func expand(s *session, path string) string { return strings.ReplaceAll(path, "$CWD", s.cwd) }

func locations(s *session, paths []string) []acp.ToolCallLocation {
	var ls []acp.ToolCallLocation
	for _, p := range paths {
		ls = append(ls, acp.ToolCallLocation{Path: expand(s, p)})
	}
	return ls
}

// rawValue keeps a script's JSON as written (nil when absent).
func rawValue(r json.RawMessage) any {
	if r == nil {
		return nil
	}
	return r
}

func textContent(c *string) []acp.ToolCallContent {
	if c == nil {
		return nil
	}
	return []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(*c))}
}

func (a *fakeAgent) toolCall(s *session, tc *toolCall) acp.SessionUpdate {
	status := tc.Status
	if status == "" {
		status = string(acp.ToolCallStatusPending)
	}
	return acp.SessionUpdate{ToolCall: &acp.SessionUpdateToolCall{
		ToolCallId: acp.ToolCallId(tc.ID),
		Title:      tc.Title,
		Kind:       acp.ToolKind(tc.Kind),
		Status:     acp.ToolCallStatus(status),
		Locations:  locations(s, tc.Locations),
		RawInput:   rawValue(tc.RawInput),
		RawOutput:  rawValue(tc.RawOutput),
		Content:    textContent(tc.Content),
	}}
}

func (a *fakeAgent) toolCallUpdate(s *session, tu *toolCallUpdate) acp.SessionUpdate {
	u := &acp.SessionToolCallUpdate{
		ToolCallId: acp.ToolCallId(tu.ID),
		Title:      tu.Title,
		Locations:  locations(s, tu.Locations),
		RawInput:   rawValue(tu.RawInput),
		RawOutput:  rawValue(tu.RawOutput),
		Content:    textContent(tu.Content),
	}
	if tu.Kind != nil {
		u.Kind = acp.Ptr(acp.ToolKind(*tu.Kind))
	}
	if tu.Status != nil {
		u.Status = acp.Ptr(acp.ToolCallStatus(*tu.Status))
	}
	return acp.SessionUpdate{ToolCallUpdate: u}
}

// permission asks the client and returns the outcome. It waits for the answer with the
// connection's context, not the prompt's, so that an answer sent after session/cancel
// (which ACP requires to be "cancelled") is seen and checked.
func (a *fakeAgent) permission(ctx context.Context, conn *acp.AgentSideConnection, s *session, st *step) string {
	p := st.Permission
	opts := p.Options
	if opts == nil {
		opts = standardOptions
	}
	req := acp.RequestPermissionRequest{
		SessionId: s.id,
		ToolCall: acp.ToolCallUpdate{
			ToolCallId: acp.ToolCallId(p.ToolCallID),
			Status:     acp.Ptr(acp.ToolCallStatusPending),
			Locations:  locations(s, p.Locations),
			RawInput:   rawValue(p.RawInput),
		},
		Options: []acp.PermissionOption{},
	}
	if p.Kind != "" {
		req.ToolCall.Kind = acp.Ptr(acp.ToolKind(p.Kind))
	}
	if p.Title != "" {
		req.ToolCall.Title = acp.Ptr(p.Title)
	}
	for _, o := range opts {
		name := o.Name
		if name == "" {
			name = o.ID
		}
		req.Options = append(req.Options, acp.PermissionOption{OptionId: acp.PermissionOptionId(o.ID), Kind: acp.PermissionOptionKind(o.Kind), Name: name})
	}
	resp, err := conn.RequestPermission(ctx, req)
	got, optionID := "", ""
	switch {
	case err != nil:
		got = "error"
	case resp.Outcome.Cancelled != nil:
		got = "cancelled"
	case resp.Outcome.Selected != nil:
		optionID = string(resp.Outcome.Selected.OptionId)
		got = "unknown_option"
		for _, o := range opts {
			if o.ID == optionID {
				got = o.Kind
			}
		}
	default:
		got = "error"
	}
	ev := obj{"session_id": s.id, "tool_call_id": p.ToolCallID, "outcome": got, "option_id": optionID}
	if err != nil {
		ev["error"] = err.Error()
	}
	a.rec.event("permission", ev)
	if st.Expect != nil && outcomes[*st.Expect] != got {
		a.exit(exitExpectation, "expectation failed: permission %q answered %q (option %q), expected %q", p.ToolCallID, got, optionID, outcomes[*st.Expect])
	}
	return got
}

func (a *fakeAgent) read(ctx context.Context, conn *acp.AgentSideConnection, s *session, st *step) {
	path := expand(s, *st.Read)
	resp, err := conn.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: s.id, Path: path, Line: st.Line, Limit: st.Limit})
	ev := obj{"path": path, "ok": err == nil}
	if err != nil {
		ev["error"] = err.Error()
	} else {
		ev["content"] = resp.Content
	}
	a.rec.event("read", ev)
	if st.ExpectError != nil && *st.ExpectError != (err != nil) {
		a.exit(exitExpectation, "expectation failed: read %q: expect_error %v, got error %v", path, *st.ExpectError, err)
	}
	if err == nil && st.ExpectContent != nil && resp.Content != *st.ExpectContent {
		a.exit(exitExpectation, "expectation failed: read %q returned %q, expected %q", path, resp.Content, *st.ExpectContent)
	}
}

func (a *fakeAgent) write(ctx context.Context, conn *acp.AgentSideConnection, s *session, st *step) {
	path := expand(s, st.Write.Path)
	_, err := conn.WriteTextFile(ctx, acp.WriteTextFileRequest{SessionId: s.id, Path: path, Content: st.Write.Content})
	ev := obj{"path": path, "ok": err == nil}
	if err != nil {
		ev["error"] = err.Error()
	}
	a.rec.event("write", ev)
	if st.ExpectError != nil && *st.ExpectError != (err != nil) {
		a.exit(exitExpectation, "expectation failed: write %q: expect_error %v, got error %v", path, *st.ExpectError, err)
	}
}

// spawn starts a child in the agent's process group and leaves it running. It is reaped
// if it ends while the agent lives; otherwise it outlives the agent, as a careless real
// agent's children would.
func (a *fakeAgent) spawn(st *step) {
	cmd := exec.Command(st.argv[0], st.argv[1:]...)
	if err := cmd.Start(); err != nil {
		a.exit(exitStepFailed, "spawn_background %q: %v", st.argv, err)
	}
	pid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }()
	a.rec.event("spawn", obj{"pid": pid, "argv": st.argv})
	if st.PidFile == nil {
		return
	}
	tmp := *st.PidFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		a.exit(exitStepFailed, "pid_file: %v", err)
	}
	if err := os.Rename(tmp, *st.PidFile); err != nil {
		a.exit(exitStepFailed, "pid_file: %v", err)
	}
}
