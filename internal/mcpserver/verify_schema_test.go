package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/schemapin"
)

// vectorDir holds the SchemaPin vectors shared with internal/schemapin and the CLI.
var vectorDir = filepath.Join("..", "..", "testdata", "schemapin")

// schemaVector is one case of vectors.json.
type schemaVector struct {
	Name      string `json:"name"`
	Schema    string `json:"schema"`
	Key       string `json:"key"`
	KeyURL    string `json:"key_url"`
	Signature string `json:"signature"`
	Error     string `json:"error"`
	Verified  bool   `json:"verified"`
}

func readVector(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cliVerify does what `symbi schema verify --json SCHEMA (--key FILE | --key-url URL)
// [--signature SIG]` does, in process: it builds the request from the files, verifies it
// with a verifier reading env, and returns the JSON the CLI prints, or its error.
func cliVerify(t *testing.T, v *schemapin.Verifier, vec schemaVector, keyURL string) ([]byte, error) {
	t.Helper()
	req := schemapin.Request{Schema: readVector(t, vec.Schema), PublicKeyURL: keyURL}
	if vec.Signature != "" {
		req.Signature = readVector(t, vec.Signature)
	}
	if keyURL == "" {
		req.PublicKeyPEM = readVector(t, vec.Key)
	}
	res, err := v.Verify(context.Background(), req)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), nil
}

// TestVerifySchemaAgreesWithCLI runs every vector through the MCP tool and through the
// CLI's library path, with key URLs served over TLS and over opted-in plain http, and
// requires the same result or the same coded error.
func TestVerifySchemaAgreesWithCLI(t *testing.T) {
	var vectors []schemaVector
	if err := json.Unmarshal([]byte(readVector(t, "vectors.json")), &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 11 {
		t.Fatalf("only %d vectors", len(vectors))
	}
	tlsSrv := httptest.NewTLSServer(http.FileServer(http.Dir(vectorDir)))
	defer tlsSrv.Close()
	plainSrv := httptest.NewServer(http.FileServer(http.Dir(vectorDir)))
	defer plainSrv.Close()
	for _, mode := range []struct {
		name string
		env  map[string]string
		srv  *httptest.Server
	}{
		{"https", map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}, tlsSrv},
		{"insecure http", map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1", "SYMBI_SCHEMAPIN_ALLOW_INSECURE": "1"}, plainSrv},
	} {
		verifier := func() *schemapin.Verifier {
			v := schemapin.NewVerifier(func(k string) string { return mode.env[k] })
			if mode.srv == tlsSrv {
				v.RootCAs = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
			}
			return v
		}
		cs := serve(t, t.TempDir(), serveOpts{env: mode.env, schemas: verifier()})
		cli := verifier()
		for _, vec := range vectors {
			t.Run(mode.name+"/"+vec.Name, func(t *testing.T) {
				args := map[string]any{"schema": readVector(t, vec.Schema)}
				var keyURL string
				if vec.Signature != "" {
					args["signature"] = readVector(t, vec.Signature)
				}
				if vec.KeyURL != "" {
					keyURL = mode.srv.URL + "/" + vec.KeyURL
					args["public_key_url"] = keyURL
				} else {
					args["public_key_pem"] = readVector(t, vec.Key)
				}
				want, wantErr := cliVerify(t, cli, vec, keyURL)
				res := call(t, cs, "verify_schema", args)
				if vec.Error != "" {
					if string(errcode.Of(wantErr)) != vec.Error {
						t.Fatalf("CLI path: %s, %v; want error %s", want, wantErr, vec.Error)
					}
					wantToolError(t, res, vec.Error)
					if got := textOf(t, res); got != errcode.Text(wantErr) {
						t.Fatalf("tool error %q, CLI error %q", got, errcode.Text(wantErr))
					}
					return
				}
				if wantErr != nil {
					t.Fatalf("CLI path error %v", wantErr)
				}
				if res.IsError {
					t.Fatalf("tool error %s; an unverified signature is a result", textOf(t, res))
				}
				raw := structuredJSON(t, res)
				if !sameJSON(t, raw, want) || !sameJSON(t, []byte(textOf(t, res)), want) {
					t.Fatalf("tool %s\nCLI  %s", raw, want)
				}
				var got schemapin.Result
				decodeStrict(t, raw, &got)
				if got.Verified != vec.Verified {
					t.Fatalf("verified %v, vector says %v", got.Verified, vec.Verified)
				}
			})
		}
	}
}

// TestVerifySchemaErrors covers the tool's refusals: limits, key choice and unsafe URLs.
func TestVerifySchemaErrors(t *testing.T) {
	cs := serve(t, t.TempDir(), serveOpts{})
	schema := readVector(t, "schema.signed.json")
	pem := readVector(t, "signer.pub.pem")
	tests := []struct {
		name string
		args map[string]any
		code string
		msg  []string
	}{
		{"schema over 1 MiB", map[string]any{"schema": strings.Repeat(" ", schemapin.MaxSchemaBytes+1), "public_key_pem": pem}, "limit_exceeded", []string{"schema is 1048577 bytes"}},
		{"key URL over 8 KiB", map[string]any{"schema": schema, "public_key_url": "https://example.com/" + strings.Repeat("k", schemapin.MaxKeyURLBytes)}, "limit_exceeded", []string{"public_key_url is"}},
		{"schema not JSON", map[string]any{"schema": "not json", "public_key_pem": pem}, "invalid_request", []string{"malformed JSON"}},
		{"schema not an object", map[string]any{"schema": "[1,2]", "public_key_pem": pem}, "invalid_request", []string{"not a JSON object"}},
		{"schema with trailing data", map[string]any{"schema": "{} {}", "public_key_pem": pem}, "invalid_request", []string{"data after the top-level value"}},
		{"no key", map[string]any{"schema": schema}, "invalid_request", []string{"a key is required"}},
		{"two keys", map[string]any{"schema": schema, "public_key_pem": pem, "public_key_url": "https://example.com/k"}, "invalid_request", []string{"not both"}},
		{"signature argument differs", map[string]any{"schema": schema, "public_key_pem": pem, "signature": strings.TrimSpace(readVector(t, "schema.sig.raw.b64")) + "AA"}, "invalid_request", []string{"differs"}},
		{"plain http", map[string]any{"schema": schema, "public_key_url": "http://127.0.0.1:1/k"}, "invalid_request", []string{"plain http is refused"}},
		{"file scheme", map[string]any{"schema": schema, "public_key_url": "file:///etc/passwd"}, "invalid_request", []string{`scheme "file" is refused`}},
		{"loopback", map[string]any{"schema": schema, "public_key_url": "https://127.0.0.1:1/k"}, "invalid_request", []string{"loopback"}},
		{"metadata", map[string]any{"schema": schema, "public_key_url": "https://169.254.169.254/latest"}, "invalid_request", []string{"metadata"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantToolError(t, call(t, cs, "verify_schema", tt.args), tt.code, tt.msg...)
		})
	}
}
