package inference_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/loopback"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// hangGuard bounds every call so a broken test fails instead of hanging forever.
const hangGuard = 5 * time.Minute // only a hang reaches it; never an expectation of speed

func startServer(t *testing.T, opts ...loopback.Option) *loopback.Server {
	t.Helper()
	s := loopback.New(opts...)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// newProvider configures a provider of the given name against s through FromEnv.
func newProvider(t *testing.T, name string, s *loopback.Server) inference.Provider {
	t.Helper()
	env := map[string]string{"SYMBI_PROVIDER": name}
	switch name {
	case "openai":
		env["OPENAI_BASE_URL"], env["OPENAI_API_KEY"], env["CHAT_MODEL"] = s.URL(), "sk-test", "test-model"
	case "anthropic":
		env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"], env["ANTHROPIC_MODEL"] = s.AnthropicURL(), "ak-test", "test-model"
	case "openrouter":
		env["OPENROUTER_BASE_URL"], env["OPENROUTER_API_KEY"], env["OPENROUTER_MODEL"] = s.URL(), "or-test", "vendor/test-model"
	}
	p, err := inference.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var conv = inference.Conversation{
	System:       "You are agent \"helper\". Definition:\nagent helper() { }",
	Instructions: "Answer in <b>one</b> line & be brief.",
	Prompt:       "What is 2+2?",
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		provider     string
		conv         inference.Conversation
		golden       string
		path         string
		header       map[string]string
		absentHeader []string
		reply        loopback.Reply
		wantFinish   string
	}{
		{
			provider: "openai", conv: conv, golden: "openai_request.json", path: "/v1/chat/completions",
			header:       map[string]string{"Authorization": "Bearer sk-test", "Content-Type": "application/json"},
			absentHeader: []string{"X-Api-Key", "Anthropic-Version"},
			reply:        loopback.Reply{Text: "4", FinishReason: "stop", Model: "served-model", InputTokens: 31, OutputTokens: 1},
			wantFinish:   "stop",
		},
		{
			provider: "openai", conv: inference.Conversation{System: conv.System, Prompt: conv.Prompt}, golden: "openai_request_no_instructions.json",
			path: "/v1/chat/completions", header: map[string]string{"Authorization": "Bearer sk-test"},
			reply:      loopback.Reply{Text: "4", FinishReason: "length", Model: "served-model", InputTokens: 31, OutputTokens: 1},
			wantFinish: "length",
		},
		{
			provider: "anthropic", conv: conv, golden: "anthropic_request.json", path: "/v1/messages",
			header:       map[string]string{"X-Api-Key": "ak-test", "Anthropic-Version": "2023-06-01", "Content-Type": "application/json"},
			absentHeader: []string{"Authorization"},
			reply:        loopback.Reply{Text: "4", FinishReason: "end_turn", Model: "served-model", InputTokens: 31, OutputTokens: 1},
			wantFinish:   "end_turn",
		},
		{
			provider: "openrouter", conv: conv, golden: "openrouter_request.json", path: "/v1/chat/completions",
			header:     map[string]string{"Authorization": "Bearer or-test"},
			reply:      loopback.Reply{Text: "4", FinishReason: "stop", Model: "served-model", InputTokens: 31, OutputTokens: 1},
			wantFinish: "stop",
		},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			s := startServer(t)
			s.Script(tt.reply)
			p := newProvider(t, tt.provider, s)
			if p.Name() != tt.provider {
				t.Errorf("Name = %q, want %q", p.Name(), tt.provider)
			}
			call, err := p.Prepare(tt.conv, inference.MaxOutputTokens)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Requests()) != 0 {
				t.Fatal("Prepare sent a request")
			}
			checkGolden(t, tt.golden, call.Body)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			resp, err := call.Do(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := inference.Usage{InputTokens: 31, OutputTokens: 1}
			if resp.Text != "4" || resp.FinishReason != tt.wantFinish || resp.Model != "served-model" || resp.Usage != want || resp.Status != 200 {
				t.Errorf("response = %+v", resp)
			}
			if !json.Valid(resp.Body) || !bytes.Contains(resp.Body, []byte(`"served-model"`)) {
				t.Errorf("response body not the served bytes: %s", resp.Body)
			}
			s.Close()
			reqs := s.Requests()
			if len(reqs) != 1 {
				t.Fatalf("server got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != "POST" || r.Path != tt.path || !bytes.Equal(r.Body, call.Body) {
				t.Errorf("request %s %s, body equal to Call.Body: %v", r.Method, r.Path, bytes.Equal(r.Body, call.Body))
			}
			for k, v := range tt.header {
				if got := r.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			for _, k := range tt.absentHeader {
				if _, ok := r.Header[k]; ok {
					t.Errorf("header %s present", k)
				}
			}
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, append(bytes.Clone(got), '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(bytes.Clone(got), '\n'), want) {
		t.Errorf("request body differs from %s (run with -update to accept):\n got %s\nwant %s", path, got, want)
	}
}

func TestFaults(t *testing.T) {
	long := strings.Repeat("é", 2000) // 4000 bytes of two-byte runes
	tests := []struct {
		name       string
		reply      loopback.Reply
		openaiBody string // Body override for the OpenAI format, if different
		deadline   time.Duration
		cancelOnRq bool
		kind       inference.Kind
		code       errcode.Code
		status     int // 0: no response expected
		inMessage  []string
	}{
		{name: "server error", reply: loopback.Reply{Status: 500, Text: "overloaded"}, kind: inference.KindStatus, code: errcode.InferenceFailed, status: 500, inMessage: []string{"HTTP 500", "overloaded"}},
		{name: "rate limited", reply: loopback.Reply{Status: 429, RetryAfter: "7", Text: "slow down"}, kind: inference.KindStatus, code: errcode.InferenceFailed, status: 429, inMessage: []string{"rate limited", "Retry-After", `"7"`, "slow down"}},
		{name: "long error body", reply: loopback.Reply{Status: 400, Text: long}, kind: inference.KindStatus, code: errcode.InferenceFailed, status: 400},
		{name: "redirect not followed", reply: loopback.Reply{Status: 307, Location: "/elsewhere", Body: []byte("{}")}, kind: inference.KindStatus, code: errcode.InferenceFailed, status: 307},
		{name: "malformed json", reply: loopback.Reply{Body: []byte(`{"choices": [`)}, kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200},
		{name: "not an object", reply: loopback.Reply{Body: []byte(`null`)}, kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200},
		// Read strictly, so that another reader of the same bytes finds the same text.
		{name: "body not UTF-8", reply: loopback.Reply{Body: []byte("{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"hi \xff\"}]}")},
			openaiBody: "{\"choices\":[{\"message\":{\"content\":\"hi \xff\"}}]}", kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200, inMessage: []string{"not valid UTF-8"}},
		{name: "a member name twice", reply: loopback.Reply{Body: []byte(`{"type":"message","content":[{"type":"text","text":"a","text":"b"}]}`)},
			openaiBody: `{"choices":[{"message":{"content":"a","content":"b"}}]}`, kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200, inMessage: []string{"member name is repeated"}},
		{name: "a member name in another case", reply: loopback.Reply{Body: []byte(`{"type":"message","CONTENT":[{"type":"text","text":"folded"}]}`)},
			openaiBody: `{"CHOICES":[{"message":{"content":"folded"}}]}`, kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200, inMessage: []string{"spelled otherwise"}},
		{name: "a lone surrogate escape", reply: loopback.Reply{Body: []byte(`{"type":"message","content":[{"type":"text","text":"a\ud800b"}]}`)},
			openaiBody: `{"choices":[{"message":{"content":"a\udc00b"}}]}`, kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200, inMessage: []string{"lone surrogate"}},
		{name: "no content", reply: loopback.Reply{Body: []byte(`{"type":"message","content":[],"stop_reason":"max_tokens"}`)}, openaiBody: `{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"content_filter"}]}`, kind: inference.KindNoContent, code: errcode.InferenceFailed, status: 200},
		{name: "finish reason over its bound", reply: loopback.Reply{Text: "hi", FinishReason: strings.Repeat("x", 2<<20)}, kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200,
			inMessage: []string{"finish reason is 2097152 bytes, more than the 64-byte limit"}},
		{name: "model name over its bound", reply: loopback.Reply{Text: "hi", Model: strings.Repeat("m", 257)}, kind: inference.KindMalformed, code: errcode.InferenceFailed, status: 200,
			inMessage: []string{"model is 257 bytes, more than the 256-byte limit"}},
		{name: "empty text", reply: loopback.Reply{Text: ""}, kind: inference.KindNoContent, code: errcode.InferenceFailed, status: 200},
		{name: "body too large", reply: loopback.Reply{Fault: loopback.FaultHuge}, kind: inference.KindTooLarge, code: errcode.InferenceFailed, status: 200},
		{name: "connection reset", reply: loopback.Reply{Fault: loopback.FaultReset}, kind: inference.KindConnection, code: errcode.InferenceFailed},
		{name: "hang ended by deadline", reply: loopback.Reply{Fault: loopback.FaultHang}, deadline: time.Second, kind: inference.KindTimeout, code: errcode.Timeout},
		{name: "hang ended by cancellation", reply: loopback.Reply{Fault: loopback.FaultHang}, cancelOnRq: true, kind: inference.KindCancelled, code: errcode.Cancelled},
		{name: "delay ended by deadline", reply: loopback.Reply{Text: "late", Delay: time.Minute}, deadline: time.Second, kind: inference.KindTimeout, code: errcode.Timeout},
		{name: "slow drip ended by deadline", reply: loopback.Reply{Text: long, Fault: loopback.FaultDrip}, deadline: time.Second, kind: inference.KindTimeout, code: errcode.Timeout, status: 200},
	}
	for _, format := range []string{"openai", "anthropic"} {
		for _, tt := range tests {
			t.Run(format+"/"+tt.name, func(t *testing.T) {
				s := startServer(t)
				rep := tt.reply
				if format == "openai" && tt.openaiBody != "" {
					rep.Body = []byte(tt.openaiBody)
				}
				s.Script(rep)
				limit := hangGuard
				if tt.deadline > 0 {
					limit = tt.deadline
				}
				ctx, cancel := context.WithTimeout(context.Background(), limit)
				defer cancel()
				if tt.cancelOnRq {
					s.OnRequest(func(loopback.Request) { cancel() })
				}
				call, err := newProvider(t, format, s).Prepare(conv, 100)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := call.Do(ctx)
				s.Close() // waits for the handler, so Requests is final
				if n := len(s.Requests()); n != 1 {
					t.Errorf("server got %d requests, want exactly 1", n)
				}
				if !errors.Is(err, tt.kind) {
					t.Fatalf("err = %v, want kind %s", err, tt.kind)
				}
				if got := errcode.Of(err); got != tt.code {
					t.Errorf("code = %s, want %s", got, tt.code)
				}
				var ie *inference.Error
				if !errors.As(err, &ie) {
					t.Fatalf("err %T is not an *inference.Error", err)
				}
				if tt.status == 0 {
					if resp != nil {
						t.Errorf("response %+v, want none", resp)
					}
				} else if resp == nil || resp.Status != tt.status || ie.Status != tt.status {
					t.Errorf("response %+v, error status %d, want status %d", resp, ie.Status, tt.status)
				}
				if len(ie.Excerpt) > inference.ExcerptBytes {
					t.Errorf("excerpt is %d bytes, over %d", len(ie.Excerpt), inference.ExcerptBytes)
				}
				if tt.kind == inference.KindTooLarge && len(resp.Body) != inference.MaxResponseBytes+1 {
					t.Errorf("read %d bytes of a huge body, want the cap + 1 = %d", len(resp.Body), inference.MaxResponseBytes+1)
				}
				for _, m := range tt.inMessage {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("message %q lacks %q", err.Error(), m)
					}
				}
				if !strings.HasPrefix(errcode.Text(err), string(tt.code)+": ") {
					t.Errorf("Text = %q", errcode.Text(err))
				}
			})
		}
	}
}

func TestConnectionRefused(t *testing.T) {
	s := startServer(t)
	p := newProvider(t, "openai", s)
	s.Close()
	call, err := p.Prepare(conv, 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	resp, err := call.Do(ctx)
	if !errors.Is(err, inference.KindConnection) || errcode.Of(err) != errcode.InferenceFailed || resp != nil {
		t.Errorf("resp %v, err %v: want a connection failure", resp, err)
	}
}

func TestDoSendsOnce(t *testing.T) {
	s := startServer(t)
	call, err := newProvider(t, "anthropic", s).Prepare(conv, 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if _, err := call.Do(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := call.Do(ctx); !errors.Is(err, inference.ErrAlreadySent) {
		t.Errorf("second Do: err = %v, want ErrAlreadySent", err)
	}
	s.Close()
	if n := len(s.Requests()); n != 1 {
		t.Errorf("server got %d requests, want 1", n)
	}
}

// TestNoCompression: the client asks for no compression, so the body it journals (hash
// and length) and parses is the one on the wire, not one the transport decoded.
func TestNoCompression(t *testing.T) {
	for _, format := range []string{"openai", "anthropic"} {
		s := startServer(t)
		call, err := newProvider(t, format, s).Prepare(conv, 10)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		if _, err := call.Do(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		s.Close()
		if ae := s.Requests()[0].Header.Get("Accept-Encoding"); strings.Contains(ae, "gzip") {
			t.Errorf("%s: Accept-Encoding %q", format, ae)
		}
	}
}

func TestPrepareRefuses(t *testing.T) {
	big := strings.Repeat("x", inference.MaxRequestBytes)
	tests := []struct {
		name      string
		conv      inference.Conversation
		maxTokens int
		code      errcode.Code
		kind      inference.Kind // "" when not an *inference.Error
	}{
		{"request too large", inference.Conversation{System: "s", Prompt: big}, 10, errcode.LimitExceeded, inference.KindRequestTooLarge},
		{"too many tokens", conv, inference.MaxOutputTokens + 1, errcode.LimitExceeded, ""},
		{"zero tokens", conv, 0, errcode.InvalidRequest, ""},
		{"no prompt", inference.Conversation{System: "s"}, 10, errcode.InvalidRequest, ""},
		{"no system", inference.Conversation{Prompt: "p"}, 10, errcode.InvalidRequest, ""},
		{"invalid utf-8", inference.Conversation{System: "s", Prompt: "p\xff"}, 10, errcode.InvalidRequest, ""},
	}
	for _, format := range []string{"openai", "anthropic"} {
		for _, tt := range tests {
			t.Run(format+"/"+tt.name, func(t *testing.T) {
				s := startServer(t)
				call, err := newProvider(t, format, s).Prepare(tt.conv, tt.maxTokens)
				if call != nil || errcode.Of(err) != tt.code {
					t.Fatalf("call %v, err %v: want code %s", call, err, tt.code)
				}
				if tt.kind != "" && !errors.Is(err, tt.kind) {
					t.Errorf("err = %v, want kind %s", err, tt.kind)
				}
				s.Close()
				if n := len(s.Requests()); n != 0 {
					t.Errorf("server got %d requests, want none", n)
				}
			})
		}
	}
}

func TestRequestAtLimit(t *testing.T) {
	s := startServer(t)
	p := newProvider(t, "openai", s)
	small, err := p.Prepare(inference.Conversation{System: "s", Prompt: "p"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the prompt so the body is exactly MaxRequestBytes.
	c := inference.Conversation{System: "s", Prompt: "p" + strings.Repeat("x", inference.MaxRequestBytes-len(small.Body))}
	call, err := p.Prepare(c, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(call.Body) != inference.MaxRequestBytes {
		t.Fatalf("body is %d bytes, want %d", len(call.Body), inference.MaxRequestBytes)
	}
	c.Prompt += "x"
	if _, err := p.Prepare(c, 10); !errors.Is(err, inference.KindRequestTooLarge) {
		t.Errorf("one byte over: err = %v", err)
	}
}

// TestEmptyContentRefusalReported: an OpenAI answer whose content is "" and whose
// message carries a refusal is a refusal, and must be reported as such (without its text).
// Contract: docs/providers.md, kind no_content: "null or empty content (a refusal is
// reported as such, without its text)": an empty content as a null one.
func TestEmptyContentRefusalReported(t *testing.T) {
	const refusal = "REFUSAL TEXT 8812"
	s := startServer(t, loopback.WithReply(loopback.Reply{Body: []byte(`{"choices":[{"message":{"role":"assistant","content":"","refusal":"` + refusal + `"},"finish_reason":"stop"}]}`)}))
	_, err := doOnce(t, "openai", s)
	if !errors.Is(err, inference.KindNoContent) {
		t.Fatalf("err = %v, want no_content", err)
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("message %q does not report the refusal", err)
	}
	if strings.Contains(err.Error(), refusal) {
		t.Errorf("message quotes the refusal text: %q", err)
	}
}

// TestRequestAsksForIdentityEncoding: docs/providers.md says "the client asks for no
// compression: the body journaled and parsed is the one on the wire". Sending no
// Accept-Encoding does not ask for that: RFC 9110 §12.5.3 — "A request without any
// Accept-Encoding header field implies that the user agent has no preferences regarding
// content codings ... this allows the server to use any content coding". Expected: the
// request carries "Accept-Encoding: identity".
func TestRequestAsksForIdentityEncoding(t *testing.T) {
	for _, format := range []string{"openai", "anthropic"} {
		s := startServer(t)
		if _, err := doOnce(t, format, s); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if ae := s.Requests()[0].Header.Get("Accept-Encoding"); ae != "identity" {
			t.Errorf("%s: Accept-Encoding %q, want \"identity\" (ask for no compression)", format, ae)
		}
	}
}

// TestResponseHeaderLimit: a provider's response headers are at most 64 KiB; more is a
// connection failure that says the headers were too large.
func TestResponseHeaderLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Padding", strings.Repeat("h", 80<<10))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"message":{"content":"hi"}}]}`))
	}))
	defer srv.Close()
	p, err := inference.NewOpenAI(srv.URL, "", "test-model")
	if err != nil {
		t.Fatal(err)
	}
	call, err := p.Prepare(conv, 100)
	if err != nil {
		t.Fatal(err)
	}
	_, err = call.Do(context.Background())
	var e *inference.Error
	if !errors.As(err, &e) || e.Kind != inference.KindConnection || !strings.Contains(err.Error(), "header") {
		t.Fatalf("error %v, want a connection failure naming the headers' size", err)
	}
}
