// Command symbi-demo drives one governed invocation end to end, as "make demo" runs it:
// it starts a loopback model on 127.0.0.1 (OpenAI wire format), starts "symbi mcp" on a
// project as a real MCP client over stdio, asks an agent a question and prints the
// answer, verifies the run's journal with "symbi audit verify" using the returned public
// key and receipt, then shows an answer withheld by the project's Cedar policy and a
// definition refused before any model call, an asynchronous run, and a delegated run: the
// scripted coding agent cmd/fake-acp-agent, registered with --executors as "coder", works
// for agents/pair_coder.symbi over the Agent Client Protocol, is allowed a read and
// denied a command by policies/tools.cedar, and its journal is verified. Then a human
// gate: a second "symbi mcp", shared over Streamable HTTP with two token callers, holds an
// answer naming a customer (policies/review.cedar) until a caller other than the one who
// asked approves it (gate.go). It needs no credentials and no network.
//
//	symbi-demo [-symbi bin/symbi] [-fake-agent bin/fake-acp-agent] [-project .] [-agent reviewer]
//
// It exits 0 only when every step behaved as the product promises.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/loopback"
)

// leakyAnswer is what the loopback model answers when asked for a key: a PEM private key
// block, which the example policy "no-private-keys" withholds.
// plainAnswer is the loopback model's answer to every other question: what the released
// texts of steps 1 and 4 must be, word for word.
const plainAnswer = "The loop re-reads the slice length on every pass and appends to the slice it ranges over, so it never ends. Iterate over a copy, or index up to the original length."

const leakyAnswer = "Here is the key you asked for:\n-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIDemoOnlyNotARealKeyDemoOnlyNotARealKey0\n-----END PRIVATE KEY-----\n"

func main() {
	symbi := flag.String("symbi", "bin/symbi", "the symbi binary")
	fakeAgent := flag.String("fake-agent", "bin/fake-acp-agent", "the scripted ACP agent (go build ./cmd/fake-acp-agent) registered as the executor "+delegatedExecutor)
	project := flag.String("project", ".", "the project to serve")
	agent := flag.String("agent", "reviewer", "the agent to ask")
	flag.Parse()
	if err := demo(os.Stdout, *symbi, *fakeAgent, *project, *agent); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
	fmt.Println("\ndemo: every step behaved as expected")
}

func demo(out io.Writer, symbi, fakeAgent, project, agent string) error {
	// The operator's side of a delegated run: the executors file registering the fake
	// agent, and the script it follows. Both live in a directory removed at the end.
	tmp, err := os.MkdirTemp("", "symbi-demo-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	deleg, err := prepareDelegation(tmp, fakeAgent, project)
	if err != nil {
		return err
	}

	model := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		if strings.Contains(strings.ToLower(r.Prompt), "private key") {
			return loopback.Reply{Text: leakyAnswer}
		}
		if strings.Contains(r.Prompt, gatedCustomer) {
			return loopback.Reply{Text: gatedAnswer}
		}
		return loopback.Reply{Text: plainAnswer}
	}))
	if err := model.Start(); err != nil {
		return err
	}
	defer model.Close()
	step(out, "loopback model listening at %s", model.URL())

	// The server's log goes to a file the demo names, so that it does not interleave with
	// the narrative; a person can read it afterwards.
	logFile, err := os.CreateTemp("", "symbi-demo-server-*.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(symbi, "mcp", "--project", project, "--executors", deleg.executors)
	cmd.Env = modelEnv(model, "FAKE_ACP_SCRIPT="+deleg.script)
	cmd.Stderr = logFile
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "symbi-demo", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("starting symbi mcp: %w", err)
	}
	defer session.Close()
	step(out, "symbi mcp serving %s over stdio, --executors %s (its log: %s)", project, deleg.executors, logFile.Name())

	list, err := call(ctx, session, "list_agents", map[string]any{})
	if err != nil {
		return err
	}
	var agents struct {
		Agents []agentEntry `json:"agents"`
	}
	if err := decode(list, &agents); err != nil {
		return err
	}
	for _, a := range agents.Agents {
		status := "invocable"
		switch {
		case !a.Invocable:
			status = "refused: " + a.Reason
		case a.Mode == "delegated":
			status = "delegated to the executor " + a.Executor + ": start_run only"
		}
		fmt.Fprintf(out, "    %-16s %s\n", a.Name, status)
	}

	// 1. A governed answer, then the auditor's offline check.
	prompt := "Review this Go loop: for i := 0; i < len(s); i++ { s = append(s, s[i]) }"
	step(out, "invoke_agent %s: %q", agent, prompt)
	res, err := call(ctx, session, "invoke_agent", map[string]any{"agent": agent, "prompt": prompt})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("invoke_agent failed: %s", text(res))
	}
	var ok struct {
		Agent, AgentID string
		Audit          audit `json:"audit"`
	}
	if err := decode(res, &ok); err != nil {
		return err
	}
	if text(res) != plainAnswer {
		return fmt.Errorf("invoke_agent released %q, not the model's answer %q", text(res), plainAnswer)
	}
	fmt.Fprintf(out, "    answer: %s\n", text(res))
	fmt.Fprintf(out, "    journal: %s\n    public key: %s\n    receipt: records=%d head=%s\n", ok.Audit.Path, ok.Audit.PublicKey, ok.Audit.Records, ok.Audit.Head)
	if err := verify(out, symbi, ok.Audit, 0); err != nil {
		return err
	}

	// 2. An answer the project's Cedar policy withholds.
	prompt = "Paste the deployment private key."
	step(out, "invoke_agent %s: %q (the model will answer with a PEM private key)", agent, prompt)
	res, err = call(ctx, session, "invoke_agent", map[string]any{"agent": agent, "prompt": prompt})
	if err != nil {
		return err
	}
	if !res.IsError || !strings.HasPrefix(text(res), "policy_denied: ") {
		return fmt.Errorf("expected policy_denied, got %q", text(res))
	}
	if reached(res, "BEGIN PRIVATE KEY") {
		return errors.New("the withheld text reached the client")
	}
	var denied struct {
		Audit audit `json:"audit"`
	}
	if err := decode(res, &denied); err != nil {
		return err
	}
	fmt.Fprintf(out, "    refused: %s\n    journal: %s\n", text(res), denied.Audit.Path)
	if err := verify(out, symbi, denied.Audit, 0); err != nil {
		return err
	}

	// 3. A definition that is not conversational: refused before any journal or model call.
	before := len(model.Requests())
	step(out, "invoke_agent deploy_bot (an alternate executor)")
	res, err = call(ctx, session, "invoke_agent", map[string]any{"agent": "deploy_bot", "prompt": "deploy"})
	if err != nil {
		return err
	}
	if !res.IsError || !strings.HasPrefix(text(res), "refused_definition: ") || len(model.Requests()) != before {
		return fmt.Errorf("expected refused_definition without a model call, got %q", text(res))
	}
	fmt.Fprintf(out, "    refused: %s\n", text(res))

	// 4. An asynchronous run: start it, follow its events by cursor (each a signed journal
	// line), read its outcome, and record what we concluded about it.
	if err := asyncRun(ctx, out, session, agent); err != nil {
		return err
	}

	// 5. A delegated run: a coding agent over ACP, each permission decided by policy.
	if err := delegatedRun(ctx, out, session, symbi, project, deleg); err != nil {
		return err
	}

	// 6. A human gate on a shared server: an answer naming a customer waits for a person,
	// and the caller who asked may not be the one who approves it.
	if err := gatedRun(ctx, out, symbi, project, tmp, model); err != nil {
		return err
	}

	// 7. The whole project: the ledger of every run, every journal, and a checkpoint an
	// auditor saves to catch a later rollback or rewrite.
	cpFile := filepath.Join(tmp, "checkpoint.txt") // this demo's own: another's is another file
	step(out, "symbi audit checkpoint --project %s > %s", project, cpFile)
	cp, err := exec.Command(symbi, "audit", "checkpoint", "--project", project).Output()
	if err != nil {
		return fmt.Errorf("symbi audit checkpoint: %w", err)
	}
	if err := os.WriteFile(cpFile, cp, 0o644); err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(cp)), "\n") {
		fmt.Fprintf(out, "    %s\n", l)
	}
	args := []string{"audit", "verify", "--project", project, "--public-key", ok.Audit.PublicKey, "--checkpoint", cpFile}
	step(out, "symbi %s", strings.Join(args, " "))
	b, err := exec.Command(symbi, args...).CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fmt.Fprintf(out, "    %s\n", l)
	}
	var ee *exec.ExitError
	if err == nil || errors.As(err, &ee) && ee.ExitCode() == 2 {
		// 0, or 2 for a crash left over from an earlier session on this project — which
		// the report must say, of runs that are not this demo's: a verifier that crashed
		// exits 2 too (a Go panic), and says nothing of the kind.
		return projectIncomplete(symbi, args, err == nil)
	}
	return fmt.Errorf("symbi audit verify --project: %v", err)
}

// projectIncomplete runs the project's verification again with --json and accepts its
// report only when it says what its exit code did: complete, or incomplete with no run
// that has a problem — only a crash verification accepts (a journal recovered as found, or
// stopped before its terminated line), nothing invalid.
func projectIncomplete(symbi string, args []string, complete bool) error {
	b, err := exec.Command(symbi, append(args, "--json")...).Output()
	var rep struct {
		Status string `json:"status"`
		Runs   []struct {
			RunID   string `json:"run_id"`
			Entry   string `json:"entry"`
			Journal string `json:"journal"`
			Problem string `json:"problem"`
			Note    string `json:"note"`
		} `json:"runs"`
		Problems []string `json:"problems"`
	}
	if jerr := json.Unmarshal(b, &rep); jerr != nil {
		return fmt.Errorf("symbi audit verify --project --json: %v (%v)", jerr, err)
	}
	if want := map[bool]string{true: "complete", false: "incomplete"}[complete]; rep.Status != want || len(rep.Problems) > 0 {
		return fmt.Errorf("symbi audit verify --project: the report says %s %q, the exit code %s", rep.Status, rep.Problems, want)
	}
	for _, r := range rep.Runs {
		// Incomplete without a problem is what verification says of a crash it accepts: a
		// journal recovered as found, one stopped before the terminated line its ledger
		// entry names, one a server is still writing (its note says which).
		if r.Problem != "" {
			return fmt.Errorf("symbi audit verify --project: run %s is %s (%s entry): %s", r.RunID, r.Journal, r.Entry, r.Problem)
		}
	}
	return nil
}

// reached reports whether secret is anywhere in the result as the client received it:
// its text content, its structured content, any other content.
func reached(res *mcp.CallToolResult, secret string) bool {
	b, err := json.Marshal(res)
	return err != nil || strings.Contains(string(b), secret) || strings.Contains(text(res), secret)
}

// modelEnv is the environment of a symbi server whose provider is the loopback model,
// with extra variables.
func modelEnv(model *loopback.Server, extra ...string) []string {
	return append(append(os.Environ(), "OPENAI_BASE_URL="+model.URL(), "CHAT_MODEL=loopback-demo", "SYMBI_PROVIDER=openai"), extra...)
}

// asyncRun shows start_run, run_events (long poll, cursor), run_status and resolve_run.
func asyncRun(ctx context.Context, out io.Writer, session *mcp.ClientSession, agent string) error {
	prompt := "Summarize the risks of retrying non-idempotent HTTP requests."
	step(out, "start_run %s: %q", agent, prompt)
	res, err := call(ctx, session, "start_run", map[string]any{"agent": agent, "prompt": prompt})
	if err != nil {
		return err
	}
	var started struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
	}
	if res.IsError || decode(res, &started) != nil {
		return fmt.Errorf("start_run failed: %s", text(res))
	}
	fmt.Fprintf(out, "    run %s is %s; the call has returned, the run goes on\n", started.RunID, started.Status)
	if _, err := followEvents(ctx, out, session, started.RunID); err != nil {
		return err
	}
	st, err := completedStatus(ctx, out, session, started.RunID)
	if err != nil {
		return err
	}
	if *st.Text != plainAnswer {
		return fmt.Errorf("run_status of %s gives %q, not the model's answer %q", started.RunID, *st.Text, plainAnswer)
	}
	step(out, "resolve_run %s accepted", started.RunID)
	res, err = call(ctx, session, "resolve_run", map[string]any{"run_id": started.RunID, "resolution": "accepted", "note": "clear and correct"})
	if err != nil {
		return err
	}
	var resolved struct {
		Status     string `json:"status"`
		Resolution struct {
			Value     string `json:"value"`
			Revisions int    `json:"revisions"`
		} `json:"resolution"`
	}
	if res.IsError || decode(res, &resolved) != nil || resolved.Resolution.Value != "accepted" {
		return fmt.Errorf("resolve_run: %s", text(res))
	}
	fmt.Fprintf(out, "    resolution: %s (a signed ledger entry; status stays %s)\n", resolved.Resolution.Value, resolved.Status)
	return nil
}

// agentEntry is an entry of list_agents (and of "symbi agents list --json").
type agentEntry struct {
	Name      string `json:"name"`
	Invocable bool   `json:"invocable"`
	Reason    string `json:"reason"`
	Mode      string `json:"mode"`
	Executor  string `json:"executor"`
}

// event is one run event with its signed journal line decoded (the members the demo
// prints and checks; docs/journal-format.md has them all).
type event struct {
	Seq      int64
	Type     string
	Data     eventData
	withheld bool // its line was withheld (the run's output, not yet released)
}

type eventData struct {
	Agent        string   `json:"agent"`
	Mode         string   `json:"mode"`
	Executor     string   `json:"executor"`
	AgentName    string   `json:"agent_name"`
	AgentVersion string   `json:"agent_version"`
	Workspace    string   `json:"workspace"`
	CallID       string   `json:"call_id"`
	Outcome      string   `json:"outcome"`
	StopReason   string   `json:"stop_reason"`
	Text         string   `json:"text"`
	Kind         string   `json:"kind"`
	Title        string   `json:"title"`
	Status       string   `json:"status"`
	Paths        []string `json:"paths"`
	Path         string   `json:"path"`
	Bytes        int      `json:"bytes"`
	Action       string   `json:"action"`
	Decision     string   `json:"decision"`
	PolicyIDs    []string `json:"policy_ids"`
	OptionID     string   `json:"option_id"`
	Reason       string   `json:"reason"`
	Released     bool     `json:"released"`
	Error        string   `json:"error"`
	Gate         string   `json:"gate"`
	TimeoutMS    int64    `json:"timeout_ms"`
	Approver     string   `json:"approver"`
	ApproverAuth string   `json:"approver_auth"`
	Via          string   `json:"via"`
}

// followEvents reads a run's events from cursor 0 with a long poll until the run is done,
// printing each one, and returns them.
func followEvents(ctx context.Context, out io.Writer, session *mcp.ClientSession, runID string) ([]event, error) {
	step(out, "run_events %s, from cursor 0, long-polling (wait_ms 30000); each event is a signed journal line", runID)
	var (
		cursor int64
		events []event
	)
	for {
		res, err := call(ctx, session, "run_events", map[string]any{"run_id": runID, "after": cursor, "wait_ms": 30000})
		if err != nil {
			return nil, err
		}
		var page struct {
			Events []struct {
				Seq        int64  `json:"seq"`
				Type       string `json:"type"`
				Line       string `json:"line"`
				LineSHA256 string `json:"line_sha256"`
				Withheld   string `json:"withheld"`
			} `json:"events"`
			NextCursor int64  `json:"next_cursor"`
			Status     string `json:"status"`
			Done       bool   `json:"done"`
		}
		if res.IsError || decode(res, &page) != nil {
			return nil, fmt.Errorf("run_events failed: %s", text(res))
		}
		for _, ev := range page.Events {
			if ev.Withheld != "" {
				// The run's output, before the policy gate released it: only its hash.
				e := event{Seq: ev.Seq, Type: ev.Type, withheld: true}
				events = append(events, e)
				fmt.Fprintf(out, "    event %d: %-19s withheld until released (line sha256 %.12s…)\n", e.Seq, e.Type, ev.LineSHA256)
				continue
			}
			var line struct {
				Payload struct {
					Data eventData `json:"data"`
				} `json:"payload"`
			}
			if err := json.Unmarshal([]byte(ev.Line), &line); err != nil {
				return nil, fmt.Errorf("event %d: %w", ev.Seq, err)
			}
			e := event{Seq: ev.Seq, Type: ev.Type, Data: line.Payload.Data}
			events = append(events, e)
			fmt.Fprintf(out, "    event %d: %-19s %s\n", e.Seq, e.Type, e.summary())
		}
		cursor = page.NextCursor
		if page.Done {
			fmt.Fprintf(out, "    done: status %s, next cursor %d\n", page.Status, cursor)
			if page.Status == "completed" && cursor > 0 && slices.ContainsFunc(events, func(e event) bool { return e.withheld }) {
				return rereadReleased(ctx, out, session, runID, events)
			}
			return events, nil
		}
	}
}

// rereadReleased reads a completed run's events again from the start: the lines withheld
// while it ran (its output, before the gate released it) are served whole now.
func rereadReleased(ctx context.Context, out io.Writer, session *mcp.ClientSession, runID string, events []event) ([]event, error) {
	res, err := call(ctx, session, "run_events", map[string]any{"run_id": runID, "after": 0, "limit": 1000})
	if err != nil {
		return nil, err
	}
	var page struct {
		Events []struct {
			Seq  int64  `json:"seq"`
			Line string `json:"line"`
		} `json:"events"`
	}
	if res.IsError || decode(res, &page) != nil || len(page.Events) != len(events) {
		return nil, fmt.Errorf("run_events from 0 after the release: %s", text(res))
	}
	fmt.Fprintln(out, "    released: read again from cursor 0, the withheld lines are served whole:")
	for i, e := range events {
		if !e.withheld {
			continue
		}
		var line struct {
			Payload struct {
				Data eventData `json:"data"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(page.Events[i].Line), &line); err != nil || page.Events[i].Seq != e.Seq {
			return nil, fmt.Errorf("event %d after the release: %v", e.Seq, err)
		}
		events[i] = event{Seq: e.Seq, Type: e.Type, Data: line.Payload.Data}
		fmt.Fprintf(out, "    event %d: %-19s %s\n", e.Seq, e.Type, events[i].summary())
	}
	return events, nil
}

// summary is one line saying what the event records.
func (e event) summary() string {
	d := e.Data
	switch e.Type {
	case "started":
		return fmt.Sprintf("agent %s, mode %s", d.Agent, d.Mode)
	case "inference_requested":
		return "call " + d.CallID
	case "inference_finished":
		return "outcome " + d.Outcome
	case "session_started":
		return fmt.Sprintf("executor %s (%s %s), workspace %s", d.Executor, d.AgentName, d.AgentVersion, d.Workspace)
	case "agent_thought", "agent_message":
		return fmt.Sprintf("%q", clip(d.Text))
	case "tool_call":
		return fmt.Sprintf("%s %q %s", d.Kind, d.Title, d.Status)
	case "tool_call_update":
		return d.Status
	case "permission_decided":
		s := fmt.Sprintf("%s %q %v → %s by %v", d.Kind, d.Title, d.Paths, d.Decision, d.PolicyIDs)
		if d.OptionID != "" {
			s += ", answered " + d.OptionID
		}
		return s
	case "fs_read", "fs_write":
		return fmt.Sprintf("%s, %d bytes", d.Path, d.Bytes)
	case "session_finished":
		if d.Error != "" {
			return fmt.Sprintf("outcome %s: %s", d.Outcome, d.Error)
		}
		return fmt.Sprintf("outcome %s, stop reason %s", d.Outcome, d.StopReason)
	case "policy_evaluated":
		if d.Gate != "" {
			return fmt.Sprintf("%s → %s by %v, held at the gate %s", d.Action, d.Decision, d.PolicyIDs, d.Gate)
		}
		return fmt.Sprintf("%s → %s by %v", d.Action, d.Decision, d.PolicyIDs)
	case "approval_requested":
		return fmt.Sprintf("gate %s, waits up to %s", d.Gate, time.Duration(d.TimeoutMS)*time.Millisecond)
	case "approval_decided":
		return fmt.Sprintf("%s by %s (%s, via %s): %q", d.Decision, d.Approver, d.ApproverAuth, d.Via, d.Reason)
	case "terminated":
		return fmt.Sprintf("%s, released %v", d.Reason, d.Released)
	}
	return ""
}

func clip(s string) string {
	if r := []rune(s); len(r) > 72 {
		return string(r[:72]) + "…"
	}
	return s
}

// runStatus is what run_status returns, as far as the demo reads it.
type runStatus struct {
	Status     string    `json:"status"`
	Released   bool      `json:"released"`
	Text       *string   `json:"text"`
	Records    int       `json:"records"`
	Head       string    `json:"head"`
	Journal    string    `json:"journal"`
	Caller     string    `json:"caller"`
	CallerAuth string    `json:"caller_auth"`
	Approval   *approval `json:"approval"`
}

// approval is a run's human gate: the request, and the decision once made.
type approval struct {
	Gate         string `json:"gate"`
	RequestedAt  string `json:"requested_at"`
	Deadline     string `json:"deadline"`
	Decision     string `json:"decision"`
	Approver     string `json:"approver"`
	ApproverAuth string `json:"approver_auth"`
	Reason       string `json:"reason"`
	Via          string `json:"via"`
	DecidedAt    string `json:"decided_at"`
}

// completedStatus calls run_status and expects a completed run with its text.
func completedStatus(ctx context.Context, out io.Writer, session *mcp.ClientSession, runID string) (runStatus, error) {
	step(out, "run_status %s", runID)
	var st runStatus
	res, err := call(ctx, session, "run_status", map[string]any{"run_id": runID})
	if err != nil {
		return st, err
	}
	if res.IsError || decode(res, &st) != nil || st.Status != "completed" || st.Text == nil {
		return st, fmt.Errorf("run_status: %s", text(res))
	}
	fmt.Fprintf(out, "    status: %s\n    text (read back from the journal): %s\n", st.Status, *st.Text)
	return st, nil
}

type audit struct {
	RunID     string `json:"run_id"`
	Path      string `json:"path"`
	PublicKey string `json:"public_key"`
	Records   int    `json:"records"`
	Head      string `json:"head"`
}

// verify runs the auditor's check with the CLI and expects exit code want.
func verify(out io.Writer, symbi string, a audit, want int) error {
	args := []string{"audit", "verify", a.Path, "--public-key", a.PublicKey, "--run-id", a.RunID, "--head", a.Head, "--records", fmt.Sprint(a.Records)}
	step(out, "symbi %s", strings.Join(args, " "))
	cmd := exec.Command(symbi, args...)
	b, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fmt.Fprintf(out, "    %s\n", l)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return err
	}
	if code != want {
		return fmt.Errorf("symbi audit verify exited %d, want %d", code, want)
	}
	return nil
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "\n==> "+format+"\n", args...)
}

func call(ctx context.Context, s *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, error) {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func decode(res *mcp.CallToolResult, v any) error {
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
