package inference

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/loopback"
)

// callGuard bounds every call so that a broken test fails instead of hanging; only a hang
// reaches it.
const callGuard = 5 * time.Minute

var refusalConv = Conversation{System: "You are agent \"t\".", Instructions: "be brief", Prompt: "What is 2+2?"}

// startModel starts a loopback model server answering every request with rep.
func startModel(t *testing.T, rep loopback.Reply) *loopback.Server {
	t.Helper()
	s := loopback.New(loopback.WithReply(rep))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// providerAt configures a provider of the wire format against s with the API key.
func providerAt(t *testing.T, format string, s *loopback.Server, key string) Provider {
	t.Helper()
	var (
		p   Provider
		err error
	)
	if format == "anthropic" {
		p, err = NewAnthropic(s.AnthropicURL(), key, "test-model")
	} else {
		p, err = NewOpenAI(s.URL(), key, "test-model")
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sendOnce prepares refusalConv on p and sends it once.
func sendOnce(t *testing.T, p Provider) (*Response, error) {
	t.Helper()
	call, err := p.Prepare(refusalConv, 100)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callGuard)
	defer cancel()
	return call.Do(ctx)
}

// serveOnce answers every request with status and body, and sends it once through an
// OpenAI-compatible provider with the key.
func serveOnce(t *testing.T, status int, body, key string) (*Response, error) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	p, err := NewOpenAI(srv.URL+"/v1", key, "test-model")
	if err != nil {
		t.Fatal(err)
	}
	return sendOnce(t, p)
}

// callError returns the *Error in err, failing the test if there is none.
func callError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want an *inference.Error", err, err)
	}
	return e
}

// TestStatusBoundary: 299 is a success whose body is parsed; 300 is already a status
// error, even when its body is a well-formed answer.
func TestStatusBoundary(t *testing.T) {
	const ok = `{"choices":[{"message":{"content":"hi"}}]}`
	resp, err := serveOnce(t, 299, ok, "")
	if err != nil || resp.Text != "hi" || resp.Status != 299 {
		t.Errorf("299: %+v, %v; want the answer read", resp, err)
	}
	resp, err = serveOnce(t, 300, ok, "")
	if e := callError(t, err); e.Kind != KindStatus || e.Status != 300 || resp == nil || resp.Status != 300 {
		t.Errorf("300: %+v, %v; want a status error", resp, err)
	}
}

// hijackAnswer answers every request with the raw head and partial body, then keeps the
// connection open until the client closes it (the body's announced length never comes).
func hijackAnswer(t *testing.T, raw string, hold bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString(raw)
		buf.Flush()
		if hold {
			io.Copy(io.Discard, conn) // until the client goes away
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCut2xxBodyIsConnection: a 2xx answer whose body is cut short (the connection
// closes before the announced length) is a connection failure that keeps the status and
// the bytes read, not a malformed answer parsed from a fragment.
func TestCut2xxBodyIsConnection(t *testing.T) {
	url := hijackAnswer(t, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"choices\":[", false)
	p, err := NewOpenAI(url+"/v1", "", "m")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sendOnce(t, p)
	e := callError(t, err)
	if e.Kind != KindConnection || e.Status != 200 || errcode.Of(err) != errcode.InferenceFailed {
		t.Errorf("err = %v (kind %s, status %d), want a connection failure with status 200", err, e.Kind, e.Status)
	}
	if resp == nil || resp.Status != 200 || string(resp.Body) != `{"choices":[` {
		t.Errorf("response %+v, want status 200 and the bytes read", resp)
	}
}

// cancelOnRead cancels the call's context at the first read of the response body, so
// that the cancellation comes, deterministically, while the body is being read.
type cancelOnRead struct {
	rt     http.RoundTripper
	cancel context.CancelFunc
}

func (c cancelOnRead) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil {
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: c.cancel}
	}
	return resp, err
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Read(p []byte) (int, error) {
	b.cancel()
	return b.ReadCloser.Read(p)
}

// TestCancelWhileReadingStatusBody: a call cancelled while the body of a non-2xx
// answer is being read is cancelled (errcode.Cancelled), not a status error: the context
// decides first; the status is kept.
func TestCancelWhileReadingStatusBody(t *testing.T) {
	url := hijackAnswer(t, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"error\":", true)
	p, err := NewOpenAI(url+"/v1", "", "m")
	if err != nil {
		t.Fatal(err)
	}
	call, err := p.Prepare(refusalConv, 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callGuard)
	defer cancel()
	call.client.Transport = cancelOnRead{rt: call.client.Transport, cancel: cancel}
	resp, err := call.Do(ctx)
	e := callError(t, err)
	if e.Kind != KindCancelled || errcode.Of(err) != errcode.Cancelled || e.Status != 500 {
		t.Errorf("err = %v (kind %s, status %d), want cancelled with status 500", err, e.Kind, e.Status)
	}
	if resp == nil || resp.Status != 500 {
		t.Errorf("response %+v, want status 500", resp)
	}
}

// TestExcerptRedactedBeforeCut: the excerpt of a non-2xx body is cut after the API key
// is redacted, so a key that straddles the 512-byte cut leaves no prefix of it behind.
func TestExcerptRedactedBeforeCut(t *testing.T) {
	const key = "sk-straddle-0123456789abcdefghij"
	body := strings.Repeat("a", ExcerptBytes-12) + key + " tail"
	_, err := serveOnce(t, http.StatusUnauthorized, body, key)
	e := callError(t, err)
	if e.Kind != KindStatus || !strings.Contains(e.Excerpt, "[redacted]") {
		t.Errorf("kind %s, excerpt %q: want a status error whose excerpt holds [redacted]", e.Kind, e.Excerpt)
	}
	for _, s := range []string{e.Excerpt, err.Error()} {
		if strings.Contains(s, "sk-straddle") {
			t.Errorf("a prefix of the key survives the cut: %q", s)
		}
	}
	if len(e.Excerpt) > ExcerptBytes {
		t.Errorf("excerpt is %d bytes, over %d", len(e.Excerpt), ExcerptBytes)
	}
}

// TestRetryAfter: Error.RetryAfter is set for a 429 only, with the API key redacted
// and at most 64 bytes.
func TestRetryAfter(t *testing.T) {
	const key = "sk-retry-0123456789abcdef"
	for name, tc := range map[string]struct {
		rep  loopback.Reply
		want string
	}{
		"not a 429":    {loopback.Reply{Status: 503, RetryAfter: "9"}, ""},
		"key redacted": {loopback.Reply{Status: 429, RetryAfter: "1 " + key}, "1 [redacted]"},
		"bounded":      {loopback.Reply{Status: 429, RetryAfter: strings.Repeat("7", 100)}, strings.Repeat("7", 64)},
	} {
		t.Run(name, func(t *testing.T) {
			s := startModel(t, tc.rep)
			_, err := sendOnce(t, providerAt(t, "openai", s, key))
			e := callError(t, err)
			if e.Kind != KindStatus || e.Status != tc.rep.Status || e.RetryAfter != tc.want {
				t.Errorf("kind %s, status %d, RetryAfter %q; want status %d, RetryAfter %q", e.Kind, e.Status, e.RetryAfter, tc.rep.Status, tc.want)
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("the error quotes the key: %q", err)
			}
		})
	}
}

// paddedAnswer returns a well-formed answer of the format padded to exactly n bytes.
func paddedAnswer(format string, n int) []byte {
	head := `{"choices":[{"message":{"content":"hi"}}],"pad":"`
	if format == "anthropic" {
		head = `{"type":"message","content":[{"type":"text","text":"hi"}],"pad":"`
	}
	return []byte(head + strings.Repeat("x", n-len(head)-2) + `"}`)
}

// TestResponseAtLimit: a 2xx body of exactly MaxResponseBytes is read and parsed; one
// byte more is KindTooLarge, with MaxResponseBytes+1 bytes read.
func TestResponseAtLimit(t *testing.T) {
	for _, format := range []string{"openai", "anthropic"} {
		t.Run(format, func(t *testing.T) {
			s := startModel(t, loopback.Reply{Body: paddedAnswer(format, MaxResponseBytes)})
			resp, err := sendOnce(t, providerAt(t, format, s, ""))
			if err != nil || resp.Text != "hi" || len(resp.Body) != MaxResponseBytes {
				t.Fatalf("a body of exactly %d bytes: %v", MaxResponseBytes, err)
			}
			s = startModel(t, loopback.Reply{Body: paddedAnswer(format, MaxResponseBytes+1)})
			resp, err = sendOnce(t, providerAt(t, format, s, ""))
			if e := callError(t, err); e.Kind != KindTooLarge || resp == nil || len(resp.Body) != MaxResponseBytes+1 {
				t.Errorf("one byte over: %v, want too_large", err)
			}
		})
	}
}

// TestParseKindOutermost: the kind a parser gives its refusal (no_content) is the kind
// of the *Error the caller reaches with errors.As, not wrapped in a malformed one, and it
// carries the status.
func TestParseKindOutermost(t *testing.T) {
	for format, body := range map[string]string{
		"openai":    `{"choices":[]}`,
		"anthropic": `{"type":"message","content":[]}`,
	} {
		s := startModel(t, loopback.Reply{Body: []byte(body)})
		_, err := sendOnce(t, providerAt(t, format, s, ""))
		if e := callError(t, err); e.Kind != KindNoContent || e.Status != 200 || !strings.HasPrefix(err.Error(), "provider response has no text content") {
			t.Errorf("%s: err = %v (kind %s, status %d), want no_content with status 200", format, err, e.Kind, e.Status)
		}
	}
}

// TestFreshConnectionPerRequest: every request asks for its connection to be closed
// after it ("Connection: close"): a connection is never reused, so never replayed on.
func TestFreshConnectionPerRequest(t *testing.T) {
	s := startModel(t, loopback.Reply{Text: "hi"})
	p := providerAt(t, "openai", s, "")
	for range 2 {
		if _, err := sendOnce(t, p); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	for i, r := range s.Requests() {
		if got := r.Header.Get("Connection"); got != "close" {
			t.Errorf("request %d: Connection %q, want close", i, got)
		}
	}
}

// TestHTTP1OverTLS: against a TLS endpoint that offers HTTP/2, the request is still
// sent over HTTP/1.1.
func TestHTTP1OverTLS(t *testing.T) {
	var (
		mu    sync.Mutex
		proto []int
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		proto = append(proto, r.ProtoMajor)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}]}`)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p, err := NewOpenAI(srv.URL+"/v1", "", "m")
	if err != nil {
		t.Fatal(err)
	}
	call, err := p.Prepare(refusalConv, 10)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	call.client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool}
	ctx, cancel := context.WithTimeout(context.Background(), callGuard)
	defer cancel()
	resp, err := call.Do(ctx)
	if err != nil || resp.Text != "hi" {
		t.Fatalf("Do: %+v, %v", resp, err)
	}
	srv.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(proto) != 1 || proto[0] != 1 {
		t.Errorf("request protocol major versions %v, want [1]", proto)
	}
}

// TestRedirectNotFollowed: a 301, 302 or 303 answer (which a client would follow with a
// GET) is a status error naming that status, after exactly one request.
func TestRedirectNotFollowed(t *testing.T) {
	for _, status := range []int{301, 302, 303, 308} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			s := startModel(t, loopback.Reply{Status: status, Location: "/v1/chat/completions", Body: []byte("{}")})
			resp, err := sendOnce(t, providerAt(t, "openai", s, ""))
			s.Close()
			if e := callError(t, err); e.Kind != KindStatus || e.Status != status || resp == nil || resp.Status != status {
				t.Errorf("err = %v, want a status error %d", err, status)
			}
			if n := len(s.Requests()); n != 1 {
				t.Errorf("server got %d requests, want 1", n)
			}
		})
	}
}

// TestConversationUTF8: invalid UTF-8 in the system message or in the caller
// instructions, not only in the prompt, is refused as invalid_request before anything is
// sent.
func TestConversationUTF8(t *testing.T) {
	for name, c := range map[string]Conversation{
		"system message": {System: "s\xff", Prompt: "p"},
		"instructions":   {System: "s", Instructions: "i\xc3", Prompt: "p"},
	} {
		for _, format := range []string{"openai", "anthropic"} {
			s := startModel(t, loopback.Reply{Text: "hi"})
			call, err := providerAt(t, format, s, "").Prepare(c, 10)
			if call != nil || errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), name) {
				t.Errorf("%s/%s: call %v, err %v; want invalid_request naming the %s", format, name, call, err, name)
			}
			s.Close()
			if n := len(s.Requests()); n != 0 {
				t.Errorf("%s/%s: server got %d requests", format, name, n)
			}
		}
	}
}

// TestBaseURLRules: a base URL ending in a bare "?" (an empty query) is refused; an
// API key travels over plain http only to a loopback host — localhost, 127.0.0.0/8, ::1 —
// and never to another address, private or unspecified.
func TestBaseURLRules(t *testing.T) {
	type ctor func(base, key, model string) (Provider, error)
	for name, newP := range map[string]ctor{"openai": NewOpenAI, "anthropic": NewAnthropic} {
		for base, ok := range map[string]bool{
			"https://api.example.com/v1?": false,
			"http://localhost:8080/v1":    true,
			"http://127.0.0.2:8080/v1":    true,
			"http://[::1]:8080/v1":        true,
			"http://10.0.0.5:8000/v1":     false,
			"http://192.168.1.10/v1":      false,
			"http://0.0.0.0:8080/v1":      false,
			"http://[::]:8080/v1":         false,
			"http://[fe80::1]:8080/v1":    false,
		} {
			_, err := newP(base, "sk-k", "m")
			if ok && err != nil {
				t.Errorf("%s %s with a key: %v, want accepted", name, base, err)
			}
			if !ok && errcode.Of(err) != errcode.NoProvider {
				t.Errorf("%s %s with a key: %v, want no_provider", name, base, err)
			}
		}
	}
}

// TestTokenBytes: an API key or model name with a DEL, a non-ASCII byte, or a space or
// control character in any position (the last included) is refused, for both formats; so
// is an empty model name.
func TestTokenBytes(t *testing.T) {
	type ctor func(base, key, model string) (Provider, error)
	for name, tc := range map[string]struct {
		newP ctor
		base string
	}{"openai": {NewOpenAI, "https://api.example.com/v1"}, "anthropic": {NewAnthropic, "https://api.example.com"}} {
		for _, kv := range [][2]string{
			{"sk-x\x7f", "m"}, {"sk-x\n", "m"}, {"sk-x ", "m"}, {"sk-\x80x", "m"}, {"\x7fsk", "m"},
			{"sk", "m\x7f"}, {"sk", "m "}, {"sk", "m\x00"}, {"sk", "m\xff"}, {"sk", "a b"}, {"sk", ""},
		} {
			if _, err := tc.newP(tc.base, kv[0], kv[1]); errcode.Of(err) != errcode.NoProvider {
				t.Errorf("%s key %q model %q: %v, want no_provider", name, kv[0], kv[1], err)
			}
		}
		if _, err := tc.newP(tc.base, "sk-~!", "vendor/model:tag~"); err != nil {
			t.Errorf("%s: printable key and model refused: %v", name, err)
		}
	}
}

// TestKeyFormsLongestFirst: the escaped forms of the key are replaced longest first, so
// a key ending in a backslash, echoed JSON-escaped, becomes exactly "[redacted]" with no
// stray piece of its escape left.
func TestKeyFormsLongestFirst(t *testing.T) {
	const key = `sk-end\`
	_, err := serveOnce(t, http.StatusUnauthorized, `{"error":{"key":"sk-end\\"}}`, key)
	if e := callError(t, err); e.Excerpt != `{"error":{"key":"[redacted]"}}` {
		t.Errorf("excerpt %q, want the key's JSON form replaced whole", e.Excerpt)
	}
}

// TestBoundedRunes: bounded drops a rune the cut splits, even when its replacement
// would fit, and turns invalid bytes that fit into U+FFFD rather than dropping them.
func TestBoundedRunes(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"😀x", 3, ""},
		{"a😀", 4, "a"},
		{"\xf0\x9f\x98", 3, "\uFFFD"},
		{"ab\xff", 3, "ab"},
		{"\xff", 3, "\uFFFD"},
	} {
		if got := bounded(tt.in, tt.n); got != tt.want {
			t.Errorf("bounded(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// TestUsageNonNegative: a negative count in either usage field is a malformed answer,
// in both formats.
func TestUsageNonNegative(t *testing.T) {
	for _, tc := range []struct{ format, body string }{
		{"openai", `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":-1,"completion_tokens":1}}`},
		{"openai", `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":-1}}`},
		{"anthropic", `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":-1,"output_tokens":1}}`},
		{"anthropic", `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":1,"output_tokens":-1}}`},
	} {
		s := startModel(t, loopback.Reply{Body: []byte(tc.body)})
		_, err := sendOnce(t, providerAt(t, tc.format, s, ""))
		if e := callError(t, err); e.Kind != KindMalformed || !strings.Contains(err.Error(), "negative token usage") {
			t.Errorf("%s %s: %v, want malformed (negative usage)", tc.format, tc.body, err)
		}
	}
}

// TestFieldsAtBound: a finish reason of exactly MaxFinishReasonBytes and a model of
// exactly MaxModelBytes are accepted; one byte more of either is malformed.
func TestFieldsAtBound(t *testing.T) {
	for _, format := range []string{"openai", "anthropic"} {
		for _, over := range []int{0, 1} {
			fr, model := strings.Repeat("f", MaxFinishReasonBytes), strings.Repeat("m", MaxModelBytes)
			for field := range 2 {
				rep := loopback.Reply{Text: "hi", FinishReason: fr, Model: model}
				if field == 0 {
					rep.FinishReason += strings.Repeat("f", over)
				} else {
					rep.Model += strings.Repeat("m", over)
				}
				s := startModel(t, rep)
				resp, err := sendOnce(t, providerAt(t, format, s, ""))
				if over == 0 && (err != nil || resp.FinishReason != rep.FinishReason || resp.Model != rep.Model) {
					t.Errorf("%s at the bounds: %v", format, err)
				}
				if over == 1 && !errors.Is(err, KindMalformed) {
					t.Errorf("%s field %d one byte over: %v, want malformed", format, field, err)
				}
			}
		}
	}
}

// TestOpenAIContentShapes: a first choice without a message is no_content (never a
// crash); a null content with a refusal is reported as a refusal, without its text, and
// without one says the content is null; a content that is not a string is malformed.
func TestOpenAIContentShapes(t *testing.T) {
	const refusal = "REFUSAL TEXT 5531"
	for _, tc := range []struct {
		body string
		kind Kind
		says string
	}{
		{`{"choices":[{"finish_reason":"stop"}]}`, KindNoContent, "no message"},
		{`{"choices":[{"message":null}]}`, KindNoContent, "no message"},
		{`{"choices":[{"message":{"content":null,"refusal":"` + refusal + `"}}]}`, KindNoContent, "refused"},
		{`{"choices":[{"message":{"refusal":"` + refusal + `"}}]}`, KindNoContent, "refused"},
		{`{"choices":[{"message":{"content":null},"finish_reason":"content_filter"}]}`, KindNoContent, "content is null"},
		{`{"choices":[{"message":{"content":["hi"]}}]}`, KindMalformed, "not a string"},
		{`{"choices":[{"message":{"content":{"text":"hi"}}}]}`, KindMalformed, "not a string"},
		{`{"choices":[{"message":{"content":5}}]}`, KindMalformed, "not a string"},
		{`{"choices":[{"message":{"content":true}}]}`, KindMalformed, "not a string"},
	} {
		s := startModel(t, loopback.Reply{Body: []byte(tc.body)})
		_, err := sendOnce(t, providerAt(t, "openai", s, ""))
		if e := callError(t, err); e.Kind != tc.kind || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), refusal) {
			t.Errorf("%s: %v, want %s saying %q, not quoting the refusal", tc.body, err, tc.kind, tc.says)
		}
	}
}

// TestCallsOwnHeaders: each prepared call has its own header map: a change to one
// call's headers reaches neither the provider nor a later call.
func TestCallsOwnHeaders(t *testing.T) {
	s := startModel(t, loopback.Reply{Text: "hi"})
	p := providerAt(t, "openai", s, "sk-h")
	first, err := p.Prepare(refusalConv, 10)
	if err != nil {
		t.Fatal(err)
	}
	first.header.Set("X-Changed", "1")
	second, err := p.Prepare(refusalConv, 10)
	if err != nil {
		t.Fatal(err)
	}
	if second.header.Get("X-Changed") != "" || second.header.Get("Authorization") != "Bearer sk-h" {
		t.Errorf("second call headers %v: shares the first call's", second.header)
	}
}

// TestUnknownProviderBounded: an unknown SYMBI_PROVIDER is named in the no_provider
// error bounded to 64 bytes, however long it is.
func TestUnknownProviderBounded(t *testing.T) {
	name := strings.Repeat("z", 10000)
	_, err := FromEnv(func(k string) string { return map[string]string{"SYMBI_PROVIDER": name}[k] })
	if errcode.Of(err) != errcode.NoProvider || len(err.Error()) > 512 || strings.Contains(err.Error(), strings.Repeat("z", 65)) {
		t.Errorf("err (%d bytes) = %.200v, want a short no_provider error", len(err.Error()), err)
	}
}

// TestKeyRedactedInAnyEscapeMix: the key is replaced whole however an encoder escapes
// its characters in a JSON string, each in its own way — as itself, \u00xx, \u00XX, or
// \/, \" and \\ — and the text around it is kept byte for byte.
func TestKeyRedactedInAnyEscapeMix(t *testing.T) {
	const key = `sk-Zm9v+YmF6/cX"V4\'<&>=`
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var w strings.Builder
		for i := 0; i < len(key); i++ {
			c := key[i]
			forms := []string{string(c), fmt.Sprintf(`\u%04x`, c), fmt.Sprintf(`\u%04X`, c)}
			switch c {
			case '/', '"':
				forms = append(forms, `\`+string(c))
			case '\\': // never bare inside a JSON string
				forms[0] = `\\`
			}
			w.WriteString(forms[rnd.IntN(len(forms))])
		}
		body := `{"error":"bad key ` + w.String() + `, see \n docs"}`
		want := `{"error":"bad key [redacted], see \n docs"}`
		if got := string(redact([]byte(body), key)); got != want {
			t.Fatalf("%s\nredacted to %s\nwant        %s", body, got, want)
		}
	}
}

// TestKeyEchoedByDefaultJSONEncodersIsRedacted: a base64-alphabet key ("+", "/",
// "=") echoed by two widespread servers' default JSON encoders. ASP.NET Core's
// System.Text.Json (JavaScriptEncoder.Default) writes "+" as \u002B (and "`" as \u0060);
// Java's Gson (new Gson(), HTML-safe by default) writes "=" as \u003d (and "'" as
// \u0027 while it writes '"' as \"). Neither Error.Excerpt nor err.Error() holds the key
// so written.
func TestKeyEchoedByDefaultJSONEncodersIsRedacted(t *testing.T) {
	const key = "sk-Zm9vYmFy+YmF6/cXV4==" // printable ASCII: checkToken accepts it
	for name, echoed := range map[string]string{
		"System.Text.Json default": `sk-Zm9vYmFy\u002BYmF6/cXV4==`,
		"Gson default":             `sk-Zm9vYmFy+YmF6/cXV4\u003d\u003d`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := serveOnce(t, http.StatusUnauthorized,
				`{"error":{"message":"Incorrect API key provided: `+echoed+`"}}`, key)
			e := callError(t, err)
			for what, s := range map[string]string{"Excerpt": e.Excerpt, "Error()": err.Error()} {
				if strings.Contains(s, "Zm9vYmFy") || strings.Contains(s, "cXV4") {
					t.Errorf("%s holds the echoed key %s: %s", what, echoed, s)
				}
			}
		})
	}
}
