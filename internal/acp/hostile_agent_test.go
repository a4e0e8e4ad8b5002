package acp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"symbi/internal/journal"
	"symbi/internal/policy"
	"symbi/internal/proctest"
)

// TestPermissionThroughProcSelf: a permission request is decided on where its paths
// lead, and a link through /proc (whose self, cwd and fd links lead where the reading
// process is: symbi's, not the agent's) leads outside: with the server's working directory
// below the workspace's top, a link to /proc/self/cwd does not get an edit allowed that
// the agent's tool would make outside the workspace or in its policies.
func TestPermissionThroughProcSelf(t *testing.T) {
	for _, tt := range []struct {
		name, link, loc string
		agentSees       func(ws string) string
	}{
		{"out of the workspace", "/proc/self/cwd/..", "l/escaped.txt", func(ws string) string { return filepath.Join(filepath.Dir(ws), "escaped.txt") }},
		{"into the policies", "/proc/self/cwd", "l/policies/p.cedar", func(ws string) string { return filepath.Join(ws, "policies/p.cedar") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit", "locations": []string{"$CWD/" + tt.loc}}},
				map[string]any{"message": "done"},
			}})
			for _, d := range []string{"sub", "policies"} {
				if err := os.MkdirAll(filepath.Join(e.dir, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(tt.link, filepath.Join(e.dir, "l")); err != nil {
				t.Fatal(err)
			}
			t.Chdir(filepath.Join(e.dir, "sub")) // the server's working directory
			e.cfg.Decide = allowKinds("edit")    // every edit inside the workspace
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
			heard := e.eventsNamed("permission")[0]["outcome"]
			if pd.Decision == "allow" || heard == "allow_once" {
				t.Fatalf("the agent heard %v (permission_decided %s on %q, outside %q): its own tool, following %s from its working directory %s, edits %s",
					heard, pd.Decision, pd.Paths, pd.Outside, tt.link, e.dir, tt.agentSees(e.dir))
			}
			e.finishAndVerify(res)
		})
	}
}

// TestAgentExitHoldingStdout: an agent that exits (crashes) while a child it started
// holds its stdout open — a background process that inherited it, as children do — ends
// the run with an error, as a crash does, within the grace period of its exit: the run
// does not wait for the connection's end, which the child's copy of the pipe withholds,
// nor for its deadline.
func TestAgentExitHoldingStdout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"spawn_background": []string{"sh", "-c", "exec sleep 1000 >/proc/$PPID/fd/1"}, "pid_file": pidFile},
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "think", "title": "after the spawn"}},
		map[string]any{"crash": 7},
	}})
	e.cfg.Grace = 100 * time.Millisecond // configuration, not an expectation
	var agentPID, childPID atomic.Int64
	e.cfg.Decide = func(policy.ToolUse) policy.Decision {
		// The crash comes after this answer: answer once the child holds the agent's stdout.
		deadline := time.Now().Add(guard)
		for time.Now().Before(deadline) {
			if starts := e.eventsNamed("start"); len(starts) > 0 {
				agentPID.Store(int64(starts[0]["pid"].(float64)))
			}
			if b, err := os.ReadFile(pidFile); err == nil {
				n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				childPID.Store(int64(n))
			}
			if agentPID.Load() > 0 && childPID.Load() > 0 {
				a, err1 := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", agentPID.Load()))
				c, err2 := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", childPID.Load()))
				if err1 == nil && err2 == nil && a == c {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		return policy.Decision{Allow: true, Policies: []string{"allow-think"}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result, 1)
	go func() { done <- Run(ctx, e.cfg) }()
	e.waitEvent("crash")
	// Wait for the agent's exit (an event), then bound the wait for Run (not an expectation
	// of speed: a run that noticed the exit ends within milliseconds).
	for agentPID.Load() == 0 || proctest.Alive(int(agentPID.Load())) {
		select {
		case res := <-done:
			mustOutcome(t, res, OutcomeError)
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case res := <-done:
		mustOutcome(t, res, OutcomeError)
	case <-time.After(30 * time.Second):
		cancel()
		res := <-done
		t.Fatalf("the agent %d exited (crash 7) but the run did not end: its child %d holds the agent's stdout, and the prompt phase waits for the connection to close or the deadline; ended only by the cancel, as %q (%v)",
			agentPID.Load(), childPID.Load(), res.Outcome, res.Err)
	}
}

// killPending reports whether pid has a SIGKILL pending (sent, not yet acted on).
func killPending(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		for _, field := range []string{"ShdPnd:", "SigPnd:"} {
			if v, ok := strings.CutPrefix(l, field); ok {
				var mask uint64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &mask); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// TestSetsidChildKilled: when the run ends, anything left of it is killed: no orphans. A
// child the agent starts that leaves the group (setsid, as daemons, dev servers and build
// daemons do) is found by the run's mark in its environment and killed too: when Run
// returns it is dead, or its SIGKILL is on the way. The run ends only once the child has
// left the agent's group, so the group's kill cannot be what reaches it.
func TestSetsidChildKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"spawn_background": []string{"setsid", "sleep", "1000"}, "pid_file": pidFile},
		map[string]any{"wait_file": "$CWD/left"},
		map[string]any{"message": "spawned"},
	}})
	// The child has left the agent's group: an event, waited for.
	go func() {
		for deadline := time.Now().Add(guard); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			pid, err := proctest.ReadPID(pidFile)
			if err != nil {
				continue
			}
			starts := e.eventsNamed("start")
			if len(starts) == 0 {
				continue
			}
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid != int(starts[0]["pgid"].(float64)) {
				_ = os.WriteFile(filepath.Join(e.dir, "left"), nil, 0o600)
				return
			}
		}
	}()
	res := e.run(nil)
	mustOutcome(t, res, OutcomeCompleted)
	pid := proctest.PID(t, pidFile)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // the child this test started
	if proctest.Alive(pid) && !killPending(pid) {
		t.Fatalf("the agent's child %d, which left its process group, outlives the run with no kill sent to it", pid)
	}
	e.finishAndVerify(res)
}

// TestWriteJournaledBeforeChange: a write through symbi is journaled (fs_write, durable)
// before the file changes: when that record cannot be made (the journal full — the agent
// can fill it —, an I/O error), the file is left as it was, never changed without a record.
func TestWriteJournaledBeforeChange(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"write": map[string]any{"path": "$CWD/b.txt", "content": "written by the agent\n"}},
		map[string]any{"message": "done"},
	}})
	if err := os.WriteFile(filepath.Join(e.dir, "b.txt"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.cfg.Journal = &fullJournal{Writer: e.w, typ: journal.TypeFSWrite}
	e.cfg.Decide = allowKinds("edit")
	res := e.run(nil)
	mustOutcome(t, res, OutcomeError)
	got, err := os.ReadFile(filepath.Join(e.dir, "b.txt"))
	if err != nil {
		t.Fatal(err)
	}
	es := e.entries()
	if string(got) != "original\n" && len(ofType(es, journal.TypeFSWrite)) == 0 {
		t.Fatalf("b.txt now holds %q but the journal has no fs_write (records %v)", got, types(es))
	}
}

// heldDecision holds the append of the first permission_decided until release.
type heldDecision struct {
	*journal.Writer
	once      sync.Once
	appending chan struct{}
	release   chan struct{}
}

func (j *heldDecision) Append(r journal.Record) error {
	if _, ok := r.(journal.PermissionDecided); ok {
		j.once.Do(func() {
			close(j.appending)
			<-j.release
		})
	}
	return j.Writer.Append(r)
}

// TestPermissionCancelledAfterCancel: at session/cancel, pending permission requests are
// answered cancelled: one whose decision (an allow) was being journaled when the run was
// cancelled — session/cancel already delivered — is answered cancelled, not allow_once.
func TestPermissionCancelledAfterCancel(t *testing.T) {
	e := newEnv(t, map[string]any{"steps": []any{
		map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": "edit", "title": "Edit a", "locations": []string{"$CWD/a.txt"}}},
		map[string]any{"message": "after the answer"},
	}})
	e.cfg.Decide = allowKinds("edit")
	e.cfg.Grace = guard // the agent is not killed before the test releases the record
	j := &heldDecision{Writer: e.w, appending: make(chan struct{}), release: make(chan struct{})}
	e.cfg.Journal = j
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := startRun(ctx, e.cfg)
	select {
	case <-j.appending:
	case <-time.After(guard):
		t.Fatal("no permission_decided")
	}
	cancel()
	e.waitEvent("cancel") // session/cancel reached the agent; its request is still pending
	close(j.release)
	res := wait(t)
	mustOutcome(t, res, OutcomeCancelled)
	if p := e.eventsNamed("permission"); len(p) != 1 || p[0]["outcome"] != "cancelled" {
		t.Fatalf("after session/cancel the pending request was answered %v, want cancelled", p)
	}
}

// TestPermissionOnGovernanceAncestor: no policy, however broad, lets an agent rewrite the
// journals, the ledger, the signing key or the policies that judge it — nor delete or move
// a directory that holds them: a delete or move of the workspace itself (the project
// directory by default) is denied before any policy.
func TestPermissionOnGovernanceAncestor(t *testing.T) {
	for _, kind := range []string{"delete", "move"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, map[string]any{"steps": []any{
				map[string]any{"permission": map[string]any{"tool_call_id": "p1", "kind": kind, "title": "rm -rf / mv the workspace", "locations": []string{"$CWD"}}},
				map[string]any{"message": "done"},
			}})
			for _, f := range []string{"policies/tools.cedar", ".symbiont/ledger.jsonl"} {
				p := filepath.Join(e.dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e.cfg.Decide = allowKinds(kind) // a broad permit
			res := e.run(nil)
			mustOutcome(t, res, OutcomeCompleted)
			pd := data[journal.PermissionDecided](t, ofType(e.entries(), journal.TypePermissionDecided)[0])
			if pd.Decision == "allow" {
				t.Fatalf("permission_decided %+v: a %s of the workspace, which holds policies/ and .symbiont/, was left to the policy and allowed", pd, kind)
			}
			e.finishAndVerify(res)
		})
	}
}

// TestSweepMarkedBounded: a session's end waits for the sweep for its marked processes
// (killMarked) a bounded time: reading another process's environment can block, and the
// run's last records must not wait on it. A sweep that finishes is reported done; one that
// does not is left to finish in the background.
func TestSweepMarkedBounded(t *testing.T) {
	release := make(chan struct{})
	finished := make(chan string, 2)
	sweep = func(mark string) {
		if mark == "stuck" {
			<-release
		}
		finished <- mark
	}
	t.Cleanup(func() { sweep = killMarked })
	if !sweepMarked("quick", time.Minute) {
		t.Fatal("a sweep that finished is reported unfinished")
	}
	if <-finished != "quick" {
		t.Fatal("the quick sweep did not run")
	}
	if sweepMarked("stuck", time.Millisecond) {
		t.Fatal("a sweep that cannot finish is reported finished")
	}
	close(release)
	if <-finished != "stuck" {
		t.Fatal("the stuck sweep did not go on in the background")
	}
}
