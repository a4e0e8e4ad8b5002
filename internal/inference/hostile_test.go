package inference_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/inference"
	"symbi/internal/loopback"
)

// doOnce prepares the conversation against a provider of the given format pointed at s
// and sends it once.
func doOnce(t *testing.T, format string, s *loopback.Server) (*inference.Response, error) {
	t.Helper()
	call, err := newProvider(t, format, s).Prepare(conv, 100)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	return call.Do(ctx)
}

// TestMalformedNamesNotQuoted: a 2xx body that cannot be used is never quoted
// (providers.md) — neither its text nor its member names, which may be the model's (a
// tool_use input, a structured output).
func TestMalformedNamesNotQuoted(t *testing.T) {
	const secret = "UNGATED MODEL TEXT 4711"
	for format, body := range map[string]string{
		"openai":    `{"choices":[{"message":{"role":"assistant","content":"ok","parsed":{"` + secret + `":1,"` + secret + `":2}}}]}`,
		"anthropic": `{"type":"message","content":[{"type":"tool_use","id":"t","name":"n","input":{"` + secret + `":1,"` + secret + `":2}},{"type":"text","text":"ok"}]}`,
		"type":      `{"type":"` + secret + `","content":[{"type":"text","text":"ok"}]}`,
	} {
		t.Run(format, func(t *testing.T) {
			wire := format
			if format == "type" {
				wire = "anthropic"
			}
			s := startServer(t, loopback.WithReply(loopback.Reply{Body: []byte(body)}))
			_, err := doOnce(t, wire, s)
			if !errors.Is(err, inference.KindMalformed) {
				t.Fatalf("err = %v, want malformed", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error quotes the unusable 2xx body: %v", err)
			}
		})
	}
}

// TestMalformedErrorBounded: the error of a malformed 2xx answer is journaled
// (inference_finished.error) and returned to the client: the provider cannot make it
// large — a 2 MiB number literal, a 1.5 MiB repeated member name, or a member in other
// capitals under a 1.5 MiB path each give a short message, saying what was wrong.
func TestMalformedErrorBounded(t *testing.T) {
	name := strings.Repeat("n", 3<<19)
	for what, tc := range map[string]struct{ body, says string }{
		"number literal": {`{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":` + strings.Repeat("7", 2<<20) + `,"completion_tokens":1}}`, "prompt_tokens is a JSON number, not int"},
		"repeated name":  {`{"choices":[{"message":{"content":"ok"}}],"x":{"` + name + `":1,"` + name + `":2}}`, "a member name is repeated"},
		"path of a case": {`{"choices":[{"message":{"content":"ok"}}],"` + name + `":{"MODEL":"m"}}`, `a member is "model" spelled otherwise`},
	} {
		t.Run(what, func(t *testing.T) {
			s := startServer(t, loopback.WithReply(loopback.Reply{Body: []byte(tc.body)}))
			_, err := doOnce(t, "openai", s)
			if !errors.Is(err, inference.KindMalformed) {
				t.Fatalf("err kind: %.200v, want malformed", err)
			}
			if n := len(err.Error()); n > 512 || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("a malformed answer's error is %d bytes, %.300q; want at most 512, saying %q", n, err.Error(), tc.says)
			}
		})
	}
}

// TestBaseURLNotEchoed: a refused base URL is not quoted in the no_provider error, which
// every invoke_agent caller receives: it may carry a secret (credentials, a key in its
// query). A bare "#" (an empty fragment) is refused as a fragment: the path after it
// would never be sent.
func TestBaseURLNotEchoed(t *testing.T) {
	const secret = "s3cr3tPASSWORD"
	for _, base := range []string{
		"https://api.example.com/v1?api_key=" + secret,
		"ftp://user:" + secret + "@api.example.com/v1",
		"https://user:" + secret + "%zz@api.example.com/v1",
		"https://user:" + secret + "@api.example.com:bad/v1",
		"https://api.example.com/v1#" + secret,
		"https://api.example.com/v1#",
	} {
		t.Run(base, func(t *testing.T) {
			env := map[string]string{"OPENAI_BASE_URL": base, "OPENAI_API_KEY": "sk-x"}
			_, err := inference.FromEnv(func(k string) string { return env[k] })
			if errcode.Of(err) != errcode.NoProvider {
				t.Fatalf("err = %v, want no_provider", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the no_provider error quotes the base URL's secret: %v", err)
			}
		})
	}
}

// TestInformationalAnswerRefused: an endpoint that answers the POST with 101 Switching
// Protocols (nothing asked for an upgrade) and then holds the connection gets a status
// error at once: the transport would hand over the raw connection as the body, no longer
// bound to the call's deadline or cancellation.
func TestInformationalAnswerRefused(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x-hold\r\n\r\n")
		buf.Flush()
		<-hold
	}))
	t.Cleanup(func() { close(hold); srv.Close() })
	p, err := inference.NewOpenAI(srv.URL+"/v1", "", "m")
	if err != nil {
		t.Fatal(err)
	}
	call, err := p.Prepare(conv, 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard) // only a hang reaches it
	defer cancel()
	resp, err := call.Do(ctx)
	var e *inference.Error
	if !errors.As(err, &e) || e.Kind != inference.KindStatus || resp == nil || resp.Status != http.StatusSwitchingProtocols {
		t.Fatalf("Do = %+v, %v; want a status error for the 101 answer, at once", resp, err)
	}
}

// TestErrorNeverQuotesAPIKey: an endpoint that echoes the API key it was sent in
// its error body (OpenAI's "Incorrect API key provided: <key>" for short keys, LiteLLM's
// "Received API Key = ...", a debugging proxy) must not get that key into the error: the
// error reaches the (untrusted) MCP client, the journal (shared with auditors) and the
// server log. Expected: the key does not appear in err.Error(); the excerpt has it
// redacted. Contract: credentials (API keys) are never in the journal, errors or logs;
// docs/providers.md "Error messages never contain the key"; security-model.md
// trusts the MCP client with nothing.
func TestErrorNeverQuotesAPIKey(t *testing.T) {
	const key = "sk-review-0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if got == "" {
			got = r.Header.Get("X-Api-Key")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided: ` + got + `. You can find your API key at https://platform.example/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}`))
	}))
	t.Cleanup(srv.Close)
	for name, env := range map[string]map[string]string{
		"openai":     {"SYMBI_PROVIDER": "openai", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": key},
		"anthropic":  {"SYMBI_PROVIDER": "anthropic", "ANTHROPIC_BASE_URL": srv.URL, "ANTHROPIC_API_KEY": key},
		"openrouter": {"SYMBI_PROVIDER": "openrouter", "OPENROUTER_BASE_URL": srv.URL + "/v1", "OPENROUTER_API_KEY": key},
	} {
		t.Run(name, func(t *testing.T) {
			err := callWithEnv(t, env)
			if !errors.Is(err, inference.KindStatus) || errcode.Of(err) != errcode.InferenceFailed {
				t.Fatalf("err = %v, want a status error (inference_failed)", err)
			}
			if !strings.Contains(err.Error(), "HTTP 401") {
				t.Errorf("message %q does not name the status", err)
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("the error quotes the API key the endpoint echoed: %q", err)
			}
		})
	}
}

// TestHugeErrorBodyKeepsStatus: a 429 (or any non-2xx) whose body passes 4 MiB is
// still the provider's status answer: the message must name the HTTP status and, for a
// 429, say "rate limited" with its Retry-After. Contract: a provider error becomes
// inference_failed with the HTTP status and a bounded excerpt, and a 429 says so;
// docs/providers.md: "a 429 message says `rate limited` and quotes
// `Retry-After`": the status is judged before the body's size.
func TestHugeErrorBodyKeepsStatus(t *testing.T) {
	huge := `{"error":{"message":"slow down","pad":"` + strings.Repeat("a", 5<<20) + `"}}`
	for _, format := range []string{"openai", "anthropic"} {
		t.Run(format, func(t *testing.T) {
			s := startServer(t, loopback.WithReply(loopback.Reply{Status: 429, RetryAfter: "7", Body: []byte(huge)}))
			_, err := doOnce(t, format, s)
			if errcode.Of(err) != errcode.InferenceFailed {
				t.Fatalf("err = %.300v, want inference_failed", err)
			}
			msg := err.Error()
			for _, want := range []string{"429", "rate limited", `"7"`} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %.300q lacks %q", msg, want)
				}
			}
		})
	}
}

// TestKeyRedactedFrom2xxErrors: an API key an endpoint echoes is redacted from every
// error (docs/providers.md: "Error messages never contain the key"). A 2xx answer whose
// parse fails is an error too: an empty content whose finish reason echoes the key must
// not carry the key in err.Error().
func TestKeyRedactedFrom2xxErrors(t *testing.T) {
	const key = "sk-review-2xx-0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":""},"finish_reason":"` + got + `"}]}`))
	}))
	t.Cleanup(srv.Close)
	err := callWithEnv(t, map[string]string{"SYMBI_PROVIDER": "openai", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": key})
	if err == nil {
		t.Fatal("no error for an empty content")
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("the error quotes the API key the endpoint echoed: %q", err)
	}
}

// TestKeyEchoedJSONEscapedIsRedacted: an endpoint that writes the key back inside a JSON
// string escapes it as its encoder does ("/" as "\/", "<" as "\u003c" or "\u003C", a quote
// or a backslash with a backslash, or a quote as "\u0022"); the error holds none of those
// forms either.
func TestKeyEchoedJSONEscapedIsRedacted(t *testing.T) {
	const key = `sk-a/b+c<d>&e"f\g'h`
	escapes := map[string]func(string) string{
		"PHP, every JSON_HEX option": func(k string) string {
			var b strings.Builder
			for _, r := range k {
				switch r {
				case '<', '>', '&', '\'', '"':
					fmt.Fprintf(&b, `\u%04X`, r)
				case '/', '\\':
					b.WriteString(`\` + string(r))
				default:
					b.WriteRune(r)
				}
			}
			return `"` + b.String() + `"`
		},
		"encoding/json": func(k string) string { b, _ := json.Marshal(k); return string(b) },
		"slash escaped": func(k string) string { return strings.ReplaceAll(strconv.Quote(k), "/", `\/`) },
		"no html escape": func(k string) string {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.Encode(k)
			return strings.TrimSpace(b.String())
		},
	}
	for name, escape := range escapes {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				w.Write([]byte(`{"error":{"message":"Incorrect API key provided","key":` + escape(got) + `}}`))
			}))
			t.Cleanup(srv.Close)
			err := callWithEnv(t, map[string]string{"SYMBI_PROVIDER": "openai", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": key})
			if err == nil {
				t.Fatal("no error for a 401")
			}
			msg := err.Error()
			if !strings.Contains(msg, "[redacted]") {
				t.Errorf("the key the endpoint echoed is not redacted: %s", msg)
			}
			for _, tell := range []string{"sk-a", "b+c"} {
				if strings.Contains(msg, tell) {
					t.Errorf("the error holds %q of the key: %s", tell, msg)
				}
			}
		})
	}
}

// callWithEnv configures the provider env names, sends it one call and returns the
// call's error.
func callWithEnv(t *testing.T, env map[string]string) error {
	t.Helper()
	p, err := inference.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	call, err := p.Prepare(conv, 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	_, err = call.Do(ctx)
	return err
}

// TestCutStatusBodyNamesStatus: a non-2xx answer whose body is cut short (the endpoint
// closes the connection before the Content-Length it announced) is still a status error:
// its message names the HTTP status, and a 429 says rate limited and quotes Retry-After
// (docs/providers.md), with the cut as its cause.
func TestCutStatusBodyNamesStatus(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   []string
	}{
		{"429 Too Many Requests", []string{"429", "rate limited", `"7"`}},
		{"503 Service Unavailable", []string{"HTTP 503"}},
	} {
		t.Run(tc.status, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				buf.WriteString("HTTP/1.1 " + tc.status + "\r\nRetry-After: 7\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"error\":{\"message\":\"slow")
				buf.Flush()
				conn.Close() // the announced 1000 bytes never come
			}))
			t.Cleanup(srv.Close)
			err := callWithEnv(t, map[string]string{"SYMBI_PROVIDER": "openai", "OPENAI_BASE_URL": srv.URL + "/v1", "OPENAI_API_KEY": "sk-review"})
			if errcode.Of(err) != errcode.InferenceFailed {
				t.Fatalf("err = %v, want inference_failed", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not name the provider's status (lacks %q)", err.Error(), w)
				}
			}
		})
	}
}

// TestTypeErrorWordsJSON: a 2xx body whose member has the wrong JSON type is described by
// what the format expects there (an array, an object), never by the Go spelling of the
// package's decoding structs, tags and all.
func TestTypeErrorWordsJSON(t *testing.T) {
	wantJSON := map[string]string{
		`{"choices":{}}`:                 "member choices is a JSON object, not an array",
		`{"choices":[],"usage":"many"}`:  "member usage is a JSON string, not an object",
		`{"choices":[{"message":"hi"}]}`: "is a JSON string, not an object",
	}
	for body := range wantJSON {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(body))
		}))
		err := callWithEnv(t, map[string]string{"SYMBI_PROVIDER": "openai", "OPENAI_BASE_URL": srv.URL + "/v1"})
		srv.Close()
		if !errors.Is(err, inference.KindMalformed) {
			t.Fatalf("%s: err = %v, want malformed", body, err)
		}
		if msg := err.Error(); strings.Contains(msg, "struct {") || strings.Contains(msg, `json:\"`) || strings.Contains(msg, "json.RawMessage") {
			t.Errorf("%s: the message describes a Go type, not the JSON expected: %q", body, msg)
		} else if want := wantJSON[body]; !strings.Contains(msg, want) {
			t.Errorf("%s: message %q, want it to say %q", body, msg, want)
		}
	}
}
