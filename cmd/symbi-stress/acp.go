package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/ledger"
	"symbi/internal/proctest"
)

// The acp harness: delegated runs (docs/executors.md) with the scripted agent of
// cmd/fake-acp-agent, first under SIGKILLs of the server, then many at once.

// acpFiles is the acp harness's project: the delegated agent coder, run by the executor
// "fake", a respond policy, and the example project's use_tool policy (read, search and
// think anywhere, edit under src/, never execute).
var acpFiles = map[string]string{
	"agents/coder.symbi":     "metadata { executor = \"fake\", description = \"works in a workspace\" }\nagent coder {\n  capabilities = [\"code\"]\n}\n",
	"policies/respond.cedar": agentFiles["policies/respond.cedar"],
	"policies/tools.cedar": `@id("tools-read-search")
permit (principal is Agent, action == Action::"use_tool", resource is Tool)
when { [Tool::"read", Tool::"search", Tool::"think"].contains(resource) };

@id("tools-edit-src")
permit (principal is Agent, action == Action::"use_tool", resource == Tool::"edit")
when { context.top_dirs.contains("src") && ["src"].containsAll(context.top_dirs) };

@id("tools-no-execute")
forbid (principal, action == Action::"use_tool", resource == Tool::"execute");
`,
}

// acpScriptName is each workspace's script: the executor runs the fake agent with
// --script and this relative name, and the agent runs in the workspace.
const acpScriptName = ".fake-acp-script.json"

// acpPinMode is the session mode the executor pins; the scripts require it.
const acpPinMode = "read-only"

// acpEnv is the server's environment: delegated runs need no model provider, and the
// agents inherit it.
func acpEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
}

// acpSetup is one project served with the fake agent registered.
type acpSetup struct {
	dir    string   // the project
	wsRoot string   // the granted workspace root (symbolic links resolved)
	state  string   // pid files and the agents' records
	flags  []string // of symbi mcp
}

// newACPProject writes the project, its workspace root and the executors file.
func (h *harnessRun) newACPProject(name string, maxRuns int) (*acpSetup, error) {
	dir := filepath.Join(h.tmp, name)
	for rel, content := range acpFiles {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	s := &acpSetup{dir: dir, state: filepath.Join(h.tmp, name+"-state")}
	ws := filepath.Join(h.tmp, name+"-workspaces")
	for _, d := range []string{ws, s.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var err error
	if s.wsRoot, err = filepath.EvalSymlinks(ws); err != nil {
		return nil, err
	}
	execs, _ := json.Marshal(map[string]any{"executors": map[string]any{
		"fake": map[string]any{"command": []string{h.fakeAgent, "--script", acpScriptName}, "pin_mode": acpPinMode},
	}})
	execFile := filepath.Join(h.tmp, name+"-executors.json")
	if err := os.WriteFile(execFile, execs, 0o644); err != nil {
		return nil, err
	}
	s.flags = []string{"--executors", execFile, "--workspace-root", s.wsRoot, "--max-runs", strconv.Itoa(maxRuns)}
	return s, nil
}

// acpRun is one delegated run: its workspace, its script's files and what the client saw.
type acpRun struct {
	name    string
	ws      string // the workspace (under the root)
	pidFile string // the background child's pid, written by the agent
	record  string // the agent's record of events (its pid first)
	want    string // the answer the script produces

	runID   string         // from start_run ("" when it did not answer)
	err     string         // start_run's error
	types   map[string]int // events read, by type
	last    string         // the last event's type
	done    bool           // run_events said done
	elapsed time.Duration
}

// newRun writes a workspace with src/a.go and a script: a thought and a plan, a
// background child (a sleep in the agent's process group, its pid written to pidFile),
// streamed message chunks, a permitted read with its tool call, a command the policy
// forbids, a permitted write under src/, and the answer. pause is spread over three
// sleeps between the steps.
func (s *acpSetup) newRun(rel string, chunks int, pause time.Duration) (*acpRun, error) {
	r := &acpRun{name: rel, ws: filepath.Join(s.wsRoot, rel)}
	flat := strings.ReplaceAll(rel, "/", "-")
	r.pidFile = filepath.Join(s.state, flat+".pid")
	r.record = filepath.Join(s.state, flat+".jsonl")
	if err := os.MkdirAll(filepath.Join(r.ws, "src"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(r.ws, "src", "a.go"), []byte("package a\n"), 0o644); err != nil {
		return nil, err
	}
	done := "Done with " + rel + "."
	r.want = strings.Repeat("Working. ", chunks) + done
	third := fmt.Sprintf("%dms", pause.Milliseconds()/3)
	tc := func(id, kind, title, loc string) map[string]any {
		return map[string]any{"tool_call_id": id, "kind": kind, "title": title, "locations": []string{loc}}
	}
	steps := []map[string]any{
		{"thought": "Looking at the task."},
		{"plan": []string{"read src/a.go", "run the tests", "write src/b.go", "answer"}},
		{"spawn_background": []string{"sleep", "1000"}, "pid_file": r.pidFile},
		{"message": "Working. ", "repeat": chunks},
		{"sleep": third},
		{"tool_call": map[string]any{"id": "t1", "kind": "read", "title": "read src/a.go", "locations": []string{"$CWD/src/a.go"}}},
		{"permission": tc("t1", "read", "read src/a.go", "$CWD/src/a.go"), "expect": "allow"},
		{"read": "$CWD/src/a.go", "expect_content": "package a\n"},
		{"tool_call_update": map[string]any{"id": "t1", "status": "completed", "raw_output": "package a"}},
		{"sleep": third},
		{"permission": tc("t2", "execute", "go test ./...", "$CWD"), "expect": "reject"},
		{"write": map[string]any{"path": "$CWD/src/b.go", "content": "package a // " + rel + "\n"}, "expect_error": false},
		{"sleep": third},
		{"message": done},
	}
	script, _ := json.Marshal(map[string]any{
		"modes": []string{"default", acpPinMode}, "require_mode": acpPinMode,
		"require_fs": true, "forbid_terminal": true, "record": r.record, "steps": steps,
	})
	if err := os.WriteFile(filepath.Join(r.ws, acpScriptName), script, 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

// callTool calls a tool and decodes its structured content into out; a tool error is
// returned as its text.
func callTool(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err
	}
	if res.IsError {
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return fmt.Errorf("tool error: %s", clip(text, 300))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	return json.Unmarshal(raw, out)
}

// start starts the run and follows its events until it is done (or the connection
// fails).
func (r *acpRun) start(ctx context.Context, cs *mcp.ClientSession) {
	t0 := time.Now()
	var st struct {
		RunID string `json:"run_id"`
	}
	if err := callTool(ctx, cs, "start_run", map[string]any{"agent": "coder", "prompt": "work on " + r.name, "workspace": r.ws}, &st); err != nil {
		r.err = err.Error()
		return
	}
	r.runID = st.RunID
	var cursor int64
	for i := 0; i < 10000 && ctx.Err() == nil; i++ { // bounded: a run has a few dozen events
		var page eventsPage
		if err := callTool(ctx, cs, "run_events", map[string]any{"run_id": r.runID, "after": cursor, "wait_ms": 30000}, &page); err != nil {
			r.err = "run_events: " + err.Error()
			return
		}
		for _, ev := range page.Events {
			if r.types == nil {
				r.types = map[string]int{}
			}
			r.types[ev.Type]++
			r.last = ev.Type
		}
		cursor = page.NextCursor
		if page.Done {
			r.done, r.elapsed = true, time.Since(t0)
			return
		}
	}
}

// eventsPage is what run_events answers (docs/runs.md), as far as the harness reads it.
type eventsPage struct {
	Events []struct {
		Type string `json:"type"`
	} `json:"events"`
	NextCursor int64 `json:"next_cursor"`
	Done       bool  `json:"done"`
}

// runState is what run_status answers, as far as the harness reads it.
type runState struct {
	Status         string  `json:"status"`
	Reason         string  `json:"reason"`
	Released       bool    `json:"released"`
	Text           *string `json:"text"`
	JournalProblem string  `json:"journal_problem"`
}

// Statuses of runs (docs/runs.md).
const (
	statusCompleted   = "completed"
	statusAuditFailed = "audit_failed"
	statusAbandoned   = "abandoned"
)

// runStatus asks the server for a run's status.
func runStatus(ctx context.Context, cs *mcp.ClientSession, runID string) (runState, error) {
	var st runState
	err := callTool(ctx, cs, "run_status", map[string]any{"run_id": runID}, &st)
	return st, err
}

// Processes.

// procInfo is one live process found in /proc.
type procInfo struct {
	pid, pgrp int
	comm      string
}

func (p procInfo) String() string { return fmt.Sprintf("%d(%s, group %d)", p.pid, p.comm, p.pgrp) }

// procsUnder lists the live processes whose working directory is root or below it: the
// agents run in their workspaces and their children inherit the directory, so this finds
// every one of them, whatever the records say (zombies have no directory to read).
func procsUnder(root string) []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil || (cwd != root && !strings.HasPrefix(cwd, root+"/")) {
			continue
		}
		if st, pgrp, comm, ok := proctest.Stat(pid); ok && st != 'Z' && st != 'X' {
			out = append(out, procInfo{pid: pid, pgrp: pgrp, comm: comm})
		}
	}
	return out
}

// leaders keeps the process-group leaders: the agents (each starts its own group).
func leaders(ps []procInfo) []procInfo {
	var out []procInfo
	for _, p := range ps {
		if p.pid == p.pgrp {
			out = append(out, p)
		}
	}
	return out
}

// waitFor polls cond every 20 ms for up to d; it reports whether cond held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goneWithin is how long an ended process may take to disappear (a SIGKILLed process
// exits asynchronously; a busy machine can be slow to schedule it).
const goneWithin = 30 * time.Second

// killUnder SIGKILLs every live process under root and waits until none is left; it
// returns what it killed, and an error if something survived.
func killUnder(root string) ([]procInfo, error) {
	found := procsUnder(root)
	for _, p := range found {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	if !waitFor(goneWithin, func() bool { return len(procsUnder(root)) == 0 }) {
		return found, fmt.Errorf("processes under %s survive SIGKILL: %v", root, procsUnder(root))
	}
	return found, nil
}

// agentPID reads the agent's pid from its record (the start event), 0 if none.
func agentPID(record string) int {
	f, err := os.Open(record)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev struct {
			Event string `json:"event"`
			PID   int    `json:"pid"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "start" {
			return ev.PID
		}
	}
	return 0
}

// runACP runs the two cases of the acp harness.
func runACP(ctx context.Context, h *harnessRun, r *result) {
	// Whatever happens below, no process is left behind in the harness's directories.
	defer func() {
		root, err := filepath.EvalSymlinks(h.tmp)
		if err != nil {
			r.failf("cleanup: %v", err)
			return
		}
		if killed, err := killUnder(root); err != nil {
			r.failf("cleanup: %v", err)
		} else if len(killed) > 0 {
			h.logf("acp: cleanup killed %v", killed)
		}
	}()
	var peak int64
	peak = max(peak, h.acpKillCase(ctx, r))
	peak = max(peak, h.acpConcurrentCase(ctx, r))
	r.figure("peak_rss", mib(peak))
	r.figure("seed", h.seed)
}

// acpKillCase starts symbi mcp with the fake agent registered again and again; each
// time a few delegated runs start and the server is SIGKILLed at a seeded random moment.
// The agents must exit (a SIGKILLed server cannot stop them, but their stdin reaches end
// of file, and an ACP agent over stdio ends there); whatever else of their process groups
// is still alive once the next server has started is counted as orphans and killed by the
// harness (docs/reliability.md: the product does not reach them). After the last kill, a
// restarted server must answer run_status for every run, as docs/runs.md says, and serve
// a delegated run; every journal verifies complete or incomplete, never invalid, and the
// ledger agrees with the journals.
func (h *harnessRun) acpKillCase(ctx context.Context, r *result) (peak int64) {
	s, err := h.newACPProject("acp-kill", 4*h.sizes.acpKillRuns)
	if err != nil {
		r.failf("kill: project: %v", err)
		return 0
	}
	var (
		all      []*acpRun
		kills    int
		agents   int // agent processes seen by their records
		orphans  int // processes of killed servers' agents alive after the restart
		prevRoot string
		p        *proc
		cs       *mcp.ClientSession
	)
	start := func() bool {
		if p, err = h.startProc(h.bin, s.dir, acpEnv(), procOptions{flags: s.flags}); err != nil {
			r.failf("kill: start: %v", err)
			return false
		}
		if cs, err = p.connect(ctx); err != nil {
			p.kill()
			r.failf("kill: %v", err)
			return false
		}
		return true
	}
	// survivors counts and kills what the previous round's agents left, once a new server
	// has started (and reconciled the project): nothing in symbi stops them.
	survivors := func() {
		if prevRoot == "" {
			return
		}
		found, err := killUnder(prevRoot)
		if err != nil {
			r.failf("kill: %v", err)
		}
		orphans += len(found)
		if len(found) > 0 {
			h.logf("acp: %d processes of SIGKILLed agents' groups outlived the server and the restart: %v", len(found), found)
		}
	}
	for round := 0; round < h.sizes.acpKills && ctx.Err() == nil; round++ {
		if !start() {
			return peak
		}
		survivors()
		roundRoot := filepath.Join(s.wsRoot, fmt.Sprintf("round%03d", round))
		var batch []*acpRun
		for k := range h.sizes.acpKillRuns {
			run, err := s.newRun(fmt.Sprintf("round%03d/run%d", round, k), 1+h.rng.IntN(20), time.Duration(100+h.rng.IntN(600))*time.Millisecond)
			if err != nil {
				r.failf("kill: %v", err)
				p.kill()
				return peak
			}
			batch = append(batch, run)
		}
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		var wg sync.WaitGroup
		for _, run := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run.start(callCtx, cs)
			}()
		}
		wait := time.Duration(h.rng.IntN(h.sizes.acpKillMaxMS*1000)) * time.Microsecond
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		peak = max(peak, p.peakRSS())
		p.kill()
		kills++
		cs.Close()
		wg.Wait()
		cancel()
		p.stdin.Close()
		p.stdout.Close()
		all = append(all, batch...)
		// The agents' stdin was a pipe whose other end only the server held: it is at end
		// of file now, and the fake agent, like any ACP agent over stdio, exits there.
		if !waitFor(goneWithin, func() bool { return len(leaders(procsUnder(roundRoot))) == 0 }) {
			r.failf("kill: round %d: agents still running %s after their server was SIGKILLed (their stdin never reached end of file?): %v",
				round, goneWithin, leaders(procsUnder(roundRoot)))
		}
		for _, run := range batch {
			if agentPID(run.record) != 0 {
				agents++
			}
		}
		prevRoot = roundRoot
		if round%5 == 0 {
			h.logf("acp: kill round %d after %s", round, wait.Round(time.Millisecond))
		}
	}

	// The restart: every run answers, the project serves a delegated run.
	if !start() {
		return peak
	}
	survivors()
	statuses := map[string]int{}
	known := map[string]*acpRun{}
	for _, run := range all {
		if run.runID != "" {
			known[run.runID] = run
		}
	}
	c, err := takeCensus(s.dir)
	if err != nil {
		r.failf("kill: census: %v", err)
	} else {
		for _, inv := range c.invalid {
			r.failf("kill: invalid journal (verify exit 1): %s", inv)
		}
		journaled := map[string]bool{}
		bad := 0
		for _, rep := range c.reports {
			if rep.RunID == "" {
				statuses["(no record)"]++
				continue
			}
			journaled[rep.RunID] = true
			st, err := runStatus(ctx, cs, rep.RunID)
			if err == nil {
				statuses[st.Status]++
				err = checkKilledStatus(st, rep.ExitCode(), rep.TerminalReason, known[rep.RunID])
			} else {
				statuses["(error)"]++
			}
			if err != nil {
				if bad++; bad <= 10 {
					r.failf("kill: run %s after the restart: %v", rep.RunID, err)
				}
			}
		}
		if bad > 10 {
			r.failf("kill: … %d runs answered wrongly after the restart", bad)
		}
		for id := range known {
			if !journaled[id] {
				r.failf("kill: start_run answered run %s, which has no journal", id)
			}
		}
	}
	final, err := s.newRun("after-restart", 3, 30*time.Millisecond)
	if err != nil {
		r.failf("kill: %v", err)
	} else {
		final.start(ctx, cs)
		st, err := runStatus(ctx, cs, final.runID)
		if err != nil || st.Status != statusCompleted || st.Text == nil || *st.Text != final.want {
			r.failf("kill: a delegated run after the restart: %s, status %+v, %v; stderr: %s", final.err, st, err, p.stderr.tail())
		}
	}
	peak = max(peak, p.peakRSS())
	if !p.stop(cs) {
		r.failf("kill: after the restart, the server did not exit when its input closed")
	} else if st := p.exitStatus(); st != "exit 0" {
		r.failf("kill: after the restart, the server ended with %s; stderr: %s", st, p.stderr.tail())
	}
	if !waitFor(goneWithin, func() bool { return len(procsUnder(s.wsRoot)) == 0 }) {
		leftover := procsUnder(s.wsRoot)
		r.failf("kill: processes left after the last run ended and the server exited: %v", leftover)
	}
	if pub, err := projectKey(s.dir); err != nil {
		r.failf("kill: project key: %v", err)
	} else if lr := ledger.VerifyProject(s.dir, pub, nil); lr.ExitCode() == 1 {
		r.failf("kill: ledger and journals inconsistent after the kills: %v", append(lr.Problems, findings(lr)...))
	}
	var keys []string
	for k := range statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sts []string
	for _, k := range keys {
		sts = append(sts, fmt.Sprintf("%s:%d", k, statuses[k]))
	}
	r.figure("kills", kills)
	r.figure("runs", len(all))
	r.figure("agents", agents)
	if c != nil {
		r.figure("journals", c.total)
		r.figure("complete", c.complete)
		r.figure("incomplete", c.incomplete)
		r.figure("invalid", len(c.invalid))
	}
	r.figure("statuses", strings.Join(sts, ","))
	r.figure("orphans_after_kill", orphans)
	return peak
}

// checkKilledStatus checks a run's status after the restart against its journal: an
// unterminated journal is abandoned (or audit_failed, when the ledger recorded an end the
// kill kept out of the journal), a terminated one has its reason as status, and a run
// that completed released its script's answer.
func checkKilledStatus(st runState, exit int, reason string, run *acpRun) error {
	switch exit {
	case 2:
		if st.Status == statusAbandoned || st.Status == statusAuditFailed && st.JournalProblem != "" {
			return nil
		}
		return fmt.Errorf("unterminated journal, status %q (reason %q), want abandoned", st.Status, st.Reason)
	case 0:
		if st.Status != reason {
			return fmt.Errorf("journal terminated %q, status %q (reason %q)", reason, st.Status, st.Reason)
		}
		if reason == statusCompleted && run != nil && (st.Text == nil || *st.Text != run.want) {
			return fmt.Errorf("completed with text %v, want %q", st.Text, run.want)
		}
		return nil
	}
	return fmt.Errorf("journal verify exit %d", exit)
}

// acpConcurrentCase starts sizes.acpConc delegated runs at once on one server, each
// leaving a background child in its agent's process group and doing some work (a read
// and a write through symbi, a permission granted and one refused, streamed messages).
// Every run must complete with its script's answer; once the runs have ended no agent and
// no background child may be alive (gone or a zombie); every journal verifies complete
// and ends in terminated with reason completed and released true.
func (h *harnessRun) acpConcurrentCase(ctx context.Context, r *result) (peak int64) {
	n := h.sizes.acpConc
	s, err := h.newACPProject("acp-conc", 2*n)
	if err != nil {
		r.failf("concurrent: project: %v", err)
		return 0
	}
	batch := make([]*acpRun, n)
	for i := range batch {
		if batch[i], err = s.newRun(fmt.Sprintf("run%03d", i), 1+h.rng.IntN(10), 300*time.Millisecond); err != nil {
			r.failf("concurrent: %v", err)
			return 0
		}
	}
	p, err := h.startProc(h.bin, s.dir, acpEnv(), procOptions{flags: s.flags})
	if err != nil {
		r.failf("concurrent: start: %v", err)
		return 0
	}
	cs, err := p.connect(ctx)
	if err != nil {
		p.kill()
		r.failf("concurrent: %v", err)
		return 0
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		inFlight int
	)
	t0 := time.Now()
	inFlight = n
	for _, run := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run.start(ctx, cs)
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
	}
	// The peak of agents alive at once, sampled while the runs go on.
	agentsPeak := 0
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for !waitFor(100*time.Millisecond, func() bool { mu.Lock(); defer mu.Unlock(); return inFlight == 0 }) {
			agentsPeak = max(agentsPeak, len(leaders(procsUnder(s.wsRoot))))
		}
	}()
	wg.Wait()
	<-sampled
	wall := time.Since(t0)

	var lat []time.Duration
	failed := 0
	var pids []int
	for _, run := range batch {
		var err error
		st := runState{}
		if !run.done {
			err = fmt.Errorf("not done: %s", run.err)
		} else if st, err = runStatus(ctx, cs, run.runID); err == nil && (st.Status != statusCompleted || !st.Released || st.Text == nil || *st.Text != run.want) {
			err = fmt.Errorf("status %q, released %v, reason %q, text %v; want completed with %q", st.Status, st.Released, st.Reason, st.Text, run.want)
		}
		// The two permissions and the read and the write through symbi are each a use_tool
		// decision; the accesses are journaled, the run ends with terminated.
		if err == nil && (run.types["permission_decided"] != 4 || run.types["fs_read"] != 1 || run.types["fs_write"] != 1 || run.last != "terminated") {
			err = fmt.Errorf("events %v, last %q: want 4 permission_decided, 1 fs_read, 1 fs_write, terminated last", run.types, run.last)
		}
		pid, agent := pidOf(run.pidFile), agentPID(run.record)
		if err == nil && (pid == 0 || agent == 0) {
			err = fmt.Errorf("no pid of the background child (%d) or of the agent (%d)", pid, agent)
		}
		if err != nil {
			if failed++; failed <= 10 {
				r.failf("concurrent: %s: %v", run.name, err)
			}
			continue
		}
		lat = append(lat, run.elapsed)
		pids = append(pids, pid, agent)
	}
	if failed > 10 {
		r.failf("concurrent: … %d of %d runs failed in all", failed, n)
	}
	// Every run has ended: each agent's whole process group was SIGKILLed before its
	// terminated record. A killed process disappears (or is a zombie) once the kernel has
	// run its exit: wait for that, not for a clock.
	var orphans []string
	if !waitFor(goneWithin, func() bool {
		for _, pid := range pids {
			if proctest.Alive(pid) {
				return false
			}
		}
		return len(procsUnder(s.wsRoot)) == 0
	}) {
		for _, pid := range pids {
			if proctest.Alive(pid) {
				orphans = append(orphans, strconv.Itoa(pid))
			}
		}
		for _, q := range procsUnder(s.wsRoot) {
			orphans = append(orphans, q.String())
		}
		r.failf("concurrent: alive %s after every run ended: %s", goneWithin, strings.Join(orphans, " "))
	}
	peak = p.peakRSS()
	if !p.stop(cs) {
		r.failf("concurrent: the server did not exit when its input closed")
	} else if st := p.exitStatus(); st != "exit 0" {
		r.failf("concurrent: the server ended with %s; stderr: %s", st, p.stderr.tail())
	}
	c, err := takeCensus(s.dir)
	if err != nil {
		r.failf("concurrent: census: %v", err)
		return peak
	}
	for _, inv := range c.invalid {
		r.failf("concurrent: invalid journal: %s", inv)
	}
	if c.total != n || c.complete != n {
		r.failf("concurrent: %d journals, %d complete, for %d runs", c.total, c.complete, n)
	}
	for _, rep := range c.reports {
		if rep.TerminalReason != "completed" || !rep.Released {
			r.failf("concurrent: journal %s: terminal %q, released %v", filepath.Base(rep.Path), rep.TerminalReason, rep.Released)
		}
	}
	if pub, err := projectKey(s.dir); err == nil {
		if lr := ledger.VerifyProject(s.dir, pub, nil); lr.ExitCode() != 0 {
			r.failf("concurrent: ledger: %s %v", lr.Status, append(lr.Problems, findings(lr)...))
		}
	}
	events := 0
	for _, run := range batch {
		for _, k := range run.types {
			events += k
		}
	}
	r.figure("conc_runs", n)
	r.figure("conc_completed", len(lat))
	r.figure("conc_agents_peak", agentsPeak)
	r.figure("conc_children", len(pids)/2)
	r.figure("conc_orphans", len(orphans))
	r.figure("conc_events", events)
	r.figure("conc_p50", percentile(lat, 50).Round(time.Millisecond))
	r.figure("conc_p99", percentile(lat, 99).Round(time.Millisecond))
	r.figure("conc_wall", wall.Round(time.Millisecond))
	return peak
}

// pidOf reads a pid file, 0 if absent or not a pid.
func pidOf(path string) int {
	pid, _ := proctest.ReadPID(path)
	return pid
}
