package runs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"symbi/internal/inference"
	"symbi/internal/invoke"
	"symbi/internal/ledger"
	"symbi/internal/loopback"
	"symbi/internal/policy"
	"symbi/internal/project"
)

// heldServer serves a project whose answers naming ACME are held at a human gate, with
// an echoing model, and returns its Manager.
func heldServer(t *testing.T) *Manager {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range map[string]string{
		"agents/helper.symbi": "agent helper {\n  capabilities = [\"answer\"]\n}\n",
		"policies/respond.cedar": `@id("respond") permit (principal, action == Action::"respond", resource);
@gate("human") @id("acme-review") forbid (principal, action == Action::"respond", resource) when { context.response like "*ACME*" };
`,
	} {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	model := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	if err := model.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	p, err := project.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := p.LoadRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	lw, _, err := ledger.OpenProject(p.Root(), "")
	if err != nil {
		t.Fatal(err)
	}
	prov, err := inference.NewOpenAI(model.URL(), "", "test-model")
	if err != nil {
		t.Fatal(err)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Provider: prov, Ledger: lw})
	m := New(Config{Root: p.Root(), Runner: runner, Registry: reg, Ledger: lw})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		runner.Shutdown(ctx)
		m.Close()
		lw.Close()
		p.Close()
	})
	return m
}

// awaitHeld long-polls the run's events until it awaits approval.
func awaitHeld(t *testing.T, m *Manager, id string) {
	t.Helper()
	var cursor int64
	for range 1000 {
		evs, err := m.Events(context.Background(), id, cursor, 100, MaxWait)
		if err != nil {
			t.Fatal(err)
		}
		if evs.Status == StatusAwaitingApproval {
			return
		}
		if evs.Done {
			t.Fatalf("run %s ended %s before it awaited approval", id, evs.Status)
		}
		cursor = evs.NextCursor
	}
	t.Fatalf("run %s never awaited approval", id)
}

// TestCancelEndedOwnRunIdempotent: cancel_run of this server's run that has already
// ended is answered with its status and already_finished, also in the moment after its
// end and before its watcher has recorded it in the index (the run still this server's
// live run there): cancel_run is idempotent, whoever looks first.
func TestCancelEndedOwnRunIdempotent(t *testing.T) {
	m := heldServer(t)
	st, _, err := m.Start(context.Background(), invoke.Request{Agent: "helper", Prompt: "tell ACME", Caller: "alice", CallerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	awaitHeld(t, m, st.RunID)
	m.mu.Lock()
	lr := m.runs[st.RunID].live
	m.mu.Unlock()
	if lr == nil {
		t.Fatal("premise: the waiting run is not this server's live run")
	}
	if got, already, err := m.Cancel(context.Background(), st.RunID); err != nil || already || got.Status != StatusCancelled {
		t.Fatalf("first cancel_run: %+v, already_finished %v, %v; want cancelled", got, already, err)
	}
	m.Close() // its watcher has recorded the end
	// The moment between the run's end and its watcher's record of it.
	m.mu.Lock()
	r := m.runs[st.RunID]
	r.live, r.ownEnd = lr, false
	m.mu.Unlock()
	got, already, err := m.Cancel(context.Background(), st.RunID)
	if err != nil || !already || got.Status != StatusCancelled {
		t.Fatalf("cancel_run of the run that has ended: %+v, already_finished %v, %v; want cancelled, already_finished", got, already, err)
	}
}
