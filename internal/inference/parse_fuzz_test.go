package inference

import (
	"errors"
	"testing"
)

// FuzzParseResponse feeds untrusted response bodies to both wire-format parsers: each
// either returns a response with text and non-negative usage, or an *Error of kind
// KindMalformed or KindNoContent.
func FuzzParseResponse(f *testing.F) {
	seeds := []string{
		`{"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
		`{"choices":[{"message":{"content":null,"refusal":"no"}}]}`,
		`{"choices":[{"message":{"content":["a"]}}]}`,
		`{"choices":[]}`,
		`{"type":"message","model":"m","content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"a"},{"type":"text","text":"b"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"type":"message","content":[{"type":"text"}]}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`,
		`{"usage":{"prompt_tokens":-1}}`,
		`[1]`, `null`, `{`, ``, "{\"choices\":[{\"message\":{\"content\":\"\xff\"}}]}",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, parse := range map[string]func([]byte) (*Response, error){"openai": parseOpenAI, "anthropic": parseAnthropic} {
			resp, err := parse(body)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || (e.Kind != KindMalformed && e.Kind != KindNoContent) {
					t.Fatalf("%s: error %v is not malformed/no_content", name, err)
				}
				if resp != nil {
					t.Fatalf("%s: response with an error", name)
				}
				continue
			}
			if resp.Text == "" || resp.Usage.InputTokens < 0 || resp.Usage.OutputTokens < 0 {
				t.Fatalf("%s: accepted %q as %+v", name, body, resp)
			}
		}
	})
}

func TestBounded(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"},           // é split by the cut is dropped
		{"héllo", 3, "hé"},          // whole é fits
		{"a\xffb", 10, "a\uFFFDb"},  // invalid byte replaced
		{"\xff\xff\xff\xff", 2, ""}, // replacement would pass the bound
		{"", 5, ""},
	}
	for _, tt := range tests {
		if got := bounded(tt.in, tt.n); got != tt.want {
			t.Errorf("bounded(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
