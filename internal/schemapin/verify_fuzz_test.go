package schemapin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

// FuzzVerify: verify_schema's schema and signature arguments are any text, and its
// public_key_pem any text up to its limit. Verify never panics; it refuses with a client's
// code (invalid_request, limit_exceeded) or answers; an answer that says verified has a
// signature, a key fingerprint and the schema's digest, and is not revoked. With the
// signer's key, the vectors' signed schema and signatures are the seeds that verify.
func FuzzVerify(f *testing.F) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schemapin", name))
		if err != nil {
			f.Fatal(err)
		}
		return string(b)
	}
	pem, schema := read("signer.pub.pem"), read("schema.json")
	for _, sig := range []string{read("schema.sig.b64"), read("schema.sig.digest.b64"), read("schema.sig.raw.b64"), "", "AAAA", "MEUCIQ==\n", "*"} {
		f.Add(schema, sig, pem)
	}
	f.Add(read("schema.signed.json"), "", pem)
	f.Add(read("schema.tampered.json"), read("schema.sig.b64"), pem)
	f.Add(schema, read("schema.sig.b64"), read("wrong.pub.pem"))
	f.Add(schema, "", read("malformed.pub.pem"))
	f.Add(`{"signature":1}`, "", pem)
	v := NewVerifier(func(string) string { return "" })
	f.Fuzz(func(t *testing.T, schema, sig, key string) {
		if key == "" {
			return // a key URL: a fetch, not fuzzed here
		}
		res, err := v.Verify(context.Background(), Request{Schema: schema, Signature: sig, PublicKeyPEM: key})
		if err != nil {
			if c := errcode.Of(err); c != errcode.InvalidRequest && c != errcode.LimitExceeded {
				t.Fatalf("refused with code %s: %v", c, err)
			}
			return
		}
		if res.Verified && (res.Revoked || res.KeyFingerprint == "" || len(res.SchemaHash) != 64 ||
			strings.TrimSpace(sig) == "" && !strings.Contains(schema, "signature")) {
			t.Fatalf("verified without what a verification needs: %+v", res)
		}
		if res.Message == "" {
			t.Fatalf("an answer without a message: %+v", res)
		}
	})
}
