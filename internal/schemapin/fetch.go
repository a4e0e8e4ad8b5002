package schemapin

import (
	"context"
	"fmt"

	"symbi/internal/safefetch"
)

// DefaultTimeout bounds a whole key fetch: connection, TLS, headers and body.
const DefaultTimeout = safefetch.DefaultTimeout

// fetchKey downloads the key at rawURL under the safe-fetch rules (package safefetch).
func (v *Verifier) fetchKey(ctx context.Context, rawURL string) ([]byte, error) {
	body, err := safefetch.Get(ctx, rawURL, safefetch.Options{
		AllowInsecure: v.allowInsecure,
		AllowPrivate:  v.allowPrivate,
		InsecureHint:  "use https, or set SYMBI_SCHEMAPIN_ALLOW_INSECURE=1",
		PrivateHint:   "set SYMBI_SCHEMAPIN_ALLOW_PRIVATE=1 to allow",
		RootCAs:       v.RootCAs,
		Timeout:       v.Timeout,
		MaxBytes:      MaxKeyDocBytes,
		Accept:        "application/json, application/x-pem-file, text/plain",
	})
	if err != nil {
		return nil, fmt.Errorf("key URL: %w", err)
	}
	return body, nil
}
