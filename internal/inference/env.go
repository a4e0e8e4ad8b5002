package inference

import "symbi/internal/errcode"

// NoProviderHint says what to set when no provider is configured. It is what a user sees
// in a no_provider error, so it names the variables, not a document they may not have.
const NoProviderHint = "no inference provider configured: set OPENAI_BASE_URL for a local OpenAI-compatible model (Ollama: http://localhost:11434/v1; llama.cpp, vLLM, LM Studio), or OPENAI_API_KEY for OpenAI, or ANTHROPIC_API_KEY, or OPENROUTER_API_KEY, in the environment symbi mcp starts with (the symbi README's Configuration section lists every variable)"

// FromEnv chooses and configures a provider from the environment.
//
// SYMBI_PROVIDER (openai, anthropic or openrouter) chooses explicitly. Otherwise the first
// match wins: OPENAI_API_KEY or OPENAI_BASE_URL → openai; ANTHROPIC_API_KEY or
// ANTHROPIC_BASE_URL → anthropic; OPENROUTER_API_KEY → openrouter. An empty variable
// counts as unset. Nothing configured, an unknown SYMBI_PROVIDER, or an invalid setting
// is an errcode.NoProvider error naming the variable.
func FromEnv(getenv func(string) string) (Provider, error) {
	name := getenv("SYMBI_PROVIDER")
	if name == "" {
		switch {
		case getenv("OPENAI_API_KEY") != "" || getenv("OPENAI_BASE_URL") != "":
			name = "openai"
		case getenv("ANTHROPIC_API_KEY") != "" || getenv("ANTHROPIC_BASE_URL") != "":
			name = "anthropic"
		case getenv("OPENROUTER_API_KEY") != "":
			name = "openrouter"
		default:
			return nil, errcode.Errorf(errcode.NoProvider, "%s", NoProviderHint)
		}
	}
	or := func(variable, def string) string {
		if v := getenv(variable); v != "" {
			return v
		}
		return def
	}
	switch name {
	case "openai":
		if getenv("OPENAI_API_KEY") == "" && getenv("OPENAI_BASE_URL") == "" {
			return nil, errcode.Errorf(errcode.NoProvider, "SYMBI_PROVIDER=openai needs OPENAI_API_KEY or OPENAI_BASE_URL")
		}
		return NewOpenAI(or("OPENAI_BASE_URL", DefaultOpenAIBaseURL), getenv("OPENAI_API_KEY"), or("CHAT_MODEL", DefaultOpenAIModel))
	case "anthropic":
		if getenv("ANTHROPIC_API_KEY") == "" && getenv("ANTHROPIC_BASE_URL") == "" {
			return nil, errcode.Errorf(errcode.NoProvider, "SYMBI_PROVIDER=anthropic needs ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL")
		}
		return NewAnthropic(or("ANTHROPIC_BASE_URL", DefaultAnthropicBaseURL), getenv("ANTHROPIC_API_KEY"), or("ANTHROPIC_MODEL", DefaultAnthropicModel))
	case "openrouter":
		if getenv("OPENROUTER_API_KEY") == "" {
			return nil, errcode.Errorf(errcode.NoProvider, "SYMBI_PROVIDER=openrouter needs OPENROUTER_API_KEY")
		}
		return newOpenAICompatible("openrouter", "OPENROUTER_BASE_URL", "OPENROUTER_API_KEY", "OPENROUTER_MODEL",
			or("OPENROUTER_BASE_URL", DefaultOpenRouterBaseURL), getenv("OPENROUTER_API_KEY"), or("OPENROUTER_MODEL", DefaultOpenRouterModel))
	}
	return nil, errcode.Errorf(errcode.NoProvider, "SYMBI_PROVIDER=%q: unknown provider (want openai, anthropic or openrouter)", bounded(name, 64))
}
