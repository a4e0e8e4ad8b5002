package inference

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"symbi/internal/errcode"
)

// provider is one configured endpoint speaking one wire format.
type provider struct {
	name, model, url string
	key              string      // the API key ("" without one)
	header           http.Header // fixed headers, including authentication
	build            func(c Conversation, model string, maxTokens int) ([]byte, error)
	parse            func(body []byte) (*Response, error)
	client           *http.Client
}

func (p *provider) Name() string  { return p.name }
func (p *provider) Model() string { return p.model }

func (p *provider) Prepare(c Conversation, maxTokens int) (*Call, error) {
	if err := checkPrepare(c, maxTokens); err != nil {
		return nil, err
	}
	body, err := p.build(c, p.model, maxTokens)
	if err != nil {
		return nil, errcode.Wrap(errcode.Internal, fmt.Errorf("encoding %s request: %w", p.name, err))
	}
	return newCall(p.name, p.model, p.url, p.key, maxTokens, body, p.header.Clone(), p.parse, p.client)
}

// checkBase validates a base URL named by variable and returns it without trailing
// slashes. Plain http is allowed, except that an API key is never sent in clear text to a
// host other than a loopback one.
//
// No message quotes the URL: one that is refused may carry a secret (credentials, or a key
// in its query), and the error reaches every caller of invoke_agent. A message names the
// variable, the rule, and at most the scheme and host of a URL that parsed.
func checkBase(variable, raw string, hasKey bool) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errcode.Errorf(errcode.NoProvider, "%s is not a valid URL", variable)
	}
	switch {
	case u.User != nil:
		return "", errcode.Errorf(errcode.NoProvider, "%s: credentials in the URL are not allowed; use the API key variable", variable)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errcode.Errorf(errcode.NoProvider, "%s: the scheme must be http or https", variable)
	case u.Hostname() == "" || u.Opaque != "":
		return "", errcode.Errorf(errcode.NoProvider, "%s: no host", variable)
	case u.RawQuery != "" || u.ForceQuery || strings.Contains(raw, "#"):
		return "", errcode.Errorf(errcode.NoProvider, "%s (%s://%s): a query or fragment is not allowed", variable, u.Scheme, u.Host)
	case u.Scheme == "http" && hasKey && !isLoopback(u.Hostname()):
		return "", errcode.Errorf(errcode.NoProvider, "%s (%s://%s): refusing to send an API key over plain http to a non-loopback host; use https", variable, u.Scheme, u.Host)
	}
	return strings.TrimRight(raw, "/"), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkToken refuses a key or model name that cannot travel safely in a header or body.
func checkToken(variable, v string, maxLen int) error {
	if len(v) > maxLen {
		return errcode.Errorf(errcode.NoProvider, "%s is longer than %d bytes", variable, maxLen)
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return errcode.Errorf(errcode.NoProvider, "%s contains a space, control or non-ASCII character", variable)
		}
	}
	return nil
}
