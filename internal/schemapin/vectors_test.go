package schemapin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/schemapin"
)

// vectorDir holds the openssl-made vectors (see make-vectors.sh there).
var vectorDir = filepath.Join("..", "..", "testdata", "schemapin")

// vector is one case of vectors.json.
type vector struct {
	Name           string `json:"name"`
	Schema         string `json:"schema"`
	Key            string `json:"key"`
	KeyURL         string `json:"key_url"`
	Signature      string `json:"signature"`
	Error          string `json:"error"`
	Verified       bool   `json:"verified"`
	Revoked        bool   `json:"revoked"`
	SchemaHash     string `json:"schema_hash"`
	KeyFingerprint string `json:"key_fingerprint"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	var vs []vector
	if err := json.Unmarshal(readVector(t, "vectors.json"), &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 11 {
		t.Fatalf("only %d vectors", len(vs))
	}
	return vs
}

func readVector(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// request builds the library request for v; key URLs are served by baseURL.
func (v vector) request(t *testing.T, baseURL string) schemapin.Request {
	r := schemapin.Request{Schema: string(readVector(t, v.Schema))}
	if v.Signature != "" {
		r.Signature = string(readVector(t, v.Signature))
	}
	if v.KeyURL != "" {
		r.PublicKeyURL = baseURL + "/" + v.KeyURL
	} else {
		r.PublicKeyPEM = string(readVector(t, v.Key))
	}
	return r
}

// check compares an outcome with the vector's expectation.
func (v vector) check(t *testing.T, res *schemapin.Result, err error) {
	t.Helper()
	if v.Error != "" {
		if err == nil || string(errcode.Of(err)) != v.Error {
			t.Fatalf("got result %+v, error %v; want error %s", res, err, v.Error)
		}
		return
	}
	if err != nil {
		t.Fatalf("error %v", err)
	}
	if res.Verified != v.Verified || res.Revoked != v.Revoked || res.SchemaHash != v.SchemaHash || res.KeyFingerprint != v.KeyFingerprint || res.Message == "" {
		t.Fatalf("got %+v\nwant verified=%v revoked=%v schema_hash=%s key_fingerprint=%s", res, v.Verified, v.Revoked, v.SchemaHash, v.KeyFingerprint)
	}
}

func TestVectors(t *testing.T) {
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(vectorDir)))
	defer srv.Close()
	v := schemapin.NewVerifier(env(map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}))
	v.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	for _, vec := range loadVectors(t) {
		t.Run(vec.Name, func(t *testing.T) {
			res, err := v.Verify(context.Background(), vec.request(t, srv.URL))
			vec.check(t, res, err)
		})
	}
}

// TestCanonicalizeMatchesPython checks Canonicalize against the canonical bytes made by
// Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False).
func TestCanonicalizeMatchesPython(t *testing.T) {
	got, err := schemapin.Canonicalize(readVector(t, "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := readVector(t, "schema.canonical.json"); string(got) != string(want) {
		t.Fatalf("canonical bytes differ\ngot  %s\nwant %s", got, want)
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
