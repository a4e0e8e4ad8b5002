package acp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"symbi/internal/journal"
	"symbi/internal/policy"
)

// decidedJournal holds the Sync that makes a permission_decided durable: it closes
// syncing, then waits for release.
type decidedJournal struct {
	*journal.Writer
	mu      sync.Mutex
	held    bool
	syncing chan struct{}
	release chan struct{}
}

func (j *decidedJournal) Append(r journal.Record) error {
	if _, ok := r.(journal.PermissionDecided); ok {
		j.mu.Lock()
		j.held = true
		j.mu.Unlock()
	}
	return j.Writer.Append(r)
}

func (j *decidedJournal) Sync() error {
	j.mu.Lock()
	held := j.held
	j.held = false
	j.mu.Unlock()
	if held {
		close(j.syncing)
		select {
		case <-j.release:
		case <-time.After(guard):
		}
	}
	return j.Writer.Sync()
}

// TestNoFileAccessAfterClose: an fs request whose permission_decided is being made
// durable when the session closes (the agent ended its turn without waiting for its
// answer) neither reads nor writes: the access and its record happen together before the
// close, or not at all. The agent hears an error, and nothing is left in the workspace or
// the journal that the journal does not account for.
func TestNoFileAccessAfterClose(t *testing.T) {
	tests := []struct {
		name   string
		record string // the access record that must not be attempted
		call   func(c *client, dir string) error
	}{
		{"write", journal.TypeFSWrite, func(c *client, dir string) error {
			_, err := c.WriteTextFile(context.Background(), sdk.WriteTextFileRequest{SessionId: "s1", Path: filepath.Join(dir, "late.txt"), Content: "written after the session closed\n"})
			return err
		}},
		{"read", journal.TypeFSRead, func(c *client, dir string) error {
			resp, err := c.ReadTextFile(context.Background(), sdk.ReadTextFileRequest{SessionId: "s1", Path: filepath.Join(dir, "a.txt")})
			if resp.Content != "" {
				return fmt.Errorf("the agent was sent %q", resp.Content)
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{}})
			if err := os.WriteFile(filepath.Join(e.dir, "a.txt"), []byte("hello\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := e.w.Append(journal.SessionStarted{Executor: "fake", Command: e.cfg.Executor.Command, Workspace: e.dir,
				ProtocolVersion: 1, SessionID: "s1", PromptSHA256: sha(e.cfg.Prompt), PromptBytes: int64(len(e.cfg.Prompt))}); err != nil {
				t.Fatal(err)
			}
			j := &decidedJournal{Writer: e.w, syncing: make(chan struct{}), release: make(chan struct{})}
			e.cfg.Journal = j
			r := newRunner(e.cfg)
			r.sid = "s1"
			r.open.Store(true)
			answered := make(chan error, 1)
			go func() { answered <- tt.call(&client{r}, e.dir) }()
			select {
			case <-j.syncing:
			case err := <-answered:
				t.Fatalf("answered %v before the decision was durable", err)
			case <-time.After(guard):
				t.Fatal("no permission_decided")
			}
			r.close(guard, nil) // the turn ends while the decision is made durable
			close(j.release)
			var err error
			select {
			case err = <-answered:
			case <-time.After(guard):
				t.Fatal("the request was not answered")
			}
			if err == nil || strings.Contains(err.Error(), "sent") {
				t.Fatalf("the request after the close was answered %v, want an error", err)
			}
			if _, err := os.Stat(filepath.Join(e.dir, "late.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("late.txt was written after the session closed (stat: %v)", err)
			}
			es := e.entries()
			if got := types(es); len(got) != 2 || got[1] != journal.TypePermissionDecided {
				t.Fatalf("records %v, want only the decision (no %s)", got, tt.record)
			}
		})
	}
}

// TestRequestFlood: an agent with more than maxRequests requests in flight at once — the
// SDK serves each on its own goroutine — ends the run as malformed ACP naming a limit;
// never more than maxRequests are served at once, and none is still served when Run
// returns.
func TestRequestFlood(t *testing.T) {
	const n = 4 * maxRequests
	permission := func(i int) any {
		return map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "id": 1000 + i, "method": "session/request_permission", "params": map[string]any{
			"sessionId": "fake-session-1",
			"toolCall":  map[string]any{"toolCallId": fmt.Sprintf("t%d", i), "title": "Edit", "kind": "edit", "locations": []any{map[string]any{"path": "src/a.go"}}},
			"options":   []any{map[string]any{"optionId": "allow", "name": "Allow", "kind": "allow_once"}, map[string]any{"optionId": "reject", "name": "Reject", "kind": "reject_once"}}}}}
	}
	write := func(i int) any {
		return map[string]any{"raw": map[string]any{"jsonrpc": "2.0", "id": 1000 + i, "method": "fs/write_text_file", "params": map[string]any{
			"sessionId": "fake-session-1", "path": fmt.Sprintf("f%d.txt", i), "content": strings.Repeat("y", 64<<10)}}}
	}
	for _, tt := range []struct {
		name    string
		request func(i int) any
	}{{"permission requests", permission}, {"file writes", write}} {
		t.Run(tt.name, func(t *testing.T) {
			var steps []any
			for i := range n {
				steps = append(steps, tt.request(i))
			}
			e := newEnv(t, map[string]any{"steps": append(steps, map[string]any{"hang": true})})
			e.cfg.Decide = func(policy.ToolUse) policy.Decision {
				return policy.Decision{Policies: []string{"edits-review"}, Gate: "edits-review", Reason: "held for a person"}
			}
			var held, most atomic.Int64
			over := make(chan struct{})
			var overOnce sync.Once
			e.cfg.Hold = func(ctx context.Context, _ Hold, _ func(journal.Record) error) HoldResult {
				now := held.Add(1)
				defer held.Add(-1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				if now > maxRequests {
					overOnce.Do(func() { close(over) })
				}
				<-ctx.Done() // no one decides
				return HoldResult{Err: ctx.Err()}
			}
			ctx, cancel := context.WithTimeout(context.Background(), guard)
			defer cancel()
			wait := make(chan Result, 1)
			go func() { wait <- Run(ctx, e.cfg) }()
			var res Result
			select {
			case res = <-wait:
			case <-over:
				t.Fatalf("more than %d requests served at once", maxRequests)
			}
			mustOutcome(t, res, OutcomeError)
			// Which bound the flood meets first is the scheduler's: the SDK starts a
			// goroutine per request, and the line check may read maxUnanswered requests
			// before the SDK has begun serving maxRequests of them.
			if !errors.Is(res.Err, ErrMalformed) || !strings.Contains(res.Err.Error(), "floods requests") ||
				!strings.Contains(res.Err.Error(), fmt.Sprintf("more than %d", maxRequests)) && !strings.Contains(res.Err.Error(), fmt.Sprintf("more than %d read", maxUnanswered)) {
				t.Fatalf("err %v, want malformed ACP naming the limit of %d requests in flight (or of %d unanswered)", res.Err, maxRequests, maxUnanswered)
			}
			if h := held.Load(); h != 0 {
				t.Fatalf("%d requests still held when Run returned", h)
			}
			if m := most.Load(); m > maxRequests {
				t.Fatalf("%d requests held at once", m)
			}
			es := e.entries()
			if fin := data[journal.SessionFinished](t, es[len(es)-1]); fin.Outcome != OutcomeError || !strings.Contains(fin.Error, "floods requests") {
				t.Fatalf("session_finished %+v", fin)
			}
			e.finishAndVerify(res)
		})
	}
}
