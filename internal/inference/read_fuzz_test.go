package inference

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"symbi/internal/strictjson"
)

// FuzzParseResponseRead: FuzzParseResponse asks only that an accepted answer has text and
// non-negative usage, and its seeds hold none of the shapes the parsers refuse on purpose.
// Here, whatever a provider answers: an accepted answer is strict JSON (UTF-8, one object,
// no name twice, no lone surrogate escape), its finish reason and model within their
// bounds (docs/security-model.md: "finish reason 64 bytes, model 256 bytes:
// inference_failed"), and its text is what a reader of the body by the format's exact
// member names finds — OpenAI: choices[0].message.content; Anthropic: the text of the
// "text" blocks, in order. A refusal never quotes the body (it may hold model text the
// policy gate has not passed): it is short whatever the body.
func FuzzParseResponseRead(f *testing.F) {
	long := strings.Repeat("x", 300)
	for _, s := range []string{
		`{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`,
		`{"model":"` + long + `","choices":[{"message":{"content":"hi"}}]}`,
		`{"choices":[{"message":{"content":"hi"},"finish_reason":"` + long[:65] + `"}]}`,
		`{"choices":[{"message":{"content":"hi"},"finish_reason":"` + long[:64] + `"}]}`,
		`{"choices":[{"message":{"content":"hi","Content":"bye"}}]}`,
		`{"choices":[{"message":{"content":"hi","content":"bye"}}]}`,
		`{"Choices":[{"message":{"content":"hi"}}]}`,
		`{"choices":[{"message":{"content":"\ud800"}}]}`,
		`{"choices":[{"message":{"content":"a"}},{"message":{"content":"b"}}]}`,
		`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1.5}}`,
		`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1e999}}`,
		`{"choices":[{"message":{"content":"` + long + `"}}],"usage":{"prompt_tokens":"` + long + `"}}`,
		`{"choices":[{"message":{"content":"hi"}}]} {}`,
		`{"type":"message","model":"m","content":[{"type":"text","text":"a"},{"type":"thinking","thinking":"t"},{"type":"text","text":"b"}],"stop_reason":"end_turn"}`,
		`{"type":"message","content":[{"type":"text","text":"a","Text":"b"}]}`,
		`{"type":"message","content":[{"type":"Text","text":"a"}]}`,
		`{"type":"message","content":[{"type":"text","text":""},{"type":"text","text":"b"}],"stop_reason":"` + long + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, parse := range map[string]func([]byte) (*Response, error){"openai": parseOpenAI, "anthropic": parseAnthropic} {
			resp, err := parse(body)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || len(err.Error()) > 512 {
					t.Fatalf("%s: refusal of %d bytes (%T): %.300q", name, len(err.Error()), err, err)
				}
				continue
			}
			if !utf8.Valid(body) || strictjson.Check(body, strictjson.Options{Single: true, NoLoneSurrogates: true}) != nil {
				t.Fatalf("%s: accepted %q, not strict JSON", name, body)
			}
			if len(resp.FinishReason) > MaxFinishReasonBytes || len(resp.Model) > MaxModelBytes {
				t.Fatalf("%s: accepted a finish reason of %d bytes, a model of %d", name, len(resp.FinishReason), len(resp.Model))
			}
			var want string
			var ok bool
			if name == "openai" {
				want, ok = openAIText(body)
			} else {
				want, ok = anthropicText(body)
			}
			if !ok || resp.Text != want {
				t.Fatalf("%s: text %q; the body's is %q (%v): %q", name, resp.Text, want, ok, body)
			}
		}
	})
}

// member returns obj[name] by its exact name.
func member(raw json.RawMessage, name string) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	v, ok := m[name]
	return v, ok
}

func openAIText(body []byte) (string, bool) {
	choices, ok := member(body, "choices")
	var list []json.RawMessage
	if !ok || json.Unmarshal(choices, &list) != nil || len(list) == 0 {
		return "", false
	}
	msg, ok := member(list[0], "message")
	if !ok {
		return "", false
	}
	content, ok := member(msg, "content")
	var s string
	if !ok || json.Unmarshal(content, &s) != nil || !strings.HasPrefix(strings.TrimSpace(string(content)), `"`) {
		return "", false
	}
	return s, true
}

func anthropicText(body []byte) (string, bool) {
	content, ok := member(body, "content")
	var blocks []json.RawMessage
	if !ok || json.Unmarshal(content, &blocks) != nil {
		return "", false
	}
	var b strings.Builder
	for _, blk := range blocks {
		raw, _ := member(blk, "type")
		var typ string
		if json.Unmarshal(raw, &typ) != nil || typ != "text" {
			continue
		}
		raw, ok := member(blk, "text")
		var s string
		if !ok || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		b.WriteString(s)
	}
	return b.String(), true
}
