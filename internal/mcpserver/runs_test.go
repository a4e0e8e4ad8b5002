package mcpserver_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/invoke"
	"symbi/internal/journal"
	"symbi/internal/loopback"
	"symbi/internal/mcpserver"
	"symbi/internal/runs"
)

// gatedModel is a loopback model whose answers to prompts starting with "hold" wait until
// the test opens the gate; "hang" prompts are never answered. Other prompts are echoed.
type gatedModel struct {
	*loopback.Server
	gate chan struct{}
	once sync.Once
}

func newGatedModel(t *testing.T) *gatedModel {
	t.Helper()
	m := &gatedModel{gate: make(chan struct{})}
	m.Server = loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		switch {
		case strings.Contains(r.Prompt, "hang"):
			return loopback.Reply{Fault: loopback.FaultHang}
		case strings.Contains(r.Prompt, "hold"):
			<-m.gate
		}
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.open(); m.Close() })
	return m
}

func (m *gatedModel) open() { m.once.Do(func() { close(m.gate) }) }

func (m *gatedModel) env() map[string]string {
	return map[string]string{"OPENAI_BASE_URL": m.URL(), "CHAT_MODEL": "loopback-test"}
}

type startContent struct {
	RunID   string        `json:"run_id"`
	Agent   string        `json:"agent"`
	AgentID string        `json:"agent_id"`
	Status  string        `json:"status"`
	Audit   *invoke.Audit `json:"audit"`
}

type cancelContent struct {
	runs.Status
	AlreadyFinished bool `json:"already_finished"`
}

// callOK calls a tool that must succeed and decodes its structuredContent strictly.
func callOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: %s", name, args, textOf(t, res))
	}
	decodeStrict(t, structuredJSON(t, res), out)
}

// verifyEvent checks that an event's line is a journal line signed by pub with the
// event's seq and type, and returns the line's hash and the prev it names. A withheld
// event (output before its release) has no line: only a record type that carries output
// or its digest, and its hash.
func verifyEvent(t *testing.T, pub ed25519.PublicKey, ev runs.Event) (hash, prev string) {
	t.Helper()
	if ev.Withheld != "" {
		switch ev.Type {
		case journal.TypeInferenceFinished, journal.TypeSessionFinished, journal.TypeAgentMessage, journal.TypeAgentThought, journal.TypeToolCallUpdate, journal.TypePlan,
			journal.TypePolicyEvaluated, journal.TypeApprovalRequested, journal.TypePolicyReevaluated:
		default:
			t.Fatalf("event %d: a %s record withheld", ev.Seq, ev.Type)
		}
		if ev.Line != "" || len(ev.LineSHA256) != 64 {
			t.Fatalf("withheld event %+v", ev)
		}
		return ev.LineSHA256, ""
	}
	p, err := journal.Open([]byte(ev.Line+"\n"), pub, journal.SignatureContext, new([]byte))
	if err != nil {
		t.Fatalf("event %d: %v", ev.Seq, err)
	}
	var payload struct {
		Seq  int64  `json:"seq"`
		Type string `json:"type"`
		Time string `json:"time"`
		Prev string `json:"prev"`
	}
	if err := json.Unmarshal(p, &payload); err != nil || payload.Seq != ev.Seq || payload.Type != ev.Type || payload.Time != ev.Time {
		t.Fatalf("event %+v does not match its signed line %s (%v)", ev, p, err)
	}
	sum := sha256.Sum256([]byte(ev.Line + "\n"))
	return hex.EncodeToString(sum[:]), payload.Prev
}

// readAll reads every event of a run in pages of limit, checking that cursors neither
// skip nor repeat, until done.
func readAll(t *testing.T, cs *mcp.ClientSession, runID string, limit int, pub ed25519.PublicKey) []runs.Event {
	t.Helper()
	var all []runs.Event
	var cursor int64
	chain := journal.ZeroHash
	for range 1000 {
		var page runs.Events
		callOK(t, cs, "run_events", map[string]any{"run_id": runID, "after": cursor, "limit": limit, "wait_ms": 30000}, &page)
		if len(page.Events) > limit {
			t.Fatalf("%d events in a page of limit %d", len(page.Events), limit)
		}
		for i, ev := range page.Events {
			if ev.Seq != cursor+int64(i) {
				t.Fatalf("event seq %d at cursor %d+%d: a gap or a repeat", ev.Seq, cursor, i)
			}
			hash, prev := verifyEvent(t, pub, ev)
			if prev != "" && prev != chain {
				t.Fatalf("event %d names prev %s, but the line before hashes to %s", ev.Seq, prev, chain)
			}
			chain = hash
		}
		all = append(all, page.Events...)
		if page.NextCursor != cursor+int64(len(page.Events)) {
			t.Fatalf("next_cursor %d after %d events from %d", page.NextCursor, len(page.Events), cursor)
		}
		cursor = page.NextCursor
		if page.Done {
			return all
		}
	}
	t.Fatal("run_events never reported done")
	return nil
}

func TestRunLifecycle(t *testing.T) {
	model := newGatedModel(t)
	dir := testProject(t, nil)
	cs := serve(t, dir, serveOpts{env: model.env()})

	var st startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hold then answer"}, &st)
	if st.Status != runs.StatusRunning || st.Agent != "helper" || st.Audit == nil || st.Audit.RunID != st.RunID || st.Audit.Records < 1 {
		t.Fatalf("start_run %+v", st)
	}
	checkAudit(t, dir, st.Audit)
	pubBytes, err := hex.DecodeString(st.Audit.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.PublicKey(pubBytes)

	// While the model holds the answer: running, and resolving it is refused.
	var status runs.Status
	callOK(t, cs, "run_status", map[string]any{"run_id": st.RunID}, &status)
	if status.Status != runs.StatusRunning || status.Released || status.Text != nil || status.StartedAt == "" || status.Caller != invoke.CallerStdio {
		t.Fatalf("run_status while held: %+v", status)
	}
	wantToolError(t, call(t, cs, "resolve_run", map[string]any{"run_id": st.RunID, "resolution": "accepted"}), "invalid_transition", "running")

	// The events durable so far, then a long poll that the model's answer wakes.
	var first runs.Events
	callOK(t, cs, "run_events", map[string]any{"run_id": st.RunID}, &first)
	if len(first.Events) != 2 || first.Events[0].Type != "started" || first.Events[1].Type != "inference_requested" || first.Done || first.Status != runs.StatusRunning {
		t.Fatalf("events while held: %+v", first)
	}
	polled := make(chan runs.Events, 1)
	go func() {
		var page runs.Events
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_events", Arguments: map[string]any{"run_id": st.RunID, "after": first.NextCursor, "wait_ms": 30000}})
		if err == nil && !res.IsError {
			raw, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(raw, &page)
		}
		polled <- page
	}()
	model.open()
	page := <-polled
	if len(page.Events) == 0 || page.Events[0].Seq != first.NextCursor {
		t.Fatalf("the long poll returned %+v; want the events after cursor %d", page, first.NextCursor)
	}

	// Every event in pages of 2: in order, each a verified signed line, ending done.
	all := readAll(t, cs, st.RunID, 2, pub)
	types := []string{}
	for _, ev := range all {
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, ","); got != "started,inference_requested,inference_finished,policy_evaluated,terminated" {
		t.Fatalf("event types %s", got)
	}

	callOK(t, cs, "run_status", map[string]any{"run_id": st.RunID}, &status)
	if status.Status != runs.StatusCompleted || !status.Released || status.Text == nil || *status.Text != "echo: hold then answer" ||
		status.TextRetained == nil || !*status.TextRetained || status.Records != 5 || status.EndedAt == "" || status.Resolution != nil {
		t.Fatalf("run_status after the answer: %+v", status)
	}
	if rep := journal.Verify(status.Journal, pub, journal.VerifyOptions{RunID: st.RunID}); rep.Status != "complete" {
		t.Fatalf("journal: %+v", rep)
	}

	// Resolve, then revise: the latest wins, revisions counts every entry.
	callOK(t, cs, "resolve_run", map[string]any{"run_id": st.RunID, "resolution": "accepted"}, &status)
	if status.Resolution == nil || status.Resolution.Value != "accepted" || status.Resolution.Revisions != 1 || status.Status != runs.StatusCompleted {
		t.Fatalf("resolve: %+v", status.Resolution)
	}
	callOK(t, cs, "resolve_run", map[string]any{"run_id": st.RunID, "resolution": "needs_followup", "note": "check the sources"}, &status)
	if r := status.Resolution; r == nil || r.Value != "needs_followup" || r.Note != "check the sources" || r.Revisions != 2 || r.Caller != invoke.CallerStdio || r.Time == "" {
		t.Fatalf("revised resolution: %+v", r)
	}

	// Cancelling a finished run is not an error.
	var cancelled cancelContent
	callOK(t, cs, "cancel_run", map[string]any{"run_id": st.RunID}, &cancelled)
	if !cancelled.AlreadyFinished || cancelled.Status.Status != runs.StatusCompleted {
		t.Fatalf("cancel_run of a finished run: %+v", cancelled)
	}

	// list_runs finds it, with its resolution, and filters.
	var list runs.Page
	callOK(t, cs, "list_runs", map[string]any{"resolution": "needs_followup"}, &list)
	if len(list.Runs) != 1 || list.Runs[0].RunID != st.RunID || list.Runs[0].Text != nil {
		t.Fatalf("list_runs resolution=needs_followup: %+v", list)
	}
	callOK(t, cs, "list_runs", map[string]any{"resolution": "unresolved"}, &list)
	if len(list.Runs) != 0 {
		t.Fatalf("list_runs unresolved: %+v", list)
	}
}

func TestCancelRun(t *testing.T) {
	model := newGatedModel(t)
	cs := serve(t, testProject(t, nil), serveOpts{env: model.env()})
	var st startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang forever"}, &st)
	var c cancelContent
	callOK(t, cs, "cancel_run", map[string]any{"run_id": st.RunID}, &c)
	if c.AlreadyFinished || c.Status.Status != runs.StatusCancelled || !strings.Contains(c.Status.Reason, "cancel_run") {
		t.Fatalf("cancel_run: %+v", c)
	}
	callOK(t, cs, "cancel_run", map[string]any{"run_id": st.RunID}, &c)
	if !c.AlreadyFinished || c.Status.Status != runs.StatusCancelled {
		t.Fatalf("second cancel_run: %+v", c)
	}
	pub, _ := hex.DecodeString(st.Audit.PublicKey)
	all := readAll(t, cs, st.RunID, 100, pub)
	if last := all[len(all)-1]; last.Type != "terminated" || !strings.Contains(last.Line, `"reason":"cancelled"`) {
		t.Fatalf("last event %+v", last)
	}
	var status runs.Status
	callOK(t, cs, "resolve_run", map[string]any{"run_id": st.RunID, "resolution": "superseded"}, &status)
	if status.Status != runs.StatusCancelled || status.Resolution.Value != "superseded" {
		t.Fatalf("resolved cancelled run: %+v", status)
	}
}

func TestRunToolErrors(t *testing.T) {
	model := newGatedModel(t)
	cs := serve(t, testProject(t, nil), serveOpts{env: model.env()})
	var st startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "answer"}, &st)
	missing := "0190a000-0000-7000-8000-000000000000"
	tests := []struct {
		tool string
		args map[string]any
		code string
		msg  string
	}{
		{"run_status", map[string]any{"run_id": missing}, "run_not_found", missing},
		{"run_events", map[string]any{"run_id": missing}, "run_not_found", missing},
		{"cancel_run", map[string]any{"run_id": missing}, "run_not_found", missing},
		{"resolve_run", map[string]any{"run_id": missing, "resolution": "accepted"}, "run_not_found", missing},
		{"run_status", map[string]any{"run_id": "../../etc/passwd"}, "invalid_request", "not a run id"},
		{"run_status", map[string]any{"run_id": ""}, "invalid_request", "not a run id"},
		{"run_events", map[string]any{"run_id": st.RunID, "limit": 0}, "invalid_request", "1..1000"},
		{"run_events", map[string]any{"run_id": st.RunID, "limit": 1001}, "invalid_request", "1..1000"},
		{"run_events", map[string]any{"run_id": st.RunID, "wait_ms": 30001}, "invalid_request", "0..30000"},
		{"run_events", map[string]any{"run_id": st.RunID, "wait_ms": -1}, "invalid_request", "0..30000"},
		{"run_events", map[string]any{"run_id": st.RunID, "after": -1}, "invalid_request", "cursor"},
		{"run_events", map[string]any{"run_id": st.RunID, "after": 99}, "invalid_request", "events so far"},
		{"run_events", map[string]any{"run_id": st.RunID, "after": "x"}, "invalid_request", "after"},
		{"list_runs", map[string]any{"limit": 0}, "invalid_request", "1..1000"},
		{"list_runs", map[string]any{"after": "not-a-cursor"}, "invalid_request", "cursor"},
		{"list_runs", map[string]any{"status": "finished"}, "invalid_request", "status"},
		{"list_runs", map[string]any{"resolution": "maybe"}, "invalid_request", "resolution"},
		{"resolve_run", map[string]any{"run_id": st.RunID, "resolution": "maybe"}, "invalid_request", "resolution"},
		{"resolve_run", map[string]any{"run_id": st.RunID, "resolution": "accepted", "note": strings.Repeat("n", 4097)}, "limit_exceeded", "4 KiB"},
		{"start_run", map[string]any{"agent": "nobody", "prompt": "hi"}, "unknown_agent", "nobody"},
		{"start_run", map[string]any{"agent": "helper"}, "invalid_request", "prompt"},
		{"start_run", map[string]any{"agent": "helper", "prompt": "x", "extra": 1}, "invalid_request", "extra"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.tool, tt.args), func(t *testing.T) {
			wantToolError(t, call(t, cs, tt.tool, tt.args), tt.code, tt.msg)
		})
	}
}

// TestListRunsPaging starts runs concurrently and pages through them: every run exactly
// once, newest first.
func TestListRunsPaging(t *testing.T) {
	model := newGatedModel(t)
	cs := serve(t, testProject(t, nil), serveOpts{env: model.env()})
	const n = 30
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st startContent
			callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": fmt.Sprintf("run %d", i)}, &st)
			ids <- st.RunID
		}()
	}
	wg.Wait()
	close(ids)
	started := map[string]bool{}
	for id := range ids {
		started[id] = true
	}
	seen := map[string]bool{}
	var prev, cursor string
	for pages := 0; ; pages++ {
		args := map[string]any{"limit": 7}
		if cursor != "" {
			args["after"] = cursor
		}
		var page runs.Page
		callOK(t, cs, "list_runs", args, &page)
		for _, r := range page.Runs {
			if seen[r.RunID] || !started[r.RunID] {
				t.Fatalf("run %s listed twice or never started", r.RunID)
			}
			if prev != "" && r.RunID >= prev {
				t.Fatalf("run %s listed after %s: not newest first", r.RunID, prev)
			}
			seen[r.RunID], prev = true, r.RunID
		}
		if page.NextCursor == "" {
			break
		}
		if len(page.Runs) != 7 {
			t.Fatalf("a page of %d runs before the last", len(page.Runs))
		}
		cursor = page.NextCursor
	}
	if len(seen) != n {
		t.Fatalf("listed %d runs, want %d", len(seen), n)
	}
}

// TestRunResourceSubscription subscribes to a run and gets notifications/resources/updated
// as it goes on; the resource reads as run_status. The client speaks 2025-11-25, whose
// resources/subscribe answers once the subscription is in place (as the TypeScript SDK
// does; the conformance suite covers it there too).
func TestRunResourceSubscription(t *testing.T) {
	model := newGatedModel(t)
	updated := make(chan string, 100)
	cs := serve(t, testProject(t, nil), serveOpts{env: model.env(), version: "2025-11-25", client: &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	}})
	uri := startSubscribed(t, cs)
	ctx := context.Background()
	for _, bad := range []string{mcpserver.RunURIPrefix + "0190a000-0000-7000-8000-000000000000", mcpserver.RunURIPrefix + "../x", "symbi://other/1"} {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: bad}); err == nil {
			t.Errorf("subscribing to %s succeeded", bad)
		}
	}
	// AGENTS.md exists, but is no resource to follow: the refusal says so, not "not found".
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.AgentsMDURI}); err == nil || !strings.Contains(err.Error(), "only run resources") {
		t.Errorf("subscribing to %s: %v", mcpserver.AgentsMDURI, err)
	}
	// Ending a subscription is refused as making it is, for a URI none can name; a run
	// resource never subscribed to is no error.
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: mcpserver.AgentsMDURI}); err == nil || !strings.Contains(err.Error(), "only run resources") {
		t.Errorf("unsubscribing from %s: %v", mcpserver.AgentsMDURI, err)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "symbi://other/1"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unsubscribing from symbi://other/1: %v", err)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: mcpserver.RunURIPrefix + "0190a000-0000-7000-8000-000000000000"}); err != nil {
		t.Errorf("unsubscribing from a run resource never subscribed to: %v", err)
	}
	model.open()
	// Wait for the notification of the run's end: the resource then reads as completed.
	for {
		select {
		case got := <-updated:
			if got != uri {
				t.Fatalf("notification for %s, want %s", got, uri)
			}
		case <-time.After(hangGuard):
			t.Fatal("never notified of the run's end")
		}
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatal(err)
		}
		var status runs.Status
		if err := json.Unmarshal([]byte(res.Contents[0].Text), &status); err != nil || res.Contents[0].MIMEType != "application/json" {
			t.Fatalf("resource contents %+v: %v", res.Contents[0], err)
		}
		if status.Status == runs.StatusCompleted {
			break
		}
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.RunURIPrefix + "nope"}); err == nil {
		t.Fatal("reading an unknown run resource succeeded")
	}
	tmpl, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(tmpl.ResourceTemplates) != 1 || tmpl.ResourceTemplates[0].URITemplate != mcpserver.RunURITemplate {
		t.Fatalf("resource templates %+v, %v", tmpl, err)
	}
}

// startSubscribed starts a run of helper that the gated model holds and subscribes cs to
// its resource, whose URI it returns.
func startSubscribed(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	var st startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hold"}, &st)
	uri := mcpserver.RunURIPrefix + st.RunID
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	return uri
}

// TestSubscriptionsEndWithTheirSession: over HTTP one server outlives many sessions; a
// session that subscribed and ended (closed by its client, or for idleness) leaves no
// subscription behind, while the others keep theirs.
func TestSubscriptionsEndWithTheirSession(t *testing.T) {
	model := newGatedModel(t)
	var srv *mcp.Server
	cs := serve(t, testProject(t, nil), serveOpts{env: model.env(), version: "2025-11-25", server: &srv})
	defer model.open()
	uri := startSubscribed(t, cs)
	ctx := context.Background()
	var others []*mcp.ClientSession
	for range 3 {
		ct, stt := mcp.NewInMemoryTransports()
		if _, err := srv.Connect(ctx, stt, nil); err != nil {
			t.Fatal(err)
		}
		other, err := mcp.NewClient(&mcp.Implementation{Name: "other", Version: "1"}, nil).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		others = append(others, other)
	}
	if s, w := mcpserver.Subscriptions(srv); s != 4 || w != 4 {
		t.Fatalf("%d sessions subscribed, %d watched; want 4 and 4", s, w)
	}
	for _, o := range others {
		o.Close()
	}
	for { // the server's side of each session ends after its client's
		if s, w := mcpserver.Subscriptions(srv); s == 1 && w == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if s, _ := mcpserver.Subscriptions(srv); s != 0 {
		t.Fatalf("%d sessions subscribed after the last unsubscribed", s)
	}
}

// TestRunsAfterRestart stops the server and serves the project again: every earlier run
// answers from the ledger and its journal.
func TestRunsAfterRestart(t *testing.T) {
	model := newGatedModel(t)
	dir := testProject(t, map[string]string{"policies/respond.cedar": denyPolicy})
	cs, stop := serveStoppable(t, dir, serveOpts{env: model.env()})
	var done, denied, cancelled startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "answer me"}, &done)
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "say FORBIDDEN"}, &denied)
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang"}, &cancelled)
	pub, _ := hex.DecodeString(done.Audit.PublicKey)
	readAll(t, cs, done.RunID, 100, pub) // waits for the run to end
	// Read again once it has ended: a page read while it ran may hold its answer line
	// withheld (status.go), which after the release is served in clear.
	before := readAll(t, cs, done.RunID, 100, pub)
	for i, ev := range before {
		if ev.Withheld != "" || ev.Line == "" {
			t.Fatalf("event %d of a completed run withheld: %+v", i, ev)
		}
	}
	readAll(t, cs, denied.RunID, 100, pub)
	var r runs.Status
	callOK(t, cs, "resolve_run", map[string]any{"run_id": denied.RunID, "resolution": "rejected", "note": "policy"}, &r)
	stop() // cancels the hanging run: it ends with terminated, reason cancelled

	cs = serve(t, dir, serveOpts{env: model.env()})
	want := map[string]string{done.RunID: runs.StatusCompleted, denied.RunID: runs.StatusPolicyDenied, cancelled.RunID: runs.StatusCancelled}
	for id, status := range want {
		r = runs.Status{}
		callOK(t, cs, "run_status", map[string]any{"run_id": id}, &r)
		if r.Status != status || r.StartedAt == "" || r.EndedAt == "" || r.Agent != "helper" {
			t.Errorf("after restart run %s: %+v, want status %s", id, r, status)
		}
	}
	r = runs.Status{}
	callOK(t, cs, "run_status", map[string]any{"run_id": done.RunID}, &r)
	if r.Text == nil || *r.Text != "echo: answer me" {
		t.Errorf("released text after restart: %+v", r)
	}
	r = runs.Status{}
	callOK(t, cs, "run_status", map[string]any{"run_id": denied.RunID}, &r)
	if r.Text != nil || r.Released || !strings.Contains(r.Reason, "no-forbidden-word") || r.Resolution == nil || r.Resolution.Value != "rejected" {
		t.Errorf("denied run after restart: %+v", r)
	}
	after := readAll(t, cs, done.RunID, 3, pub)
	if len(after) != len(before) {
		t.Fatalf("%d events after restart, %d before", len(after), len(before))
	}
	for i := range after {
		if after[i] != before[i] {
			t.Fatalf("event %d differs after restart", i)
		}
	}
	var list runs.Page
	callOK(t, cs, "list_runs", map[string]any{}, &list)
	if len(list.Runs) != 3 || list.Runs[0].RunID != cancelled.RunID {
		t.Fatalf("list_runs after restart: %+v", list)
	}
	callOK(t, cs, "list_runs", map[string]any{"status": "policy_denied", "agent": "helper"}, &list)
	if len(list.Runs) != 1 || list.Runs[0].RunID != denied.RunID {
		t.Fatalf("list_runs status=policy_denied: %+v", list)
	}
}

// TestListRunsEmptyFilterRefused: list_runs' status and resolution are advertised as
// enums that do not contain "" (tools.golden.json), and docs/errors.md lists "an unknown
// status or resolution" under invalid_request. An empty string is none of them; taken for
// "no filter", a client that sends status:"" would get every run instead of a refusal.
func TestListRunsEmptyFilterRefused(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	for _, args := range []string{`{"status":""}`, `{"resolution":""}`} {
		t.Run(args, func(t *testing.T) {
			wantToolError(t, call(t, cs, "list_runs", json.RawMessage(args)), "invalid_request")
		})
	}
}

// TestListRunsCursorExactlyIssued: docs/errors.md: invalid_request for "a list_runs cursor
// that is not one"; the cursor is opaque and must be passed back unchanged. A cursor with
// a newline or carriage return inserted is not one the server issued (a base64 decoder
// skips '\r' and '\n': it would be read as the same position).
func TestListRunsCursorExactlyIssued(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	good := base64.RawURLEncoding.EncodeToString([]byte("r1:0190a000-0000-7000-8000-000000000000"))
	if res := call(t, cs, "list_runs", map[string]any{"after": good}); res.IsError {
		t.Fatalf("a well-formed cursor is refused: %s", textOf(t, res))
	}
	for _, bad := range []string{good[:8] + "\n" + good[8:], good + "\r\n", "\n" + good} {
		t.Run(bad, func(t *testing.T) {
			wantToolError(t, call(t, cs, "list_runs", map[string]any{"after": bad}), "invalid_request", "cursor")
		})
	}
}

// TestResolutionNotifies: a subscriber to a run's resource is notified at each resolution
// made through this server, as at each durable event and at the end: subscribed once the
// run has ended, each resolve_run brings a notification, and the resource then carries
// the latest resolution.
func TestResolutionNotifies(t *testing.T) {
	model := newGatedModel(t)
	updated := make(chan string, 100)
	cs := serve(t, testProject(t, nil), serveOpts{env: model.env(), version: "2025-11-25", client: &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	}})
	model.open()
	var st startContent
	callOK(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "answer"}, &st)
	uri := mcpserver.RunURIPrefix + st.RunID
	// Wait for the end (run_events long poll), then subscribe: what comes next is only the
	// resolution's notification.
	var cursor int64
	for {
		var page runs.Events
		callOK(t, cs, "run_events", map[string]any{"run_id": st.RunID, "after": cursor, "wait_ms": 30000}, &page)
		cursor = page.NextCursor
		if page.Done {
			break
		}
	}
	ctx := context.Background()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	// Two resolutions, two notifications: one of the run's end sent late to the new
	// subscriber could stand for one of them, not for both.
	for i, resolution := range []string{"needs_followup", "accepted"} {
		var resolved runs.Status
		callOK(t, cs, "resolve_run", map[string]any{"run_id": st.RunID, "resolution": resolution, "note": "ok"}, &resolved)
		select {
		case got := <-updated:
			if got != uri {
				t.Fatalf("notification for %s, want %s", got, uri)
			}
		case <-time.After(hangGuard): // a failure guard
			t.Fatalf("no notification after resolve_run %d", i+1)
		}
	}
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	var status runs.Status
	decodeStrict(t, []byte(res.Contents[0].Text), &status)
	if status.Resolution == nil || status.Resolution.Value != "accepted" || status.Status != runs.StatusCompleted {
		t.Fatalf("the resource after the notification: %+v", status)
	}
}
