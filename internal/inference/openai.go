package inference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"symbi/internal/errcode"
	"symbi/internal/strictjson"
)

// OpenAI-compatible defaults.
const (
	DefaultOpenAIBaseURL     = "https://api.openai.com/v1"
	DefaultOpenAIModel       = "gpt-4o-mini"
	DefaultOpenRouterBaseURL = "https://openrouter.ai/api/v1"
	DefaultOpenRouterModel   = "openai/gpt-4o-mini"
)

// NewOpenAI configures an OpenAI-compatible chat completions provider named "openai".
// baseURL includes the version path (e.g. DefaultOpenAIBaseURL); requests go to
// baseURL + "/chat/completions". An empty apiKey sends no Authorization header (local
// endpoints). Invalid settings are errcode.NoProvider errors.
func NewOpenAI(baseURL, apiKey, model string) (Provider, error) {
	return newOpenAICompatible("openai", "OPENAI_BASE_URL", "OPENAI_API_KEY", "CHAT_MODEL", baseURL, apiKey, model)
}

func newOpenAICompatible(name, baseVar, keyVar, modelVar, baseURL, apiKey, model string) (Provider, error) {
	base, err := checkBase(baseVar, baseURL, apiKey != "")
	if err != nil {
		return nil, err
	}
	if err := checkToken(keyVar, apiKey, 4096); err != nil {
		return nil, err
	}
	if err := checkModel(modelVar, model); err != nil {
		return nil, err
	}
	h := http.Header{}
	if apiKey != "" {
		h.Set("Authorization", "Bearer "+apiKey)
	}
	return &provider{name: name, model: model, url: base + "/chat/completions", key: apiKey, header: h,
		build: buildOpenAI, parse: parseOpenAI, client: newHTTPClient()}, nil
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// messages lays out the conversation: [system], [labelled instructions], prompt. The
// Anthropic format takes the system message separately.
func messages(c Conversation, withSystem bool) []chatMessage {
	var m []chatMessage
	if withSystem {
		m = append(m, chatMessage{"system", c.System})
	}
	if c.Instructions != "" {
		m = append(m, chatMessage{"user", InstructionsLabel + c.Instructions})
	}
	return append(m, chatMessage{"user", c.Prompt})
}

func buildOpenAI(c Conversation, model string, maxTokens int) ([]byte, error) {
	return marshal(struct {
		Model     string        `json:"model"`
		MaxTokens int           `json:"max_tokens"`
		Messages  []chatMessage `json:"messages"`
	}{model, maxTokens, messages(c, true)})
}

func parseOpenAI(body []byte) (*Response, error) {
	var r struct {
		Model   string `json:"model"`
		Choices []struct {
			Message *struct {
				Content json.RawMessage `json:"content"`
				Refusal *string         `json:"refusal"`
			} `json:"message"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := unmarshalObject(body, &r); err != nil {
		return nil, err
	}
	resp := &Response{Model: r.Model}
	if r.Usage != nil {
		resp.Usage = Usage{r.Usage.PromptTokens, r.Usage.CompletionTokens}
	}
	if err := checkUsage(resp.Usage); err != nil {
		return nil, err
	}
	if len(r.Choices) == 0 {
		return nil, &Error{Kind: KindNoContent, Err: errors.New("no choices")}
	}
	ch := r.Choices[0]
	if ch.FinishReason != nil {
		resp.FinishReason = *ch.FinishReason
	}
	if err := checkFields(resp); err != nil {
		return nil, err
	}
	if ch.Message == nil {
		return nil, &Error{Kind: KindNoContent, Err: errors.New("first choice has no message")}
	}
	content := bytes.TrimSpace(ch.Message.Content)
	if len(content) == 0 || string(content) == "null" {
		if ch.Message.Refusal != nil {
			return nil, &Error{Kind: KindNoContent, Err: errors.New("the model refused (its refusal text is model output and is not released)")}
		}
		return nil, &Error{Kind: KindNoContent, Err: fmt.Errorf("message content is null (finish reason %q)", resp.FinishReason)}
	}
	if err := json.Unmarshal(content, &resp.Text); err != nil {
		return nil, &Error{Kind: KindMalformed, Err: errors.New("message content is not a string")}
	}
	if resp.Text == "" {
		if ch.Message.Refusal != nil {
			return nil, &Error{Kind: KindNoContent, Err: errors.New("the model refused (its refusal text is model output and is not released)")}
		}
		return nil, &Error{Kind: KindNoContent, Err: fmt.Errorf("message content is empty (finish reason %q)", resp.FinishReason)}
	}
	return resp, nil
}

// unmarshalObject decodes a body that must be exactly one JSON object, strictly: valid
// UTF-8, no member name twice in an object, and the members v reads spelled exactly —
// encoding/json would let the last of two names win and match a name in any case, so
// that another reader of the same bytes (an auditor's, from the journal) could find
// another text than the one judged.
func unmarshalObject(body []byte, v any) error {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return &Error{Kind: KindMalformed, Err: errors.New("body is not a JSON object")}
	}
	if !utf8.Valid(body) {
		return &Error{Kind: KindMalformed, Err: errors.New("body is not valid UTF-8")}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &Error{Kind: KindMalformed, Err: bodyFault(err)}
	}
	if err := strictjson.Check(body, strictjson.Options{Single: true, NoLoneSurrogates: true, ExactNames: strictjson.NamesOf(reflect.TypeOf(v))}); err != nil {
		return &Error{Kind: KindMalformed, Err: bodyFault(err)}
	}
	return nil
}

// bodyFault words why a 2xx body could not be decoded without quoting any of it: the body
// may hold model text that has not passed the policy gate, and a decoder's message quotes
// member names, paths and number literals of any length — which would reach the caller
// and the journal (where a record of over 1 MiB would turn the provider's fault into a
// journal failure).
func bodyFault(err error) error {
	var (
		dup *strictjson.DuplicateError
		cas *strictjson.CaseError
		typ *json.UnmarshalTypeError
		syn *json.SyntaxError
	)
	switch {
	case errors.As(err, &dup):
		return errors.New("a member name is repeated in one object")
	case errors.As(err, &cas):
		return fmt.Errorf("a member is %q spelled otherwise", cas.Want) // Want is the format's name
	case errors.As(err, &typ):
		kind, _, _ := strings.Cut(typ.Value, " ") // "number 1e999…": the kind, not the literal
		return fmt.Errorf("member %s is a JSON %s, not %s", bounded(typ.Field, 128), kind, wantJSON(typ.Type))
	case errors.As(err, &syn):
		return fmt.Errorf("not valid JSON (at byte %d)", syn.Offset)
	case errors.Is(err, strictjson.ErrFloat):
		return errors.New("a number where an integer belongs is not one")
	case errors.Is(err, strictjson.ErrSurrogate):
		return errors.New("an escaped lone surrogate")
	case errors.Is(err, strictjson.ErrTrailing):
		return errors.New("data after the JSON object")
	case errors.Is(err, strictjson.ErrDepth):
		return errors.New("arrays and objects nested too deep")
	}
	return errors.New("not valid JSON")
}

// wantJSON names what the format expects where a decoder wanted a value of type t: an
// array or an object for the decoding structs (never their Go spelling, tags and all), a
// basic type by its name (int: a number too large for one is refused as not an int).
func wantJSON(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == nil:
		return "a value"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return "an array"
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		return "an object"
	case t.Kind() == reflect.String:
		return "a string"
	}
	return t.Kind().String()
}

func checkUsage(u Usage) error {
	if u.InputTokens < 0 || u.OutputTokens < 0 {
		return &Error{Kind: KindMalformed, Err: errors.New("negative token usage")}
	}
	return nil
}

// Bounds of the short fields a provider names in its answer. They go into journal
// records and messages, so a provider cannot make a record too large (and blame the
// journal for its own fault) through them.
const (
	MaxFinishReasonBytes = 64
	MaxModelBytes        = 256
)

// checkFields bounds a parsed response's short provider-supplied fields: one over its
// bound is a malformed answer (inference_failed), named with its size.
func checkFields(r *Response) error {
	for _, f := range []struct {
		name, value string
		limit       int
	}{{"finish reason", r.FinishReason, MaxFinishReasonBytes}, {"model", r.Model, MaxModelBytes}} {
		if len(f.value) > f.limit {
			return &Error{Kind: KindMalformed, Err: fmt.Errorf("the %s is %d bytes, more than the %d-byte limit", f.name, len(f.value), f.limit)}
		}
	}
	return nil
}

func checkModel(variable, model string) error {
	if model == "" {
		return errcode.Errorf(errcode.NoProvider, "%s: empty model name", variable)
	}
	return checkToken(variable, model, 256)
}
