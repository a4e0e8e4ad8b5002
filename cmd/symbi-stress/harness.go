package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/journal"
	"symbi/internal/loopback"
)

// sizes are the run sizes of the harnesses.
type sizes struct {
	kills     int // SIGKILLs of the crash harness
	crashConc int // concurrent invocations while the crash harness waits to kill
	killMaxMS int // a kill lands at a random moment in [0, killMaxMS) ms after connecting
	loadN     int // invocations of the load harness
	loadConc  int // their concurrency
	inFlight  int // runs in flight when the shutdown harness sends a signal
	// The acp harness: SIGKILLs, delegated runs started before each, the kill moment's
	// bound, and the delegated runs of the concurrency case.
	acpKills, acpKillRuns, acpKillMaxMS, acpConc int
}

var (
	fullSizes = sizes{kills: 200, crashConc: 8, killMaxMS: 400, loadN: 10000, loadConc: 64, inFlight: 8,
		acpKills: 20, acpKillRuns: 4, acpKillMaxMS: 1000, acpConc: 50}
	shortSizes = sizes{kills: 20, crashConc: 4, killMaxMS: 300, loadN: 500, loadConc: 16, inFlight: 4,
		acpKills: 3, acpKillRuns: 3, acpKillMaxMS: 800, acpConc: 10}
)

// config is what every harness gets.
type config struct {
	bin       string
	fakeAgent string // absolute path of a built cmd/fake-acp-agent (the acp harness)
	seed      uint64
	sizes     sizes
	log       io.Writer // progress; nil: quiet
}

// harness is one named harness.
type harness struct {
	name string
	run  func(ctx context.Context, h *harnessRun, r *result)
}

// harnesses are run in this order.
var harnesses = []harness{
	{"crash", runCrash},
	{"storage", runStorage},
	{"model", runModel},
	{"client", runClient},
	{"load", runLoad},
	{"shutdown", runShutdown},
	{"acp", runACP},
}

// harnessBudget bounds one harness; past it the harness fails instead of hanging.
const harnessBudget = 20 * time.Minute

// harnessRun is the state of one harness run: its configuration, its random source and its
// temporary directory.
type harnessRun struct {
	config
	rng *rand.Rand
	tmp string
}

func (h *harnessRun) logf(format string, args ...any) {
	if h.log != nil {
		fmt.Fprintf(h.log, format+"\n", args...)
	}
}

// result is the outcome of one harness.
type result struct {
	name     string
	mu       sync.Mutex
	failures []string
	figures  []string
	elapsed  time.Duration
}

func (r *result) ok() bool { return len(r.failures) == 0 }

// failf records a violated invariant.
func (r *result) failf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// figure records one reported figure.
func (r *result) figure(name string, value any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figures = append(r.figures, fmt.Sprintf("%s=%v", name, value))
}

// runAll runs the harnesses one after the other, each with a random source derived from
// the seed and its position in the table.
func runAll(cfg config, hs []harness) []*result {
	var out []*result
	for _, hs := range hs {
		r := &result{name: hs.name}
		idx := 0
		for i, h := range harnesses {
			if h.name == hs.name {
				idx = i
			}
		}
		tmp, err := os.MkdirTemp("", "symbi-stress-"+hs.name+"-")
		if err != nil {
			r.failf("temp dir: %v", err)
			out = append(out, r)
			continue
		}
		h := &harnessRun{config: cfg, rng: rand.New(rand.NewPCG(cfg.seed, uint64(idx))), tmp: tmp}
		ctx, cancel := context.WithTimeout(context.Background(), harnessBudget)
		start := time.Now()
		h.logf("== %s", hs.name)
		hs.run(ctx, h, r)
		if ctx.Err() != nil {
			r.failf("harness did not finish within %s", harnessBudget)
		}
		cancel()
		r.elapsed = time.Since(start)
		if err := removeAll(tmp); err != nil {
			h.logf("removing %s: %v", tmp, err)
		}
		out = append(out, r)
	}
	return out
}

// removeAll removes dir, first giving back write permission that a harness took away.
func removeAll(dir string) error {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// printSummary writes the table and, under it, every failure.
func printSummary(w io.Writer, cfg config, results []*result) {
	size := "full"
	if cfg.sizes == shortSizes {
		size = "short"
	}
	fmt.Fprintf(w, "symbi-stress: %s sizes, seed %d, binary %s\n\n", size, cfg.seed, cfg.bin)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HARNESS\tRESULT\tTIME\tFIGURES")
	for _, r := range results {
		verdict := "pass"
		if !r.ok() {
			verdict = fmt.Sprintf("FAIL (%d)", len(r.failures))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.name, verdict, r.elapsed.Round(100*time.Millisecond), strings.Join(r.figures, " "))
	}
	tw.Flush()
	for _, r := range results {
		for _, f := range r.failures {
			fmt.Fprintf(w, "\nFAIL %s: %s", r.name, f)
		}
	}
	fmt.Fprintln(w)
}

// Projects.

// agentFiles are the project's agents: helper has the default deadline (120 s), quick a
// deadline of 2 s so that hanging models end fast.
var agentFiles = map[string]string{
	"agents/helper.symbi": "metadata { description = \"answers questions\", version = \"1.0\" }\nagent helper {\n  capabilities = [\"answer\"]\n}\n",
	"agents/quick.symbi":  "agent quick {\n  with timeout = 2.seconds {}\n}\n",
	"policies/respond.cedar": "@id(\"allow-respond\")\npermit (principal, action == Action::\"respond\", resource);\n\n" +
		"@id(\"no-forbidden-word\")\nforbid (principal, action == Action::\"respond\", resource)\nwhen { context.response like \"*FORBIDDEN*\" };\n",
}

// quickDeadline is the quick agent's deadline.
const quickDeadline = 2 * time.Second

// newProject writes a project under the harness's temp dir and returns its path.
func (h *harnessRun) newProject(name string) (string, error) {
	dir := filepath.Join(h.tmp, name)
	for rel, content := range agentFiles {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// governed is the journal directory of a project.
func governed(dir string) string { return filepath.Join(dir, ".symbiont", "governed") }

// projectKey reads the project's public key from its signing key.
func projectKey(dir string) (ed25519.PublicKey, error) {
	seed, err := os.ReadFile(filepath.Join(governed(dir), "audit-signing.key"))
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("signing key is %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), nil
}

// journalCensus verifies every journal of a project and counts them by status. Invalid
// journals are returned with their first problem.
type census struct {
	total, complete, incomplete int
	invalid                     []string
	reports                     []*journal.Report
}

func takeCensus(dir string) (*census, error) {
	c := &census{}
	files, _ := filepath.Glob(filepath.Join(governed(dir), "*.jsonl"))
	if len(files) == 0 {
		return c, nil
	}
	pub, err := projectKey(dir)
	if err != nil {
		return nil, err
	}
	reps, err := journal.VerifyDir(governed(dir), pub)
	if err != nil {
		return nil, err
	}
	c.reports = reps
	for _, rep := range reps {
		c.total++
		switch rep.ExitCode() {
		case 0:
			c.complete++
		case 2:
			c.incomplete++
		default:
			msg := rep.Status
			if len(rep.Problems) > 0 {
				msg = fmt.Sprintf("line %d: %s", rep.Problems[0].Line, rep.Problems[0].Message)
			}
			c.invalid = append(c.invalid, filepath.Base(rep.Path)+": "+msg)
		}
	}
	return c, nil
}

// Model servers.

func startModel(opts ...loopback.Option) (*loopback.Server, error) {
	m := loopback.New(opts...)
	if err := m.Start(); err != nil {
		return nil, err
	}
	return m, nil
}

// modelEnv points symbi at an OpenAI-compatible base URL.
func modelEnv(baseURL string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"OPENAI_BASE_URL=" + baseURL, "CHAT_MODEL=loopback-stress"}
}

// Server processes.

// proc is a running symbi mcp with its stdio as plain pipes that the harness owns, so the
// harness decides when the process is reaped and can signal it.
type proc struct {
	cmd    *exec.Cmd
	stdin  *os.File // write end of the server's stdin
	stdout *os.File // read end of the server's stdout
	stderr *syncBuffer
	done   chan struct{} // closed once the process was reaped
	state  *os.ProcessState
}

// procOptions adjust how the server is started.
type procOptions struct {
	cred      *syscall.Credential // run as another user (nil: as the harness)
	fsizeByte uint64              // RLIMIT_FSIZE of the server, set right after start (0: none)
	flags     []string            // more flags of symbi mcp
}

// startProc starts bin mcp on dir.
func (h *harnessRun) startProc(bin, dir string, env []string, o procOptions) (*proc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"mcp", "--project", dir, "--log-level", "warn"}, o.flags...)...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout = inR, outW
	p := &proc{cmd: cmd, stdin: inW, stdout: outR, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if o.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred}
	}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	if o.fsizeByte > 0 {
		if err := setFileSizeLimit(cmd.Process.Pid, o.fsizeByte); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
	}
	go func() {
		cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// connect starts an MCP client session over the process's stdio.
func (p *proc) connect(ctx context.Context) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "symbi-stress", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: p.stdout, Writer: p.stdin}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect: %w; stderr: %s", err, p.stderr.tail())
	}
	return cs, nil
}

// peakRSS returns the process's peak resident set size in KiB (VmHWM), 0 if unknown.
func (p *proc) peakRSS() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// waitExit waits up to d for the process to exit by itself.
func (p *proc) waitExit(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill ends the process with SIGKILL and reaps it.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exitStatus describes how the process ended.
func (p *proc) exitStatus() string {
	if p.state == nil {
		return "running"
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", p.state.ExitCode())
}

// stop closes the server's stdin, waits up to 30 s for the process to exit by itself and
// kills it otherwise, then closes the session; it reports whether the process exited by
// itself.
func (p *proc) stop(cs *mcp.ClientSession) bool {
	p.stdin.Close() // the reading side stays open, so that the server can still answer
	exited := p.waitExit(30 * time.Second)
	if !exited {
		p.kill()
	}
	if cs != nil {
		cs.Close()
	}
	p.stdout.Close()
	return exited
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 4<<20 { // bounded: keep the first 4 MiB of diagnostics
		s.b.Write(p)
	}
	return len(p), nil
}

// tail returns the last 600 bytes of what was written.
func (s *syncBuffer) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(b)
}

// Invocations.

type auditRef struct {
	RunID     string `json:"run_id"`
	Path      string `json:"path"`
	PublicKey string `json:"public_key"`
	Records   int    `json:"records"`
	Head      string `json:"head"`
}

// outcome is what the client saw of one invoke_agent call.
type outcome struct {
	err     error  // transport or protocol error: no result
	isError bool   // a tool error
	code    string // its code
	text    string // the result's text (the released answer, or the error text)
	whole   string // the whole result as the client received it (JSON): where a leak is looked for
	audit   *auditRef
	elapsed time.Duration
}

// released reports whether the call delivered a model's text to the client.
func (o outcome) released() bool { return o.err == nil && !o.isError }

func (o outcome) String() string {
	switch {
	case o.err != nil:
		return "transport error: " + o.err.Error()
	case o.isError:
		return "tool error: " + clip(o.text, 300)
	}
	return "text: " + clip(o.text, 100)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// invoke calls invoke_agent and decodes the result.
func invoke(ctx context.Context, cs *mcp.ClientSession, agent, prompt string) outcome {
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": agent, "prompt": prompt}})
	o := outcome{err: err, elapsed: time.Since(start)}
	if err != nil {
		return o
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			o.text += tc.Text
		}
	}
	o.isError = res.IsError
	if whole, err := json.Marshal(res); err == nil {
		o.whole = string(whole)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var sc struct {
		Audit *auditRef `json:"audit"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(raw, &sc)
	o.audit = sc.Audit
	if o.isError {
		o.code, _, _ = strings.Cut(o.text, ": ")
		if sc.Error == nil || sc.Error.Code != o.code {
			o.code = "(uncoded) " + o.code
		}
	}
	return o
}

// listAgents reports whether list_agents answers without error.
func listAgents(ctx context.Context, cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_agents", Arguments: map[string]any{}})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("list_agents: tool error")
	}
	return nil
}

// checkReleased asserts the invariant of a released text: its journal verifies complete
// with the client's receipt and ends in terminated with released true.
func checkReleased(o outcome) error {
	if o.audit == nil {
		return fmt.Errorf("text %q was released without an audit reference", clip(o.text, 60))
	}
	pub, err := hexKey(o.audit.PublicKey)
	if err != nil {
		return err
	}
	rep := journal.Verify(o.audit.Path, pub, journal.VerifyOptions{RunID: o.audit.RunID, Head: o.audit.Head, Records: o.audit.Records})
	if rep.ExitCode() != 0 || !rep.Released || rep.TerminalReason != "completed" {
		return fmt.Errorf("released text of run %s: journal %s, terminal %q, released %v, problems %v",
			o.audit.RunID, rep.Status, rep.TerminalReason, rep.Released, rep.Problems)
	}
	return nil
}

// checkWithheld asserts the invariant of a recorded failure: no text in the result, and
// the journal verifies complete with terminated released false and the given reason.
func checkWithheld(o outcome, secret, reason string) error {
	if o.released() {
		return fmt.Errorf("released text %q", clip(o.text, 60))
	}
	if secret != "" && (strings.Contains(o.text, secret) || strings.Contains(o.whole, secret)) {
		return fmt.Errorf("the result carries the model's text")
	}
	if o.audit == nil {
		return nil
	}
	if _, err := os.Lstat(o.audit.Path); errors.Is(err, fs.ErrNotExist) {
		return nil // the fault removed the journal: nothing to verify, and nothing was released
	}
	pub, err := hexKey(o.audit.PublicKey)
	if err != nil {
		return err
	}
	rep := journal.Verify(o.audit.Path, pub, journal.VerifyOptions{RunID: o.audit.RunID})
	if rep.ExitCode() == 1 {
		return fmt.Errorf("journal of run %s is invalid: %v", o.audit.RunID, rep.Problems)
	}
	if rep.Released {
		return fmt.Errorf("journal of run %s says released", o.audit.RunID)
	}
	if reason != "" && (rep.ExitCode() != 0 || rep.TerminalReason != reason) {
		return fmt.Errorf("journal of run %s: status %s, terminal %q, want complete with %q", o.audit.RunID, rep.Status, rep.TerminalReason, reason)
	}
	return nil
}

func hexKey(h string) (ed25519.PublicKey, error) {
	var b []byte
	if _, err := fmt.Sscanf(h, "%x", &b); err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public_key %q is not 32 bytes of hex", h)
	}
	return ed25519.PublicKey(b), nil
}

// percentile returns the p-th percentile (0..100) of ds, nearest rank.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s) + 99) / 100
	return s[max(0, min(i, len(s))-1)]
}

// mib formats KiB as MiB.
func mib(kib int64) string { return fmt.Sprintf("%.1fMiB", float64(kib)/1024) }
