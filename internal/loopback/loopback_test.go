package loopback_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"symbi/internal/loopback"
)

func post(t *testing.T, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	c := &http.Client{Timeout: hangGuard}
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return resp.StatusCode, resp.Header, m
}

func start(t *testing.T, opts ...loopback.Option) *loopback.Server {
	t.Helper()
	s := loopback.New(opts...)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

const openaiReq = `{"model":"m1","messages":[{"role":"system","content":"s"},{"role":"user","content":"first"},{"role":"user","content":"say hello"}]}`
const anthropicReq = `{"model":"m2","system":"s","messages":[{"role":"user","content":[{"type":"text","text":"say "},{"type":"text","text":"bye"}]}]}`

func TestOrderAndRecording(t *testing.T) {
	s := start(t,
		loopback.WithReply(loopback.Reply{Text: "default"}),
		loopback.WithResponder(func(r loopback.Request) loopback.Reply {
			if strings.Contains(r.Prompt, "bye") {
				return loopback.Reply{Text: "goodbye"}
			}
			return loopback.Reply{Text: "responded " + r.Prompt}
		}))
	var hooked []string
	s.OnRequest(func(r loopback.Request) { hooked = append(hooked, r.Path) })
	s.Script(loopback.Reply{Text: "scripted", FinishReason: "length", Model: "x", InputTokens: 5, OutputTokens: 6},
		loopback.Reply{Status: 429, RetryAfter: "3", Text: "slow"})

	status, _, m := post(t, s.URL()+"/chat/completions", openaiReq)
	choice := m["choices"].([]any)[0].(map[string]any)
	if status != 200 || choice["message"].(map[string]any)["content"] != "scripted" || choice["finish_reason"] != "length" || m["model"] != "x" ||
		m["usage"].(map[string]any)["completion_tokens"] != 6.0 {
		t.Errorf("scripted reply: %d %v", status, m)
	}
	status, h, m := post(t, s.AnthropicURL()+"/v1/messages", anthropicReq)
	if status != 429 || h.Get("Retry-After") != "3" || m["type"] != "error" || m["error"].(map[string]any)["type"] != "rate_limit_error" {
		t.Errorf("scripted 429: %d %v %v", status, h, m)
	}
	status, _, m = post(t, s.AnthropicURL()+"/v1/messages", anthropicReq)
	if status != 200 || m["content"].([]any)[0].(map[string]any)["text"] != "goodbye" || m["model"] != "m2" || m["stop_reason"] != "end_turn" {
		t.Errorf("responder reply: %d %v", status, m)
	}
	status, _, m = post(t, s.URL()+"/chat/completions", openaiReq)
	if status != 200 || m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != "responded say hello" {
		t.Errorf("responder reply: %d %v", status, m)
	}
	s.Close()
	reqs := s.Requests()
	if len(reqs) != 4 || len(hooked) != 4 {
		t.Fatalf("%d requests, %d hook calls; want 4", len(reqs), len(hooked))
	}
	r := reqs[1]
	if r.Method != "POST" || r.Path != "/v1/messages" || r.Format != "anthropic" || r.Model != "m2" || r.Prompt != "say bye" ||
		string(r.Body) != anthropicReq || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("recorded %+v", r)
	}
}

func TestRefusals(t *testing.T) {
	s := start(t)
	s.Script(loopback.Reply{Text: "kept for the valid request"})
	tests := []struct {
		path, body string
		status     int
	}{
		{"/v1/other", openaiReq, 404},
		{"/v1/chat/completions", `[]`, 400},
		{"/v1/messages", `{"model":`, 400},
		{"/v1/chat/completions", openaiReq, 200},
	}
	for _, tt := range tests {
		status, _, m := post(t, s.AnthropicURL()+tt.path, tt.body)
		if status != tt.status {
			t.Errorf("%s %s: status %d, want %d (%v)", tt.path, tt.body, status, tt.status, m)
		}
		if status == 200 && m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"] != "kept for the valid request" {
			t.Errorf("script consumed by a refused request: %v", m)
		}
	}
	resp, err := http.Get(s.URL() + "/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
	if n := len(s.Requests()); n != 5 {
		t.Errorf("%d requests recorded, want 5", n)
	}
}

func TestCloseEndsHang(t *testing.T) {
	s := start(t, loopback.WithReply(loopback.Reply{Fault: loopback.FaultHang}))
	arrived := make(chan struct{})
	s.OnRequest(func(loopback.Request) { close(arrived) })
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(openaiReq))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(hangGuard):
		t.Fatal("request never arrived")
	}
	s.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("a hanging request got a response")
		}
	case <-time.After(hangGuard):
		t.Fatal("Close did not end the hang")
	}
}

func Example() {
	s := loopback.New(loopback.WithReply(loopback.Reply{Text: "Hello."}))
	if err := s.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	resp, err := http.Post(s.URL()+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	json.NewDecoder(resp.Body).Decode(&out)
	fmt.Println(resp.StatusCode, out.Choices[0].Message.Content, s.Requests()[0].Prompt)
	// Output: 200 Hello. hi
}

// hangGuard bounds a wait that only a hang reaches. It is never an expectation of speed:
// under -race on a busy machine the work it guards may take far longer than on an idle one.
const hangGuard = 5 * time.Minute
