// Package mcpserver exposes a project over the Model Context Protocol: the tools of
// docs/mcp-tools.md, the file:///AGENTS.md resource and the symbi://runs/{run_id}
// template. It translates between MCP and the packages that decide — runs, invoke,
// project, dsl, schemapin — and decides nothing itself.
//
// Every tool failure is a tool result with isError set, whose text is "<code>: <message>"
// (codes in docs/errors.md) and whose structuredContent is {"error": {"code", "message"}}
// plus, for invoke_agent failures recorded in a journal, the run's "audit" reference.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/auth"
	"symbi/internal/buildinfo"
	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/project"
	"symbi/internal/runs"
	"symbi/internal/schemapin"
)

// Config is what the server serves.
type Config struct {
	Project  *project.Project
	Registry *project.Registry
	// Runs starts runs (invoke_agent, start_run) and answers for them.
	Runs    *runs.Manager
	Schemas *schemapin.Verifier
	Log     *slog.Logger
	// Caller is who calls this server when a request carries no verified bearer token:
	// the zero value is the one client of a stdio server (invoke.CallerStdio). With
	// authentication, each request's caller comes from its token (auth.FromTokenInfo).
	Caller runs.Caller
	// Authenticated is set when every request must carry a verified bearer token (the
	// HTTP server with --auth-tokens or --auth-jwks): a request without one — which the
	// token middleware lets none through — is then nobody, never Caller or stdio.
	Authenticated bool
	// Rate, when positive, is the requests a second each caller may make (tool calls,
	// resource reads and subscriptions), with a burst of one second's worth; past it a
	// request is refused with rate_limited.
	Rate float64
	// Now is the clock of the rate limiter (default time.Now).
	Now func() time.Time
}

// Surface is the surface runs asked for over MCP are recorded under.
const Surface = "mcp-server"

// caller returns who made a request: the caller its verified bearer token names, else
// the server's configured caller.
func (c Config) caller(extra *mcp.RequestExtra) runs.Caller {
	if extra != nil && extra.TokenInfo != nil {
		if c, ok := auth.FromTokenInfo(extra.TokenInfo); ok {
			return runs.Caller{ID: c.ID, Auth: c.Method}
		}
		// A token that verified but names nobody: an identity no policy can be about.
		return runs.Caller{ID: "", Auth: "unknown"}
	}
	if c.Authenticated {
		return runs.Caller{ID: "", Auth: "unknown"}
	}
	if c.Caller.ID == "" {
		return runs.Caller{ID: invoke.CallerStdio, Auth: invoke.CallerStdio}
	}
	return c.Caller
}

// AgentsMDURI is the URI of the AGENTS.md resource.
const AgentsMDURI = "file:///AGENTS.md"

// testNewServer, set by tests, is told of each server New makes and its handlers.
var testNewServer func(*mcp.Server, *handlers)

// New returns an MCP server with the tools and, when AGENTS.md is readable through the
// confined reader, the AGENTS.md resource.
func New(cfg Config) (s *mcp.Server) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h := &handlers{cfg: cfg}
	defer func() {
		if testNewServer != nil {
			testNewServer(s, h)
		}
	}()
	s = mcp.NewServer(&mcp.Implementation{Name: "symbi", Version: buildinfo.Version}, &mcp.ServerOptions{
		Logger:             cfg.Log,
		SubscribeHandler:   h.subscribe,
		UnsubscribeHandler: h.unsubscribe,
		Instructions:       "Governed agent invocation: invoke_agent asks one of this project's registered agents for a policy-checked text answer and returns it with a signed journal receipt. list_agents shows what can be invoked.",
	})
	no, yes := false, true
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}
	addTool(s, &mcp.Tool{Name: "invoke_agent", Title: "Invoke an agent (governed)", Description: invokeDescription,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}}, h.invokeAgent)
	addTool(s, &mcp.Tool{Name: "start_run", Title: "Start a governed run", Description: startRunDescription,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}}, h.startRun)
	addTool(s, &mcp.Tool{Name: "run_events", Title: "Read a run's events", Annotations: readOnly, Description: runEventsDescription}, h.runEvents,
		integer("limit", 1, runs.MaxLimit, runs.DefaultLimit), integer("wait_ms", 0, float64(runs.MaxWait.Milliseconds()), 0), integer("after", 0, 1<<53, 0))
	addTool(s, &mcp.Tool{Name: "run_status", Title: "A run's status", Annotations: readOnly, Description: "The status of one run: status (running, awaiting_approval, completed, policy_denied, inference_failed, cancelled, timeout, audit_failed, abandoned), reason, released, the released text when the journal retains it, the durable receipt (records, head), times, caller and the latest resolution. Also readable as the resource symbi://runs/{run_id}."}, h.runStatus)
	addTool(s, &mcp.Tool{Name: "cancel_run", Title: "Cancel a run", Description: "Cancel a run of this server. Waits (up to 10 s) for its journal to end with terminated, reason cancelled, and returns its status. Idempotent: a run that has already ended is answered with its status and already_finished=true, not an error.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}, h.cancelRun)
	addTool(s, &mcp.Tool{Name: "list_runs", Title: "List runs", Annotations: readOnly, Description: "List the project's runs, newest first: every run of this server and every run the project ledger records (they survive restarts). Filters: agent, status, resolution (or unresolved). Pages of limit (1..1000, default 100); pass next_cursor as after for the next page."}, h.listRuns,
		integer("limit", 1, runs.MaxLimit, runs.DefaultLimit), enum("status", runs.Statuses...), enum("resolution", append(slices.Clone(runs.Resolutions), runs.Unresolved)...))
	addTool(s, &mcp.Tool{Name: "resolve_run", Title: "Resolve a finished run", Description: "Record what you concluded about a finished run: accepted, rejected, needs_followup or superseded, with an optional note (at most 4 KiB). Each call appends a signed resolution entry to the project ledger, durable before the answer; the latest wins and a later call revises it. A run still running is invalid_transition. Resolution never changes status.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no}}, h.resolveRun, enum("resolution", runs.Resolutions...))
	addTool(s, &mcp.Tool{Name: "approve_run", Title: "Approve or reject a held answer", Description: approveRunDescription,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no}}, h.approveRun, enum("decision", invoke.ApprovalApprove, invoke.ApprovalReject))
	addTool(s, &mcp.Tool{Name: "list_agents", Title: "List agents", Annotations: readOnly, Description: "List the project's registered agent files (snapshot taken at server start): name (stem), file, declared agents, description, capabilities, and whether each is invocable — with the refusal reason when not. Sorted by name."}, h.listAgents)
	addTool(s, &mcp.Tool{Name: "parse_dsl", Title: "Parse an agent definition", Annotations: readOnly, Description: "Parse an agent definition — a project file (relative path, .symbi or .dsl, read through the confined reader) or inline content, at most 1 MiB — and return its views and admission verdicts. Syntax errors are results (valid=false, errors with line and column), not tool errors."}, h.parseDSL)
	addTool(s, &mcp.Tool{Name: "get_agent_dsl", Title: "Get an agent definition", Annotations: readOnly, Description: "Return the raw source of a registered agent file, by its stem (the file name without .symbi/.dsl)."}, h.getAgentDSL)
	addTool(s, &mcp.Tool{Name: "get_agents_md", Title: "Get AGENTS.md", Annotations: readOnly, Description: "Return the project's whole AGENTS.md (at most 64 KiB). Missing: not_found (create it with `symbi agents-md generate`)."}, h.getAgentsMD)
	addTool(s, &mcp.Tool{Name: "verify_schema", Title: "Verify a SchemaPin tool schema", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}, Description: "Verify a SchemaPin-signed tool schema: ECDSA P-256 over SHA-256 of the canonical schema JSON. Key inline (public_key_pem, offline) or from an HTTPS URL (public_key_url; private, loopback and metadata hosts refused). An invalid signature is a result with verified=false, not a tool error."}, h.verifySchema)
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: RunURITemplate, Name: "run", Title: "A governed run",
		Description: "run_status's JSON for one run; subscribe for notifications/resources/updated at each new journal event, its end and each resolution.", MIMEType: "application/json"}, h.readRun)
	if cfg.Rate > 0 {
		now := cfg.Now
		if now == nil {
			now = time.Now
		}
		s.AddReceivingMiddleware(newRateLimiter(cfg.Rate, now).middleware(&h.cfg))
	}
	// Added last, so it is outermost (each middleware added wraps the handler built so
	// far): a panic in any request's handling is that request's failure, not the server's
	// end.
	s.AddReceivingMiddleware(clipErrors)
	s.AddReceivingMiddleware(recoverPanics(cfg.Log))
	s.AddSendingMiddleware(h.notifyReaders)
	u := &updater{s: s, h: h}
	cfg.Runs.OnChange(u.changed)
	if _, err := cfg.Project.AgentsMD(); err == nil {
		s.AddResource(&mcp.Resource{URI: AgentsMDURI, Name: "AGENTS.md", Title: "Project guidance (AGENTS.md)", MIMEType: "text/markdown"}, h.readAgentsMD)
	} else {
		cfg.Log.Info("AGENTS.md resource not listed", "reason", err)
	}
	return s
}

const startRunDescription = "Start a governed run of one of the project's registered agents and return at once, when its journal's started record is durable: " +
	"run_id, agent, agent_id, status (running) and the audit reference. The run is the same governed run as invoke_agent's; it belongs to the server, " +
	"not to this request, so it goes on after the call returns. Follow it with run_events (by cursor, with wait_ms to long-poll) or by subscribing to symbi://runs/{run_id}; " +
	"read the outcome with run_status; cancel it with cancel_run; record your conclusion with resolve_run. Arguments as invoke_agent."

const approveRunDescription = "Decide a run whose answer a @gate(\"human\") policy holds (status awaiting_approval): decision approve releases the text, reject ends the run withheld (policy_denied, naming the gate); " +
	"reason (required, not blank, at most 4 KiB) says why: what the approver checked. The decision is signed into the run's journal and the project ledger before the text is released. " +
	"request_id names the wait decided (run_status's approval says what the run waits for): a delegated agent's held permission request by its request_id, a held answer as \"answer\". " +
	"It is required for a permission request and for any wait of a delegated run, which may wait more than once (invalid_request without it), so that a decision never reaches a wait its approver did not see; " +
	"a model run's held answer, its only wait, may be decided without it. " +
	"Over HTTP a caller may by default approve only runs another caller started (Cedar approve_run). A run not awaiting approval, or not for the wait named, is invalid_transition. " +
	"Returns the run's status once it has ended (for a permission request, once the decision is durable: the run goes on)."

const runEventsDescription = "Read a run's events: its journal records, in order, each with its exact signed line (verify offline with the project's public key). " +
	"after is a cursor: the number of events already read (0 for the first); pass next_cursor to read on — pages never overlap or skip. limit 1..1000 (default 100). " +
	"wait_ms (0..30000): when no event is after the cursor, wait for one, or for the run's end. done is true when the run has ended and every event has been read."

const invokeDescription = "Ask one of the project's registered agents for one policy-checked text answer. " +
	"Only canonical conversational definitions are invoked. Every step is written to an Ed25519-signed, hash-chained journal " +
	"before the answer is released, and the exact text must pass the project's Cedar `respond` policy. " +
	"Returns the text, and in structuredContent the agent, its agent_id and the audit reference " +
	"(run_id, journal path, public_key, and the receipt: records, head) for `symbi audit verify`. " +
	"prompt and system_prompt: at most 64 KiB each; system_prompt is passed as labelled caller input, never as the system message."

// toolError is the structured form of a tool failure.
type toolError struct {
	Code    string `json:"code" jsonschema:"stable error code (docs/errors.md)"`
	Message string `json:"message" jsonschema:"what failed and which rule refused"`
}

// errorOutput is the structuredContent of a failed call.
type errorOutput struct {
	Error toolError     `json:"error"`
	Audit *invoke.Audit `json:"audit,omitempty"`
}

// handler is a tool's logic: it returns the text content (nil for the JSON of out) and
// the structured output, or an error carrying its code.
type handler[In, Out any] func(ctx context.Context, req *mcp.CallToolRequest, in In) (text *string, out Out, err error)

// addTool registers t with schemas derived from In and Out and strict argument decoding,
// so that every failure — bad arguments included — is a coded tool error.
// Each of adjust is applied to the derived input schema.
func addTool[In, Out any](s *mcp.Server, t *mcp.Tool, h handler[In, Out], adjust ...func(*jsonschema.Schema)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: input schema of %s: %v", t.Name, err))
	}
	for _, f := range adjust {
		f(in)
	}
	t.InputSchema = in
	t.OutputSchema = outputSchema[Out](t.Name)
	s.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args In
		if err := decodeArgs(req.Params.Arguments, &args); err != nil {
			return errorResult(errcode.Errorf(errcode.InvalidRequest, "arguments of %s: %v", t.Name, err)), nil
		}
		text, out, err := h(ctx, req, args)
		if err != nil {
			return errorResult(err), nil
		}
		raw, err := json.Marshal(out)
		if err != nil {
			return errorResult(errcode.Errorf(errcode.Internal, "encoding result: %v", err)), nil
		}
		content := string(raw)
		if text != nil { // the tool's raw text (an answer, a file), even when empty
			content = *text
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: content}}, StructuredContent: json.RawMessage(raw)}, nil
	})
}

// outputSchema is Out's schema with an "error" property beside its own: a result holds
// either Out's required properties or "error"; either may carry "audit". MCP requires an output schema whose
// top-level type is exactly "object", so a pointer result type is described by the type
// it points to (jsonschema would make it ["null","object"]); a handler never returns a
// nil result without an error.
func outputSchema[Out any](tool string) *jsonschema.Schema {
	rt := reflect.TypeFor[Out]()
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	out, err := jsonschema.ForType(rt, nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: output schema of %s: %v", tool, err))
	}
	errSchema, err := jsonschema.For[errorOutput](nil)
	if err != nil {
		panic(err)
	}
	if out.Properties == nil {
		out.Properties = map[string]*jsonschema.Schema{}
	}
	out.Properties["error"] = errSchema.Properties["error"]
	audit, ok := out.Properties["audit"]
	if !ok {
		audit = errSchema.Properties["audit"]
	}
	// A result that has an audit has a journal: the member is an object, never null
	// (jsonschema allows null for a pointer).
	a := *audit
	a.Types, a.Type = nil, "object"
	out.Properties["audit"] = &a
	success := &jsonschema.Schema{Required: out.Required}
	out.Required = nil
	out.AnyOf = []*jsonschema.Schema{success, {Required: []string{"error"}}}
	return out
}

// decodeArgs decodes tool arguments strictly into v, a pointer to a struct: one JSON
// object whose member names each match a json tag of the struct exactly and appear at
// most once (encoding/json alone would fold case and let a repeated member win), with
// values of the declared types — null is none (encoding/json would read it as the member
// left out). A string field tagged args:"nonempty" may be left out but, given, not be
// empty (an optional filter or choice: "" is none of its values).
func decodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	known := map[string]reflect.StructField{}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			known[name] = t.Field(i)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("arguments must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name := tok.(string)
		field, ok := known[name]
		switch {
		case !ok:
			return fmt.Errorf("unknown argument %s", errcode.Quote(name))
		case seen[name]:
			return fmt.Errorf("argument %s given twice", errcode.Quote(name))
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		switch {
		case string(value) == "null" && !strings.Contains(field.Tag.Get("json"), ",omitempty"):
			return fmt.Errorf("%s is required: %s, not null", name, jsonType(field.Type))
		case string(value) == "null":
			return fmt.Errorf("%s must be %s, not null (leave it out for none)", name, jsonType(field.Type))
		case string(value) == `""` && field.Tag.Get("args") == "nonempty":
			return fmt.Errorf("%s is empty (leave it out for none)", name)
		}
	}
	dec = json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s must be %s", te.Field, jsonType(te.Type))
		}
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the arguments object")
	}
	return nil
}

func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem() // an optional argument: its value's type
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64:
		// 100.0 and 1e2 are integers to JSON Schema but not to Go's decoder: say what is read.
		return "an integer written without a fraction or exponent, within range"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "an array"
	}
	return "an object"
}

// errorResult turns err into an isError result: "<code>: <message>" and the structured
// error, with the audit reference when the run had one.
func errorResult(err error) *mcp.CallToolResult {
	out := errorOutput{Error: toolError{Code: string(errcode.Of(err)), Message: err.Error()}}
	var ie *invoke.Error
	if errors.As(err, &ie) {
		out.Audit = ie.Audit
	}
	raw, _ := json.Marshal(out)
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: errcode.Text(err)}},
		StructuredContent: json.RawMessage(raw),
	}
}

// MaxErrorMessage bounds the bytes of a protocol error's message.
const MaxErrorMessage = 1024

// clipMessage is msg cut so that it and the note of its length ("…(N bytes in all)")
// together fit MaxErrorMessage bytes; msg itself when it fits.
func clipMessage(msg string) string {
	if len(msg) <= MaxErrorMessage {
		return msg
	}
	return errcode.ClipTo(msg, MaxErrorMessage-len(fmt.Sprintf("…(%d bytes in all)", len(msg))))
}

// clipData bounds an error's data at MaxErrorMessage bytes: the SDK's refusals carry the
// caller's text there too (resources/read of an unknown URI of megabytes answers
// {"uri": …} with it whole). Data that fits is kept as it is; else each string in it is
// cut at errcode.MaxQuoted bytes, its length said, and data still over the bound is left
// out.
func clipData(data json.RawMessage) json.RawMessage {
	if len(data) <= MaxErrorMessage {
		return data
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	out, err := json.Marshal(clipStrings(v))
	if err != nil || len(out) > MaxErrorMessage {
		return nil
	}
	return out
}

// clipStrings is v with every string in it cut as errcode.ClipTo cuts at MaxQuoted bytes.
func clipStrings(v any) any {
	switch v := v.(type) {
	case string:
		return errcode.ClipTo(v, errcode.MaxQuoted)
	case []any:
		for i := range v {
			v[i] = clipStrings(v[i])
		}
	case map[string]any:
		clipped := make(map[string]any, len(v))
		for k, e := range v {
			clipped[errcode.ClipTo(k, errcode.MaxQuoted)] = clipStrings(e)
		}
		return clipped
	}
	return v
}

// clipErrors bounds every protocol error a request is answered with: its message at
// MaxErrorMessage bytes, its length said (the SDK's own refusals quote the caller's text
// whole, an unknown tool or prompt name of megabytes, where symbi's messages quote at most
// errcode.MaxQuoted bytes of it), and its data as clipData bounds it. The code is kept.
func clipErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err == nil {
			return res, err
		}
		var we *jsonrpc.Error
		direct := errors.As(err, &we) && we == err
		if len(err.Error()) <= MaxErrorMessage && (!direct || len(we.Data) <= MaxErrorMessage) {
			return res, err
		}
		msg := clipMessage(err.Error())
		switch {
		case direct:
			return res, &jsonrpc.Error{Code: we.Code, Message: clipMessage(we.Message), Data: clipData(we.Data)}
		case we != nil:
			return res, &jsonrpc.Error{Code: we.Code, Message: msg}
		}
		return res, errors.New(msg)
	}
}

// recoverPanics answers a request whose handling panicked (a bug) with an internal error
// — a tool error for a tool call, a JSON-RPC error otherwise — and logs the stack: the
// server keeps serving its other requests and runs.
func recoverPanics(log *slog.Logger) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				log.Error("a request's handling panicked", "method", method, "panic", v, "stack", string(debug.Stack()))
				fail := errcode.Errorf(errcode.Internal, "%s failed on an internal error (the server's log has its stack)", method)
				if method == "tools/call" {
					res, err = errorResult(fail), nil
					return
				}
				res, err = nil, protocolError(fail)
			}()
			return next(ctx, method, req)
		}
	}
}
