package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/loopback"
)

// The human gate: policies/review.cedar (@gate("human") @id("customer-names-review"))
// holds an answer naming the customer ACME Corp for a person. The demo serves the project
// a second time, over Streamable HTTP with two token callers: alice asks, her own approval
// is refused (four eyes), bob approves and the answer is released.
const (
	gatePolicy    = "customer-names-review"
	gatedCustomer = "ACME Corp" // the loopback model answers gatedAnswer to a prompt naming it
	gatedAgent    = "summarizer"
	gatedPrompt   = "Summarize this week's support notes on " + gatedCustomer + " for the account manager."
	gatedAnswer   = gatedCustomer + "'s nightly export failed twice this week; both runs were retried and completed, no data was lost, and the fix ships on Friday."
	gateRequester = "alice"
	gateApprover  = "bob"
	gateReason    = "the note names the customer only; no contract terms or personal data"
	// serverGrace bounds the server's start and its exit after SIGTERM.
	serverGrace = 30 * time.Second
)

// servingRE finds, in symbi mcp --http's log, the address bound and the URL it serves.
var servingRE = regexp.MustCompile(`\bmsg=serving\b.*\blisten=(\S+) http=(https?://\S+)`)

// gatedRun shows a human gate over HTTP: two bearer tokens made with symbi token add, a
// server started with --auth-tokens, alice's invoke_agent answered approval_required, the
// run awaiting approval, alice's own approval refused, bob's approval releasing the text,
// the approval in the journal and in the ledger, the journal verified, and the server
// stopped with SIGTERM.
func gatedRun(ctx context.Context, out io.Writer, symbi, project, tmp string, model *loopback.Server) error {
	tokens := filepath.Join(tmp, "tokens")
	tok := map[string]string{}
	for _, name := range []string{gateRequester, gateApprover} {
		step(out, "symbi token add --file %s %s", tokens, name)
		b, err := exec.Command(symbi, "token", "add", "--file", tokens, name).Output()
		if err != nil {
			return fmt.Errorf("symbi token add %s: %w", name, err)
		}
		t := strings.TrimSpace(string(b))
		if !strings.HasPrefix(t, "symbi_") || strings.ContainsAny(t, " \n") {
			return fmt.Errorf("symbi token add %s printed %q, want one symbi_ token", name, b)
		}
		tok[name] = t
		fmt.Fprintf(out, "    %s's token, printed once (the file keeps its hash): %s…\n", name, t[:12])
	}

	srv, err := startHTTP(symbi, project, modelEnv(model), "--auth-tokens", tokens)
	if err != nil {
		return err
	}
	defer srv.kill()
	step(out, "symbi mcp --project %s --http 127.0.0.1:0 --auth-tokens %s", project, tokens)
	fmt.Fprintf(out, "    serving %s (its log: %s)\n", srv.url, srv.log)

	alice, err := connectHTTP(ctx, srv.url, tok[gateRequester])
	if err != nil {
		return fmt.Errorf("%s connecting: %w", gateRequester, err)
	}
	defer alice.Close()
	bob, err := connectHTTP(ctx, srv.url, tok[gateApprover])
	if err != nil {
		return fmt.Errorf("%s connecting: %w", gateApprover, err)
	}
	defer bob.Close()
	fmt.Fprintf(out, "    %s and %s connected, each with a Streamable HTTP client and a bearer token\n", gateRequester, gateApprover)

	// alice asks; the answer names the customer, so the gated forbid holds it.
	step(out, "%s: invoke_agent %s: %q (the model's answer will name %s)", gateRequester, gatedAgent, gatedPrompt, gatedCustomer)
	res, err := call(ctx, alice, "invoke_agent", map[string]any{"agent": gatedAgent, "prompt": gatedPrompt})
	if err != nil {
		return err
	}
	var held struct {
		Audit audit `json:"audit"`
	}
	if !res.IsError || !strings.HasPrefix(text(res), "approval_required: ") || decode(res, &held) != nil || held.Audit.RunID == "" {
		return fmt.Errorf("expected approval_required with the run's reference, got %q", text(res))
	}
	id := held.Audit.RunID
	if !strings.Contains(text(res), gatePolicy) || !strings.Contains(text(res), id) {
		return fmt.Errorf("approval_required names neither the gate %s nor the run %s: %q", gatePolicy, id, text(res))
	}
	if reached(res, gatedCustomer) {
		return errors.New("the held text reached the client")
	}
	fmt.Fprintf(out, "    held: %s\n    run %s, journal %s\n", text(res), id, held.Audit.Path)

	// The run waits for a person, its text withheld.
	step(out, "%s: run_status %s", gateRequester, id)
	st, err := gateStatus(ctx, alice, id)
	if err != nil {
		return err
	}
	if st.Status != "awaiting_approval" || st.Text != nil || st.Released || st.Approval == nil || st.Approval.Gate != gatePolicy || st.Approval.Decision != "" {
		return fmt.Errorf("run_status of the held run: %+v (approval %+v), want awaiting_approval at the gate %s, no text", st, st.Approval, gatePolicy)
	}
	fmt.Fprintf(out, "    status: %s, caller %s (%s), text withheld\n    approval: gate %s, requested at %s, deadline %s\n",
		st.Status, st.Caller, st.CallerAuth, st.Approval.Gate, st.Approval.RequestedAt, st.Approval.Deadline)

	// Four eyes: the caller who started the run may not approve it.
	step(out, "%s: approve_run %s approve (her own run)", gateRequester, id)
	res, err = call(ctx, alice, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": "looks fine to me"})
	if err != nil {
		return err
	}
	if !res.IsError || !strings.HasPrefix(text(res), "access_denied: ") {
		return fmt.Errorf("expected access_denied for the requester's own approval, got %q", text(res))
	}
	fmt.Fprintf(out, "    refused: %s\n", text(res))

	step(out, "%s: approve_run %s approve, reason %q", gateApprover, id, gateReason)
	res, err = call(ctx, bob, "approve_run", map[string]any{"run_id": id, "decision": "approve", "reason": gateReason})
	if err != nil {
		return err
	}
	st = runStatus{} // decode into a fresh value: nothing carried over from the held status
	if res.IsError || decode(res, &st) != nil {
		return fmt.Errorf("%s's approval: %s", gateApprover, text(res))
	}
	if a := st.Approval; st.Status != "completed" || !st.Released || st.Text == nil || *st.Text != gatedAnswer || st.Caller != gateRequester ||
		a == nil || a.Decision != "approve" || a.Approver != gateApprover || a.ApproverAuth != "token" || a.Via != "approve_run" || a.Reason != gateReason {
		return fmt.Errorf("after %s's approval: %+v (approval %+v), want completed with the text, approved by %s", gateApprover, st, st.Approval, gateApprover)
	}
	fmt.Fprintf(out, "    status: %s, approved by %s (%s) at %s\n    text released: %q\n", st.Status, st.Approval.Approver, st.Approval.ApproverAuth, st.Approval.DecidedAt, *st.Text)

	// alice reads her released answer, and the run's story, each event a signed journal line.
	if _, err := completedStatus(ctx, out, alice, id); err != nil {
		return err
	}
	events, err := followEvents(ctx, out, alice, id)
	if err != nil {
		return err
	}
	if err := checkGatedEvents(events); err != nil {
		return err
	}
	fmt.Fprintln(out, "    the journal's approval records:")
	for _, e := range events {
		if strings.HasPrefix(e.Type, "approval_") {
			fmt.Fprintf(out, "      %d %s: %s\n", e.Seq, e.Type, e.summary())
		}
	}

	// The decision is in the project ledger too, durable before the text was released.
	step(out, "the ledger's approval entry for %s (%s)", id, filepath.Join(project, ".symbiont", "ledger.jsonl"))
	entry, err := approvalEntry(project, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    %s\n", entry)

	// The auditor's offline check of the run's journal, to its final receipt.
	a := held.Audit
	a.Records, a.Head = st.Records, st.Head
	if err := verify(out, symbi, a, 0); err != nil {
		return err
	}

	// The sessions end, then the server: SIGTERM, and a clean exit.
	alice.Close()
	bob.Close()
	step(out, "kill -TERM %d (symbi mcp --http)", srv.cmd.Process.Pid)
	code, err := srv.stop()
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("symbi mcp --http exited %d after SIGTERM, want 0 (its log: %s)", code, srv.log)
	}
	fmt.Fprintln(out, "    symbi mcp --http exited 0")
	return nil
}

// gateStatus calls run_status and decodes it.
func gateStatus(ctx context.Context, s *mcp.ClientSession, id string) (runStatus, error) {
	var st runStatus
	res, err := call(ctx, s, "run_status", map[string]any{"run_id": id})
	if err != nil {
		return st, err
	}
	if res.IsError || decode(res, &st) != nil {
		return st, fmt.Errorf("run_status: %s", text(res))
	}
	return st, nil
}

// checkGatedEvents expects the story of a held and approved answer: the deny held at the
// gate, the request, bob's approval, then the release.
func checkGatedEvents(events []event) error {
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	got := strings.Join(types, ",")
	const want = "started,inference_requested,inference_finished,policy_evaluated,approval_requested,approval_decided,terminated"
	if got != want {
		return fmt.Errorf("gated run events %s, want %s", got, want)
	}
	pe, req, dec, end := events[3].Data, events[4].Data, events[5].Data, events[6].Data
	switch {
	case pe.Decision != "deny" || pe.Gate != gatePolicy || len(pe.PolicyIDs) != 1 || pe.PolicyIDs[0] != gatePolicy:
		return fmt.Errorf("policy_evaluated %+v, want deny by %s held at the gate", pe, gatePolicy)
	case req.Gate != gatePolicy || req.TimeoutMS <= 0:
		return fmt.Errorf("approval_requested %+v", req)
	case dec.Decision != "approve" || dec.Approver != gateApprover || dec.ApproverAuth != "token" || dec.Via != "approve_run" || dec.Reason != gateReason:
		return fmt.Errorf("approval_decided %+v, want approve by %s via approve_run", dec, gateApprover)
	case end.Reason != "completed" || !end.Released:
		return fmt.Errorf("terminated %+v, want completed and released", end)
	}
	return nil
}

// approvalEntry returns the one approval entry of the project ledger for run id, as its
// signed payload says it (sequence number, type and data), checking who decided.
func approvalEntry(project, id string) (string, error) {
	b, err := os.ReadFile(filepath.Join(project, ".symbiont", "ledger.jsonl"))
	if err != nil {
		return "", err
	}
	var found []string
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var line struct {
			Payload struct {
				Seq  int64           `json:"seq"`
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(l, &line); err != nil {
			return "", fmt.Errorf("ledger: %w", err)
		}
		if line.Payload.Type != "approval" {
			continue
		}
		var d struct {
			RunID        string `json:"run_id"`
			Gate         string `json:"gate"`
			Decision     string `json:"decision"`
			Approver     string `json:"approver"`
			ApproverAuth string `json:"approver_auth"`
			Via          string `json:"via"`
		}
		if err := json.Unmarshal(line.Payload.Data, &d); err != nil {
			return "", fmt.Errorf("ledger entry %d: %w", line.Payload.Seq, err)
		}
		if d.RunID != id {
			continue
		}
		if d.Gate != gatePolicy || d.Decision != "approve" || d.Approver != gateApprover || d.ApproverAuth != "token" || d.Via != "approve_run" {
			return "", fmt.Errorf("ledger entry %d: %s, want approve by %s at the gate %s", line.Payload.Seq, line.Payload.Data, gateApprover, gatePolicy)
		}
		found = append(found, fmt.Sprintf("entry %d, %s: %s", line.Payload.Seq, line.Payload.Type, line.Payload.Data))
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%d approval entries for run %s in the ledger, want 1", len(found), id)
	}
	return found[0], nil
}

// httpServer is a running symbi mcp --http.
type httpServer struct {
	cmd    *exec.Cmd
	url    string        // the MCP endpoint, as the serving line says it
	log    string        // the file its log goes to
	exited chan struct{} // closed once the process has been reaped
}

// startHTTP starts symbi mcp --http 127.0.0.1:0 on project with extra flags, its log going
// to a file, and waits until the log says where it serves.
func startHTTP(symbi, project string, env []string, flags ...string) (*httpServer, error) {
	logFile, err := os.CreateTemp("", "symbi-demo-http-*.log")
	if err != nil {
		return nil, err
	}
	w := &servingWriter{file: logFile, found: make(chan string, 1)}
	s := &httpServer{log: logFile.Name(), exited: make(chan struct{})}
	s.cmd = exec.Command(symbi, append([]string{"mcp", "--project", project, "--http", "127.0.0.1:0"}, flags...)...)
	s.cmd.Env = env
	s.cmd.Stderr = w
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting symbi mcp --http: %w", err)
	}
	go func() {
		s.cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	select {
	case s.url = <-w.found:
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("symbi mcp --http exited (%v) before serving; its log: %s", s.cmd.ProcessState, s.log)
	case <-time.After(serverGrace):
		s.kill()
		return nil, fmt.Errorf("symbi mcp --http did not say it serves within %s; its log: %s", serverGrace, s.log)
	}
}

// stop sends SIGTERM and returns the exit code.
func (s *httpServer) stop() (int, error) {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-s.exited:
	case <-time.After(serverGrace):
		s.kill()
		return 0, fmt.Errorf("symbi mcp --http did not exit within %s of SIGTERM; its log: %s", serverGrace, s.log)
	}
	if !s.cmd.ProcessState.Exited() {
		return 0, fmt.Errorf("symbi mcp --http ended with %v after SIGTERM; its log: %s", s.cmd.ProcessState, s.log)
	}
	return s.cmd.ProcessState.ExitCode(), nil
}

// kill ends a server still running (a step failed) and waits until it is reaped.
func (s *httpServer) kill() {
	select {
	case <-s.exited:
	default:
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// servingWriter writes the server's log to a file and reports the URL of its serving line.
type servingWriter struct {
	file  *os.File
	found chan string

	mu   sync.Mutex
	line []byte
	sent bool
}

func (w *servingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent {
		w.line = append(w.line, p...)
		for {
			i := bytes.IndexByte(w.line, '\n')
			if i < 0 {
				break
			}
			if m := servingRE.FindSubmatch(w.line[:i]); m != nil {
				w.sent, w.line = true, nil
				w.found <- string(m[2])
				break
			}
			w.line = w.line[i+1:]
		}
	}
	return w.file.Write(p)
}

// bearer adds a caller's token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connectHTTP connects the go-sdk Streamable HTTP client to url as the caller of token,
// with a connection pool of its own.
func connectHTTP(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "symbi-demo", Version: "1"}, nil)
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: bearer{token: token, base: &http.Transport{}}},
	}, nil)
}
