package inference_test

import (
	"fmt"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/inference"
)

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		provider string
		model    string
		url      string
		errIn    string // non-empty: want errcode.NoProvider with this text
	}{
		{name: "nothing", env: nil, errIn: "no inference provider configured"},
		{name: "openai key", env: map[string]string{"OPENAI_API_KEY": "k"}, provider: "openai", model: inference.DefaultOpenAIModel, url: "https://api.openai.com/v1/chat/completions"},
		{name: "local base alone", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1/", "CHAT_MODEL": "llama3:8b"}, provider: "openai", model: "llama3:8b", url: "http://localhost:11434/v1/chat/completions"},
		{name: "lan base without key", env: map[string]string{"OPENAI_BASE_URL": "http://10.0.0.5:8000/v1"}, provider: "openai", model: inference.DefaultOpenAIModel, url: "http://10.0.0.5:8000/v1/chat/completions"},
		{name: "anthropic key", env: map[string]string{"ANTHROPIC_API_KEY": "k"}, provider: "anthropic", model: inference.DefaultAnthropicModel, url: "https://api.anthropic.com/v1/messages"},
		{name: "anthropic base", env: map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/", "ANTHROPIC_MODEL": "m"}, provider: "anthropic", model: "m", url: "http://127.0.0.1:9/v1/messages"},
		{name: "openrouter key", env: map[string]string{"OPENROUTER_API_KEY": "k"}, provider: "openrouter", model: inference.DefaultOpenRouterModel, url: "https://openrouter.ai/api/v1/chat/completions"},
		{name: "openai before anthropic", env: map[string]string{"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "OPENROUTER_API_KEY": "k"}, provider: "openai", model: inference.DefaultOpenAIModel, url: "https://api.openai.com/v1/chat/completions"},
		{name: "anthropic before openrouter", env: map[string]string{"ANTHROPIC_API_KEY": "k", "OPENROUTER_API_KEY": "k"}, provider: "anthropic", model: inference.DefaultAnthropicModel, url: "https://api.anthropic.com/v1/messages"},
		{name: "explicit choice", env: map[string]string{"SYMBI_PROVIDER": "openrouter", "OPENAI_API_KEY": "k", "OPENROUTER_API_KEY": "k", "OPENROUTER_MODEL": "x/y"}, provider: "openrouter", model: "x/y", url: "https://openrouter.ai/api/v1/chat/completions"},
		{name: "explicit anthropic", env: map[string]string{"SYMBI_PROVIDER": "anthropic", "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}, provider: "anthropic", model: inference.DefaultAnthropicModel, url: "https://api.anthropic.com/v1/messages"},
		{name: "explicit without config", env: map[string]string{"SYMBI_PROVIDER": "anthropic", "OPENAI_API_KEY": "k"}, errIn: "needs ANTHROPIC_API_KEY"},
		{name: "explicit openai without config", env: map[string]string{"SYMBI_PROVIDER": "openai"}, errIn: "needs OPENAI_API_KEY"},
		{name: "explicit openrouter without key", env: map[string]string{"SYMBI_PROVIDER": "openrouter", "OPENROUTER_BASE_URL": "http://127.0.0.1:1/v1"}, errIn: "needs OPENROUTER_API_KEY"},
		{name: "unknown provider", env: map[string]string{"SYMBI_PROVIDER": "ollama", "OPENAI_API_KEY": "k"}, errIn: "unknown provider"},
		{name: "bad scheme", env: map[string]string{"OPENAI_BASE_URL": "ftp://host/v1"}, errIn: "scheme must be http or https"},
		{name: "no host", env: map[string]string{"OPENAI_BASE_URL": "http:///v1"}, errIn: "no host"},
		{name: "userinfo", env: map[string]string{"OPENAI_BASE_URL": "https://u:p@host/v1"}, errIn: "credentials in the URL"},
		{name: "query", env: map[string]string{"ANTHROPIC_BASE_URL": "https://host/?x=1"}, errIn: "query or fragment"},
		{name: "key over plain http", env: map[string]string{"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://example.com/v1"}, errIn: "plain http"},
		{name: "key with newline", env: map[string]string{"OPENAI_API_KEY": "k\nX-Evil: 1"}, errIn: "OPENAI_API_KEY contains"},
		{name: "model with space", env: map[string]string{"OPENAI_API_KEY": "k", "CHAT_MODEL": "a b"}, errIn: "CHAT_MODEL contains"},
		{name: "key at its limit", env: map[string]string{"OPENAI_API_KEY": strings.Repeat("k", 4096), "CHAT_MODEL": strings.Repeat("m", 256)}, provider: "openai", model: strings.Repeat("m", 256), url: "https://api.openai.com/v1/chat/completions"},
		{name: "key over its limit", env: map[string]string{"OPENAI_API_KEY": strings.Repeat("k", 4097)}, errIn: "OPENAI_API_KEY is longer than 4096 bytes"},
		{name: "model over its limit", env: map[string]string{"OPENAI_API_KEY": "k", "CHAT_MODEL": strings.Repeat("m", 257)}, errIn: "CHAT_MODEL is longer than 256 bytes"},
		{name: "anthropic key over its limit", env: map[string]string{"ANTHROPIC_API_KEY": strings.Repeat("k", 4097)}, errIn: "ANTHROPIC_API_KEY is longer than 4096 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := inference.FromEnv(func(k string) string { return tt.env[k] })
			if tt.errIn != "" {
				if errcode.Of(err) != errcode.NoProvider || !strings.Contains(err.Error(), tt.errIn) {
					t.Fatalf("err = %v, want no_provider containing %q", err, tt.errIn)
				}
				if strings.Contains(err.Error(), "k\n") {
					t.Errorf("error leaks the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			call, err := p.Prepare(inference.Conversation{System: "s", Prompt: "p"}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != tt.provider || p.Model() != tt.model || call.URL != tt.url || call.Model != tt.model || call.Provider != tt.provider {
				t.Errorf("got %s %s %s, want %s %s %s", p.Name(), p.Model(), call.URL, tt.provider, tt.model, tt.url)
			}
		})
	}
}

func ExampleFromEnv() {
	env := map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "CHAT_MODEL": "llama3"}
	p, err := inference.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	call, err := p.Prepare(inference.Conversation{System: "You are agent \"echo\".", Prompt: "hi"}, 64)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Name(), call.URL)
	fmt.Printf("%s\n", call.Body)
	// Output:
	// openai http://127.0.0.1:11434/v1/chat/completions
	// {"model":"llama3","max_tokens":64,"messages":[{"role":"system","content":"You are agent \"echo\"."},{"role":"user","content":"hi"}]}
}

// TestBaseURLWithoutHostRefused: a base URL whose host is empty but for a port
// ("http://:8080/v1") has no host; it must be a no_provider error naming the variable.
// Contract: docs/providers.md "Every configuration problem is a no_provider error that
// names the variable: a base URL that ... has no host" (its URL's Host is ":8080";
// accepted, the client would dial the local machine).
func TestBaseURLWithoutHostRefused(t *testing.T) {
	for variable, env := range map[string]map[string]string{
		"OPENAI_BASE_URL":     {"OPENAI_BASE_URL": "http://:8080/v1"},
		"ANTHROPIC_BASE_URL":  {"ANTHROPIC_BASE_URL": "https://:443"},
		"OPENROUTER_BASE_URL": {"SYMBI_PROVIDER": "openrouter", "OPENROUTER_API_KEY": "k", "OPENROUTER_BASE_URL": "https://:443/api/v1"},
	} {
		t.Run(variable, func(t *testing.T) {
			p, err := inference.FromEnv(func(k string) string { return env[k] })
			if errcode.Of(err) != errcode.NoProvider || !strings.Contains(err.Error(), variable) {
				t.Fatalf("FromEnv = %v, %v; want no_provider naming %s (no host)", p, err, variable)
			}
		})
	}
}
