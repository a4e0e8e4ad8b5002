package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/runs"
	"symbi/internal/syncbuf"
)

// The end-to-end tests of symbi mcp --http (docs/http.md) drive the real binary over real
// loopback HTTP: the go-sdk's Streamable HTTP client for MCP, and plain HTTP requests for
// what a client library would not send (no token, a foreign Host, a cross-origin
// browser request, an oversized body). Every wait is for an event — a log line, the
// model receiving a request, a long poll, the process exiting — bounded only by
// hangGuard.

// httpSymbi is a running symbi mcp --http.
type httpSymbi struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	base   string // http://127.0.0.1:PORT (https with --tls-cert): where it listens
	url    string // base + "/mcp"
	// announced is the URL of the serving line: url, or the --public-url one.
	announced string
	exited    chan struct{} // closed once the process has been reaped
	// rootCAs, when set, are the roots clients trust (a server with --tls-cert).
	rootCAs *x509.CertPool
}

// transport is a new connection pool for clients of s.
func (s *httpSymbi) transport() *http.Transport {
	if s.rootCAs == nil {
		return &http.Transport{}
	}
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.rootCAs}}
}

// httpServingRE finds the address bound and the URL announced in the log line symbi
// writes once it serves.
var httpServingRE = regexp.MustCompile(`\bmsg=serving\b.*\blisten=(\S+) http=(https?://\S+)(\s|$)`)

// httpStderr keeps symbi's stderr and reports the address and URL of its "serving" line.
type httpStderr struct {
	buf   *syncbuf.Buffer
	found chan []string // listen, http

	mu   sync.Mutex
	line []byte
	sent bool
}

func (w *httpStderr) Write(p []byte) (int, error) {
	w.buf.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		l := string(w.line[:i])
		w.line = slices.Clone(w.line[i+1:])
		if m := httpServingRE.FindStringSubmatch(l); m != nil && !w.sent {
			w.sent = true
			w.found <- m[1:3]
		}
	}
	return len(p), nil
}

// httpStart runs symbi mcp --http 127.0.0.1:0 on dir with extra flags, and waits until
// it logs the URL it serves. The process is stopped (SIGTERM) at the end of the test.
func httpStart(t *testing.T, dir string, env []string, flags ...string) *httpSymbi {
	t.Helper()
	args := append([]string{"mcp", "--project", dir, "--log-level", "debug", "--http", "127.0.0.1:0"}, flags...)
	cmd := exec.Command(symbiBin, args...)
	cmd.Env = env
	s := &httpSymbi{cmd: cmd, stderr: &syncbuf.Buffer{}, exited: make(chan struct{})}
	w := &httpStderr{buf: s.stderr, found: make(chan []string, 1)}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		httpStop(t, s)
		if t.Failed() {
			t.Logf("symbi mcp --http stderr:\n%s", s.stderr.String())
		}
	})
	select {
	case m := <-w.found:
		scheme := "http"
		if slices.Contains(flags, "--tls-cert") {
			scheme = "https"
		}
		s.base, s.announced = scheme+"://"+m[0], m[1]
		s.url = s.base + "/mcp"
	case <-s.exited:
		t.Fatalf("symbi mcp --http exited before serving: %v\nstderr:\n%s", cmd.ProcessState, s.stderr.String())
	case <-time.After(hangGuard):
		t.Fatalf("symbi mcp --http never said it serves; stderr:\n%s", s.stderr.String())
	}
	return s
}

// httpStop sends SIGTERM to a server still running and waits for it to exit (killing it
// after hangGuard); it returns how the process ended.
func httpStop(t *testing.T, s *httpSymbi) *os.ProcessState {
	t.Helper()
	select {
	case <-s.exited:
		return s.cmd.ProcessState
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(hangGuard):
		t.Errorf("symbi mcp --http did not exit after SIGTERM")
		s.cmd.Process.Kill()
		<-s.exited
	}
	return s.cmd.ProcessState
}

// httpKill kills the server with SIGKILL and waits until it is reaped (so the kernel has
// released its journal locks).
func httpKill(t *testing.T, s *httpSymbi) {
	t.Helper()
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the server ended with %v, want killed by SIGKILL", s.cmd.ProcessState)
	}
}

// httpBearer adds a bearer token to every request.
type httpBearer struct {
	token string
	base  http.RoundTripper
}

func (b httpBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// httpSession connects the go-sdk Streamable HTTP client to s, presenting token ("" for
// none), with its own connection pool.
func httpSession(ctx context.Context, s *httpSymbi, token string, copts ...*mcp.ClientOptions) (*mcp.ClientSession, error) {
	var opts *mcp.ClientOptions
	if len(copts) > 0 {
		opts = copts[0]
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "symbi-http-e2e", Version: "1"}, opts)
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.url,
		HTTPClient: &http.Client{Transport: httpBearer{token: token, base: s.transport()}},
	}, nil)
}

// httpConnect connects a client that must succeed; the *server it returns carries the
// run helpers of the stdio tests (call, callInto, startRun, runStatus, listAllRuns...).
func httpConnect(t *testing.T, s *httpSymbi, token string, copts ...*mcp.ClientOptions) *server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cs, err := httpSession(ctx, s, token, copts...)
	if err != nil {
		t.Fatalf("connect to %s: %v\nstderr:\n%s", s.url, err, s.stderr.String())
	}
	t.Cleanup(func() { cs.Close() })
	return &server{session: cs, stderr: s.stderr, cmd: s.cmd}
}

// httpTokenAdd runs symbi token add --file file name and returns the token it prints.
func httpTokenAdd(t *testing.T, file, name string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(symbiBin, "token", "add", "--file", file, name)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("symbi token add %s: %v\n%s", name, err, stderr.String())
	}
	tok := strings.TrimSpace(stdout.String())
	if !strings.HasPrefix(tok, "symbi_") || strings.ContainsAny(tok, " \n") || strings.Contains(stderr.String(), tok) {
		t.Fatalf("symbi token add %s printed %q (stderr %q), want one symbi_ token on stdout only", name, tok, stderr.String())
	}
	return tok
}

// httpInitBody is an initialize request, as a client's first POST.
const httpInitBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

type httpReply struct {
	code   int
	header http.Header
	body   string // not read for a 200 (it may be an event stream)
}

// httpRaw sends one plain HTTP request: a POST carries the headers a Streamable HTTP
// client sends; header "Host" sets the Host header; token "" sends no Authorization.
func httpRaw(t *testing.T, method, target, token string, header map[string]string, body string) httpReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	r := httpReply{code: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.body = string(b)
	}
	return r
}

// httpRefused checks that res is the tool error code whose text contains each of wants.
func httpRefused(t *testing.T, what string, res *mcp.CallToolResult, code string, wants ...string) {
	t.Helper()
	out := structured(t, res)
	if !res.IsError || !strings.HasPrefix(text(res), code+": ") || out.Error == nil || out.Error.Code != code {
		t.Fatalf("%s: isError=%v %q, want the tool error %s", what, res.IsError, text(res), code)
	}
	for _, w := range wants {
		if !strings.Contains(text(res), w) {
			t.Errorf("%s: %q does not say %q", what, text(res), w)
		}
	}
}

// httpStarted is the data of a journal's started record.
func httpStarted(t *testing.T, path string) map[string]any {
	t.Helper()
	recs := records(t, path)
	if len(recs) == 0 || recs[0]["type"] != "started" {
		t.Fatalf("journal %s does not begin with started: %v", path, types(recs))
	}
	d, _ := recs[0]["data"].(map[string]any)
	return d
}

// httpWaitHung waits until the model has received n held requests.
func httpWaitHung(t *testing.T, hung <-chan string, n int) {
	t.Helper()
	for range n {
		select {
		case <-hung:
		case <-time.After(hangGuard):
			t.Fatal("the model did not receive the held run's request")
		}
	}
}

// httpReadResource reads a resource and returns its text or the error.
func httpReadResource(s *server, uri string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	rr, err := s.session.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return "", err
	}
	if len(rr.Contents) != 1 {
		return "", fmt.Errorf("%d contents", len(rr.Contents))
	}
	return rr.Contents[0].Text, nil
}

// httpRunIDs returns the run ids of statuses, in order.
func httpRunIDs(sts []runs.Status) []string {
	ids := []string{}
	for _, st := range sts {
		ids = append(ids, st.RunID)
	}
	return ids
}

// httpNewest returns run ids newest first (descending), as list_runs orders them.
func httpNewest(ids ...string) []string {
	out := slices.Clone(ids)
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// httpAuditVerify runs symbi audit verify --project dir and returns its exit code and
// output.
func httpAuditVerify(t *testing.T, dir, pub string) (int, string) {
	t.Helper()
	out, err := exec.Command(symbiBin, "audit", "verify", "--project", dir, "--public-key", pub).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestHTTPNoAuth: on loopback without authentication the go-sdk client lists the tools
// and runs an agent; the run records caller "anonymous", caller_auth "none" in the
// journal, the ledger and run_status.
func TestHTTPNoAuth(t *testing.T) {
	dir := newE2EProject(t)
	model, _ := runsModel(t)
	s := httpStart(t, dir, modelEnv(model))
	if !strings.HasPrefix(s.url, "http://127.0.0.1:") || strings.HasSuffix(s.base, ":0") || s.announced != s.url {
		t.Fatalf("serving URL %q (announced %q), want http://127.0.0.1:PORT/mcp with the port chosen", s.url, s.announced)
	}
	if !strings.Contains(s.stderr.String(), "auth=none") {
		t.Errorf("the serving line does not say auth=none:\n%s", s.stderr.String())
	}
	progress := make(chan string, 100)
	c := httpConnect(t, s, "", &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Message
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	tools, err := c.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"invoke_agent", "start_run", "run_events", "run_status", "cancel_run", "list_runs", "resolve_run", "list_agents"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list over HTTP lacks %s: %v", want, names)
		}
	}
	// The same tools as a stdio server of the same project (a copy: one server writes a
	// project's ledger).
	stdio, err := startSymbi(t, newE2EProject(t), modelEnv(nil), nil).session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stdioNames []string
	for _, tool := range stdio.Tools {
		stdioNames = append(stdioNames, tool.Name)
	}
	slices.Sort(names)
	slices.Sort(stdioNames)
	if !slices.Equal(names, stdioNames) {
		t.Errorf("tools/list over HTTP: %v, want the tools of stdio %v", names, stdioNames)
	}

	params := &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": "over http"}}
	params.SetProgressToken("p1")
	res, err := c.session.CallTool(ctx, params)
	if err != nil || res.IsError || text(res) != "echo: over http" {
		t.Fatalf("invoke_agent over HTTP: %v %+v", err, res)
	}
	// Progress notifications, as over stdio (TestE2EInvokeSuccess).
	var stages []string
	for _, want := range []string{"admitted", "journal opened", "request sent", "response received", "policy decided"} {
		select {
		case got := <-progress:
			stages = append(stages, got)
			if got != want {
				t.Fatalf("progress stages %q, want %q next", stages, want)
			}
		case <-time.After(hangGuard):
			t.Fatalf("progress stages %q: %q never came", stages, want)
		}
	}
	out := structured(t, res)
	if out.Audit == nil {
		t.Fatal("invoke_agent over HTTP: no audit reference")
	}
	if d := httpStarted(t, out.Audit.Path); d["caller"] != "anonymous" || d["caller_auth"] != "none" {
		t.Errorf("started record: caller %v caller_auth %v, want anonymous/none", d["caller"], d["caller_auth"])
	}
	if e := ledgerEntries(t, dir, "run")[out.Audit.RunID]; len(e) != 1 || e[0]["caller"] != "anonymous" || e[0]["caller_auth"] != "none" {
		t.Errorf("ledger run entry %v, want caller anonymous, caller_auth none", e)
	}
	st := c.runStatus(t, out.Audit.RunID)
	if st.Status != runs.StatusCompleted || st.Caller != "anonymous" || st.CallerAuth != "none" || st.Text == nil || *st.Text != "echo: over http" {
		t.Errorf("run_status over HTTP: %+v", st)
	}
	// Two clients without authentication are the one caller anonymous: each reads the
	// other's runs.
	other := httpConnect(t, s, "")
	if got := httpRunIDs(other.listAllRuns(t, 10, nil)); !slices.Equal(got, []string{out.Audit.RunID}) {
		t.Errorf("a second anonymous client lists %v, want the first one's run %s", got, out.Audit.RunID)
	}
	// A client without authentication is not asked for a token, and there is no
	// protected resource metadata to point to.
	if r := httpRaw(t, http.MethodPost, s.url, "", nil, httpInitBody); r.code != http.StatusOK || r.header.Get("WWW-Authenticate") != "" {
		t.Errorf("initialize without a token on an unauthenticated server: %d %q", r.code, r.header.Get("WWW-Authenticate"))
	}
}

// TestHTTPNonLoopbackRefused: without authentication, an address that is not loopback
// (or has no host: every interface) is a usage error, exit 2, saying why.
func TestHTTPNonLoopbackRefused(t *testing.T) {
	dir := newE2EProject(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "[::]:0"} {
		t.Run(addr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			cmd := exec.CommandContext(ctx, symbiBin, "mcp", "--project", dir, "--http", addr)
			cmd.Env = modelEnv(nil)
			out, err := cmd.CombinedOutput()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 {
				t.Fatalf("symbi mcp --http %s without auth: %v, want exit 2\n%s", addr, err, out)
			}
			for _, want := range []string{"not a loopback address", "--auth-tokens or --auth-jwks"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("the refusal of %s does not say %q:\n%s", addr, want, out)
				}
			}
			if addr == ":0" && !strings.Contains(string(out), "every interface") {
				t.Errorf("the refusal of %s does not say it listens on every interface:\n%s", addr, out)
			}
		})
	}
}

// TestHTTPStaticTokens: bearer tokens from symbi token add. A missing or wrong token is
// 401 with the metadata URL; the metadata is served; each caller sees and acts only on
// its own runs by the built-in defaults (access_denied naming the default), the evidence
// names the caller; then, served again with the shipped access policies, the caller
// "auditor" reads every run but still may not cancel or resolve another's.
func TestHTTPStaticTokens(t *testing.T) {
	dir := newE2EProject(t)
	model, hung := runsModel(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	alice := httpTokenAdd(t, tokens, "alice")
	bob := httpTokenAdd(t, tokens, "bob")
	if fi, err := os.Stat(tokens); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", fi.Mode())
	}
	if data, _ := os.ReadFile(tokens); bytes.Contains(data, []byte(alice)) || bytes.Contains(data, []byte(bob)) {
		t.Fatalf("the token file holds a token in clear:\n%s", data)
	}
	s := httpStart(t, dir, modelEnv(model), "--auth-tokens", tokens)
	metaURL := s.base + "/.well-known/oauth-protected-resource/mcp"
	wantChallenge := `Bearer resource_metadata="` + metaURL + `"`

	// No token, a wrong token, a malformed header: 401 with the challenge.
	for _, tt := range []struct {
		name, auth string
	}{
		{"no token", ""},
		{"wrong token", "Bearer symbi_" + strings.Repeat("A", 43)},
		{"another scheme", "Basic " + alice},
		{"token without scheme", alice},
	} {
		hdr := map[string]string{}
		if tt.auth != "" {
			hdr["Authorization"] = tt.auth
		}
		r := httpRaw(t, http.MethodPost, s.url, "", hdr, httpInitBody)
		if r.code != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != wantChallenge {
			t.Errorf("%s: %d, WWW-Authenticate %q; want 401 with %q", tt.name, r.code, r.header.Get("WWW-Authenticate"), wantChallenge)
		}
	}
	if r := httpRaw(t, http.MethodGet, s.url, "", nil, ""); r.code != http.StatusUnauthorized {
		t.Errorf("GET /mcp without a token: %d, want 401", r.code)
	}
	// The go-sdk client with a wrong token cannot connect.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if cs, err := httpSession(ctx, s, "symbi_wrong"); err == nil {
		cs.Close()
		t.Error("the go-sdk client connected with a wrong token")
	}

	// The protected resource metadata, at both paths, without a token.
	for _, u := range []string{metaURL, s.base + "/.well-known/oauth-protected-resource"} {
		r := httpRaw(t, http.MethodGet, u, "", nil, "")
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", u, r.code, r.body)
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			BearerMethods        []string `json:"bearer_methods_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if err != nil || meta.Resource != s.url || !strings.HasSuffix(meta.Resource, "/mcp") ||
			!slices.Equal(meta.BearerMethods, []string{"header"}) || len(meta.AuthorizationServers) != 0 {
			t.Errorf("metadata at %s: %+v (%v), want resource %s, bearer_methods_supported [header], no authorization server", u, meta, err, s.url)
		}
	}

	a := httpConnect(t, s, alice)
	b := httpConnect(t, s, bob)

	// alice's runs: one that completes, one the model holds.
	done := a.startRun(t, "alpha")
	pub := pubKey(t, done.Audit.PublicKey)
	a.readRunEvents(t, done.RunID, 100, pub)
	held := a.startRun(t, "hang alice")
	httpWaitHung(t, hung, 1)
	if st := a.runStatus(t, done.RunID); st.Status != runs.StatusCompleted || st.Caller != "alice" || st.CallerAuth != "token" || st.Text == nil || *st.Text != "echo: alpha" {
		t.Fatalf("alice's run_status of her run: %+v", st)
	}
	if d := httpStarted(t, done.Audit.Path); d["caller"] != "alice" || d["caller_auth"] != "token" {
		t.Errorf("started record: caller %v caller_auth %v, want alice/token", d["caller"], d["caller_auth"])
	}
	if e := ledgerEntries(t, dir, "run")[done.RunID]; len(e) != 1 || e[0]["caller"] != "alice" || e[0]["caller_auth"] != "token" {
		t.Errorf("ledger run entry %v, want caller alice, caller_auth token", e)
	}

	// bob may do nothing with alice's runs: the built-in default denies, and says so.
	deny := func(action, runID string) []string {
		return []string{`caller "bob" may not ` + action + " run " + runID, "denied by the built-in default", "is not one of them"}
	}
	httpRefused(t, "bob's run_status", b.call(t, "run_status", map[string]any{"run_id": done.RunID}), "access_denied", deny("read_run", done.RunID)...)
	httpRefused(t, "bob's run_events", b.call(t, "run_events", map[string]any{"run_id": done.RunID}), "access_denied", deny("read_run", done.RunID)...)
	httpRefused(t, "bob's cancel_run", b.call(t, "cancel_run", map[string]any{"run_id": held.RunID}), "access_denied", deny("cancel_run", held.RunID)...)
	httpRefused(t, "bob's resolve_run", b.call(t, "resolve_run", map[string]any{"run_id": done.RunID, "resolution": "rejected"}), "access_denied", deny("resolve_run", done.RunID)...)
	if _, err := httpReadResource(b, "symbi://runs/"+done.RunID); err == nil || !strings.Contains(err.Error(), "access_denied") || !strings.Contains(err.Error(), "denied by the built-in default") {
		t.Errorf("bob's read of alice's run resource: %v, want access_denied naming the default", err)
	}
	if err := b.session.Subscribe(ctx, &mcp.SubscribeParams{URI: "symbi://runs/" + done.RunID}); err == nil || !strings.Contains(err.Error(), "access_denied") {
		t.Errorf("bob's subscription to alice's run: %v, want access_denied", err)
	}
	if st := a.runStatus(t, held.RunID); st.Status != runs.StatusRunning {
		t.Errorf("alice's held run after bob's refused cancel_run: %+v, want running", st)
	}
	if st := a.runStatus(t, done.RunID); st.Resolution != nil {
		t.Errorf("alice's run after bob's refused resolve_run: resolution %+v", st.Resolution)
	}
	// alice reads her run's resource.
	if body, err := httpReadResource(a, "symbi://runs/"+done.RunID); err != nil || !strings.Contains(body, `"caller":"alice"`) {
		t.Errorf("alice's read of her run resource: %v %s", err, body)
	}

	// list_runs shows each caller its own runs.
	if got := httpRunIDs(b.listAllRuns(t, 10, nil)); len(got) != 0 {
		t.Errorf("bob's list_runs shows %v, want none of alice's runs", got)
	}
	if got, want := httpRunIDs(a.listAllRuns(t, 10, nil)), httpNewest(done.RunID, held.RunID); !slices.Equal(got, want) {
		t.Errorf("alice's list_runs: %v, want %v", got, want)
	}
	bobs := b.startRun(t, "bravo")
	b.readRunEvents(t, bobs.RunID, 100, pub)
	if got := httpRunIDs(b.listAllRuns(t, 10, nil)); !slices.Equal(got, []string{bobs.RunID}) {
		t.Errorf("bob's list_runs: %v, want only his run %s", got, bobs.RunID)
	}
	if got := httpRunIDs(a.listAllRuns(t, 10, nil)); slices.Contains(got, bobs.RunID) {
		t.Errorf("alice's list_runs shows bob's run: %v", got)
	}
	httpRefused(t, "alice's run_status of bob's run", a.call(t, "run_status", map[string]any{"run_id": bobs.RunID}), "access_denied",
		`caller "alice" may not read_run run `+bobs.RunID, "is not one of them")

	// alice resolves her run; the ledger names her.
	var resolved runs.Status
	a.callInto(t, "resolve_run", map[string]any{"run_id": done.RunID, "resolution": "accepted", "note": "by alice"}, &resolved)
	if r := resolved.Resolution; r == nil || r.Value != "accepted" || r.Caller != "alice" || r.CallerAuth != "token" {
		t.Errorf("resolve_run: resolution %+v, want accepted by alice (token)", resolved.Resolution)
	}
	if e := ledgerEntries(t, dir, "resolution")[done.RunID]; len(e) != 1 || e[0]["caller"] != "alice" || e[0]["caller_auth"] != "token" || e[0]["resolution"] != "accepted" {
		t.Errorf("ledger resolution entry %v, want accepted by alice (token)", e)
	}

	// A session belongs to the caller that opened it: bob's token cannot use alice's.
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}`
	hdr := map[string]string{"Mcp-Session-Id": a.session.ID(), "Mcp-Protocol-Version": "2025-11-25"}
	if a.session.ID() == "" {
		t.Fatal("alice's session has no Mcp-Session-Id")
	}
	if r := httpRaw(t, http.MethodPost, s.url, bob, hdr, call); r.code != http.StatusForbidden {
		t.Errorf("bob's token on alice's session: %d %s, want 403", r.code, r.body)
	}
	if r := httpRaw(t, http.MethodPost, s.url, alice, hdr, call); r.code != http.StatusOK {
		t.Errorf("alice's token on her session: %d %s, want 200", r.code, r.body)
	}
	// The DNS-rebinding check applies to authenticated requests too.
	if r := httpRaw(t, http.MethodPost, s.url, alice, map[string]string{"Host": "evil.example.com"}, httpInitBody); r.code != http.StatusForbidden {
		t.Errorf("alice's token with Host evil.example.com: %d %s, want 403", r.code, r.body)
	}

	// alice cancels her own run.
	var c struct {
		runs.Status
		AlreadyFinished bool `json:"already_finished"`
	}
	a.callInto(t, "cancel_run", map[string]any{"run_id": held.RunID}, &c)
	if c.Status.Status != runs.StatusCancelled || c.AlreadyFinished {
		t.Errorf("alice's cancel_run of her run: %+v", c)
	}
	a.session.Close()
	b.session.Close()
	if st := httpStop(t, s); !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("symbi mcp --http ended with %v after SIGTERM, want exit 0", st)
	}

	// Served again with the shipped access policies and a token for the auditor.
	shipped, err := os.ReadFile(filepath.Join("..", "..", "policies", "access", "runs.cedar"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "policies", "access", "runs.cedar"), string(shipped))
	auditor := httpTokenAdd(t, tokens, "auditor")
	s = httpStart(t, dir, modelEnv(model), "--auth-tokens", tokens)
	if !strings.Contains(s.stderr.String(), "access_mode=cedar") {
		t.Fatalf("the server did not load the access policies:\n%s", s.stderr.String())
	}
	a = httpConnect(t, s, alice)
	b = httpConnect(t, s, bob)
	au := httpConnect(t, s, auditor)
	held2 := a.startRun(t, "hang alice again")
	httpWaitHung(t, hung, 1)

	// The auditor reads every run: run_status, run_events, the resource, list_runs.
	if st := au.runStatus(t, done.RunID); st.Status != runs.StatusCompleted || st.Caller != "alice" || st.Resolution == nil || st.Resolution.Caller != "alice" {
		t.Errorf("the auditor's run_status of alice's run: %+v", st)
	}
	if evs := au.readRunEvents(t, done.RunID, 100, pub); len(evs) != 5 {
		t.Errorf("the auditor's run_events of alice's run: %d events, want 5", len(evs))
	}
	if body, err := httpReadResource(au, "symbi://runs/"+bobs.RunID); err != nil || !strings.Contains(body, `"caller":"bob"`) {
		t.Errorf("the auditor's read of bob's run resource: %v %s", err, body)
	}
	if got, want := httpRunIDs(au.listAllRuns(t, 2, nil)), httpNewest(done.RunID, held.RunID, bobs.RunID, held2.RunID); !slices.Equal(got, want) {
		t.Errorf("the auditor's list_runs: %v, want every run %v", got, want)
	}
	// ... but cancels and resolves only its own (the default, which the policies keep).
	httpRefused(t, "the auditor's cancel_run", au.call(t, "cancel_run", map[string]any{"run_id": held2.RunID}), "access_denied",
		`caller "auditor" may not cancel_run run `+held2.RunID, "denied by the built-in default")
	httpRefused(t, "the auditor's resolve_run", au.call(t, "resolve_run", map[string]any{"run_id": done.RunID, "resolution": "rejected"}), "access_denied",
		`caller "auditor" may not resolve_run run `+done.RunID, "denied by the built-in default")
	// bob still reads only his own: now Cedar decides read_run, and no permit matches.
	httpRefused(t, "bob's run_status under the access policies", b.call(t, "run_status", map[string]any{"run_id": done.RunID}), "access_denied",
		`caller "bob" may not read_run run `+done.RunID, "no permit matched")
	if got := httpRunIDs(b.listAllRuns(t, 10, nil)); !slices.Equal(got, []string{bobs.RunID}) {
		t.Errorf("bob's list_runs under the access policies: %v, want only %s", got, bobs.RunID)
	}
	if st := a.runStatus(t, held2.RunID); st.Status != runs.StatusRunning {
		t.Errorf("alice's run after the auditor's refused cancel: %+v", st)
	}
	a.callInto(t, "cancel_run", map[string]any{"run_id": held2.RunID}, &c)
	if c.Status.Status != runs.StatusCancelled {
		t.Errorf("alice's cancel_run: %+v", c)
	}
}

// httpJWTSigner signs JWTs with an Ed25519 key under a key id.
type httpJWTSigner struct {
	kid string
	key ed25519.PrivateKey
}

func httpNewJWTSigner(t *testing.T, kid string) httpJWTSigner {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return httpJWTSigner{kid: kid, key: key}
}

func (s httpJWTSigner) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: s.key, KeyID: s.kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestHTTPJWT: symbi as an OAuth resource server, with the issuer's keys served as a JWK
// set on loopback. A valid token names the caller (sub) in the evidence with
// caller_auth jwt; an expired token, a wrong audience or issuer, and a token signed by
// another key are 401.
func TestHTTPJWT(t *testing.T) {
	const issuer, audience = "https://idp.example.test/", "https://symbi.example.test/mcp"
	good := httpNewJWTSigner(t, "k1")
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: good.key.Public(), KeyID: good.kid, Algorithm: string(jose.EdDSA), Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(set)
	}))
	t.Cleanup(idp.Close)

	dir := newE2EProject(t)
	model, _ := runsModel(t)
	s := httpStart(t, dir, modelEnv(model), "--auth-jwks", idp.URL+"/jwks.json", "--auth-issuer", issuer, "--auth-audience", audience,
		"--auth-jwks-allow-private", "--auth-jwks-allow-insecure")
	if !strings.Contains(s.stderr.String(), "auth=jwt") {
		t.Errorf("the serving line does not say auth=jwt:\n%s", s.stderr.String())
	}
	now := time.Now()
	claims := func(edit func(map[string]any)) map[string]any {
		c := map[string]any{"iss": issuer, "aud": []string{audience, "other"}, "sub": "ci", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "scope": "runs:write"}
		if edit != nil {
			edit(c)
		}
		return c
	}

	// The metadata names the issuer as the authorization server.
	resp, err := http.Get(s.base + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		BearerMethods        []string `json:"bearer_methods_supported"`
	}
	err = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if err != nil || meta.Resource != s.url || !slices.Equal(meta.AuthorizationServers, []string{issuer}) || !slices.Equal(meta.BearerMethods, []string{"header"}) {
		t.Errorf("metadata %+v (%v), want resource %s, authorization_servers [%s]", meta, err, s.url, issuer)
	}

	// A valid token: the caller is its sub, authenticated by jwt.
	c := httpConnect(t, s, good.sign(t, claims(nil)))
	r := c.startRun(t, "from ci")
	c.readRunEvents(t, r.RunID, 100, pubKey(t, r.Audit.PublicKey))
	if st := c.runStatus(t, r.RunID); st.Status != runs.StatusCompleted || st.Caller != "ci" || st.CallerAuth != "jwt" {
		t.Errorf("run_status of the JWT caller's run: %+v, want completed, caller ci, caller_auth jwt", st)
	}
	if d := httpStarted(t, r.Audit.Path); d["caller"] != "ci" || d["caller_auth"] != "jwt" {
		t.Errorf("started record: caller %v caller_auth %v, want ci/jwt", d["caller"], d["caller_auth"])
	}
	if e := ledgerEntries(t, dir, "run")[r.RunID]; len(e) != 1 || e[0]["caller"] != "ci" || e[0]["caller_auth"] != "jwt" {
		t.Errorf("ledger run entry %v, want caller ci, caller_auth jwt", e)
	}
	// A token that expired within the 30 s leeway is still accepted — by the verifier
	// and by the SDK middleware's own expiry check alike.
	skewed := good.sign(t, claims(func(c map[string]any) { c["exp"] = time.Now().Add(-5 * time.Second).Unix() }))
	if res := httpRaw(t, http.MethodPost, s.url, skewed, nil, httpInitBody); res.code != http.StatusOK {
		t.Errorf("a token expired 5 s ago (within the 30 s leeway): %d %s, want 200", res.code, res.body)
	}

	other := httpNewJWTSigner(t, "k1")
	stranger := httpNewJWTSigner(t, "k2")
	wantChallenge := `Bearer resource_metadata="` + s.base + `/.well-known/oauth-protected-resource/mcp"`
	for _, tt := range []struct {
		name, token, why string
	}{
		{"expired", good.sign(t, claims(func(c map[string]any) {
			c["exp"], c["iat"] = now.Add(-10*time.Minute).Unix(), now.Add(-time.Hour).Unix()
		})), "expired"},
		{"wrong audience", good.sign(t, claims(func(c map[string]any) { c["aud"] = "https://elsewhere.example.test/mcp" })), "wrong audience"},
		{"wrong issuer", good.sign(t, claims(func(c map[string]any) { c["iss"] = "https://idp.example.test" })), "wrong issuer"},
		{"another key under the known kid", other.sign(t, claims(nil)), "bad signature"},
		{"another key under an unknown kid", stranger.sign(t, claims(nil)), "unknown key"},
		{"not yet valid", good.sign(t, claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() })), "not yet valid"},
		{"reserved caller id", good.sign(t, claims(func(c map[string]any) { c["sub"] = "anonymous" })), "reserved"},
		{"no exp", good.sign(t, claims(func(c map[string]any) { delete(c, "exp") })), "expired"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := httpRaw(t, http.MethodPost, s.url, tt.token, nil, httpInitBody)
			if res.code != http.StatusUnauthorized || res.header.Get("WWW-Authenticate") != wantChallenge || !strings.Contains(res.body, tt.why) {
				t.Errorf("%d %q, WWW-Authenticate %q; want 401 saying %q with %q", res.code, strings.TrimSpace(res.body), res.header.Get("WWW-Authenticate"), tt.why, wantChallenge)
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			if cs, err := httpSession(ctx, s, tt.token); err == nil {
				cs.Close()
				t.Error("the go-sdk client connected with the refused token")
			}
		})
	}
	// The refusals did not disturb the valid caller.
	if st := c.runStatus(t, r.RunID); st.Caller != "ci" {
		t.Errorf("run_status after the refusals: %+v", st)
	}
	c.session.Close()
	httpStop(t, s)

	// --auth-claim names the claim that names the caller.
	s = httpStart(t, dir, modelEnv(model), "--auth-jwks", idp.URL+"/jwks.json", "--auth-issuer", issuer, "--auth-audience", audience,
		"--auth-jwks-allow-private", "--auth-jwks-allow-insecure", "--auth-claim", "client_id")
	c = httpConnect(t, s, good.sign(t, claims(func(c map[string]any) { c["client_id"] = "ci-bot" })))
	res := c.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "by claim"})
	if out := structured(t, res); res.IsError || out.Audit == nil {
		t.Fatalf("invoke_agent with --auth-claim: %s", text(res))
	} else if d := httpStarted(t, out.Audit.Path); d["caller"] != "ci-bot" || d["caller_auth"] != "jwt" {
		t.Errorf("started record with --auth-claim client_id: caller %v caller_auth %v, want ci-bot/jwt", d["caller"], d["caller_auth"])
	}
	if res := httpRaw(t, http.MethodPost, s.url, good.sign(t, claims(nil)), nil, httpInitBody); res.code != http.StatusUnauthorized || !strings.Contains(res.body, `no "client_id" claim`) {
		t.Errorf("a token without the --auth-claim claim: %d %q, want 401", res.code, res.body)
	}
}

// TestHTTPSharedLedgerKill: two callers, alice with two sessions and bob with one, share
// one server and one ledger: each session of a caller sees the caller's runs, whichever
// session started them. Killed with SIGKILL mid-run and served again, every earlier run
// answers with how it ended (the held one abandoned, still alice's), and the project
// verifies as consistent.
func TestHTTPSharedLedgerKill(t *testing.T) {
	dir := newE2EProject(t)
	model, hung := runsModel(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	alice := httpTokenAdd(t, tokens, "alice")
	bob := httpTokenAdd(t, tokens, "bob")
	s := httpStart(t, dir, modelEnv(model), "--auth-tokens", tokens)
	a1 := httpConnect(t, s, alice)
	a2 := httpConnect(t, s, alice)
	b := httpConnect(t, s, bob)
	if a1.session.ID() == a2.session.ID() {
		t.Fatalf("two clients share the session %q", a1.session.ID())
	}

	alpha := a1.startRun(t, "alpha")
	beta := b.startRun(t, "beta")
	gamma := a2.startRun(t, "gamma")
	pub := pubKey(t, alpha.Audit.PublicKey)
	before := map[string][]runs.Event{}
	// Each session of alice reads the runs the other started.
	// (Read to the end, then again: lines with the answer read while a run is not yet
	// released are withheld; once it is, they are served whole.)
	a2.readRunEvents(t, alpha.RunID, 100, pub)
	a1.readRunEvents(t, gamma.RunID, 100, pub)
	b.readRunEvents(t, beta.RunID, 100, pub)
	before[alpha.RunID] = a2.readRunEvents(t, alpha.RunID, 100, pub)
	before[gamma.RunID] = a1.readRunEvents(t, gamma.RunID, 100, pub)
	before[beta.RunID] = b.readRunEvents(t, beta.RunID, 100, pub)
	held := a1.startRun(t, "hang alice")
	httpWaitHung(t, hung, 1)
	var page runs.Events
	a2.callInto(t, "run_events", map[string]any{"run_id": held.RunID}, &page)
	if page.Done || page.Status != runs.StatusRunning || len(page.Events) != 2 || page.Events[1].Type != "inference_requested" {
		t.Fatalf("the held run seen from alice's other session: %+v", page)
	}
	before[held.RunID] = page.Events

	aliceRuns := httpNewest(alpha.RunID, gamma.RunID, held.RunID)
	for i, c := range []*server{a1, a2} {
		if got := httpRunIDs(c.listAllRuns(t, 2, nil)); !slices.Equal(got, aliceRuns) {
			t.Errorf("alice's session %d lists %v, want %v", i+1, got, aliceRuns)
		}
	}
	if got := httpRunIDs(b.listAllRuns(t, 2, nil)); !slices.Equal(got, []string{beta.RunID}) {
		t.Errorf("bob lists %v, want %v", got, []string{beta.RunID})
	}
	var resolved runs.Status
	b.callInto(t, "resolve_run", map[string]any{"run_id": beta.RunID, "resolution": "accepted", "note": "bob checked"}, &resolved)

	httpKill(t, s)
	if last := lastRecordType(t, held.Audit.Path); last != "inference_requested" {
		t.Fatalf("the held run's journal ends with %q after the kill, want inference_requested", last)
	}

	s = httpStart(t, dir, modelEnv(model), "--auth-tokens", tokens)
	a := httpConnect(t, s, alice)
	b = httpConnect(t, s, bob)
	for _, r := range []startRunOut{alpha, gamma} {
		st := a.runStatus(t, r.RunID)
		want := "echo: " + map[string]string{alpha.RunID: "alpha", gamma.RunID: "gamma"}[r.RunID]
		if st.Status != runs.StatusCompleted || st.Caller != "alice" || st.CallerAuth != "token" || st.Text == nil || *st.Text != want {
			t.Errorf("alice's run %s after the kill and restart: %+v, want completed with %q", r.RunID, st, want)
		}
	}
	if st := b.runStatus(t, beta.RunID); st.Status != runs.StatusCompleted || st.Caller != "bob" || st.Resolution == nil ||
		st.Resolution.Value != "accepted" || st.Resolution.Caller != "bob" || st.Resolution.CallerAuth != "token" {
		t.Errorf("bob's run after the kill and restart: %+v", st)
	}
	if st := a.runStatus(t, held.RunID); st.Status != runs.StatusAbandoned || st.Caller != "alice" || st.CallerAuth != "token" || st.Records != 2 || st.Reason == "" {
		t.Errorf("the held run after the kill and restart: %+v, want abandoned, alice's, with its 2 records", st)
	}
	httpRefused(t, "bob's run_status of alice's abandoned run", b.call(t, "run_status", map[string]any{"run_id": held.RunID}), "access_denied", "is not one of them")
	for id, evs := range before {
		c := a
		if id == beta.RunID {
			c = b
		}
		if got := c.readRunEvents(t, id, 1000, pub); !slices.Equal(got, evs) {
			t.Errorf("run %s: events after the restart differ from before the kill:\n%+v\n%+v", id, got, evs)
		}
	}
	if got := httpRunIDs(a.listAllRuns(t, 2, nil)); !slices.Equal(got, aliceRuns) {
		t.Errorf("alice lists %v after the restart, want %v", got, aliceRuns)
	}
	if got := httpRunIDs(b.listAllRuns(t, 2, nil)); !slices.Equal(got, []string{beta.RunID}) {
		t.Errorf("bob lists %v after the restart", got)
	}
	if rec := ledgerEntries(t, dir, "recovered"); len(rec) != 1 || len(rec[held.RunID]) != 1 {
		t.Errorf("recovered entries %v, want one, for the held run", rec)
	}
	ended := ledgerEntries(t, dir, "run")
	for id, who := range map[string]string{alpha.RunID: "alice", gamma.RunID: "alice", beta.RunID: "bob"} {
		if e := ended[id]; len(e) != 1 || e[0]["caller"] != who || e[0]["caller_auth"] != "token" {
			t.Errorf("ledger run entries of %s: %v, want one by %s", id, e, who)
		}
	}
	// The whole project verifies: consistent; the journal the kill cut short is
	// incomplete, recorded as found, so the exit is 2 (docs/ledger.md), not 1.
	code, out := httpAuditVerify(t, dir, alpha.Audit.PublicKey)
	if code != 2 || !strings.Contains(out, held.RunID) {
		t.Errorf("symbi audit verify --project: exit %d, want 2 (consistent, one journal incomplete) naming %s\n%s", code, held.RunID, out)
	}
}

// TestHTTPRebindingAndCrossOrigin: a request arriving on loopback with a foreign Host is
// 403 (DNS rebinding); a browser's cross-origin request with an unsafe method is 403.
// http.CrossOriginProtection lets the safe methods (GET, HEAD, OPTIONS) through: they
// reach the MCP handler, which needs a session for GET.
func TestHTTPRebindingAndCrossOrigin(t *testing.T) {
	dir := newE2EProject(t)
	s := httpStart(t, dir, modelEnv(nil))
	port := s.base[strings.LastIndexByte(s.base, ':')+1:]
	for _, tt := range []struct {
		name   string
		method string
		header map[string]string
		code   int
		says   string
	}{
		{"foreign Host", http.MethodPost, map[string]string{"Host": "evil.example.com"}, http.StatusForbidden, "invalid Host header"},
		{"foreign Host with port", http.MethodPost, map[string]string{"Host": "evil.example.com:" + port}, http.StatusForbidden, "invalid Host header"},
		{"localhost Host", http.MethodPost, map[string]string{"Host": "localhost:" + port}, http.StatusOK, ""},
		{"cross-site browser request", http.MethodPost, map[string]string{"Origin": "https://evil.example.com", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "cross-origin"},
		{"same-site browser request", http.MethodPost, map[string]string{"Origin": "http://sub.127.0.0.1:" + port, "Sec-Fetch-Site": "same-site"}, http.StatusForbidden, "cross-origin"},
		{"old browser, foreign Origin", http.MethodPost, map[string]string{"Origin": "https://evil.example.com"}, http.StatusForbidden, "Origin does not match Host"},
		{"cross-site DELETE", http.MethodDelete, map[string]string{"Origin": "https://evil.example.com", "Sec-Fetch-Site": "cross-site", "Mcp-Session-Id": "x"}, http.StatusForbidden, "cross-origin"},
		{"same-origin browser request", http.MethodPost, map[string]string{"Origin": s.base, "Sec-Fetch-Site": "same-origin"}, http.StatusOK, ""},
		{"Origin matching Host", http.MethodPost, map[string]string{"Origin": s.base}, http.StatusOK, ""},
		// A safe method passes the cross-origin check; GET without a session is then the
		// MCP handler's 400.
		{"cross-site GET", http.MethodGet, map[string]string{"Origin": "https://evil.example.com", "Sec-Fetch-Site": "cross-site", "Accept": "text/event-stream"}, http.StatusBadRequest, "Mcp-Session-Id"},
		// The rebinding check comes first for every method.
		{"foreign Host GET", http.MethodGet, map[string]string{"Host": "evil.example.com", "Accept": "text/event-stream"}, http.StatusForbidden, "invalid Host header"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == http.MethodPost {
				body = httpInitBody
			}
			r := httpRaw(t, tt.method, s.url, "", tt.header, body)
			if r.code != tt.code || !strings.Contains(r.body, tt.says) {
				t.Errorf("%d %q, want %d saying %q", r.code, strings.TrimSpace(r.body), tt.code, tt.says)
			}
		})
	}
	// The server still serves a proper client.
	c := httpConnect(t, s, "")
	if res := c.call(t, "list_agents", nil); res.IsError {
		t.Fatalf("list_agents: %s", text(res))
	}
}

// httpPostPrefix posts the first n bytes of a body declared as declared bytes long over a
// raw connection, then reads the answer without sending the rest.
func httpPostPrefix(t *testing.T, s *httpSymbi, n, declared int) int {
	t.Helper()
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(hangGuard))
	body := bytes.Repeat([]byte("x"), n)
	copy(body, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"`)
	wrote := make(chan error, 1)
	go func() {
		_, err := fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n", u.Host, declared)
		if err == nil {
			_, err = conn.Write(body)
		}
		wrote <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to a %d-byte body: %v", n, err)
	}
	resp.Body.Close()
	if err := <-wrote; err != nil {
		t.Errorf("writing the %d bytes: %v", n, err)
	}
	return resp.StatusCode
}

// TestHTTPBodyLimit: a request body of 16 MiB is read; one byte more is 413, whether the
// body is whole or only its first 16 MiB + 1 of a declared 1 GiB has arrived; the server
// then goes on serving.
func TestHTTPBodyLimit(t *testing.T) {
	const limit = 16 << 20
	dir := newE2EProject(t)
	model, _ := runsModel(t)
	s := httpStart(t, dir, modelEnv(model))
	c := httpConnect(t, s, "")

	pre := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"},"_meta":{"pad":"`
	post := `"}}}`
	exact := pre + strings.Repeat("x", limit-len(pre)-len(post)) + post
	if len(exact) != limit {
		t.Fatalf("built %d bytes", len(exact))
	}
	if r := httpRaw(t, http.MethodPost, s.url, "", nil, exact); r.code != http.StatusOK {
		t.Errorf("a 16 MiB initialize: %d %s, want 200", r.code, r.body)
	}
	over := exact[:len(exact)-len(post)] + "x" + post
	if r := httpRaw(t, http.MethodPost, s.url, "", nil, over); r.code != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, fmt.Sprint(limit)) {
		t.Errorf("a 16 MiB + 1 body: %d %q, want 413 naming the limit", r.code, r.body)
	}
	if code := httpPostPrefix(t, s, limit+1, 1<<30); code != http.StatusRequestEntityTooLarge {
		t.Errorf("16 MiB + 1 of a declared 1 GiB body: %d, want 413", code)
	}
	// The connected client's session was not disturbed by those requests.
	if res := c.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "still here"}); res.IsError || text(res) != "echo: still here" {
		t.Errorf("invoke_agent after the oversized requests: %q", text(res))
	}
	// A tool call over the limit from a go-sdk client is answered 413; the go-sdk client
	// then closes its session (its own choice: any error status on a POST ends it), and
	// the server serves the next client.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": strings.Repeat("p", limit)}}); err == nil || !strings.Contains(err.Error(), "Request Entity Too Large") {
		t.Errorf("a tool call with a 16 MiB prompt: %v, want 413 Request Entity Too Large", err)
	}
	fresh := httpConnect(t, s, "")
	if res := fresh.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "a new client"}); res.IsError || text(res) != "echo: a new client" {
		t.Errorf("a new client after the oversized requests: %q", text(res))
	}
}

// TestHTTPMaxRunsPerCaller: with --max-runs-per-caller 1 a caller with a run in flight is
// busy (start_run and invoke_agent alike) until it ends, while another caller starts.
func TestHTTPMaxRunsPerCaller(t *testing.T) {
	dir := newE2EProject(t)
	model, hung := runsModel(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	alice := httpTokenAdd(t, tokens, "alice")
	bob := httpTokenAdd(t, tokens, "bob")
	s := httpStart(t, dir, modelEnv(model), "--auth-tokens", tokens, "--max-runs-per-caller", "1")
	a := httpConnect(t, s, alice)
	b := httpConnect(t, s, bob)

	first := a.startRun(t, "hang one")
	httpWaitHung(t, hung, 1)
	busy := []string{`caller "alice"`, "--max-runs-per-caller"}
	httpRefused(t, "alice's second start_run", a.call(t, "start_run", map[string]any{"agent": "helper", "prompt": "two"}), "busy", busy...)
	httpRefused(t, "alice's invoke_agent", a.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "three"}), "busy", busy...)
	other := b.startRun(t, "hang bob")
	httpWaitHung(t, hung, 1)
	httpRefused(t, "bob's second start_run", b.call(t, "start_run", map[string]any{"agent": "helper", "prompt": "bob two"}), "busy", `caller "bob"`)
	if n := len(journals(t, dir)); n != 2 {
		t.Errorf("%d journals, want 2: a busy refusal starts no run", n)
	}

	// Once alice's run has ended, she may start again.
	var c struct {
		runs.Status
	}
	a.callInto(t, "cancel_run", map[string]any{"run_id": first.RunID}, &c)
	if c.Status.Status != runs.StatusCancelled {
		t.Fatalf("cancel_run: %+v", c)
	}
	deadline := time.Now().Add(hangGuard)
	for {
		res := a.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "after"})
		if !res.IsError {
			if text(res) != "echo: after" {
				t.Fatalf("invoke_agent after the run ended: %q", text(res))
			}
			break
		}
		// The slot is released when the run's watcher ends, just after terminated.
		httpRefused(t, "alice's invoke_agent after her run ended", res, "busy")
		if time.Now().After(deadline) {
			t.Fatal("alice stayed busy after her only run ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := b.runStatus(t, other.RunID); st.Status != runs.StatusRunning {
		t.Errorf("bob's run: %+v, want running", st)
	}
}

// TestHTTPRate: with --rate 1 each caller has a bucket of one request a second. A
// caller's first tool call passes; calls in quick succession are soon refused with
// rate_limited (with how long to wait); resource reads likewise, as a JSON-RPC error;
// listings are not counted; and another caller's first call passes regardless.
//
// The assertions do not depend on speed: a fresh bucket always holds one request, and
// calls made one after another are refused as soon as two come within a second, which
// the loop waits for (a machine answering each call in over a second would only make the
// loop longer).
func TestHTTPRate(t *testing.T) {
	dir := newE2EProject(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	alice := httpTokenAdd(t, tokens, "alice")
	bob := httpTokenAdd(t, tokens, "bob")
	s := httpStart(t, dir, modelEnv(nil), "--auth-tokens", tokens, "--rate", "1")
	a := httpConnect(t, s, alice)
	b := httpConnect(t, s, bob)

	if res := a.call(t, "list_agents", nil); res.IsError {
		t.Fatalf("alice's first call: %s", text(res))
	}
	limited := false
	for i := 0; i < 1000 && !limited; i++ {
		res := a.call(t, "list_agents", nil)
		if res.IsError {
			httpRefused(t, "alice's call past her rate", res, "rate_limited", `caller "alice"`, "--rate", "retry in")
			limited = true
		}
	}
	if !limited {
		t.Fatal("1000 calls in a row were never rate_limited at --rate 1")
	}
	// Listings and pings are not counted: they pass while alice is over her rate.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := a.session.ListTools(ctx, nil); err != nil {
		t.Errorf("tools/list while rate limited: %v", err)
	}
	if err := a.session.Ping(ctx, nil); err != nil {
		t.Errorf("ping while rate limited: %v", err)
	}
	// bob's bucket is his own: his first call passes whatever alice did.
	if res := b.call(t, "list_agents", nil); res.IsError {
		t.Fatalf("bob's first call, with alice over her rate: %s", text(res))
	}
	// Resource reads count too, and are refused with a JSON-RPC error.
	limited = false
	for i := 0; i < 1000 && !limited; i++ {
		if _, err := httpReadResource(a, "file:///AGENTS.md"); err != nil {
			if !strings.Contains(err.Error(), "rate_limited") || !strings.Contains(err.Error(), "retry in") {
				t.Fatalf("alice's resource read: %v, want rate_limited", err)
			}
			limited = true
		}
	}
	if !limited {
		t.Fatal("1000 resource reads in a row were never rate_limited at --rate 1")
	}
}

// TestHTTPShutdown: SIGTERM while a run the model holds is in flight: the run is
// cancelled and its journal ends with terminated (cancelled), a client subscribed to the
// run is notified of its end before the server closes, the process exits 0, and the
// project verifies complete.
func TestHTTPShutdown(t *testing.T) {
	dir := newE2EProject(t)
	model, hung := runsModel(t)
	s := httpStart(t, dir, modelEnv(model))
	updated := make(chan string, 100)
	c := httpConnect(t, s, "", &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	})
	r := c.startRun(t, "hang until shutdown")
	httpWaitHung(t, hung, 1)
	uri := "symbi://runs/" + r.RunID
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	// Subscribed once Subscribe returns; the held run does not change until the signal.
	if err := c.session.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if st := c.runStatus(t, r.RunID); st.Status != runs.StatusRunning {
		t.Fatalf("run_status before the signal: %+v", st)
	}

	st := httpStop(t, s)
	if !st.Exited() || st.ExitCode() != 0 {
		t.Fatalf("symbi mcp --http ended with %v after SIGTERM, want exit 0", st)
	}
	recs := records(t, r.Audit.Path)
	last := recs[len(recs)-1]
	if data, _ := last["data"].(map[string]any); last["type"] != "terminated" || data["reason"] != "cancelled" || data["released"] != false {
		t.Fatalf("journal %v ends with %v, want terminated (cancelled)", types(recs), last)
	}
	// The notifications were sent before the process exited: they are here or on their
	// way through the client.
	select {
	case got := <-updated:
		if got != uri {
			t.Errorf("notified of %s, want %s", got, uri)
		}
	case <-time.After(hangGuard):
		t.Error("the subscriber was not notified of the run's end at shutdown")
	}
	if e := ledgerEntries(t, dir, "run")[r.RunID]; len(e) != 1 || e[0]["reason"] != "cancelled" {
		t.Errorf("ledger run entry %v, want one, cancelled", e)
	}
	code, out := httpAuditVerify(t, dir, r.Audit.PublicKey)
	if code != 0 {
		t.Errorf("symbi audit verify --project after a clean shutdown: exit %d, want 0\n%s", code, out)
	}
}

// TestHTTPPublicURL: --public-url names the protected resource in the 401 answers and in
// the metadata, whatever address symbi listens on.
func TestHTTPPublicURL(t *testing.T) {
	dir := newE2EProject(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	alice := httpTokenAdd(t, tokens, "alice")
	s := httpStart(t, dir, modelEnv(nil), "--auth-tokens", tokens, "--public-url", "https://symbi.example.com/")
	if s.announced != "https://symbi.example.com/mcp" {
		t.Errorf("the serving line announces %q, want https://symbi.example.com/mcp", s.announced)
	}
	r := httpRaw(t, http.MethodPost, s.url, "", nil, httpInitBody)
	if want := `Bearer resource_metadata="https://symbi.example.com/.well-known/oauth-protected-resource/mcp"`; r.code != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") != want {
		t.Errorf("401 with --public-url: %d, WWW-Authenticate %q, want %q", r.code, r.header.Get("WWW-Authenticate"), want)
	}
	resp, err := http.Get(s.base + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Resource string `json:"resource"`
	}
	err = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if err != nil || meta.Resource != "https://symbi.example.com/mcp" {
		t.Errorf("metadata resource %q (%v), want https://symbi.example.com/mcp", meta.Resource, err)
	}
	// The server itself is still reached at its own address.
	if res := httpConnect(t, s, alice).call(t, "list_agents", nil); res.IsError {
		t.Errorf("list_agents: %s", text(res))
	}
}

// httpSelfSigned writes a self-signed certificate for 127.0.0.1 and its key, and returns
// their files and a pool trusting it.
func httpSelfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "symbi e2e"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestHTTPTLS: with --tls-cert and --tls-key symbi serves HTTPS: the go-sdk client trusting
// the certificate runs an agent as the token's caller, the 401 names the https metadata
// URL, and a plain HTTP request to the port is refused.
func TestHTTPTLS(t *testing.T) {
	dir := newE2EProject(t)
	model, _ := runsModel(t)
	certFile, keyFile, pool := httpSelfSigned(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	alice := httpTokenAdd(t, tokens, "alice")
	s := httpStart(t, dir, modelEnv(model), "--auth-tokens", tokens, "--tls-cert", certFile, "--tls-key", keyFile)
	s.rootCAs = pool
	if !strings.HasPrefix(s.url, "https://127.0.0.1:") || s.announced != s.url {
		t.Fatalf("serving URL %q (announced %q), want https", s.url, s.announced)
	}
	c := httpConnect(t, s, alice)
	res := c.call(t, "invoke_agent", map[string]any{"agent": "helper", "prompt": "over tls"})
	out := structured(t, res)
	if res.IsError || text(res) != "echo: over tls" || out.Audit == nil {
		t.Fatalf("invoke_agent over HTTPS: %q", text(res))
	}
	if d := httpStarted(t, out.Audit.Path); d["caller"] != "alice" || d["caller_auth"] != "token" {
		t.Errorf("started record over HTTPS: caller %v caller_auth %v", d["caller"], d["caller_auth"])
	}
	client := &http.Client{Transport: s.transport()}
	req, err := http.NewRequest(http.MethodPost, s.url, strings.NewReader(httpInitBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := `Bearer resource_metadata="` + s.base + `/.well-known/oauth-protected-resource/mcp"`; resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != want {
		t.Errorf("HTTPS without a token: %d, WWW-Authenticate %q, want 401 with %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
	}
	// A client that does not trust the certificate cannot connect.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	s.rootCAs = x509.NewCertPool()
	if cs, err := httpSession(ctx, s, alice); err == nil {
		cs.Close()
		t.Error("a client not trusting the certificate connected")
	}
	// Plain HTTP to the TLS port is answered 400 by net/http, never served.
	plain := "http://" + strings.TrimPrefix(s.url, "https://")
	if r := httpRaw(t, http.MethodPost, plain, alice, nil, httpInitBody); r.code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the HTTPS port: %d %q, want 400", r.code, r.body)
	}
}

// httpStartRefused runs symbi mcp --http 127.0.0.1:0 with flags, which must stop at start
// with exit code, saying want, without ever saying it serves.
func httpStartRefused(t *testing.T, dir string, code int, want string, flags ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, symbiBin, append([]string{"mcp", "--project", dir, "--http", "127.0.0.1:0"}, flags...)...)
	cmd.Env = modelEnv(nil)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != code {
		t.Fatalf("symbi mcp %v: %v, want exit %d\n%s", flags, err, code, out)
	}
	if !strings.Contains(string(out), want) {
		t.Errorf("symbi mcp %v does not say %q:\n%s", flags, want, out)
	}
	if strings.Contains(string(out), "msg=serving") {
		t.Errorf("symbi mcp %v said it serves before stopping:\n%s", flags, out)
	}
}

// TestHTTPStartRefused: authentication or TLS configuration that cannot be used stops the
// server at start (exit 1, or 2 for a usage error), before it serves anything.
func TestHTTPStartRefused(t *testing.T) {
	dir := newE2EProject(t)
	tmp := t.TempDir()

	writable := filepath.Join(tmp, "writable")
	httpTokenAdd(t, writable, "alice")
	if err := os.Chmod(writable, 0o620); err != nil {
		t.Fatal(err)
	}
	httpStartRefused(t, dir, 1, "lets group or others write it", "--auth-tokens", writable)

	bad := filepath.Join(tmp, "bad")
	httpTokenAdd(t, bad, "alice")
	f, err := os.OpenFile(bad, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "# a comment\n\nbob sha256:not-hex\n")
	f.Close()
	httpStartRefused(t, dir, 1, "line 4", "--auth-tokens", bad)
	httpStartRefused(t, dir, 1, "no such file", "--auth-tokens", filepath.Join(tmp, "absent"))

	noKeys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"keys":[]}`)
	}))
	defer noKeys.Close()
	jwks := func(u string, extra ...string) []string {
		return append([]string{"--auth-jwks", u, "--auth-issuer", "https://idp.example.test/", "--auth-audience", "aud"}, extra...)
	}
	httpStartRefused(t, dir, 1, "--auth-jwks-allow-insecure", jwks(noKeys.URL)...)
	httpStartRefused(t, dir, 1, "--auth-jwks-allow-private", jwks(noKeys.URL, "--auth-jwks-allow-insecure")...)
	httpStartRefused(t, dir, 1, "no usable signature key", jwks(noKeys.URL, "--auth-jwks-allow-insecure", "--auth-jwks-allow-private")...)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	httpStartRefused(t, dir, 1, "--auth-jwks", jwks(gone.URL, "--auth-jwks-allow-insecure", "--auth-jwks-allow-private")...)
	httpStartRefused(t, dir, 2, "--auth-jwks needs --auth-issuer and --auth-audience", "--auth-jwks", noKeys.URL)
	httpStartRefused(t, dir, 2, "not both", "--auth-tokens", bad, "--auth-jwks", noKeys.URL, "--auth-issuer", "i", "--auth-audience", "a")
	httpStartRefused(t, dir, 2, "--auth-claim needs a claim name", jwks(noKeys.URL, "--auth-claim", "")...)
	httpStartRefused(t, dir, 1, `the claim "exp" cannot name the caller`, jwks(noKeys.URL, "--auth-jwks-allow-insecure", "--auth-jwks-allow-private", "--auth-claim", "exp")...)

	missing := filepath.Join(tmp, "missing.pem")
	httpStartRefused(t, dir, 1, "--tls-cert", "--tls-cert", missing, "--tls-key", missing)
	httpStartRefused(t, dir, 2, "go together", "--tls-cert", missing)
	for _, u := range []string{"symbi.example.com", "ftp://symbi.example.com", "https://", "https://symbi.example.com/?x=1"} {
		httpStartRefused(t, dir, 2, "--public-url", "--auth-tokens", bad, "--public-url", u)
	}
	// It names the protected resource, which only an authenticated server has.
	httpStartRefused(t, dir, 2, "--public-url goes with --auth-tokens or --auth-jwks", "--public-url", "https://symbi.example.com")
	httpStartRefused(t, dir, 2, "--max-sessions 0: want 1 or more", "--max-sessions", "0")
	httpStartRefused(t, dir, 2, "--max-sessions-per-caller -1: want 1 or more", "--max-sessions-per-caller", "-1")
}

// TestHTTPWildcardNeedsPublicURL: with authentication on every address (0.0.0.0, ::, an
// empty host) and no --public-url, the 401 challenge and the protected resource metadata
// would name an address no client can reach: a usage error (exit 2) naming --public-url.
func TestHTTPWildcardNeedsPublicURL(t *testing.T) {
	dir := newE2EProject(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	httpTokenAdd(t, tokens, "alice")
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "[::%lo]:0", "[::ffff:0.0.0.0]:0"} {
		t.Run(addr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			cmd := exec.CommandContext(ctx, symbiBin, "mcp", "--project", dir, "--http", addr, "--auth-tokens", tokens)
			cmd.Env = modelEnv(nil)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "give --public-url") {
				t.Fatalf("symbi mcp --http %s --auth-tokens without --public-url: %v, want exit 2 naming --public-url\n%s", addr, err, out)
			}
		})
	}
}
