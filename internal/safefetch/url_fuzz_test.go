package safefetch

import (
	"context"
	"net/url"
	"testing"

	"symbi/internal/errcode"
)

// FuzzGetURL: a key URL comes from an MCP client, a JWK set URL from the operator. Get
// never panics and never returns a body for a URL it must refuse before any connection:
// one that does not parse, a scheme other than https (http only when allowed), no host,
// or credentials — each refused with invalid_request. (The context is cancelled: no
// connection is made whatever the URL.)
func FuzzGetURL(f *testing.F) {
	for _, s := range []string{"https://example.com/k.json", "http://example.com/", "ftp://x/", "https://user:pw@example.com/",
		"https:///nohost", "https://[::1]:443/", "https://%zz/", "//example.com", "https://example.com:99999/", "\x00", "", " https://a/"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.Fuzz(func(t *testing.T, raw string, insecure bool) {
		body, err := Get(ctx, raw, Options{MaxBytes: 1 << 10, AllowInsecure: insecure})
		if err == nil || body != nil {
			t.Fatalf("%q: a body (%d bytes) with a cancelled context", raw, len(body))
		}
		u, perr := url.Parse(raw)
		refused := perr != nil || (u.Scheme != "https" && !(u.Scheme == "http" && insecure)) || u.Hostname() == "" || u.User != nil
		if refused && errcode.Of(err) != errcode.InvalidRequest {
			t.Fatalf("%q: refused with %s (%v), want invalid_request before any connection", raw, errcode.Of(err), err)
		}
	})
}
