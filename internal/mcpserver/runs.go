package mcpserver

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/errcode"
	"symbi/internal/invoke"
	"symbi/internal/policy"
	"symbi/internal/runs"
)

// RunURIPrefix starts the URI of a run resource: symbi://runs/{run_id}.
const (
	RunURIPrefix   = "symbi://runs/"
	RunURITemplate = RunURIPrefix + "{run_id}"
)

type startOutput struct {
	RunID   string        `json:"run_id"`
	Agent   string        `json:"agent" jsonschema:"the declared agent name"`
	AgentID string        `json:"agent_id"`
	Status  string        `json:"status" jsonschema:"running, unless the run has already ended"`
	Audit   *invoke.Audit `json:"audit" jsonschema:"the run's journal: run_id, absolute path, Ed25519 public key (hex), and the durable receipt so far"`
}

type startInput struct {
	Agent        string `json:"agent" jsonschema:"the agent's registry name: its file name without .symbi/.dsl"`
	Prompt       string `json:"prompt" jsonschema:"the question or task for the agent (at most 64 KiB)"`
	SystemPrompt string `json:"system_prompt,omitempty" jsonschema:"optional caller instructions, passed as labelled caller input (at most 64 KiB)"`
	Workspace    string `json:"workspace,omitempty" jsonschema:"delegated agents only: the absolute workspace directory, inside a root the server granted (default: the project)"`
}

func (h *handlers) startRun(ctx context.Context, req *mcp.CallToolRequest, in startInput) (*string, startOutput, error) {
	by := h.cfg.caller(req.Extra)
	if err := h.cfg.Runs.AuthorizeStart(by, in.Agent); err != nil {
		return nil, startOutput{}, err
	}
	st, audit, err := h.cfg.Runs.Start(ctx, invoke.Request{Agent: in.Agent, Prompt: in.Prompt, SystemPrompt: in.SystemPrompt,
		Workspace: in.Workspace, Async: true, Surface: Surface, Caller: by.ID, CallerAuth: by.Auth})
	if err != nil {
		return nil, startOutput{}, err
	}
	return nil, startOutput{RunID: st.RunID, Agent: st.Agent, AgentID: st.AgentID, Status: st.Status,
		Audit: audit}, nil
}

type runInput struct {
	RunID string `json:"run_id" jsonschema:"the run's id (from start_run, invoke_agent's audit, or list_runs)"`
}

type eventsInput struct {
	RunID  string `json:"run_id" jsonschema:"the run's id"`
	After  int64  `json:"after,omitempty" jsonschema:"cursor: the number of events already read (default 0, the first event); pass next_cursor"`
	Limit  *int   `json:"limit,omitempty" jsonschema:"at most this many events, 1..1000 (default 100)"`
	WaitMS int64  `json:"wait_ms,omitempty" jsonschema:"long poll: when no event is after the cursor, wait up to this many milliseconds (0..30000, default 0) for one or for the run's end"`
}

func (h *handlers) runEvents(ctx context.Context, req *mcp.CallToolRequest, in eventsInput) (*string, *runs.Events, error) {
	if in.WaitMS < 0 || in.WaitMS > runs.MaxWait.Milliseconds() {
		return nil, nil, errcode.Errorf(errcode.InvalidRequest, "wait_ms is %d; it must be 0..%d", in.WaitMS, runs.MaxWait.Milliseconds())
	}
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, nil, err
	}
	if _, err := h.cfg.Runs.Authorize(h.cfg.caller(req.Extra), policy.ActionReadRun, in.RunID); err != nil {
		return nil, nil, err
	}
	evs, err := h.cfg.Runs.Events(ctx, in.RunID, in.After, limit, time.Duration(in.WaitMS)*time.Millisecond)
	if err != nil {
		return nil, nil, err
	}
	return nil, evs, nil
}

func (h *handlers) runStatus(ctx context.Context, req *mcp.CallToolRequest, in runInput) (*string, *runs.Status, error) {
	st, err := h.cfg.Runs.StatusFor(h.cfg.caller(req.Extra), in.RunID)
	if err != nil {
		return nil, nil, err
	}
	return nil, st, nil
}

// runStatus lets cancelOutput embed runs.Status under another name: embedded as Status,
// the field would hide its own member Status from jsonschema (Go's promotion rules), and
// the advertised schema would lack "status" while the result carries it.
type runStatus = runs.Status

type cancelOutput struct {
	runStatus
	AlreadyFinished bool `json:"already_finished" jsonschema:"the run had ended before the request: nothing was cancelled"`
}

func (h *handlers) cancelRun(ctx context.Context, req *mcp.CallToolRequest, in runInput) (*string, *cancelOutput, error) {
	if _, err := h.cfg.Runs.Authorize(h.cfg.caller(req.Extra), policy.ActionCancelRun, in.RunID); err != nil {
		return nil, nil, err
	}
	st, already, err := h.cfg.Runs.Cancel(ctx, in.RunID)
	if err != nil {
		return nil, nil, err
	}
	return nil, &cancelOutput{runStatus: *st, AlreadyFinished: already}, nil
}

type listRunsInput struct {
	Agent      string `json:"agent,omitempty" args:"nonempty" jsonschema:"only runs of this agent: its registry name, declared name or agent_id"`
	Status     string `json:"status,omitempty" args:"nonempty" jsonschema:"only runs with this status"`
	Resolution string `json:"resolution,omitempty" args:"nonempty" jsonschema:"only runs with this latest resolution, or unresolved"`
	After      string `json:"after,omitempty" args:"nonempty" jsonschema:"the next_cursor of the previous page"`
	Limit      *int   `json:"limit,omitempty" jsonschema:"at most this many runs, 1..1000 (default 100)"`
}

func (h *handlers) listRuns(ctx context.Context, req *mcp.CallToolRequest, in listRunsInput) (*string, *runs.Page, error) {
	limit, err := pageLimit(in.Limit)
	if err != nil {
		return nil, nil, err
	}
	by := h.cfg.caller(req.Extra)
	page, err := h.cfg.Runs.List(runs.Filter{Agent: in.Agent, Status: in.Status, Resolution: in.Resolution, After: in.After, Limit: limit, Reader: &by})
	if err != nil {
		return nil, nil, err
	}
	return nil, page, nil
}

type resolveInput struct {
	RunID      string `json:"run_id" jsonschema:"the run's id"`
	Resolution string `json:"resolution" jsonschema:"accepted, rejected, needs_followup or superseded"`
	Note       string `json:"note,omitempty" jsonschema:"why (at most 4 KiB)"`
}

func (h *handlers) resolveRun(ctx context.Context, req *mcp.CallToolRequest, in resolveInput) (*string, *runs.Status, error) {
	by := h.cfg.caller(req.Extra)
	// The arguments first, then the run: a caller hears of a bad argument before of a
	// run it may not see.
	if err := runs.CheckResolution(in.Resolution, in.Note); err != nil {
		return nil, nil, err
	}
	if _, err := h.cfg.Runs.Authorize(by, policy.ActionResolveRun, in.RunID); err != nil {
		return nil, nil, err
	}
	st, err := h.cfg.Runs.Resolve(in.RunID, in.Resolution, in.Note, by)
	if err != nil {
		return nil, nil, err
	}
	return nil, st, nil
}

type approveInput struct {
	RunID     string `json:"run_id" jsonschema:"the run's id"`
	RequestID string `json:"request_id,omitempty" jsonschema:"the wait decided: a held permission request's request_id (from run_status's approval), or \"answer\" for the held answer. Required for a permission request and for any wait of a delegated run; optional only for a model run's held answer. A decision never reaches a wait it does not name"`
	Decision  string `json:"decision" jsonschema:"approve or reject"`
	Reason    string `json:"reason" jsonschema:"why: what the approver checked, recorded with the decision (required, not blank; at most 4 KiB)"`
}

func (h *handlers) approveRun(ctx context.Context, req *mcp.CallToolRequest, in approveInput) (*string, *runs.Status, error) {
	st, err := h.cfg.Runs.Approve(ctx, h.cfg.caller(req.Extra), in.RunID, in.RequestID, in.Decision, in.Reason)
	if err != nil {
		return nil, nil, err
	}
	return nil, st, nil
}

// readRun serves symbi://runs/{run_id}: run_status's JSON.
func (h *handlers) readRun(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	id, ok := strings.CutPrefix(req.Params.URI, RunURIPrefix)
	if !ok {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	st, err := h.cfg.Runs.StatusFor(h.cfg.caller(req.Extra), id)
	if err != nil {
		return nil, resourceError(req.Params.URI, err)
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	// One caller's view of a run, decided by its access (its text, an approver's held
	// answer): no shared cache may keep it for another ("public" is the default).
	return &mcp.ReadResourceResult{Cacheable: mcp.Cacheable{CacheScope: "private"},
		Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(raw)}}}, nil
}

// notFollowed refuses a subscription, or its end, to a URI that is not a run resource's:
// AGENTS.md exists but is not followed, anything else is not found.
func notFollowed(uri string) error {
	if uri == AgentsMDURI {
		// It exists, but changes only when the file is regenerated: not a resource to follow.
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "only run resources (" + RunURITemplate + ") can be subscribed to; read " + AgentsMDURI + " again to see a change"}
	}
	return mcp.ResourceNotFoundError(uri)
}

// subscribe accepts a subscription to a run resource that exists.
func (h *handlers) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	id, ok := strings.CutPrefix(req.Params.URI, RunURIPrefix)
	if !ok {
		return notFollowed(req.Params.URI)
	}
	by := h.cfg.caller(req.Extra)
	if _, err := h.cfg.Runs.Authorize(by, policy.ActionReadRun, id); err != nil {
		return resourceError(req.Params.URI, err)
	}
	h.subsMu.Lock()
	defer h.subsMu.Unlock()
	if h.subs == nil {
		h.subs = map[string]map[*mcp.ServerSession]runs.Caller{}
	}
	if h.subs[req.Params.URI] == nil {
		h.subs[req.Params.URI] = map[*mcp.ServerSession]runs.Caller{}
	}
	h.subs[req.Params.URI][req.Session] = by
	if ss := req.Session; !h.watched[ss] {
		// Over HTTP one server outlives many sessions: a session's subscriptions end
		// with it (closed by its client or for idleness), not only by unsubscribing.
		if h.watched == nil {
			h.watched = map[*mcp.ServerSession]bool{}
		}
		h.watched[ss] = true
		go func() {
			ss.Wait()
			h.dropSession(ss)
		}()
	}
	return nil
}

// unsubscribe ends a subscription to a run resource; ending one that was never made is no
// error, but a URI no subscription can name is refused as subscribe refuses it.
func (h *handlers) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	if !strings.HasPrefix(req.Params.URI, RunURIPrefix) {
		return notFollowed(req.Params.URI)
	}
	h.subsMu.Lock()
	defer h.subsMu.Unlock()
	h.drop(req.Params.URI, req.Session)
	return nil
}

// drop removes ss's subscription to uri, with h.subsMu held.
func (h *handlers) drop(uri string, ss *mcp.ServerSession) {
	delete(h.subs[uri], ss)
	if len(h.subs[uri]) == 0 {
		delete(h.subs, uri)
	}
}

// dropSession removes every subscription of ss, which has ended.
func (h *handlers) dropSession(ss *mcp.ServerSession) {
	h.subsMu.Lock()
	defer h.subsMu.Unlock()
	for uri := range h.subs {
		h.drop(uri, ss)
	}
	delete(h.watched, ss)
}

// subscriptions returns how many sessions are subscribed to some run resource, and how
// many are watched until they end (tests).
func (h *handlers) subscriptions() (sessions, watched int) {
	h.subsMu.Lock()
	defer h.subsMu.Unlock()
	seen := map[*mcp.ServerSession]bool{}
	for _, m := range h.subs {
		for ss := range m {
			seen[ss] = true
		}
	}
	return len(seen), len(h.watched)
}

// subscriber returns the caller whose subscription to uri ss holds.
func (h *handlers) subscriber(uri string, ss *mcp.ServerSession) (runs.Caller, bool) {
	h.subsMu.Lock()
	defer h.subsMu.Unlock()
	by, ok := h.subs[uri][ss]
	return by, ok
}

// notifyReaders is the server's sending middleware that decides, for each session, a run's
// notifications/resources/updated again when it is sent: read access can end after a
// subscription was accepted (an approver's, once the gate is decided), and a caller that
// may no longer read a run is not told when it changes. A notification for a subscription
// this server did not accept, or whose decision fails, is not sent.
func (h *handlers) notifyReaders(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != notificationResourceUpdated {
			return next(ctx, method, req)
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		p, _ := req.GetParams().(*mcp.ResourceUpdatedNotificationParams)
		if ss == nil || p == nil {
			return nil, nil
		}
		by, ok := h.subscriber(p.URI, ss)
		id, isRun := strings.CutPrefix(p.URI, RunURIPrefix)
		if !ok || !isRun {
			return nil, nil
		}
		if _, err := h.cfg.Runs.Authorize(by, policy.ActionReadRun, id); err != nil {
			if c := errcode.Of(err); c != errcode.AccessDenied && c != errcode.RunNotFound {
				h.cfg.Log.Warn("run notification not sent: read access could not be decided", "uri", p.URI, "caller", by.ID, "err", err)
			}
			return nil, nil
		}
		return next(ctx, method, req)
	}
}

// notificationResourceUpdated is the method of the notification a subscription gets.
const notificationResourceUpdated = "notifications/resources/updated"

// subscribed reports whether some session subscribed to uri.
func (h *handlers) subscribed(uri string) bool {
	h.subsMu.Lock()
	defer h.subsMu.Unlock()
	return len(h.subs[uri]) > 0
}

// resourceError is the answer to reading or subscribing to a run resource that cannot be
// had: not found for a run that does not exist (or a URI that names none), else the coded
// error itself — a ledger that no longer verifies is not "not found".
func resourceError(uri string, err error) error {
	switch errcode.Of(err) {
	case errcode.RunNotFound, errcode.InvalidRequest, errcode.NotFound:
		return mcp.ResourceNotFoundError(uri)
	}
	return protocolError(err)
}

// codeServerError is the JSON-RPC code of a coded refusal of a request that is not a tool
// call (a resource read or subscription): its message is "<code>: <message>", as a tool
// error's text.
const codeServerError = -32000

// protocolError is err as a JSON-RPC error: code -32000, message "<code>: <message>".
func protocolError(err error) error {
	return &jsonrpc.Error{Code: codeServerError, Message: errcode.Text(err)}
}

// updater sends notifications/resources/updated for runs that changed, coalescing: a run
// that changes again before its notification is sent gets one. It never blocks the run
// manager; one sender goroutine runs while there is something to send.
type updater struct {
	s       *mcp.Server
	h       *handlers
	mu      sync.Mutex
	pending []string
	queued  map[string]bool
	sending bool
}

func (u *updater) changed(runID string) {
	if !u.h.subscribed(RunURIPrefix + runID) {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.queued[runID] {
		return
	}
	if u.queued == nil {
		u.queued = map[string]bool{}
	}
	u.queued[runID] = true
	u.pending = append(u.pending, runID)
	if !u.sending {
		u.sending = true
		go u.send()
	}
}

func (u *updater) send() {
	for {
		u.mu.Lock()
		if len(u.pending) == 0 {
			u.sending = false
			u.mu.Unlock()
			return
		}
		id := u.pending[0]
		u.pending = u.pending[1:]
		delete(u.queued, id)
		u.mu.Unlock()
		_ = u.s.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: RunURIPrefix + id})
	}
}

// pageLimit reads an optional limit argument: absent is runs.DefaultLimit (null is refused by decodeArgs).
func pageLimit(limit *int) (int, error) {
	switch {
	case limit == nil:
		return runs.DefaultLimit, nil
	case *limit < 1 || *limit > runs.MaxLimit:
		return 0, errcode.Errorf(errcode.InvalidRequest, "limit is %d; it must be 1..%d", *limit, runs.MaxLimit)
	}
	return *limit, nil
}

// integer makes an optional integer property of a tool's input schema a plain integer
// with bounds and a default (jsonschema would describe a pointer as ["null","integer"]).
func integer(prop string, lo, hi, def float64) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		p := s.Properties[prop]
		if p == nil {
			panic("mcpserver: no input property " + prop)
		}
		p.Type, p.Types = "integer", nil
		p.Minimum, p.Maximum = &lo, &hi
		p.Default = json.RawMessage(strconv.FormatFloat(def, 'f', -1, 64))
	}
}

// enum lists the values a string property of a tool's input schema takes.
func enum(prop string, values ...string) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) {
		p := s.Properties[prop]
		if p == nil {
			panic("mcpserver: no input property " + prop)
		}
		p.Enum = make([]any, len(values))
		for i, v := range values {
			p.Enum[i] = v
		}
	}
}
