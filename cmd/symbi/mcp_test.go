package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/journal"
	"symbi/internal/loopback"
	"symbi/internal/syncbuf"
)

// The end-to-end tests drive the real symbi binary over real stdio with the go-sdk client,
// against a loopback model speaking the OpenAI wire format on 127.0.0.1.

var symbiBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "symbi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	symbiBin = filepath.Join(dir, "symbi")
	build := exec.Command("go", "build", "-o", symbiBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building symbi:", err)
		os.Exit(1)
	}
	if err := writeOutOfReach(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const e2eAgents = `
helper.symbi: metadata { description = "answers questions", version = "1.0" }
agent helper {
  capabilities = ["answer"]
}
slow.symbi: agent slow {
  with timeout = 1.seconds {}
}
refused.symbi: agent refused(topic: String) {
  capabilities = ["answer"]
}
dup.symbi: agent dup {}
dup.dsl: agent dup {}
`

const e2ePolicy = `@id("allow-respond")
permit (principal, action == Action::"respond", resource);

@id("no-forbidden-word")
forbid (principal, action == Action::"respond", resource)
when { context.response like "*FORBIDDEN*" };
`

// newE2EProject writes a project with the agents above, a policy and AGENTS.md.
func newE2EProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{}
	var name string
	for _, line := range strings.Split(strings.TrimSpace(e2eAgents), "\n") {
		if i := strings.Index(line, ": "); i > 0 && (strings.HasSuffix(line[:i], ".symbi") || strings.HasSuffix(line[:i], ".dsl")) {
			name = line[:i]
			files["agents/"+name] = line[i+2:] + "\n"
			continue
		}
		files["agents/"+name] += line + "\n"
	}
	files["policies/respond.cedar"] = e2ePolicy
	files["AGENTS.md"] = "# Test project\n\n<!-- agents-md:auto-start -->\nBe brief.\n<!-- agents-md:auto-end -->\n"
	for rel, content := range files {
		writeFile(t, filepath.Join(dir, rel), content)
	}
	return dir
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startModel starts a loopback model that answers with text unless told otherwise.
func startModel(t *testing.T, opts ...loopback.Option) *loopback.Server {
	t.Helper()
	m := loopback.New(opts...)
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

type server struct {
	session *mcp.ClientSession
	stderr  *syncbuf.Buffer
	cmd     *exec.Cmd
}

// modelEnv is the environment pointing symbi at model (nil: no provider).
func modelEnv(model *loopback.Server) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	if model != nil {
		env = append(env, "OPENAI_BASE_URL="+model.URL(), "CHAT_MODEL=loopback-test")
	}
	return env
}

// startSymbi runs symbi mcp on dir and connects the go-sdk client to it.
func startSymbi(t *testing.T, dir string, env []string, copts *mcp.ClientOptions, sopts ...*mcp.ClientSessionOptions) *server {
	t.Helper()
	cmd := exec.Command(symbiBin, "mcp", "--project", dir, "--log-level", "debug")
	cmd.Env = env
	return connectSymbi(t, cmd, copts, sopts...)
}

// connectSymbi starts cmd, a symbi mcp command line, and connects the go-sdk client.
func connectSymbi(t *testing.T, cmd *exec.Cmd, copts *mcp.ClientOptions, sopts ...*mcp.ClientSessionOptions) *server {
	t.Helper()
	return connectSymbiTerminate(t, cmd, copts, 0, sopts...)
}

// connectSymbiTerminate is connectSymbi whose session, on Close, waits terminate (0: the
// SDK's default) for the process to exit after stdin closes before signalling it.
func connectSymbiTerminate(t *testing.T, cmd *exec.Cmd, copts *mcp.ClientOptions, terminate time.Duration, sopts ...*mcp.ClientSessionOptions) *server {
	t.Helper()
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "symbi-e2e", Version: "1"}, copts)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var so *mcp.ClientSessionOptions
	if len(sopts) > 0 {
		so = sopts[0]
	}
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: terminate}, so)
	if err != nil {
		t.Fatalf("connect: %v\nstderr:\n%s", err, stderr.String())
	}
	s := &server{session: cs, stderr: stderr, cmd: cmd}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("symbi stderr:\n%s", stderr.String())
		}
	})
	return s
}

func (s *server) call(t *testing.T, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	res, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool %s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type auditRef struct {
	RunID     string `json:"run_id"`
	Path      string `json:"path"`
	PublicKey string `json:"public_key"`
	Records   int    `json:"records"`
	Head      string `json:"head"`
}

type invokeOut struct {
	Agent   string    `json:"agent"`
	AgentID string    `json:"agent_id"`
	Audit   *auditRef `json:"audit"`
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func structured(t *testing.T, res *mcp.CallToolResult) invokeOut {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var out invokeOut
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
	return out
}

// records returns the payloads of a journal's lines.
func records(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var l struct {
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		out = append(out, l.Payload)
	}
	return out
}

func types(recs []map[string]any) []string {
	var ts []string
	for _, r := range recs {
		ts = append(ts, fmt.Sprint(r["type"]))
	}
	return ts
}

func journals(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".symbiont", "governed", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func pubKey(t *testing.T, h string) ed25519.PublicKey {
	t.Helper()
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != ed25519.PublicKeySize {
		t.Fatalf("public_key %q is not 32 bytes of hex", h)
	}
	return ed25519.PublicKey(b)
}

func TestE2EInvokeSuccess(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		name := version
		if name == "" {
			name = "sdk-default"
		}
		t.Run(name, func(t *testing.T) {
			dir := newE2EProject(t)
			model := startModel(t, loopback.WithReply(loopback.Reply{Text: "Forty-two."}))
			var stages []string
			var mu sync.Mutex
			s := startSymbi(t, dir, modelEnv(model), &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					stages = append(stages, req.Params.Message)
					mu.Unlock()
				},
			}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			params := &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": "What is six times seven?"}}
			params.SetProgressToken("p1")
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			res, err := s.session.CallTool(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || text(res) != "Forty-two." {
				t.Fatalf("result: isError=%v text=%q", res.IsError, text(res))
			}
			out := structured(t, res)
			wantID := uuid.NewSHA1(uuid.NameSpaceURL, []byte("symbi://response/helper")).String()
			if out.Agent != "helper" || out.AgentID != wantID || out.Audit == nil {
				t.Fatalf("structured: %+v, want agent helper, agent_id %s", out, wantID)
			}
			a := out.Audit
			if _, err := uuid.Parse(a.RunID); err != nil || !filepath.IsAbs(a.Path) || a.Records != 5 || len(a.Head) != 64 {
				t.Fatalf("audit: %+v", a)
			}
			if want := filepath.Join(dir, ".symbiont", "governed", wantID+"."+a.RunID+".jsonl"); a.Path != want {
				t.Errorf("path %s, want %s", a.Path, want)
			}
			if got := strings.Join(types(records(t, a.Path)), ","); got != "started,inference_requested,inference_finished,policy_evaluated,terminated" {
				t.Errorf("record types: %s", got)
			}
			// The auditor's check, with the CLI, the key and the receipt.
			cmd := exec.Command(symbiBin, "audit", "verify", a.Path, "--public-key", a.PublicKey,
				"--run-id", a.RunID, "--head", a.Head, "--records", fmt.Sprint(a.Records))
			if outb, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("symbi audit verify: %v\n%s", err, outb)
			}
			if n := len(model.Requests()); n != 1 {
				t.Errorf("model received %d requests, want 1", n)
			}
			mu.Lock()
			got := strings.Join(stages, ",")
			mu.Unlock()
			if got != "admitted,journal opened,request sent,response received,policy decided" {
				t.Errorf("progress stages: %q", got)
			}
		})
	}
}

// TestE2EOrdering proves that inference_requested is durable and verified on disk at the
// moment the model receives the request.
func TestE2EOrdering(t *testing.T) {
	dir := newE2EProject(t)
	var (
		mu       sync.Mutex
		observed string
	)
	model := startModel(t)
	model.OnRequest(func(loopback.Request) {
		mu.Lock()
		defer mu.Unlock()
		files := journals(t, dir)
		if len(files) != 1 {
			observed = fmt.Sprintf("%d journal files", len(files))
			return
		}
		key, err := os.ReadFile(filepath.Join(dir, ".symbiont", "governed", "audit-signing.key"))
		if err != nil || len(key) != ed25519.SeedSize {
			observed = fmt.Sprintf("key: %v", err)
			return
		}
		pub := ed25519.NewKeyFromSeed(key).Public().(ed25519.PublicKey)
		rep := journal.Verify(files[0], pub, journal.VerifyOptions{})
		recs := records(t, files[0])
		observed = fmt.Sprintf("%s/%d/%s", rep.Status, rep.TailBytes, recs[len(recs)-1]["type"])
	})
	s := startSymbi(t, dir, modelEnv(model), nil)
	if res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hi"}); res.IsError {
		t.Fatalf("invoke: %s", text(res))
	}
	mu.Lock()
	defer mu.Unlock()
	if observed != "incomplete/0/inference_requested" {
		t.Fatalf("journal when the request arrived: %q, want a verified journal ending in inference_requested", observed)
	}
}

func TestE2EPreflightRefusals(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t)
	s := startSymbi(t, dir, modelEnv(model), nil)
	noProv := startSymbi(t, dir, modelEnv(nil), nil)
	tests := []struct {
		name string
		s    *server
		args map[string]any
		code string
		want string
	}{
		{"refused definition", s, map[string]any{"agent": "refused", "prompt": "hi"}, "refused_definition", "rule 4"},
		{"unknown agent", s, map[string]any{"agent": "nobody", "prompt": "hi"}, "unknown_agent", "nobody"},
		{"ambiguous stem", s, map[string]any{"agent": "dup", "prompt": "hi"}, "unknown_agent", "ambiguous"},
		{"prompt over 64 KiB", s, map[string]any{"agent": "helper", "prompt": strings.Repeat("a", 64<<10+1)}, "limit_exceeded", "64 KiB"},
		{"system_prompt over 64 KiB", s, map[string]any{"agent": "helper", "prompt": "hi", "system_prompt": strings.Repeat("a", 64<<10+1)}, "limit_exceeded", "64 KiB"},
		{"no provider", noProv, map[string]any{"agent": "helper", "prompt": "hi"}, "no_provider", "provider"},
		{"missing prompt", s, map[string]any{"agent": "helper"}, "invalid_request", "prompt"},
		{"wrong type", s, map[string]any{"agent": 5, "prompt": "hi"}, "invalid_request", "agent"},
		{"unknown argument", s, map[string]any{"agent": "helper", "prompt": "hi", "extra": true}, "invalid_request", "extra"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.s.call(t, "invoke_agent", tt.args)
			out := structured(t, res)
			if !res.IsError || !strings.HasPrefix(text(res), tt.code+": ") || out.Error == nil || out.Error.Code != tt.code {
				t.Fatalf("got isError=%v text=%q structured=%+v, want code %s", res.IsError, text(res), out, tt.code)
			}
			if !strings.Contains(text(res), tt.want) {
				t.Errorf("text %q does not mention %q", text(res), tt.want)
			}
			if out.Audit != nil {
				t.Errorf("preflight error carries an audit reference: %+v", out.Audit)
			}
		})
	}
	if n := len(journals(t, dir)); n != 0 {
		t.Errorf("%d journal files after preflight refusals, want 0", n)
	}
	if n := len(model.Requests()); n != 0 {
		t.Errorf("model received %d requests, want 0", n)
	}
}

func TestE2EPolicyDeny(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t, loopback.WithReply(loopback.Reply{Text: "this is FORBIDDEN text"}))
	s := startSymbi(t, dir, modelEnv(model), nil)
	res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "say it"})
	out := structured(t, res)
	if !res.IsError || !strings.HasPrefix(text(res), "policy_denied: ") || !strings.Contains(text(res), "no-forbidden-word") {
		t.Fatalf("result %q, want policy_denied naming no-forbidden-word", text(res))
	}
	raw, _ := json.Marshal(res)
	if bytes.Contains(raw, []byte("FORBIDDEN text")) {
		t.Fatalf("denied text reached the client: %s", raw)
	}
	if out.Audit == nil {
		t.Fatal("no audit reference on a recorded denial")
	}
	recs := records(t, out.Audit.Path)
	last := recs[len(recs)-1]
	data := last["data"].(map[string]any)
	if last["type"] != "terminated" || data["reason"] != "policy_denied" || data["released"] != false {
		t.Fatalf("last record %v", last)
	}
	rep := journal.Verify(out.Audit.Path, pubKey(t, out.Audit.PublicKey), journal.VerifyOptions{Head: out.Audit.Head, Records: out.Audit.Records})
	if rep.ExitCode() != 0 {
		t.Fatalf("verify: %+v", rep)
	}
}

func TestE2EStorageRefused(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, governed string)
	}{
		{"governed directory 0777", func(t *testing.T, governed string) {
			if err := os.MkdirAll(governed, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(governed, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"key file of 31 bytes", func(t *testing.T, governed string) {
			if err := os.MkdirAll(governed, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(governed, "audit-signing.key"), make([]byte, 31), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newE2EProject(t)
			tt.setup(t, filepath.Join(dir, ".symbiont", "governed"))
			model := startModel(t)
			s := startSymbi(t, dir, modelEnv(model), nil)
			res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hi"})
			if !res.IsError || !strings.HasPrefix(text(res), "audit_unavailable: ") {
				t.Fatalf("result %q, want audit_unavailable", text(res))
			}
			if n := len(model.Requests()); n != 0 {
				t.Fatalf("model received %d requests, want 0", n)
			}
			// The server keeps serving.
			if res := s.call(t, "list_agents", nil); res.IsError {
				t.Fatalf("list_agents after refusal: %s", text(res))
			}
		})
	}
}

// TestE2EJournalFailureWithholdsText makes the journal fail after the model answered: a
// byte appended behind the writer's back makes its next append fail-stop.
func TestE2EJournalFailureWithholdsText(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t, loopback.WithReply(loopback.Reply{Text: "secret answer"}))
	model.OnRequest(func(loopback.Request) {
		for _, f := range journals(t, dir) {
			fh, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				fh.Write([]byte("x"))
				fh.Close()
			}
		}
	})
	s := startSymbi(t, dir, modelEnv(model), nil)
	res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hi"})
	raw, _ := json.Marshal(res)
	if !res.IsError || !strings.HasPrefix(text(res), "audit_unavailable: ") || bytes.Contains(raw, []byte("secret answer")) {
		t.Fatalf("result %s, want audit_unavailable without the text", raw)
	}
}

// TestE2ESymbiontSwappedMidRun moves .symbiont out of the project while the model works
// and leaves a symlink to it in its place: the journal is then outside the project, so
// the run must withhold its text, as the check at its start would have refused it.
func TestE2ESymbiontSwappedMidRun(t *testing.T) {
	dir := newE2EProject(t)
	moved := filepath.Join(t.TempDir(), "elsewhere")
	model := startModel(t, loopback.WithReply(loopback.Reply{Text: "secret answer"}))
	model.OnRequest(func(loopback.Request) {
		if err := os.Rename(filepath.Join(dir, ".symbiont"), moved); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(moved, filepath.Join(dir, ".symbiont")); err != nil {
			t.Error(err)
		}
	})
	s := startSymbi(t, dir, modelEnv(model), nil)
	res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hi"})
	raw, _ := json.Marshal(res)
	if !res.IsError || !strings.HasPrefix(text(res), "audit_unavailable: ") || bytes.Contains(raw, []byte("secret answer")) {
		t.Fatalf("result %s, want audit_unavailable without the text", raw)
	}
	if !strings.Contains(text(res), "without following links") {
		t.Errorf("the error does not say why: %s", text(res))
	}
}

// TestE2EFreeSpaceFloor: below the floor a run is refused before any journal file is
// created, and the message names the floor.
func TestE2EFreeSpaceFloor(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t)
	cmd := exec.Command(symbiBin, "mcp", "--project", dir, "--min-free-space", "1048576TiB") // an exbibyte: more than any disk here
	cmd.Env = modelEnv(model)
	s := connectSymbi(t, cmd, nil)
	res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hi"})
	if !res.IsError || !strings.HasPrefix(text(res), "audit_unavailable: ") || !strings.Contains(text(res), "below the floor of 1152921504606846976 bytes (--min-free-space)") {
		t.Fatalf("result %q, want audit_unavailable naming the floor", text(res))
	}
	if out := structured(t, res); out.Audit != nil {
		t.Errorf("a refused run carries an audit reference: %+v", out.Audit)
	}
	if files := journals(t, dir); len(files) != 0 {
		t.Errorf("journal files were created: %v", files)
	}
	if n := len(model.Requests()); n != 0 {
		t.Errorf("model received %d requests, want 0", n)
	}
	if res := s.call(t, "list_agents", nil); res.IsError {
		t.Fatalf("list_agents after refusal: %s", text(res))
	}
}

// TestE2EFirstWriteFailureLeavesNoFile runs symbi with a file size limit that the key
// file fits under but the run's first record does not: the run fails closed, and the
// journal file that could not receive its first record is removed, not left as debris.
func TestE2EFirstWriteFailureLeavesNoFile(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	dir := newE2EProject(t)
	model := startModel(t)
	cmd := exec.Command(prlimit, "--fsize=1024", symbiBin, "mcp", "--project", dir)
	cmd.Env = modelEnv(model)
	s := connectSymbi(t, cmd, nil)
	for i := range 3 {
		res := s.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": strings.Repeat("x", 2000)})
		if !res.IsError || !strings.HasPrefix(text(res), "audit_unavailable: ") || !strings.Contains(text(res), "the empty journal was removed") {
			t.Fatalf("attempt %d: result %q, want audit_unavailable", i, text(res))
		}
	}
	if files := journals(t, dir); len(files) != 0 {
		t.Errorf("debris left behind: %v", files)
	}
	if n := len(model.Requests()); n != 0 {
		t.Errorf("model received %d requests, want 0", n)
	}
}

func TestE2ECancellation(t *testing.T) {
	dir := newE2EProject(t)
	arrived := make(chan struct{}, 1)
	model := startModel(t, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	model.OnRequest(func(loopback.Request) { arrived <- struct{}{} })
	s := startSymbi(t, dir, modelEnv(model), nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.session.CallTool(ctx, &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": "hang"}})
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(hangGuard):
		t.Fatal("the model never received the request")
	}
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("cancelled call returned no error")
		}
	case <-time.After(hangGuard):
		t.Fatal("cancelled call did not return")
	}
	// The run, owned by the server, finishes its journal after the handler returned.
	var recs []map[string]any
	deadline := time.Now().Add(hangGuard)
	for time.Now().Before(deadline) {
		if files := journals(t, dir); len(files) == 1 && lastRecordType(t, files[0]) == "terminated" {
			recs = records(t, files[0])
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(recs) != 4 {
		t.Fatalf("records %v, want started, inference_requested, inference_finished, terminated", types(recs))
	}
	if o := recs[2]["data"].(map[string]any)["outcome"]; o != "cancelled" {
		t.Errorf("inference_finished outcome %v, want cancelled", o)
	}
	if r := recs[3]["data"].(map[string]any)["reason"]; r != "cancelled" {
		t.Errorf("terminated reason %v, want cancelled", r)
	}
	key, _ := os.ReadFile(filepath.Join(dir, ".symbiont", "governed", "audit-signing.key"))
	if rep := journal.Verify(journals(t, dir)[0], ed25519.NewKeyFromSeed(key).Public().(ed25519.PublicKey), journal.VerifyOptions{}); rep.ExitCode() != 0 {
		t.Fatalf("verify: %+v", rep)
	}
}

func TestE2EDeadline(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	s := startSymbi(t, dir, modelEnv(model), nil)
	res := s.call(t, "invoke_agent", map[string]any{"agent": "slow", "prompt": "hang"})
	out := structured(t, res)
	if !res.IsError || !strings.HasPrefix(text(res), "timeout: ") || out.Audit == nil {
		t.Fatalf("result %q, want timeout with an audit reference", text(res))
	}
	recs := records(t, out.Audit.Path)
	if got := strings.Join(types(recs), ","); got != "started,inference_requested,inference_finished,terminated" {
		t.Fatalf("records %s", got)
	}
	if d := recs[0]["data"].(map[string]any)["deadline_ms"]; d != float64(1000) {
		t.Errorf("deadline_ms %v, want 1000", d)
	}
	if r := recs[3]["data"].(map[string]any)["reason"]; r != "timeout" {
		t.Errorf("terminated reason %v", r)
	}
}

func TestE2EConcurrent(t *testing.T) {
	dir := newE2EProject(t)
	model := startModel(t, loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	s := startSymbi(t, dir, modelEnv(model), nil)
	const n = 32
	var wg sync.WaitGroup
	outs := make([]invokeOut, n)
	texts := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": fmt.Sprint("q", i)}})
			if err != nil {
				t.Error(err)
				return
			}
			texts[i] = text(res)
			outs[i] = structured(t, res)
		}()
	}
	wg.Wait()
	paths := map[string]bool{}
	for i, out := range outs {
		if texts[i] != fmt.Sprint("echo: q", i) || out.Audit == nil {
			t.Fatalf("call %d: text %q audit %+v", i, texts[i], out.Audit)
		}
		paths[out.Audit.Path] = true
		rep := journal.Verify(out.Audit.Path, pubKey(t, out.Audit.PublicKey), journal.VerifyOptions{RunID: out.Audit.RunID, Head: out.Audit.Head, Records: out.Audit.Records})
		if rep.ExitCode() != 0 {
			t.Fatalf("journal %d: %+v", i, rep)
		}
	}
	if len(paths) != n || len(journals(t, dir)) != n {
		t.Fatalf("%d distinct journals, want %d", len(paths), n)
	}
}

func TestE2EResources(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, dir string)
		listed bool
	}{
		{"present", func(*testing.T, string) {}, true},
		{"absent", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "AGENTS.md")) }, false},
		{"hard-linked", func(t *testing.T, dir string) {
			if err := os.Link(filepath.Join(dir, "AGENTS.md"), filepath.Join(dir, "other.md")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"oversized", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "AGENTS.md"), strings.Repeat("a", 64<<10+1))
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newE2EProject(t)
			tt.setup(t, dir)
			s := startSymbi(t, dir, modelEnv(nil), nil)
			ctx := context.Background()
			list, err := s.session.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			listed := len(list.Resources) == 1 && list.Resources[0].URI == "file:///AGENTS.md"
			if listed != tt.listed || (!tt.listed && len(list.Resources) != 0) {
				t.Fatalf("resources %+v, want listed=%v", list.Resources, tt.listed)
			}
			if tt.listed {
				rr, err := s.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///AGENTS.md"})
				if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "Be brief.") || rr.Contents[0].MIMEType != "text/markdown" {
					t.Fatalf("read: %v %+v", err, rr)
				}
			}
			if _, err := s.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///etc/passwd"}); err == nil {
				t.Fatal("reading an unknown resource succeeded")
			}
		})
	}
}

// TestE2EWire speaks raw JSON-RPC lines at protocol 2025-11-25: bad input of each kind
// gets a clear error and the server keeps serving.
func TestE2EWire(t *testing.T) {
	dir := newE2EProject(t)
	cmd := exec.Command(symbiBin, "mcp", "--project", dir)
	cmd.Env = modelEnv(nil)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	send := func(s string) { io.WriteString(stdin, s+"\n") }
	recv := func(id string) map[string]any {
		t.Helper()
		timeout := time.After(hangGuard)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("server closed stdout waiting for id %s; stderr:\n%s", id, stderr.String())
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("stdout carried a non-JSON line %q", l)
				}
				if fmt.Sprint(m["id"]) == id {
					return m
				}
			case <-timeout:
				t.Fatalf("no response with id %s; stderr:\n%s", id, stderr.String())
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	init := recv("1")
	if v := init["result"].(map[string]any)["protocolVersion"]; v != "2025-11-25" {
		t.Fatalf("negotiated %v", v)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`)
	if m := recv("2"); m["error"] == nil && !isToolError(m) {
		t.Fatalf("unknown tool: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"invoke_agent","arguments":{"agent":["x"],"prompt":"hi"}}}`)
	if m := recv("3"); !isToolError(m) || !strings.HasPrefix(toolText(m), "invalid_request: ") {
		t.Fatalf("invalid arguments: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":4,"method":"no/such/method","params":{}}`)
	if m := recv("4"); m["error"] == nil {
		t.Fatalf("unknown method: %v", m)
	}
	send(`{this is not json`)
	send(`{}`)
	send(`[{"jsonrpc":"2.0","id":7,"method":"tools/list"}]`)
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"pad":"` + strings.Repeat("x", 17<<20) + `"}}`)
	for _, want := range []float64{-32700, -32600, -32600, -32600} {
		m := recv("<nil>")
		if e, _ := m["error"].(map[string]any); e == nil || e["code"] != want {
			t.Fatalf("bad line answered %v, want error %v", m, want)
		}
	}
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}`)
	m := recv("5")
	tools, _ := m["result"].(map[string]any)["tools"].([]any)
	if len(tools) != 13 {
		t.Fatalf("after bad input, tools/list: %v", m)
	}
}

func isToolError(m map[string]any) bool {
	r, ok := m["result"].(map[string]any)
	return ok && r["isError"] == true
}

func toolText(m map[string]any) string {
	r, _ := m["result"].(map[string]any)
	c, _ := r["content"].([]any)
	if len(c) == 0 {
		return ""
	}
	first, _ := c[0].(map[string]any)
	s, _ := first["text"].(string)
	return s
}

// TestE2EShutdownSignal: SIGTERM while a call waits on a hanging model cancels the run,
// which writes terminated (reason cancelled) before the process exits.
func TestE2EShutdownSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := newE2EProject(t)
			arrived := make(chan struct{}, 1)
			model := startModel(t, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
			model.OnRequest(func(loopback.Request) { arrived <- struct{}{} })
			s := startSymbi(t, dir, modelEnv(model), nil)
			go s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": "hang"}})
			select {
			case <-arrived:
			case <-time.After(hangGuard):
				t.Fatal("the model never received the request")
			}
			if err := s.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- s.session.Wait() }() // ends when the server closes stdout
			select {
			case <-exited:
			case <-time.After(hangGuard):
				t.Fatal("symbi mcp did not exit after the signal")
			}
			files := journals(t, dir)
			if len(files) != 1 {
				t.Fatalf("%d journals", len(files))
			}
			recs := records(t, files[0])
			last := recs[len(recs)-1]
			if last["type"] != "terminated" || last["data"].(map[string]any)["reason"] != "cancelled" {
				t.Fatalf("journal ends with %v", last)
			}
		})
	}
}

// symbi mcp exits 0 when its input ends (the client went away), and 1 when reading it
// fails.
func TestMCPExitCodes(t *testing.T) {
	dir := newE2EProject(t)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n"
	for _, tt := range []struct {
		name  string
		stdin io.Reader
		code  int
	}{
		{"end of input", strings.NewReader(init), 0},
		{"read error", io.MultiReader(strings.NewReader(init), iotest.ErrReader(errors.New("stdin: input/output error"))), 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			e := &env{stdin: tt.stdin, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			if code := run(e, []string{"mcp", "--project", dir}); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, errb.String())
			}
		})
	}
}

// hangGuard bounds a wait that only a hang reaches. It is never an expectation of speed:
// under -race on a busy machine the work it guards may take far longer than on an idle one.
const hangGuard = 5 * time.Minute

// TestE2ERegistrySnapshotAtStartup: the registry is a snapshot taken at start-up, whatever
// the client does: it is read without the client's notifications/initialized (here never
// sent until after the change), and a file changed once it was read is served as it was.
func TestE2ERegistrySnapshotAtStartup(t *testing.T) {
	dir := newE2EProject(t)
	const original = "agent helper {\n  capabilities = [\"answer\"]\n}\n"
	writeFile(t, filepath.Join(dir, "agents/helper.symbi"), original)
	cmd := exec.Command(symbiBin, "mcp", "--project", dir)
	cmd.Env = modelEnv(nil)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	loaded := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "registry loaded") {
				close(loaded)
				break
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	answers := make(chan map[string]any, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["id"] != nil {
				answers <- m
			}
		}
		close(answers)
	}()
	send := func(s string) {
		if _, err := io.WriteString(stdin, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatal("symbi closed stdout")
			}
			return m
		case <-time.After(hangGuard): // a failure guard
			t.Fatal("no answer")
		}
		return nil
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	if r := next(); r["result"] == nil {
		t.Fatalf("initialize: %v", r)
	}
	select {
	case <-loaded:
	case <-time.After(hangGuard): // a failure guard
		t.Fatal("the registry was not read at start-up: the server waits for the client before taking its snapshot")
	}
	writeFile(t, filepath.Join(dir, "agents/helper.symbi"), "agent helper {\n  capabilities = [\"changed\"]\n}\n")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_agent_dsl","arguments":{"agent":"helper"}}}`)
	res, _ := next()["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if got, _ := sc["source"].(string); got != original {
		t.Errorf("get_agent_dsl after the file changed once the snapshot was taken:\n got %q\nwant %q", got, original)
	}
}
