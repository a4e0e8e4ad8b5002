package inference

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Anthropic defaults.
const (
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
	DefaultAnthropicModel   = "claude-sonnet-4-5"
	AnthropicVersion        = "2023-06-01" // sent as the anthropic-version header
)

// NewAnthropic configures an Anthropic Messages provider. baseURL excludes the version
// path (e.g. DefaultAnthropicBaseURL); requests go to baseURL + "/v1/messages". An empty
// apiKey sends no x-api-key header. Invalid settings are errcode.NoProvider errors.
func NewAnthropic(baseURL, apiKey, model string) (Provider, error) {
	base, err := checkBase("ANTHROPIC_BASE_URL", baseURL, apiKey != "")
	if err != nil {
		return nil, err
	}
	if err := checkToken("ANTHROPIC_API_KEY", apiKey, 4096); err != nil {
		return nil, err
	}
	if err := checkModel("ANTHROPIC_MODEL", model); err != nil {
		return nil, err
	}
	h := http.Header{}
	if apiKey != "" {
		h.Set("X-Api-Key", apiKey)
	}
	h.Set("Anthropic-Version", AnthropicVersion)
	return &provider{name: "anthropic", model: model, url: base + "/v1/messages", key: apiKey, header: h,
		build: buildAnthropic, parse: parseAnthropic, client: newHTTPClient()}, nil
}

func buildAnthropic(c Conversation, model string, maxTokens int) ([]byte, error) {
	return marshal(struct {
		Model     string        `json:"model"`
		MaxTokens int           `json:"max_tokens"`
		System    string        `json:"system"`
		Messages  []chatMessage `json:"messages"`
	}{model, maxTokens, c.System, messages(c, false)})
}

func parseAnthropic(body []byte) (*Response, error) {
	var r struct {
		Type    string `json:"type"`
		Model   string `json:"model"`
		Content []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		} `json:"content"`
		StopReason *string `json:"stop_reason"`
		Usage      *struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := unmarshalObject(body, &r); err != nil {
		return nil, err
	}
	if r.Type != "message" {
		return nil, &Error{Kind: KindMalformed, Err: errors.New(`type is not "message"`)}
	}
	resp := &Response{Model: r.Model}
	if r.StopReason != nil {
		resp.FinishReason = *r.StopReason
	}
	if err := checkFields(resp); err != nil {
		return nil, err
	}
	if r.Usage != nil {
		resp.Usage = Usage{r.Usage.InputTokens, r.Usage.OutputTokens}
	}
	if err := checkUsage(resp.Usage); err != nil {
		return nil, err
	}
	var text strings.Builder
	for _, b := range r.Content {
		if b.Type != "text" {
			continue // e.g. thinking blocks: not part of the answer
		}
		if b.Text == nil {
			return nil, &Error{Kind: KindMalformed, Err: errors.New("text block without text")}
		}
		text.WriteString(*b.Text)
	}
	if text.Len() == 0 {
		return nil, &Error{Kind: KindNoContent, Err: fmt.Errorf("no text content (stop reason %q)", resp.FinishReason)}
	}
	resp.Text = text.String()
	return resp, nil
}
