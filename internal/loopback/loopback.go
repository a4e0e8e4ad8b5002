// Package loopback is a scripted language-model server on 127.0.0.1, for tests and
// demos. It speaks both wire formats the inference package sends:
//
//	POST /v1/chat/completions   OpenAI-compatible chat completions (base URL: URL())
//	POST /v1/messages           Anthropic Messages (base URL: AnthropicURL())
//
// Each request is recorded (method, path, headers, exact body) before it is answered,
// then the OnRequest hook runs, then the server answers with the next scripted Reply
// (Script), or, when the script is empty, with the responder's Reply (WithResponder), or
// the default Reply (WithReply; initially DefaultText). A Reply can instead carry an HTTP
// error status (with Retry-After), a verbatim body (malformed JSON, a response without
// content), a delay, or a fault: a hang until the client goes away, a reset connection,
// a body of HugeBytes, or a slow drip of one byte at a time.
//
// Other paths are answered 404 and other methods 405, and a body that is not a JSON
// object 400, all without consuming the script; they are recorded too. Request bodies
// over MaxBodyBytes are answered 413.
package loopback

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultText is the text of the initial default reply.
const DefaultText = "This is the loopback model's reply."

// HugeBytes is the size of the body sent by FaultHuge: more than a client's 4 MiB cap.
const HugeBytes = 5 << 20

// MaxBodyBytes bounds the request bodies the server reads.
const MaxBodyBytes = 8 << 20

// DefaultDrip is the interval between bytes of FaultDrip when Reply.Drip is zero.
const DefaultDrip = 10 * time.Millisecond

// Fault makes a reply misbehave.
type Fault int

// The faults.
const (
	FaultNone  Fault = iota
	FaultHang        // never answer; return when the client goes away or the server closes
	FaultReset       // reset the TCP connection without answering
	FaultHuge        // answer 200 with a HugeBytes body (the start of a JSON object)
	FaultDrip        // send the reply one byte every Drip interval
)

// Reply is how the server answers one request.
type Reply struct {
	Text         string // the model's text; for an error Status, the error message
	FinishReason string // "" → "stop" (OpenAI) or "end_turn" (Anthropic)
	Model        string // "" → the request's model
	InputTokens  int    // usage; when both are 0, estimated as bytes/4 of request body and text
	OutputTokens int
	Status       int           // 0 → 200; a non-2xx status answers the wire format's error body
	RetryAfter   string        // Retry-After header value, if not ""
	Location     string        // Location header value, if not "" (for redirects)
	Body         []byte        // if not nil, sent verbatim instead of a generated body
	Delay        time.Duration // wait before answering (ends early if the client goes away)
	Fault        Fault
	Drip         time.Duration // interval between bytes for FaultDrip; 0 → DefaultDrip
}

// Request is a request the server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte // exact bytes received
	Format string // "openai", "anthropic", or "" for another path
	Model  string // the body's "model", if any
	Prompt string // text of the last user message, if any
}

// Option configures a Server.
type Option func(*Server)

// WithAddr sets the listening address (default "127.0.0.1:0", a random port).
func WithAddr(addr string) Option { return func(s *Server) { s.addr = addr } }

// WithReply sets the default reply.
func WithReply(r Reply) Option { return func(s *Server) { s.def = r } }

// WithResponder computes the reply to a request when the script is empty.
func WithResponder(f func(Request) Reply) Option { return func(s *Server) { s.responder = f } }

// Server is a loopback model server.
type Server struct {
	addr      string
	def       Reply
	responder func(Request) Reply

	mu        sync.Mutex
	onRequest func(Request)
	script    []Reply
	reqs      []Request
	closed    bool
	handlers  sync.WaitGroup

	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// New returns a server configured by opts; Start makes it listen.
func New(opts ...Option) *Server {
	s := &Server{addr: "127.0.0.1:0", def: Reply{Text: DefaultText}, done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Start listens and serves in the background until Close.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return nil
}

// URL is the OpenAI-compatible base URL, "http://127.0.0.1:PORT/v1".
func (s *Server) URL() string { return s.AnthropicURL() + "/v1" }

// AnthropicURL is the Anthropic base URL, "http://127.0.0.1:PORT".
func (s *Server) AnthropicURL() string { return "http://" + s.ln.Addr().String() }

// Script queues replies for the next requests, in order.
func (s *Server) Script(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, replies...)
}

// OnRequest sets a hook called with each recorded request before it is answered.
func (s *Server) OnRequest(f func(Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRequest = f
}

// Requests returns the requests received so far, in arrival order. Do not modify them.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Close stops the server, ends hanging and dripping replies, and waits for every handler
// to return. Requests stays readable.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	if s.srv != nil {
		s.srv.Close() // first, so that no handler ending below can still answer
	}
	close(s.done)
	s.handlers.Wait()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()

	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return
	}
	req := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	switch r.URL.Path {
	case "/v1/chat/completions":
		req.Format = "openai"
	case "/v1/messages":
		req.Format = "anthropic"
	}
	parseErr := parseRequest(&req)
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	hook := s.onRequest
	s.mu.Unlock()
	if hook != nil {
		hook(req)
	}

	switch {
	case req.Format == "":
		writeJSON(w, http.StatusNotFound, errorBody("openai", http.StatusNotFound, "no such endpoint: "+r.URL.Path))
		return
	case r.Method != http.MethodPost:
		writeJSON(w, http.StatusMethodNotAllowed, errorBody(req.Format, http.StatusMethodNotAllowed, "method not allowed"))
		return
	case len(body) > MaxBodyBytes:
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody(req.Format, http.StatusRequestEntityTooLarge, "request body too large"))
		return
	case parseErr != nil:
		writeJSON(w, http.StatusBadRequest, errorBody(req.Format, http.StatusBadRequest, parseErr.Error()))
		return
	}
	rep := s.next(req)
	if rep.Delay > 0 && !s.wait(r, rep.Delay) {
		return
	}
	switch rep.Fault {
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	case FaultReset:
		reset(w)
		return
	case FaultHuge:
		s.writeHuge(w)
		return
	}
	status, out := render(req, rep)
	if rep.RetryAfter != "" {
		w.Header().Set("Retry-After", rep.RetryAfter)
	}
	if rep.Location != "" {
		w.Header().Set("Location", rep.Location)
	}
	if rep.Fault != FaultDrip {
		writeJSON(w, status, out)
		return
	}
	drip := rep.Drip
	if drip <= 0 {
		drip = DefaultDrip
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	for i := range out {
		if _, err := w.Write(out[i : i+1]); err != nil {
			return
		}
		if rc.Flush() != nil || !s.wait(r, drip) {
			return
		}
	}
}

// next pops the script, or asks the responder, or returns the default.
func (s *Server) next(req Request) Reply {
	s.mu.Lock()
	if len(s.script) > 0 {
		rep := s.script[0]
		s.script = s.script[1:]
		s.mu.Unlock()
		return rep
	}
	s.mu.Unlock()
	if s.responder != nil {
		return s.responder(req)
	}
	return s.def
}

// wait sleeps for d; false if the client went away or the server closed first.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.done:
	}
	return false
}

func (s *Server) writeHuge(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(HugeBytes))
	w.WriteHeader(http.StatusOK)
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	prefix := []byte(`{"pad":"`)
	if _, err := w.Write(prefix); err != nil {
		return
	}
	for left := HugeBytes - len(prefix); left > 0; left -= len(chunk) {
		select {
		case <-s.done:
			return
		default:
		}
		if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
			return
		}
	}
}

// reset closes the connection with SO_LINGER 0, so the client sees a TCP reset.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// parseRequest fills Model and Prompt from a JSON body.
func parseRequest(req *Request) error {
	if req.Format == "" {
		return nil
	}
	var b struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if t := bytes.TrimLeft(req.Body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errors.New("request body is not a JSON object")
	}
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return fmt.Errorf("request body: %v", err)
	}
	req.Model = b.Model
	for _, m := range b.Messages {
		if m.Role != "user" {
			continue
		}
		var text string
		if json.Unmarshal(m.Content, &text) != nil {
			var blocks []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			json.Unmarshal(m.Content, &blocks)
			text = ""
			for _, bl := range blocks {
				if bl.Type == "text" {
					text += bl.Text
				}
			}
		}
		req.Prompt = text
	}
	return nil
}

// render builds the status and body of a reply in the request's wire format.
func render(req Request, rep Reply) (int, []byte) {
	status := rep.Status
	if status == 0 {
		status = http.StatusOK
	}
	if rep.Body != nil {
		return status, rep.Body
	}
	if status < 200 || status > 299 {
		msg := rep.Text
		if msg == "" {
			msg = http.StatusText(status)
		}
		return status, errorBody(req.Format, status, msg)
	}
	model := rep.Model
	if model == "" {
		model = req.Model
	}
	if model == "" {
		model = "loopback"
	}
	in, out := rep.InputTokens, rep.OutputTokens
	if in == 0 && out == 0 {
		in, out = (len(req.Body)+3)/4, (len(rep.Text)+3)/4
	}
	fr := rep.FinishReason
	if req.Format == "anthropic" {
		if fr == "" {
			fr = "end_turn"
		}
		return status, marshal(map[string]any{
			"id": "msg_loopback", "type": "message", "role": "assistant", "model": model,
			"content":     []any{map[string]any{"type": "text", "text": rep.Text}},
			"stop_reason": fr, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out},
		})
	}
	if fr == "" {
		fr = "stop"
	}
	return status, marshal(map[string]any{
		"id": "chatcmpl-loopback", "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{
			"index": 0, "message": map[string]any{"role": "assistant", "content": rep.Text}, "finish_reason": fr,
		}},
		"usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
}

// errorBody is an error response in the wire format's shape.
func errorBody(format string, status int, msg string) []byte {
	typ := "api_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status < 500:
		typ = "invalid_request_error"
	}
	if format == "anthropic" {
		return marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	}
	return marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": nil}})
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only maps of strings and numbers are encoded here
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
