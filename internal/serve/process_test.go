package serve

import (
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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/auth"
	"symbi/internal/loopback"
)

// The tests of this file pin what serve promises of the server process (docs/http.md,
// docs/security-model.md, docs/reliability.md): the operator's options checked before the
// project is touched, the runs ended before the ledger and the project are let go, the
// stop signals, and the options reaching the parts that enforce them. They drive Stdio and
// HTTP in this process with the go-sdk client, against a loopback model; every wait is for
// an event, bounded by procGuard. Signals go to the test process itself (as in
// TestShutdownWatch): no test here runs in parallel.

// procGuard bounds every wait for an event.
const procGuard = 2 * time.Minute

// procRec is one log record: its message and its attributes as text.
type procRec struct {
	msg   string
	attrs map[string]string
}

// procLog keeps every record logged and wakes those waiting for one.
type procLog struct {
	mu      sync.Mutex
	recs    []procRec
	changed chan struct{} // closed and replaced at each record
}

type procHandler struct {
	l     *procLog
	attrs []slog.Attr
}

func (h procHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h procHandler) Handle(_ context.Context, r slog.Record) error {
	rec := procRec{msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.l.mu.Lock()
	h.l.recs = append(h.l.recs, rec)
	close(h.l.changed)
	h.l.changed = make(chan struct{})
	h.l.mu.Unlock()
	return nil
}
func (h procHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return procHandler{l: h.l, attrs: append(slices.Clone(h.attrs), as...)}
}
func (h procHandler) WithGroup(string) slog.Handler { return h }

func newProcLog() (*procLog, *slog.Logger) {
	l := &procLog{changed: make(chan struct{})}
	return l, slog.New(procHandler{l: l})
}

// find returns the first record with message msg, if any.
func (l *procLog) find(msg string) (procRec, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.msg == msg {
			return r, true
		}
	}
	return procRec{}, false
}

// all returns the records logged so far.
func (l *procLog) all() []procRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.recs)
}

// await waits for a record with message msg, or for stop to be closed (false).
func (l *procLog) await(t *testing.T, msg string, stop <-chan struct{}) (procRec, bool) {
	t.Helper()
	guard := time.NewTimer(procGuard)
	defer guard.Stop()
	for {
		l.mu.Lock()
		ch := l.changed
		for _, r := range l.recs {
			if r.msg == msg {
				l.mu.Unlock()
				return r, true
			}
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			// A record logged just before stop is still found.
			r, ok := l.find(msg)
			return r, ok
		case <-guard.C:
			t.Fatalf("no %q log record within %v; the log: %v", msg, procGuard, l.all())
		}
	}
}

// The project: one agent, a respond policy that permits every answer but holds one
// naming REVIEW at a human gate.
const procAgent = "agent helper {\n  capabilities = [\"answer\"]\n}\n"

const procPolicy = `@id("allow-respond")
permit (principal, action == Action::"respond", resource);

@gate("human")
@id("review-gate")
forbid (principal, action == Action::"respond", resource)
when { context.response like "*REVIEW*" };
`

func procWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func procProject(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	procWrite(t, filepath.Join(dir, "agents", "helper.symbi"), procAgent)
	procWrite(t, filepath.Join(dir, "policies", "respond.cedar"), procPolicy)
	return dir
}

// procModel is a loopback model: a prompt containing "hang" is held until the client goes
// away (its prompt sent on hung once received); any other is answered "echo: PROMPT".
func procModel(t *testing.T) (*loopback.Server, <-chan string) {
	t.Helper()
	hung := make(chan string, 100)
	m := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		if strings.Contains(r.Prompt, "hang") {
			hung <- r.Prompt
			return loopback.Reply{Fault: loopback.FaultHang}
		}
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, hung
}

// procOptions are a server's options on dir with model (nil: no provider) and the extra
// environment; the log and the watch are new, the watch ended at the test's end.
func procOptions(t *testing.T, dir string, model *loopback.Server, env map[string]string) (Options, *procLog) {
	t.Helper()
	all := map[string]string{"GOGC": "100"}
	if model != nil {
		all["OPENAI_BASE_URL"], all["CHAT_MODEL"] = model.URL(), "loopback-test"
	}
	for k, v := range env {
		all[k] = v
	}
	l, log := newProcLog()
	w := WatchSignals(log)
	t.Cleanup(w.End)
	return Options{Dir: dir, MaxRuns: 8, ApprovalTimeout: time.Hour, Getenv: func(k string) string { return all[k] },
		Log: log, Watch: w}, l
}

// procWaitHung waits until the model holds a request.
func procWaitHung(t *testing.T, hung <-chan string) {
	t.Helper()
	select {
	case <-hung:
	case <-time.After(procGuard):
		t.Fatal("the model never received the run's request")
	}
}

// wait waits for Stdio's return and returns its error.
func (s *procStdio) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(procGuard):
		t.Fatalf("%s did not return within %v", what, procGuard)
		return nil
	}
}

// procSignal sends sig to this process.
func procSignal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(syscall.Getpid(), sig); err != nil {
		t.Fatal(err)
	}
}

// procStdio is a Stdio server in this process with the go-sdk client on its pipes.
type procStdio struct {
	cs     *mcp.ClientSession
	done   chan struct{} // closed when Stdio has returned
	err    error         // what it returned
	stdinW *io.PipeWriter
}

// procStartStdio serves o over in-process pipes; stdout, when set, wraps the server's
// stdout (to make writes fail). The session is closed (stdin closed) at the test's end.
func procStartStdio(t *testing.T, o Options, stdout func(io.Writer) io.Writer) *procStdio {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var out io.Writer = outW
	if stdout != nil {
		out = stdout(outW)
	}
	s := &procStdio{done: make(chan struct{}), stdinW: inW}
	go func() {
		s.err = Stdio(o, inR, out)
		outW.CloseWithError(io.EOF)
		inR.Close()
		close(s.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), procGuard)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "symbi-test", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect over stdio: %v", err)
	}
	s.cs = cs
	t.Cleanup(func() {
		cs.Close()
		select {
		case <-s.done:
		case <-time.After(procGuard):
			t.Error("Stdio did not return after its stdin closed")
		}
	})
	return s
}

// procCall calls a tool and returns its result (the call itself must not fail).
func procCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), procGuard)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// procText is a tool result's text.
func procText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// procInto calls a tool that must succeed and decodes its structured content into out.
func procInto(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res := procCall(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: %s", name, args, procText(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %s: %v", name, raw, err)
	}
}

// procRefused checks that res is the tool error code.
func procRefused(t *testing.T, what string, res *mcp.CallToolResult, code string) {
	t.Helper()
	if !res.IsError || !strings.HasPrefix(procText(res), code+": ") {
		t.Fatalf("%s: isError=%v %q, want the tool error %s", what, res.IsError, procText(res), code)
	}
}

// procStarted is what start_run answers.
type procStarted struct {
	RunID string `json:"run_id"`
	Audit struct {
		Path string `json:"path"`
	} `json:"audit"`
}

// procInvoked is what invoke_agent answers.
type procInvoked struct {
	Audit *struct {
		RunID string `json:"run_id"`
		Path  string `json:"path"`
	} `json:"audit"`
}

// procRecords are the payloads of a journal's lines.
func procRecords(t *testing.T, path string) []map[string]any {
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

// procTerminated checks that the journal at path ends with terminated, reason reason, and
// released as said.
func procTerminated(t *testing.T, path, reason string, released bool) {
	t.Helper()
	recs := procRecords(t, path)
	last := recs[len(recs)-1]
	d, _ := last["data"].(map[string]any)
	if last["type"] != "terminated" || d["reason"] != reason || d["released"] != released {
		t.Fatalf("journal %s ends with %v, want terminated (%s, released %v)", path, last, reason, released)
	}
}

// procLedger are the data of the project ledger's entries of type typ, by run id.
func procLedger(t *testing.T, dir, typ string) map[string][]map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ".symbiont", "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]any{}
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var l struct {
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("ledger line %q: %v", line, err)
		}
		if l.Payload["type"] != typ {
			continue
		}
		d, _ := l.Payload["data"].(map[string]any)
		id, _ := d["run_id"].(string)
		out[id] = append(out[id], d)
	}
	return out
}

// procFDsUnder counts this process's open descriptors on dir or a file under it.
func procFDsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // closed since the listing
		}
		if target == dir || strings.HasPrefix(target, dir+"/") {
			out = append(out, target)
		}
	}
	return out
}

// procNoSymbiont checks that the project was left as found: no .symbiont was made.
func procNoSymbiont(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(dir, ".symbiont")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the project's .symbiont exists after a refused start (%v): the project was touched before the operator's options were checked", err)
	}
}

var _ = fmt.Sprint
var _ = net.Listen
var _ = http.StatusOK

// TestStdioSignalEndsRuns: a stop signal while serving stdio ends the session cleanly
// (Stdio returns nil): the run in flight is cancelled and its journal ends with
// terminated (cancelled) and its ledger entry, both before Stdio returns.
func TestStdioSignalEndsRuns(t *testing.T) {
	dir := procProject(t)
	model, hung := procModel(t)
	o, l := procOptions(t, dir, model, nil)
	s := procStartStdio(t, o, nil)
	var r procStarted
	procInto(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang until the signal"}, &r)
	procWaitHung(t, hung)
	procSignal(t, syscall.SIGTERM)
	if err := s.wait(t, "Stdio after SIGTERM"); err != nil {
		t.Fatalf("Stdio after SIGTERM: %v, want nil (a signal ends the session cleanly)", err)
	}
	procTerminated(t, r.Audit.Path, "cancelled", false)
	if e := procLedger(t, dir, "run")[r.RunID]; len(e) != 1 || e[0]["reason"] != "cancelled" {
		t.Errorf("ledger run entry %v, want one, cancelled", e)
	}
	if rec, ok := l.find("shutting down"); !ok || rec.attrs["signal"] != syscall.SIGTERM.String() {
		t.Errorf("shutting down record %v (%v), want one naming the signal", rec, ok)
	}
	if got := procFDsUnder(t, dir); len(got) != 0 {
		t.Errorf("descriptors into the project still open after Stdio returned: %v", got)
	}
}

// procHTTP is an HTTP server in this process.
type procHTTP struct {
	base string        // scheme://ADDRESS bound
	done chan struct{} // closed when HTTP has returned
	err  error
}

// procStartHTTP runs HTTP(o, h) and waits until it serves; it fails the test if HTTP
// returns first. It is stopped (SIGTERM) at the test's end if still serving.
func procStartHTTP(t *testing.T, o Options, l *procLog, h HTTPOptions) *procHTTP {
	t.Helper()
	s := &procHTTP{done: make(chan struct{})}
	go func() {
		s.err = HTTP(o, h)
		close(s.done)
	}()
	rec, ok := l.await(t, "serving", s.done)
	if !ok {
		t.Fatalf("HTTP returned %v before serving", s.err)
	}
	t.Cleanup(func() {
		select {
		case <-s.done:
			return
		default:
		}
		procSignal(t, syscall.SIGTERM)
		s.wait(t, "HTTP after SIGTERM")
	})
	scheme := "http"
	if h.TLSCert != "" {
		scheme = "https"
	}
	s.base = scheme + "://" + rec.attrs["listen"]
	return s
}

// wait waits for HTTP's return and returns its error.
func (s *procHTTP) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(procGuard):
		t.Fatalf("%s did not return within %v", what, procGuard)
		return nil
	}
}

// procHTTPRefused runs HTTP(o, h), which must return an error containing each of wants
// without ever serving; it returns the error.
func procHTTPRefused(t *testing.T, o Options, l *procLog, h HTTPOptions, wants ...string) error {
	t.Helper()
	done := make(chan struct{})
	var err error
	go func() {
		err = HTTP(o, h)
		close(done)
	}()
	if _, ok := l.await(t, "serving", done); ok {
		<-done // the shutdown is armed: stop it
		t.Fatalf("HTTP %+v served; want it refused at start", h)
	}
	if err == nil {
		t.Fatalf("HTTP %+v returned nil without serving; want an error", h)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("HTTP %+v: %q does not say %q", h, err, w)
		}
	}
	return err
}

// procBearer adds a bearer token to every request.
type procBearer struct {
	token string
	base  http.RoundTripper
}

func (b procBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// procConnectHTTP connects the go-sdk client to s with token ("" for none) through rt
// (nil: a new transport).
func procConnectHTTP(t *testing.T, s *procHTTP, token string, rt http.RoundTripper) (*mcp.ClientSession, error) {
	t.Helper()
	if rt == nil {
		rt = &http.Transport{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), procGuard)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "symbi-test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: s.base + "/mcp", HTTPClient: &http.Client{Transport: procBearer{token: token, base: rt}},
	}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// procInitBody is an initialize request, as a client's first POST.
const procInitBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// procPostInit posts an initialize to url with token ("" for none) through rt (nil: a new
// transport), and returns the status and the WWW-Authenticate header.
func procPostInit(t *testing.T, rt http.RoundTripper, url, token string) (int, string) {
	t.Helper()
	if rt == nil {
		rt = &http.Transport{DisableKeepAlives: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), procGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(procInitBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

// procGetJSON gets url through rt (nil: a new transport) and decodes its JSON body.
func procGetJSON(t *testing.T, rt http.RoundTripper, url string, out any) {
	t.Helper()
	if rt == nil {
		rt = &http.Transport{DisableKeepAlives: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), procGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// procTokens writes a token file naming caller and returns its path and the token.
func procTokens(t *testing.T, caller string) (path, token string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "tokens")
	tok, err := auth.AddToken(path, caller, rand.Reader, nil)
	if err != nil {
		t.Fatal(err)
	}
	return path, tok
}

// TestHTTPTokensRequireBearer: with a tokens file, every request to /mcp needs one of
// its tokens — none or another is answered 401 with WWW-Authenticate naming the metadata
// at the default public URL (scheme and address bound) — and a run made with one records
// the token's caller, authenticated by token.
func TestHTTPTokensRequireBearer(t *testing.T) {
	dir := procProject(t)
	model, _ := procModel(t)
	tokens, alice := procTokens(t, "alice")
	o, l := procOptions(t, dir, model, nil)
	s := procStartHTTP(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", Tokens: tokens, MaxSessions: 8, MaxSessionsCaller: 8})
	if rec, _ := l.find("serving"); rec.attrs["auth"] != "token" || rec.attrs["tokens"] != "1" {
		t.Errorf("serving record %v, want auth=token tokens=1", rec.attrs)
	}
	want := `Bearer resource_metadata="` + s.base + `/.well-known/oauth-protected-resource/mcp"`
	for _, tok := range []string{"", "symbi_" + strings.Repeat("0", 43), alice + "x"} {
		if code, www := procPostInit(t, nil, s.base+"/mcp", tok); code != http.StatusUnauthorized || www != want {
			t.Errorf("initialize with token %q: %d, WWW-Authenticate %q; want 401 with %q", tok, code, www, want)
		}
	}
	if _, err := procConnectHTTP(t, s, "", nil); err == nil {
		t.Fatal("a client without a token connected to a server with --auth-tokens")
	}
	cs, err := procConnectHTTP(t, s, alice, nil)
	if err != nil {
		t.Fatalf("alice's client: %v", err)
	}
	if caller, auth := procStartedCaller(t, cs); caller != "alice" || auth != "token" {
		t.Errorf("started record: caller %v caller_auth %v, want alice/token", caller, auth)
	}
}

// procStartedCaller has helper invoked through cs and returns the caller and the
// caller_auth its journal's started record names.
func procStartedCaller(t *testing.T, cs *mcp.ClientSession) (caller, auth any) {
	t.Helper()
	var out procInvoked
	procInto(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "who am I"}, &out)
	d, _ := procRecords(t, out.Audit.Path)[0]["data"].(map[string]any)
	return d["caller"], d["caller_auth"]
}

// TestHTTPTokensFileCheckedFirst: a tokens file that cannot be used — absent, with a
// malformed line, writable by others — stops HTTP at start with an error naming
// --auth-tokens, before the project is touched (no .symbiont made) and before anything
// is served, even on an address only authentication allows.
func TestHTTPTokensFileCheckedFirst(t *testing.T) {
	tmp := t.TempDir()
	bad, _ := procTokens(t, "alice")
	f, err := os.OpenFile(bad, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, "bob sha256:not-hex\n")
	f.Close()
	writable, _ := procTokens(t, "carol")
	if err := os.Chmod(writable, 0o622); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		want string
	}{
		{filepath.Join(tmp, "absent"), "--auth-tokens"},
		{bad, "line 2"},
		{writable, "--auth-tokens"},
	} {
		for _, addr := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
			dir := procProject(t)
			o, l := procOptions(t, dir, nil, nil)
			err := procHTTPRefused(t, o, l, HTTPOptions{Addr: addr, Tokens: c.file, MaxSessions: 8, MaxSessionsCaller: 8}, "--auth-tokens", c.want)
			if strings.Contains(err.Error(), "not a loopback address") {
				t.Errorf("%s with --auth-tokens refused as unauthenticated: %v", addr, err)
			}
			procNoSymbiont(t, dir)
		}
	}
}

// procIdP is an identity provider's JWK set on loopback (plain http), of one Ed25519 key.
type procIdP struct {
	url string
	key ed25519.PrivateKey
}

const procIssuer, procAudience = "https://idp.example.test/", "https://symbi.example.test/mcp"

func procNewIdP(t *testing.T) procIdP {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: string(jose.EdDSA), Use: "sig"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(set)
	}))
	t.Cleanup(srv.Close)
	return procIdP{url: srv.URL + "/jwks.json", key: key}
}

// sign signs claims (iss, aud and exp added unless given) with the provider's key.
func (p procIdP) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	all := map[string]any{"iss": procIssuer, "aud": procAudience, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		all[k] = v
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: p.key, KeyID: "k1"}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(all).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestHTTPJWT: with --auth-jwks every request to /mcp needs a JWT of the configured
// issuer and audience, signed by a key of the JWK set; the metadata names the issuer as
// the authorization server; the caller is the configured claim, recorded with jwt.
func TestHTTPJWT(t *testing.T) {
	idp := procNewIdP(t)
	dir := procProject(t)
	model, _ := procModel(t)
	o, l := procOptions(t, dir, model, nil)
	s := procStartHTTP(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", JWKS: idp.url, Issuer: procIssuer, Audience: procAudience,
		Claim: "client_id", JWKSAllowPrivate: true, JWKSAllowInsecure: true, MaxSessions: 8, MaxSessionsCaller: 8})
	if rec, _ := l.find("serving"); rec.attrs["auth"] != "jwt" {
		t.Errorf("serving record %v, want auth=jwt", rec.attrs)
	}
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	procGetJSON(t, nil, s.base+"/.well-known/oauth-protected-resource", &meta)
	if meta.Resource != s.base+"/mcp" || !slices.Equal(meta.AuthorizationServers, []string{procIssuer}) {
		t.Errorf("protected resource metadata %+v, want resource %s/mcp and the issuer %s", meta, s.base, procIssuer)
	}
	for what, tok := range map[string]string{
		"no token":         "",
		"another issuer":   idp.sign(t, map[string]any{"client_id": "ci", "iss": "https://evil.example.test/"}),
		"another audience": idp.sign(t, map[string]any{"client_id": "ci", "aud": "https://other.example.test/mcp"}),
		"no caller claim":  idp.sign(t, map[string]any{"sub": "ci"}),
	} {
		if code, _ := procPostInit(t, nil, s.base+"/mcp", tok); code != http.StatusUnauthorized {
			t.Errorf("initialize with %s: %d, want 401", what, code)
		}
	}
	cs, err := procConnectHTTP(t, s, idp.sign(t, map[string]any{"sub": "someone", "client_id": "ci"}), nil)
	if err != nil {
		t.Fatalf("a client with a good token: %v", err)
	}
	if caller, auth := procStartedCaller(t, cs); caller != "ci" || auth != "jwt" {
		t.Errorf("started record: caller %v caller_auth %v, want ci/jwt (the --auth-claim claim)", caller, auth)
	}
}

// TestHTTPJWKSCheckedFirst: the JWK set is fetched by the SSRF rules the operator chose —
// a plain http URL needs JWKSAllowInsecure, a loopback one JWKSAllowPrivate — and one
// that cannot be fetched stops HTTP at start naming --auth-jwks, before the project is
// touched; a JWK set counts as authentication, so an address other than loopback is not
// refused for the want of it.
func TestHTTPJWKSCheckedFirst(t *testing.T) {
	idp := procNewIdP(t)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, c := range []struct {
		addr, url         string
		private, insecure bool
		want              string
	}{
		{"127.0.0.1:0", idp.url, true, false, "--auth-jwks-allow-insecure"},
		{"127.0.0.1:0", idp.url, false, true, "--auth-jwks-allow-private"},
		{"127.0.0.1:0", gone.URL, true, true, "--auth-jwks"},
		{"0.0.0.0:0", gone.URL, true, true, "--auth-jwks"},
	} {
		dir := procProject(t)
		o, l := procOptions(t, dir, nil, nil)
		err := procHTTPRefused(t, o, l, HTTPOptions{Addr: c.addr, JWKS: c.url, Issuer: procIssuer, Audience: procAudience,
			JWKSAllowPrivate: c.private, JWKSAllowInsecure: c.insecure, MaxSessions: 8, MaxSessionsCaller: 8}, "--auth-jwks", c.want)
		if strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("%s with --auth-jwks refused as unauthenticated: %v", c.addr, err)
		}
		procNoSymbiont(t, dir)
	}
}

// procSelfSigned writes a self-signed certificate for 127.0.0.1 and its key, in files of
// their own, and returns them with a pool trusting the certificate.
func procSelfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "symbi serve test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
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
	procWrite(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	procWrite(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})))
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestHTTPTLS: with a certificate and its key HTTP serves HTTPS only — a client
// trusting the certificate is answered, its 401 naming the https metadata URL by default;
// plain HTTP to the port is answered 400, never served.
func TestHTTPTLS(t *testing.T) {
	dir := procProject(t)
	certFile, keyFile, pool := procSelfSigned(t)
	tokens, alice := procTokens(t, "alice")
	o, l := procOptions(t, dir, nil, nil)
	s := procStartHTTP(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", TLSCert: certFile, TLSKey: keyFile, Tokens: tokens, MaxSessions: 8, MaxSessionsCaller: 8})
	trusting := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}
	want := `Bearer resource_metadata="` + s.base + `/.well-known/oauth-protected-resource/mcp"`
	if code, www := procPostInit(t, trusting, s.base+"/mcp", ""); code != http.StatusUnauthorized || www != want {
		t.Errorf("HTTPS without a token: %d, WWW-Authenticate %q; want 401 with %q", code, www, want)
	}
	if code, _ := procPostInit(t, trusting, s.base+"/mcp", alice); code != http.StatusOK {
		t.Errorf("HTTPS initialize with alice's token: %d, want 200", code)
	}
	if code, _ := procPostInit(t, nil, "http://"+strings.TrimPrefix(s.base, "https://")+"/mcp", alice); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the HTTPS port: %d, want 400", code)
	}
}

// TestHTTPCertificateCheckedFirst: a certificate that cannot be used (absent, or a key
// that is not its own) stops HTTP at start naming --tls-cert, before the project is
// touched and before anything is served.
func TestHTTPCertificateCheckedFirst(t *testing.T) {
	certFile, _, _ := procSelfSigned(t)
	_, otherKey, _ := procSelfSigned(t)
	tokens, _ := procTokens(t, "alice")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, c := range [][2]string{{missing, missing}, {certFile, otherKey}, {certFile, certFile}} {
		dir := procProject(t)
		o, l := procOptions(t, dir, nil, nil)
		procHTTPRefused(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", TLSCert: c[0], TLSKey: c[1], Tokens: tokens, MaxSessions: 8, MaxSessionsCaller: 8}, "--tls-cert")
		procNoSymbiont(t, dir)
	}
}

// TestHTTPPublicURL: the public URL names the protected resource in the 401 and the
// metadata; a trailing slash is not doubled.
func TestHTTPPublicURL(t *testing.T) {
	dir := procProject(t)
	tokens, _ := procTokens(t, "alice")
	o, l := procOptions(t, dir, nil, nil)
	s := procStartHTTP(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", Tokens: tokens, PublicURL: "https://symbi.example.com/team/", MaxSessions: 8, MaxSessionsCaller: 8})
	want := `Bearer resource_metadata="https://symbi.example.com/.well-known/oauth-protected-resource/team/mcp"`
	if code, www := procPostInit(t, nil, s.base+"/mcp", ""); code != http.StatusUnauthorized || www != want {
		t.Errorf("401 with a public URL: %d, WWW-Authenticate %q, want %q", code, www, want)
	}
	var meta struct {
		Resource string `json:"resource"`
	}
	procGetJSON(t, nil, s.base+"/.well-known/oauth-protected-resource", &meta)
	if meta.Resource != "https://symbi.example.com/team/mcp" {
		t.Errorf("metadata resource %q, want https://symbi.example.com/team/mcp", meta.Resource)
	}
	if rec, _ := l.find("serving"); rec.attrs["http"] != "https://symbi.example.com/team/mcp" {
		t.Errorf("the serving record announces %q, want https://symbi.example.com/team/mcp", rec.attrs["http"])
	}
}

// TestHTTPAddressInUse: an address that cannot be bound stops HTTP at start naming
// --http, before the project is touched.
func TestHTTPAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := procProject(t)
	o, l := procOptions(t, dir, nil, nil)
	procHTTPRefused(t, o, l, HTTPOptions{Addr: ln.Addr().String(), MaxSessions: 8, MaxSessionsCaller: 8}, "--http "+ln.Addr().String())
	procNoSymbiont(t, dir)
}

// TestHTTPOpenFailureReleases: when the project cannot be served (here a mistyped
// SYMBI_JOURNAL_TEXT, which fails closed), HTTP returns the error without serving and lets
// go of what it took: the address is free again and no descriptor into the project stays
// open.
func TestHTTPOpenFailureReleases(t *testing.T) {
	dir := procProject(t)
	o, l := procOptions(t, dir, nil, map[string]string{"SYMBI_JOURNAL_TEXT": "hash"})
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	procHTTPRefused(t, o, l, HTTPOptions{Addr: addr, MaxSessions: 8, MaxSessionsCaller: 8}, "SYMBI_JOURNAL_TEXT")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address %s is still held after HTTP failed to open the project: %v", addr, err)
	}
	ln.Close()
	if got := procFDsUnder(t, dir); len(got) != 0 {
		t.Errorf("descriptors into the project still open after HTTP failed: %v", got)
	}
}

// TestHTTPAnonymousCaller: without authentication (loopback only) every client is the
// one caller anonymous, authenticated by none — never stdio, never an unknown caller.
func TestHTTPAnonymousCaller(t *testing.T) {
	dir := procProject(t)
	model, _ := procModel(t)
	o, l := procOptions(t, dir, model, nil)
	s := procStartHTTP(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", MaxSessions: 8, MaxSessionsCaller: 8})
	if rec, _ := l.find("serving"); rec.attrs["auth"] != "none" || rec.attrs["http"] != s.base+"/mcp" {
		t.Errorf("serving record %v, want auth=none and http=%s/mcp", rec.attrs, s.base)
	}
	if code, www := procPostInit(t, nil, s.base+"/mcp", ""); code != http.StatusOK || www != "" {
		t.Errorf("initialize without a token on an unauthenticated server: %d %q", code, www)
	}
	cs, err := procConnectHTTP(t, s, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if caller, auth := procStartedCaller(t, cs); caller != "anonymous" || auth != "none" {
		t.Errorf("started record: caller %v caller_auth %v, want anonymous/none", caller, auth)
	}
}

// TestHTTPSignalEndsRunsBeforeLedger: a stop signal while serving HTTP cancels the run
// in flight, whose journal ends with terminated (cancelled) and whose ledger entry is
// written, before HTTP returns nil; what HTTP took of the project is let go.
func TestHTTPSignalEndsRunsBeforeLedger(t *testing.T) {
	dir := procProject(t)
	model, hung := procModel(t)
	o, l := procOptions(t, dir, model, nil)
	s := procStartHTTP(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", MaxSessions: 8, MaxSessionsCaller: 8})
	cs, err := procConnectHTTP(t, s, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var r procStarted
	procInto(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang until the signal"}, &r)
	procWaitHung(t, hung)
	procSignal(t, syscall.SIGTERM)
	if err := s.wait(t, "HTTP after SIGTERM"); err != nil {
		t.Fatalf("HTTP after SIGTERM: %v, want nil", err)
	}
	procTerminated(t, r.Audit.Path, "cancelled", false)
	if e := procLedger(t, dir, "run")[r.RunID]; len(e) != 1 || e[0]["reason"] != "cancelled" {
		t.Errorf("ledger run entry %v, want one, cancelled", e)
	}
	if rec, ok := l.find("shutting down"); !ok || rec.attrs["signal"] != syscall.SIGTERM.String() {
		t.Errorf("shutting down record %v (%v), want one naming the signal", rec, ok)
	}
	if got := procFDsUnder(t, dir); len(got) != 0 {
		t.Errorf("descriptors into the project still open after HTTP returned: %v", got)
	}
}

// procAwaitHurryOrBegin sends sig and reports whether it hurried the shutdown (Hurried
// closed) rather than beginning one (the watch's context done).
func procAwaitHurryOrBegin(t *testing.T, w *Watch, sig syscall.Signal) bool {
	t.Helper()
	procSignal(t, sig)
	select {
	case <-w.Hurried():
		return true
	case <-w.Context().Done():
		return false
	case <-time.After(procGuard):
		t.Fatalf("%v neither hurried nor began a shutdown", sig)
		return false
	}
}

// TestStdioStdinCloseBeginsShutdown: the client closing stdin ends the session: the run
// start_run began is cancelled and ends its journal with terminated (cancelled) before
// Stdio returns nil; the shutdown has begun then, for that reason, so a signal that
// follows (a client's SIGTERM after it closed stdin) hurries it rather than beginning
// another.
func TestStdioStdinCloseBeginsShutdown(t *testing.T) {
	dir := procProject(t)
	model, hung := procModel(t)
	o, l := procOptions(t, dir, model, nil)
	s := procStartStdio(t, o, nil)
	var r procStarted
	procInto(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang until stdin closes"}, &r)
	procWaitHung(t, hung)
	s.stdinW.Close()
	if err := s.wait(t, "Stdio after stdin closed"); err != nil {
		t.Fatalf("Stdio after stdin closed: %v, want nil", err)
	}
	procTerminated(t, r.Audit.Path, "cancelled", false)
	if rec, ok := l.find("shutting down"); !ok || rec.attrs["cause"] != "the client closed stdin" {
		t.Errorf("shutting down record %v (%v), want cause: the client closed stdin", rec, ok)
	}
	if !procAwaitHurryOrBegin(t, o.Watch, syscall.SIGTERM) {
		t.Error("a signal after stdin closed began a shutdown; want it to hurry the one stdin's close began")
	}
}

// procFailing is a stdout whose writes fail once fail is set.
type procFailing struct {
	w    io.Writer
	fail atomic.Bool
}

func (f *procFailing) Write(p []byte) (int, error) {
	if f.fail.Load() {
		return 0, syscall.EPIPE
	}
	return f.w.Write(p)
}

// TestStdioClientStopsReading: a failed write to stdout (the client stopped reading)
// ends the session cleanly — Stdio returns nil, as for a signal — and cancels the run in
// flight, which ends its journal with terminated (cancelled) first; the shutdown has
// begun then, so a signal that follows hurries it.
func TestStdioClientStopsReading(t *testing.T) {
	dir := procProject(t)
	model, hung := procModel(t)
	o, l := procOptions(t, dir, model, nil)
	out := &procFailing{}
	s := procStartStdio(t, o, func(w io.Writer) io.Writer { out.w = w; return out })
	var r procStarted
	procInto(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang until the client goes"}, &r)
	procWaitHung(t, hung)
	out.fail.Store(true)
	// The answer to this ping is the write that fails; the ping itself ends when the
	// session does.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), procGuard)
		defer cancel()
		s.cs.Ping(ctx, nil)
	}()
	if err := s.wait(t, "Stdio after stdout failed"); err != nil {
		t.Fatalf("Stdio after stdout failed: %v, want nil (a client gone ends the session cleanly)", err)
	}
	procTerminated(t, r.Audit.Path, "cancelled", false)
	if rec, ok := l.find("shutting down"); !ok || !strings.Contains(rec.attrs["cause"], "writing to stdout") {
		t.Errorf("shutting down record %v (%v), want the cause: writing to stdout", rec, ok)
	}
	if !procAwaitHurryOrBegin(t, o.Watch, syscall.SIGTERM) {
		t.Error("a signal after the client stopped reading began a shutdown; want it to hurry the one under way")
	}
}

// TestJournalTextChoiceValues: SYMBI_JOURNAL_TEXT unset or full keeps the clear text;
// hashes keeps only hashes.
func TestJournalTextChoiceValues(t *testing.T) {
	for v, want := range map[string]bool{"": false, "full": false, "hashes": true} {
		got, err := journalTextChoice(v)
		if err != nil || got != want {
			t.Errorf("journalTextChoice(%q) = %v, %v; want %v, nil", v, got, err, want)
		}
	}
}

// TestJournalTextReachesJournals: SYMBI_JOURNAL_TEXT=hashes keeps the prompt and the
// answer out of the journal (docs/security-model.md, confidentiality); unset, the journal
// holds them in clear.
func TestJournalTextReachesJournals(t *testing.T) {
	for _, c := range []struct {
		env   string
		clear bool
	}{{"", true}, {"hashes", false}} {
		dir := procProject(t)
		model, _ := procModel(t)
		o, _ := procOptions(t, dir, model, map[string]string{"SYMBI_JOURNAL_TEXT": c.env})
		s := procStartStdio(t, o, nil)
		const secret = "the-secret-words-7391"
		res := procCall(t, s.cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": secret})
		if res.IsError || procText(res) != "echo: "+secret {
			t.Fatalf("SYMBI_JOURNAL_TEXT=%q: invoke_agent: %q", c.env, procText(res))
		}
		var out procInvoked
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil || out.Audit == nil {
			t.Fatalf("invoke_agent's audit: %s (%v)", raw, err)
		}
		data, err := os.ReadFile(out.Audit.Path)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(data, []byte(secret)); got != c.clear {
			t.Errorf("SYMBI_JOURNAL_TEXT=%q: the journal holds the prompt in clear: %v, want %v", c.env, got, c.clear)
		}
	}
}

// TestStdioRefusesBadJournalText: a mistyped SYMBI_JOURNAL_TEXT stops Stdio at start
// (fail closed) without serving, and leaves no descriptor into the project open.
func TestStdioRefusesBadJournalText(t *testing.T) {
	dir := procProject(t)
	o, l := procOptions(t, dir, nil, map[string]string{"SYMBI_JOURNAL_TEXT": "hash"})
	err := Stdio(o, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SYMBI_JOURNAL_TEXT") {
		t.Fatalf("Stdio with SYMBI_JOURNAL_TEXT=hash: %v, want the refusal", err)
	}
	if _, ok := l.find("serving"); ok {
		t.Error("Stdio said it serves with a mistyped SYMBI_JOURNAL_TEXT")
	}
	if got := procFDsUnder(t, dir); len(got) != 0 {
		t.Errorf("descriptors into the project still open after Stdio failed: %v", got)
	}
}

// procJournals lists the project's journal files.
func procJournals(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".symbiont", "governed", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMinFreeReachesRuns: the operator's free-space floor refuses a run when the
// journal file system has less free space: audit_unavailable, no journal, no model call.
func TestMinFreeReachesRuns(t *testing.T) {
	dir := procProject(t)
	model, _ := procModel(t)
	o, _ := procOptions(t, dir, model, nil)
	o.MinFree = math.MaxUint64
	s := procStartStdio(t, o, nil)
	procRefused(t, "invoke_agent below the free-space floor", procCall(t, s.cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hello"}), "audit_unavailable")
	if j := procJournals(t, dir); len(j) != 0 {
		t.Errorf("journals made below the free-space floor: %v", j)
	}
	if n := len(model.Requests()); n != 0 {
		t.Errorf("the model received %d requests below the free-space floor", n)
	}
}

// TestMaxRunsReachesRuns: --max-runs bounds the runs in flight: with one held, the
// next call is busy.
func TestMaxRunsReachesRuns(t *testing.T) {
	dir := procProject(t)
	model, hung := procModel(t)
	o, _ := procOptions(t, dir, model, nil)
	o.MaxRuns = 1
	s := procStartStdio(t, o, nil)
	var r procStarted
	procInto(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang, holding the one slot"}, &r)
	procWaitHung(t, hung)
	procRefused(t, "start_run beyond --max-runs", procCall(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "one more"}), "busy")
}

// TestMaxRunsPerCallerReachesRuns: --max-runs-per-caller bounds one caller's runs in
// flight below --max-runs.
func TestMaxRunsPerCallerReachesRuns(t *testing.T) {
	dir := procProject(t)
	model, hung := procModel(t)
	o, _ := procOptions(t, dir, model, nil)
	o.MaxRunsPerCaller = 1
	s := procStartStdio(t, o, nil)
	var r procStarted
	procInto(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang, the caller's one run"}, &r)
	procWaitHung(t, hung)
	res := procCall(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "one more"})
	procRefused(t, "start_run beyond --max-runs-per-caller", res, "busy")
	if !strings.Contains(procText(res), "--max-runs-per-caller") {
		t.Errorf("busy %q does not name --max-runs-per-caller", procText(res))
	}
}

// TestRateReachesServer: --rate bounds a caller's tool calls: at one call in 1,000 s,
// the second is rate_limited.
func TestRateReachesServer(t *testing.T) {
	dir := procProject(t)
	o, _ := procOptions(t, dir, nil, nil)
	o.Rate = 0.001
	s := procStartStdio(t, o, nil)
	if res := procCall(t, s.cs, "list_agents", nil); res.IsError {
		t.Fatalf("the first call: %s", procText(res))
	}
	procRefused(t, "the second call within the rate", procCall(t, s.cs, "list_agents", nil), "rate_limited")
}

// TestKeyFileReachesEveryPart: SYMBI_AUDIT_KEY_FILE is the one signing key of the
// ledger, the runs and the run queries: a run is released and read back whole with it,
// and no key is made in the project.
func TestKeyFileReachesEveryPart(t *testing.T) {
	dir := procProject(t)
	model, _ := procModel(t)
	keyFile := filepath.Join(t.TempDir(), "audit.key")
	o, _ := procOptions(t, dir, model, map[string]string{"SYMBI_AUDIT_KEY_FILE": keyFile})
	s := procStartStdio(t, o, nil)
	var out procInvoked
	procInto(t, s.cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "signed elsewhere"}, &out)
	var st struct {
		Status         string  `json:"status"`
		Text           *string `json:"text"`
		JournalProblem string  `json:"journal_problem"`
	}
	procInto(t, s.cs, "run_status", map[string]any{"run_id": out.Audit.RunID}, &st)
	if st.Status != "completed" || st.Text == nil || *st.Text != "echo: signed elsewhere" || st.JournalProblem != "" {
		t.Errorf("run_status with SYMBI_AUDIT_KEY_FILE: %+v", st)
	}
	if _, err := os.Stat(keyFile); err != nil {
		t.Errorf("the key of SYMBI_AUDIT_KEY_FILE: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".symbiont", "*", "*.key")); len(m) != 0 {
		t.Errorf("a key was made in the project despite SYMBI_AUDIT_KEY_FILE: %v", m)
	}
}

// TestLedgerUnavailableRefusesRuns: a project ledger that does not verify refuses every
// run before it starts (audit_unavailable, no model call), while the server still serves
// the authoring tools.
func TestLedgerUnavailableRefusesRuns(t *testing.T) {
	dir := procProject(t)
	model, _ := procModel(t)
	if err := os.Mkdir(filepath.Join(dir, ".symbiont"), 0o700); err != nil {
		t.Fatal(err)
	}
	procWrite(t, filepath.Join(dir, ".symbiont", "ledger.jsonl"), "this is not a ledger line\n")
	if err := os.Chmod(filepath.Join(dir, ".symbiont", "ledger.jsonl"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, l := procOptions(t, dir, model, nil)
	s := procStartStdio(t, o, nil)
	if _, ok := l.find("project ledger unavailable: every run will be refused (audit_unavailable)"); !ok {
		t.Errorf("no log record of the ledger's failure: %v", l.all())
	}
	if res := procCall(t, s.cs, "list_agents", nil); res.IsError {
		t.Errorf("list_agents without a ledger: %s", procText(res))
	}
	procRefused(t, "invoke_agent without a ledger", procCall(t, s.cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hello"}), "audit_unavailable")
	if n := len(model.Requests()); n != 0 {
		t.Errorf("the model received %d requests without a ledger", n)
	}
}

// TestAccessPolicyReachesRuns: the access policies of policies/access/ decide who may
// start runs: a forbid of start_run refuses start_run and invoke_agent (access_denied).
func TestAccessPolicyReachesRuns(t *testing.T) {
	dir := procProject(t)
	model, _ := procModel(t)
	procWrite(t, filepath.Join(dir, "policies", "access", "starts.cedar"),
		"@id(\"no-starts\")\nforbid (principal, action == Action::\"start_run\", resource);\n")
	o, _ := procOptions(t, dir, model, nil)
	s := procStartStdio(t, o, nil)
	procRefused(t, "start_run under a forbid", procCall(t, s.cs, "start_run", map[string]any{"agent": "helper", "prompt": "hello"}), "access_denied")
	procRefused(t, "invoke_agent under a forbid", procCall(t, s.cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hello"}), "access_denied")
	if n := len(model.Requests()); n != 0 {
		t.Errorf("the model received %d requests under an access forbid", n)
	}
}

// TestApprovalTimeoutReachesRuns: --approval-timeout is the wait of a run held at a
// human gate (the agent sets no timeout): its approval_requested records it.
func TestApprovalTimeoutReachesRuns(t *testing.T) {
	dir := procProject(t)
	model, _ := procModel(t)
	o, _ := procOptions(t, dir, model, nil)
	o.ApprovalTimeout = 3 * time.Hour
	s := procStartStdio(t, o, nil)
	res := procCall(t, s.cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "REVIEW this"})
	procRefused(t, "invoke_agent held at the gate", res, "approval_required")
	var out procInvoked
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil || out.Audit == nil {
		t.Fatalf("approval_required's audit: %s (%v)", raw, err)
	}
	var found bool
	for _, rec := range procRecords(t, out.Audit.Path) {
		if rec["type"] == "approval_requested" {
			found = true
			d, _ := rec["data"].(map[string]any)
			if d["timeout_ms"] != float64((3 * time.Hour).Milliseconds()) {
				t.Errorf("approval_requested waits %v ms, want %d (ApprovalTimeout)", d["timeout_ms"], (3 * time.Hour).Milliseconds())
			}
		}
	}
	if !found {
		t.Errorf("no approval_requested record in %s", out.Audit.Path)
	}
}

// TestNoProviderStillServes: an inference provider the environment describes wrongly
// does not stop the server: it serves, and a run is refused no_provider.
func TestNoProviderStillServes(t *testing.T) {
	dir := procProject(t)
	o, l := procOptions(t, dir, nil, map[string]string{"OPENAI_BASE_URL": "ftp://model.example.test/v1"})
	s := procStartStdio(t, o, nil)
	if rec, ok := l.find("serving"); !ok || rec.attrs["provider"] != "" {
		t.Errorf("serving record %v (%v), want one without a provider", rec.attrs, ok)
	}
	procRefused(t, "invoke_agent without a provider", procCall(t, s.cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "hello"}), "no_provider")
}

// TestOpenFailuresLetGo: a project that cannot be opened (no such directory) or whose
// agents/ cannot be listed (a file) stops Stdio at start with the error, without serving
// and without a descriptor into the project left open.
func TestOpenFailuresLetGo(t *testing.T) {
	dir := t.TempDir()
	procWrite(t, filepath.Join(dir, "agents"), "not a directory\n")
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(t.TempDir(), "absent"), "absent"},
		{dir, "agents"},
	} {
		o, l := procOptions(t, c.dir, nil, nil)
		err := Stdio(o, strings.NewReader(""), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Stdio on %s: %v, want an error naming %s", c.dir, err, c.want)
		}
		if _, ok := l.find("serving"); ok {
			t.Errorf("Stdio on %s said it serves", c.dir)
		}
		if got := procFDsUnder(t, c.dir); len(got) != 0 {
			t.Errorf("descriptors into %s still open after Stdio failed: %v", c.dir, got)
		}
	}
}

// TestExecutorsReachRegistryAndRuns: the operator's executors file decides which
// delegated agents are admitted (one naming an executor it does not register is refused)
// and runs them, in a workspace inside a granted root; a workspace outside every root is
// refused. An executors file that cannot be used stops Stdio at start.
func TestExecutorsReachRegistryAndRuns(t *testing.T) {
	dir := procProject(t)
	procWrite(t, filepath.Join(dir, "agents", "coder.symbi"), "metadata { executor = \"fake\" }\nagent coder {}\n")
	procWrite(t, filepath.Join(dir, "agents", "stranger.symbi"), "metadata { executor = \"nope\" }\nagent stranger {}\n")
	execs := filepath.Join(t.TempDir(), "executors.json")
	procWrite(t, execs, `{"executors": {"fake": {"command": ["/bin/true"]}}}`)
	if err := os.Chmod(execs, 0o600); err != nil {
		t.Fatal(err)
	}
	root, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	o, _ := procOptions(t, dir, nil, nil)
	o.Executors, o.Roots = execs, []string{root}
	s := procStartStdio(t, o, nil)
	var agents struct {
		Agents []struct {
			Name     string `json:"name"`
			Admitted bool   `json:"invocable"`
		} `json:"agents"`
	}
	res := procCall(t, s.cs, "list_agents", nil)
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &agents); err != nil {
		t.Fatalf("list_agents: %s: %v", raw, err)
	}
	admitted := map[string]bool{}
	for _, a := range agents.Agents {
		admitted[a.Name] = a.Admitted
	}
	if !admitted["coder"] || admitted["stranger"] || !admitted["helper"] {
		t.Errorf("admitted %v, want coder (registered executor) and helper, not stranger (unregistered): %s", admitted, raw)
	}
	procRefused(t, "start_run outside the roots", procCall(t, s.cs, "start_run", map[string]any{"agent": "coder", "prompt": "work", "workspace": elsewhere}), "invalid_request")
	var r procStarted
	procInto(t, s.cs, "start_run", map[string]any{"agent": "coder", "prompt": "work", "workspace": filepath.Join(root, "ws")}, &r)
	if r.RunID == "" {
		t.Error("start_run in a granted root: no run id")
	}

	if err := os.Chmod(execs, 0o622); err != nil {
		t.Fatal(err)
	}
	o2, l2 := procOptions(t, procProject(t), nil, nil)
	o2.Executors = execs
	if err := Stdio(o2, strings.NewReader(""), io.Discard); err == nil {
		t.Error("Stdio with an executors file others may write: nil, want the refusal")
	}
	if _, ok := l2.find("serving"); ok {
		t.Error("Stdio served with an executors file others may write")
	}
}

// TestStartupGC: the collector's target is raised for start-up and restored after,
// unless GOGC is set, which is left alone.
func TestStartupGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	if startupGCPercent <= 100 {
		t.Errorf("startupGCPercent %d does not raise the default target (100)", startupGCPercent)
	}
	restore := startupGC(func(string) string { return "" })
	if got := debug.SetGCPercent(startupGCPercent); got != startupGCPercent {
		t.Errorf("GC percent during start-up: %d, want %d", got, startupGCPercent)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after start-up: %d, want 100 restored", got)
	}
	restore = startupGC(func(k string) string { return map[string]string{"GOGC": "100"}[k] })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent during start-up with GOGC set: %d, want 100 (GOGC's)", got)
	}
	restore()
}

// TestWatchEndEndsContext: End lets go of the watch's context too.
func TestWatchEndEndsContext(t *testing.T) {
	w := WatchSignals(slog.New(slog.DiscardHandler))
	w.End()
	select {
	case <-w.Context().Done():
	default:
		t.Error("the watch's context is not done after End")
	}
	w.End() // again: nothing
}

// procChildEnv names the part a re-executed test binary plays (procChild).
const procChildEnv = "SYMBI_SERVE_TEST_CHILD"

// procChild runs this test binary again, as the test test alone, with role in procChildEnv
// and env added, stdout captured and stderr to stderr (nil: discarded).
func procChild(t *testing.T, test, role string, stderr *os.File, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), procChildEnv+"="+role), env...)
	if stderr != nil {
		cmd.Stderr = stderr
	}
	return cmd
}

// procRunChild runs cmd to its end (within procGuard) and returns its stdout and how it
// ended.
func procRunChild(t *testing.T, cmd *exec.Cmd) (string, syscall.WaitStatus) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		cmd.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(procGuard):
		cmd.Process.Kill()
		<-ended
		t.Fatalf("the child %v did not end within %v", cmd.Args, procGuard)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return out.String(), ws
}

// procChildGuard is how long a child waits for what must end it before it says so.
const procChildGuard = time.Minute

// TestWatchStartupSignalEndsProcess: before the server it watches for is armed (start-
// up), a stop signal ends the process as an uncaught one would — the process is killed by
// that signal — rather than beginning an ordered shutdown of nothing.
func TestWatchStartupSignalEndsProcess(t *testing.T) {
	if role := os.Getenv(procChildEnv); role != "" {
		if !strings.HasPrefix(role, "startup-") {
			return
		}
		sig := map[string]syscall.Signal{"startup-TERM": syscall.SIGTERM, "startup-INT": syscall.SIGINT, "startup-HUP": syscall.SIGHUP}[role]
		w := WatchSignals(slog.New(slog.DiscardHandler))
		syscall.Kill(syscall.Getpid(), sig)
		select {
		case <-w.Context().Done():
			fmt.Println("the start-up signal began a shutdown")
		case <-time.After(procChildGuard):
			fmt.Println("the start-up signal did not end the process")
		}
		os.Exit(3)
	}
	for _, c := range []struct {
		role string
		sig  syscall.Signal
	}{{"startup-TERM", syscall.SIGTERM}, {"startup-INT", syscall.SIGINT}, {"startup-HUP", syscall.SIGHUP}} {
		if signal.Ignored(c.sig) {
			// Ignored here (nohup, a background job), so in the child too: the watch
			// leaves it ignored (TestWatchKeepsIgnoredSignalsIgnored).
			t.Logf("%v is ignored by this process: not tried", c.sig)
			continue
		}
		out, ws := procRunChild(t, procChild(t, "TestWatchStartupSignalEndsProcess", c.role, nil))
		if !ws.Signaled() || ws.Signal() != c.sig {
			t.Errorf("%v at start-up: the process ended with %v (%q), want killed by %v", c.sig, ws, out, c.sig)
		}
	}
}

// TestWatchKeepsIgnoredSignalsIgnored: SIGHUP and SIGINT ignored when the watch starts
// (nohup, a background job) stay ignored: they neither begin nor hurry a shutdown; SIGTERM
// still begins it.
func TestWatchKeepsIgnoredSignalsIgnored(t *testing.T) {
	if os.Getenv(procChildEnv) == "ignored" {
		signal.Ignore(syscall.SIGHUP, syscall.SIGINT)
		l, log := newProcLog()
		w := WatchSignals(log)
		hurried := make(chan struct{}, 8)
		w.setHurry(func() { hurried <- struct{}{} })
		syscall.Kill(syscall.Getpid(), syscall.SIGHUP)
		syscall.Kill(syscall.Getpid(), syscall.SIGINT)
		syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
		select {
		case <-w.Context().Done():
		case <-time.After(procChildGuard):
			fmt.Println("SIGTERM did not begin the shutdown")
			os.Exit(3)
		}
		// A second SIGTERM hurries: every signal delivered before it has been seen.
		syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
		select {
		case <-w.Hurried():
		case <-time.After(procChildGuard):
			fmt.Println("the second SIGTERM did not hurry the shutdown")
			os.Exit(3)
		}
		w.End()
		var seen []string
		for _, r := range l.all() {
			seen = append(seen, r.msg+" "+r.attrs["signal"])
		}
		want := []string{"shutting down " + syscall.SIGTERM.String(),
			"told again to stop: ending the runs in flight without the rest of their grace periods " + syscall.SIGTERM.String()}
		if !slices.Equal(seen, want) || len(hurried) != 1 {
			fmt.Printf("records %q and %d hurries, want %q and 1\n", seen, len(hurried), want)
			os.Exit(3)
		}
		os.Exit(0)
	}
	if os.Getenv(procChildEnv) != "" {
		return
	}
	out, ws := procRunChild(t, procChild(t, "TestWatchKeepsIgnoredSignalsIgnored", "ignored", nil))
	if !ws.Exited() || ws.ExitStatus() != 0 {
		t.Errorf("the child ended with %v: %s", ws, out)
	}
}

// TestWatchEndReleasesSignals: once the watch has ended, the stop signals are no longer
// caught: a signal ends the process as it would uncaught.
func TestWatchEndReleasesSignals(t *testing.T) {
	if os.Getenv(procChildEnv) == "ended" {
		w := WatchSignals(slog.New(slog.DiscardHandler))
		w.setHurry(func() {})
		w.End()
		syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
		<-time.After(procChildGuard) // a guard: the signal ends the process long before
		fmt.Println("SIGTERM after End did not end the process")
		os.Exit(3)
	}
	if os.Getenv(procChildEnv) != "" {
		return
	}
	out, ws := procRunChild(t, procChild(t, "TestWatchEndReleasesSignals", "ended", nil))
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("SIGTERM after End: the process ended with %v (%q), want killed by SIGTERM", ws, out)
	}
}

// TestSIGPIPECaught: Stdio and HTTP catch SIGPIPE as they start, even when they then
// fail: a write to a stderr no one reads fails with EPIPE instead of killing the process;
// and the signal is caught, not ignored (the programs a server starts keep its default).
func TestSIGPIPECaught(t *testing.T) {
	if role := os.Getenv(procChildEnv); role == "sigpipe-stdio" || role == "sigpipe-http" {
		_, log := newProcLog()
		w := WatchSignals(log)
		o := Options{Dir: filepath.Join(os.TempDir(), "symbi-serve-test-absent", "project"), MaxRuns: 1,
			Getenv: func(string) string { return "" }, Log: log, Watch: w}
		var err error
		if role == "sigpipe-stdio" {
			err = Stdio(o, strings.NewReader(""), io.Discard)
		} else {
			err = HTTP(o, HTTPOptions{Addr: "127.0.0.1:0", Tokens: o.Dir, MaxSessions: 1, MaxSessionsCaller: 1})
		}
		if err == nil {
			fmt.Println("the server did not fail")
			os.Exit(3)
		}
		_, werr := os.Stderr.Write([]byte("to no one\n"))
		fmt.Printf("write: %v; ignored: %v\n", errors.Is(werr, syscall.EPIPE), signal.Ignored(syscall.SIGPIPE))
		os.Exit(0)
	}
	if os.Getenv(procChildEnv) != "" {
		return
	}
	for _, role := range []string{"sigpipe-stdio", "sigpipe-http"} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close() // no one reads the child's stderr
		out, ws := procRunChild(t, procChild(t, "TestSIGPIPECaught", role, w))
		w.Close()
		if !ws.Exited() || ws.ExitStatus() != 0 || strings.TrimSpace(out) != "write: true; ignored: false" {
			t.Errorf("%s: the child ended with %v, saying %q; want exit 0 after an EPIPE, SIGPIPE caught and not ignored", role, ws, out)
		}
	}
}

// procHold makes a run held at the human gate in a server of its own (this test binary
// again, serving dir over stdio), then kills that server with SIGKILL: the run's journal
// ends with approval_requested, waiting for the next server. It returns the run's id and
// journal.
func procHold(t *testing.T, test, dir string, model *loopback.Server) (runID, path string) {
	t.Helper()
	cmd := procChild(t, test, "held-server", nil, "SYMBI_SERVE_TEST_DIR="+dir, "SYMBI_SERVE_TEST_MODEL="+model.URL())
	ctx, cancel := context.WithTimeout(context.Background(), procGuard)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "symbi-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to the first server: %v", err)
	}
	res := procCall(t, cs, "invoke_agent", map[string]any{"agent": "helper", "prompt": "REVIEW the release"})
	procRefused(t, "invoke_agent held at the gate", res, "approval_required")
	var out procInvoked
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil || out.Audit == nil {
		t.Fatalf("approval_required's audit: %s (%v)", raw, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cs.Close() // closes stdin and waits for the process
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the first server ended with %v, want killed by SIGKILL", cmd.ProcessState)
	}
	recs := procRecords(t, out.Audit.Path)
	if last := recs[len(recs)-1]["type"]; last != "approval_requested" {
		t.Fatalf("the held journal ends with %v, want approval_requested", last)
	}
	return out.Audit.RunID, out.Audit.Path
}

// procHeldServer is the child of procHold: a stdio server of the project and model its
// environment names, until it is killed.
func procHeldServer() {
	_, log := newProcLog()
	w := WatchSignals(log)
	env := map[string]string{"OPENAI_BASE_URL": os.Getenv("SYMBI_SERVE_TEST_MODEL"), "CHAT_MODEL": "loopback-test", "GOGC": "100"}
	o := Options{Dir: os.Getenv("SYMBI_SERVE_TEST_DIR"), MaxRuns: 4, ApprovalTimeout: time.Hour,
		Getenv: func(k string) string { return env[k] }, Log: log, Watch: w}
	if err := Stdio(o, os.Stdin, os.Stdout); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// TestHeldRunResumed: a run that was waiting at a human gate when its server was
// killed waits again in the next server, which approves it: the held answer is released.
func TestHeldRunResumed(t *testing.T) {
	if role := os.Getenv(procChildEnv); role != "" {
		if role == "held-server" {
			procHeldServer()
		}
		return
	}
	dir := procProject(t)
	model, _ := procModel(t)
	runID, _ := procHold(t, "TestHeldRunResumed", dir, model)
	o, _ := procOptions(t, dir, model, nil)
	s := procStartStdio(t, o, nil)
	var st struct {
		Status string  `json:"status"`
		Text   *string `json:"text"`
	}
	procInto(t, s.cs, "run_status", map[string]any{"run_id": runID}, &st)
	if st.Status != "awaiting_approval" {
		t.Fatalf("the held run in the next server: %+v, want awaiting_approval", st)
	}
	procInto(t, s.cs, "approve_run", map[string]any{"run_id": runID, "decision": "approve", "reason": "looked at it"}, &st)
	if st.Status != "completed" || st.Text == nil || *st.Text != "echo: REVIEW the release" {
		t.Errorf("approve_run on the resumed run: %+v, want completed with the held answer", st)
	}
}

// TestHeldRunLeftWithoutLedger: when the project ledger cannot be opened, a run held
// at a gate is not resumed (every run is refused, fail closed): it cannot be approved,
// and its journal is left as found, its descriptor closed.
func TestHeldRunLeftWithoutLedger(t *testing.T) {
	if role := os.Getenv(procChildEnv); role != "" {
		if role == "held-server" {
			procHeldServer()
		}
		return
	}
	dir := procProject(t)
	model, _ := procModel(t)
	runID, path := procHold(t, "TestHeldRunLeftWithoutLedger", dir, model)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".symbiont", "ledger.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "this is not a ledger line")
	f.Close()
	o, l := procOptions(t, dir, model, nil)
	s := procStartStdio(t, o, nil)
	if _, ok := l.find("project ledger unavailable: every run will be refused (audit_unavailable)"); !ok {
		t.Fatalf("the ledger did not fail to open: %v", l.all())
	}
	res := procCall(t, s.cs, "approve_run", map[string]any{"run_id": runID, "decision": "approve", "reason": "looked at it"})
	if !res.IsError {
		t.Errorf("approve_run without a ledger: %s, want an error", procText(res))
	}
	s.cs.Close()
	if err := s.wait(t, "Stdio after stdin closed"); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the held journal changed in a server without a ledger: %d bytes, then %d:\n%s", len(before), len(after), after)
	}
	if got := procFDsUnder(t, dir); len(got) != 0 {
		t.Errorf("descriptors into the project still open after Stdio returned: %v", got)
	}
}

// procListenerFD finds this process's descriptor of the TCP socket listening on addr
// (127.0.0.1:PORT), by its inode in /proc/self/net/tcp.
func procListenerFD(t *testing.T, addr string) int {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf("0100007F:%04X", ap.Port())
	inode := ""
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 9 && f[1] == local && f[3] == "0A" { // 0A: LISTEN
			inode = f[9]
		}
	}
	if inode == "" {
		t.Fatalf("no socket listening on %s in /proc/self/net/tcp", addr)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); target == "socket:["+inode+"]" {
			fd, err := strconv.Atoi(e.Name())
			if err != nil {
				t.Fatal(err)
			}
			return fd
		}
	}
	t.Fatalf("no descriptor of the socket listening on %s", addr)
	return -1
}

// TestHTTPServerFailureShutsDown: when the HTTP server itself fails (its listening
// socket can no longer accept), HTTP shuts down in order as for a signal — the run in
// flight ends its journal with terminated (cancelled) — and returns the server's error;
// the shutdown has begun then, for that reason, so a signal that follows hurries it.
func TestHTTPServerFailureShutsDown(t *testing.T) {
	dir := procProject(t)
	model, hung := procModel(t)
	o, l := procOptions(t, dir, model, nil)
	s := procStartHTTP(t, o, l, HTTPOptions{Addr: "127.0.0.1:0", MaxSessions: 8, MaxSessionsCaller: 8})
	cs, err := procConnectHTTP(t, s, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var r procStarted
	procInto(t, cs, "start_run", map[string]any{"agent": "helper", "prompt": "hang until the server fails"}, &r)
	procWaitHung(t, hung)
	// shutdown(2) of a listening socket makes accept fail (EINVAL): Serve returns.
	if err := syscall.Shutdown(procListenerFD(t, strings.TrimPrefix(s.base, "http://")), syscall.SHUT_RD); err != nil {
		t.Fatal(err)
	}
	err = s.wait(t, "HTTP after its listener failed")
	if err == nil || !strings.Contains(err.Error(), "HTTP server") {
		t.Fatalf("HTTP after its listener failed: %v, want the server's error", err)
	}
	procTerminated(t, r.Audit.Path, "cancelled", false)
	if rec, ok := l.find("shutting down"); !ok || !strings.HasPrefix(rec.attrs["cause"], "the HTTP server stopped") {
		t.Errorf("shutting down record %v (%v), want the cause: the HTTP server stopped", rec, ok)
	}
	if !procAwaitHurryOrBegin(t, o.Watch, syscall.SIGTERM) {
		t.Error("a signal after the HTTP server failed began a shutdown; want it to hurry the one under way")
	}
}

// TestSchemaPinEnvReachesVerifier: verify_schema's key fetch follows the operator's
// SYMBI_SCHEMAPIN_ALLOW_* settings of Options.Getenv: without them a key URL on loopback
// over http is refused unfetched; with both it is fetched.
func TestSchemaPinEnvReachesVerifier(t *testing.T) {
	var fetched atomic.Int32
	keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		http.NotFound(w, r)
	}))
	defer keys.Close()
	args := map[string]any{"schema": `{"type":"object"}`, "signature": "AAAA", "public_key_url": keys.URL + "/key.pem"}
	for _, c := range []struct {
		env   map[string]string
		fetch bool
	}{
		{nil, false},
		{map[string]string{"SYMBI_SCHEMAPIN_ALLOW_INSECURE": "1", "SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}, true},
	} {
		fetched.Store(0)
		o, _ := procOptions(t, procProject(t), nil, c.env)
		s := procStartStdio(t, o, nil)
		procCall(t, s.cs, "verify_schema", args)
		if got := fetched.Load() > 0; got != c.fetch {
			t.Errorf("verify_schema with %v: the key URL fetched %v, want %v", c.env, got, c.fetch)
		}
	}
}
