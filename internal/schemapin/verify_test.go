package schemapin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/schemapin"
)

func TestVerifyRequests(t *testing.T) {
	pem := string(readVector(t, "signer.pub.pem"))
	sig := strings.TrimSpace(string(readVector(t, "schema.sig.b64")))
	schema := string(readVector(t, "schema.json"))
	signed := string(readVector(t, "schema.signed.json"))
	tests := []struct {
		name     string
		req      schemapin.Request
		code     errcode.Code // error expected
		verified bool
		msg      string
	}{
		{"schema over 1 MiB", schemapin.Request{Schema: strings.Repeat(" ", schemapin.MaxSchemaBytes+1), PublicKeyPEM: pem}, errcode.LimitExceeded, false, "over the 1048576-byte limit"},
		{"schema of exactly 1 MiB", schemapin.Request{Schema: schema + strings.Repeat(" ", schemapin.MaxSchemaBytes-len(schema)), Signature: sig, PublicKeyPEM: pem}, "", true, "signature verified"},
		{"key URL over 8 KiB", schemapin.Request{Schema: schema, PublicKeyURL: "https://example.com/" + strings.Repeat("a", schemapin.MaxKeyURLBytes)}, errcode.LimitExceeded, false, "public_key_url is 8212 bytes"},
		{"inline key over 64 KiB", schemapin.Request{Schema: schema, PublicKeyPEM: pem + strings.Repeat("\n", schemapin.MaxKeyDocBytes)}, errcode.LimitExceeded, false, "public_key_pem is"},
		{"no key", schemapin.Request{Schema: signed}, errcode.InvalidRequest, false, "a key is required"},
		{"two keys", schemapin.Request{Schema: signed, PublicKeyPEM: pem, PublicKeyURL: "https://example.com/k"}, errcode.InvalidRequest, false, "not both"},
		{"schema not an object", schemapin.Request{Schema: `["x"]`, PublicKeyPEM: pem}, errcode.InvalidRequest, false, "not a JSON object"},
		{"schema malformed", schemapin.Request{Schema: `{"a":1,"a":1}`, PublicKeyPEM: pem}, errcode.InvalidRequest, false, "duplicate object key"},
		{"signature member not a string", schemapin.Request{Schema: `{"signature":1}`, PublicKeyPEM: pem}, errcode.InvalidRequest, false, `"signature" is not a string`},
		{"signatures disagree", schemapin.Request{Schema: signed, Signature: "AAAA", PublicKeyPEM: pem}, errcode.InvalidRequest, false, "differs"},
		{"signatures agree", schemapin.Request{Schema: signed, Signature: sig + "\n", PublicKeyPEM: pem}, "", true, "signature verified"},
		{"signature not base64", schemapin.Request{Schema: schema, Signature: "***", PublicKeyPEM: pem}, "", false, "not valid standard base64"},
		{"signature empty member", schemapin.Request{Schema: `{"signature":""}`, PublicKeyPEM: pem}, "", false, "no signature"},
		{"signature over other bytes", schemapin.Request{Schema: `{}`, Signature: sig, PublicKeyPEM: pem}, "", false, "does not match"},
		{"private key instead of public", schemapin.Request{Schema: schema, PublicKeyPEM: "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"}, errcode.InvalidRequest, false, `"EC PRIVATE KEY"`},
		{"data after the PEM block", schemapin.Request{Schema: schema, PublicKeyPEM: pem + "x"}, errcode.InvalidRequest, false, "data after the PEM block"},
		{"non-P-256 key", schemapin.Request{Schema: schema, PublicKeyPEM: string(readVector(t, "p384.pub.pem"))}, errcode.InvalidRequest, false, "ECDSA P-384 key, want ECDSA P-256"},
	}
	v := schemapin.NewVerifier(env(nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := v.Verify(context.Background(), tt.req)
			if tt.code != "" {
				if !errors.Is(err, tt.code) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("got %+v, error %v; want %s containing %q", res, err, tt.code, tt.msg)
				}
				return
			}
			if err != nil || res.Verified != tt.verified || !strings.Contains(res.Message, tt.msg) {
				t.Fatalf("got %+v, error %v; want verified=%v, message containing %q", res, err, tt.verified, tt.msg)
			}
		})
	}
}

// TestMangledSignature flips each bit of the DER and raw signatures: none verifies.
func TestMangledSignature(t *testing.T) {
	v := schemapin.NewVerifier(env(nil))
	pem := string(readVector(t, "signer.pub.pem"))
	schema := string(readVector(t, "schema.json"))
	for _, file := range []string{"schema.sig.b64", "schema.sig.raw.b64"} {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(readVector(t, file))))
		if err != nil {
			t.Fatal(err)
		}
		for i := range raw {
			for bit := range 8 {
				m := append([]byte(nil), raw...)
				m[i] ^= 1 << bit
				res, err := v.Verify(context.Background(), schemapin.Request{Schema: schema, Signature: base64.StdEncoding.EncodeToString(m), PublicKeyPEM: pem})
				if err != nil || res.Verified {
					t.Fatalf("%s byte %d bit %d: got %+v, %v", file, i, bit, res, err)
				}
			}
		}
	}
}

func TestKeyDocuments(t *testing.T) {
	pem := string(readVector(t, "signer.pub.pem"))
	quoted := strings.ReplaceAll(strings.TrimSpace(pem), "\n", `\n`)
	docs := map[string]string{
		"/no-key":          `{"revoked_keys":[]}`,
		"/key-not-string":  `{"public_key_pem":7}`,
		"/bad-revocation":  `{"public_key_pem":"` + quoted + `","revoked_keys":["md5:00"]}`,
		"/duplicate":       `{"public_key_pem":"` + quoted + `","public_key_pem":"x"}`,
		"/upper-revoked":   `{"public_key_pem":"` + quoted + `","revoked_keys":["sha256:` + strings.ToUpper(strings.TrimPrefix(fingerprintOf(t), "sha256:")) + `"]}`,
		"/not-a-key":       `hello`,
		"/trailing-object": `{"public_key_pem":"` + quoted + `"} {}`,
		// Member names are exact: another case is another member, ignored.
		"/key-in-capitals":   `{"PUBLIC_KEY_PEM":"` + quoted + `"}`,
		"/revocation-folded": `{"public_key_pem":"` + quoted + `","revoked_keys":["` + fingerprintOf(t) + `"],"Revoked_Keys":[]}`,
		"/junk-before-pem":   "<html>hello\n" + pem,
		"/broken-pem-first":  "-----BEGIN PUBLIC KEY-----\n!!\n-----END PUBLIC KEY-----\n" + pem,
		// null is neither absent nor the member's type.
		"/key-null":     `{"public_key_pem":null}`,
		"/revoked-null": `{"public_key_pem":"` + quoted + `","revoked_keys":null}`,
		// White space before the block, on its line, is white space.
		"/space-before-key": `{"public_key_pem":" \t` + quoted + `"}`,
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(docs[r.URL.Path]))
	}))
	defer srv.Close()
	v := schemapin.NewVerifier(env(map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}))
	v.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tests := []struct {
		path, msg string
		revoked   bool
	}{
		{"/key-null", `"public_key_pem" is not a string`, false},
		{"/revoked-null", `"revoked_keys" is not an array`, false},
		{"/space-before-key", "", false},
		{"/no-key", `no "public_key_pem" member`, false},
		{"/key-not-string", `"public_key_pem" is not a string`, false},
		{"/key-in-capitals", `no "public_key_pem" member`, false},
		{"/revocation-folded", "", true},
		{"/junk-before-pem", "data before the PEM block", false},
		{"/broken-pem-first", "2 PEM blocks", false},
		{"/bad-revocation", `revoked_keys[0] "md5:00" is not sha256`, false},
		{"/duplicate", `duplicate object key "public_key_pem"`, false},
		{"/upper-revoked", "", true},
		{"/not-a-key", "no PEM block", false},
		{"/trailing-object", "after the top-level value", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, err := v.Verify(context.Background(), schemapin.Request{Schema: string(readVector(t, "schema.signed.json")), PublicKeyURL: srv.URL + tt.path})
			if tt.revoked {
				if err != nil || res.Verified || !res.Revoked || !strings.Contains(res.Message, "revoked") {
					t.Fatalf("got %+v, %v; want revoked", res, err)
				}
				return
			}
			if tt.msg == "" {
				if err != nil || !res.Verified {
					t.Fatalf("got %+v, %v; want verified", res, err)
				}
				return
			}
			if !errors.Is(err, errcode.InvalidRequest) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %+v, error %v; want invalid_request containing %q", res, err, tt.msg)
			}
		})
	}
}

func fingerprintOf(t *testing.T) string {
	for _, vec := range loadVectors(t) {
		if vec.Name == "valid" {
			return vec.KeyFingerprint
		}
	}
	t.Fatal("no valid vector")
	return ""
}

// TestSignatureBase64WithLineBreaksRefused: a signature containing CR/LF inside the
// base64 text is not "standard base64 with padding (RFC 4648 §4)" (RFC 4648 §3.3:
// characters outside the alphabet MUST be rejected) and must give verified:false with
// "not valid standard base64", like any other non-alphabet character.
// docs/schemapin.md "Signatures": "The signature is standard base64 with padding (RFC 4648
// §4; the URL-safe alphabet and unpadded forms are refused)" and "A signature that is not
// valid base64 ... gives verified: false".
// (A strict base64 decoder still drops '\r' and '\n' anywhere in its input: one signature
// would have endless accepted spellings.)
func TestSignatureBase64WithLineBreaksRefused(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	digest := sha256.Sum256([]byte(`{"a":1}`))
	sig, err := ecdsa.SignASN1(rand.Reader, k, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(sig)
	v := schemapin.NewVerifier(func(string) string { return "" })
	// Sanity: the clean form verifies.
	if res, err := v.Verify(context.Background(), schemapin.Request{Schema: `{"a":1}`, Signature: b64, PublicKeyPEM: pemText}); err != nil || !res.Verified {
		t.Fatalf("clean signature: %+v, %v", res, err)
	}
	for _, bad := range []string{b64[:10] + "\n" + b64[10:], b64[:10] + "\r\n" + b64[10:], b64[:20] + "\r" + b64[20:]} {
		res, err := v.Verify(context.Background(), schemapin.Request{Schema: `{"a":1}`, Signature: bad, PublicKeyPEM: pemText})
		if err != nil {
			t.Fatalf("%q: error %v, want a verified:false result", bad, err)
		}
		if res.Verified || !strings.Contains(res.Message, "not valid standard base64") {
			t.Errorf("%q: %+v; want verified:false, not valid standard base64", bad, res)
		}
	}
}

// TestKeyWhiteSpaceBeforeBlock: a key is one PEM block with nothing but white space around
// it; a space or tab before the block on its first line is white space too.
func TestKeyWhiteSpaceBeforeBlock(t *testing.T) {
	key := string(readVector(t, "signer.pub.pem"))
	v := schemapin.NewVerifier(env(nil))
	for _, lead := range []string{"\n", " ", "\t", "  \t\n "} {
		res, err := v.Verify(context.Background(), schemapin.Request{Schema: string(readVector(t, "schema.json")),
			Signature: strings.TrimSpace(string(readVector(t, "schema.sig.b64"))), PublicKeyPEM: lead + key})
		if err != nil || !res.Verified {
			t.Errorf("the key preceded by %q: %+v, %v; want verified", lead, res, err)
		}
	}
}

// TestSignedSchemaFile: a document in SchemaPin's signed-schema file form — what its
// signer writes, {"schema", "signature", "signed_at", "metadata"} — is verified over its
// "schema" member alone, as SchemaPin's verifier does, and the message says that
// signed_at and metadata are not covered; a document with any other member is an
// ordinary schema whose signature covers everything but "signature".
func TestSignedSchemaFile(t *testing.T) {
	pem := string(readVector(t, "signer.pub.pem"))
	sig := strings.TrimSpace(string(readVector(t, "schema.sig.digest.b64")))
	schema := strings.TrimSpace(string(readVector(t, "schema.json")))
	innerHash := loadVectors(t)[0].SchemaHash
	file := func(rest string) string { return `{"schema":` + schema + `,"signature":"` + sig + `"` + rest + `}` }
	tests := []struct {
		name     string
		doc      string
		verified bool
		note     bool // the message says what the signature covers
	}{
		{"schema and signature", file(``), true, true},
		{"with signed_at and metadata", file(`,"signed_at":"2025-06-01T12:00:00+00:00","metadata":{"v":1}`), true, true},
		{"another signed_at: not signed", file(`,"signed_at":"1999-01-01T00:00:00+00:00"`), true, true},
		{"another member: an ordinary schema", file(`,"signed_by":"x"`), false, false},
		{"a member of another case: an ordinary schema", file(`,"Signed_at":"x"`), false, false},
	}
	v := schemapin.NewVerifier(env(nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := v.Verify(context.Background(), schemapin.Request{Schema: tt.doc, PublicKeyPEM: pem})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verified != tt.verified || strings.Contains(res.Message, `covers its "schema" member only`) != tt.note {
				t.Fatalf("verified %v, message %q; want verified %v, the coverage said %v", res.Verified, res.Message, tt.verified, tt.note)
			}
			if tt.note != (res.SchemaHash == innerHash) {
				t.Fatalf("schema_hash %s; the inner schema's is %s", res.SchemaHash, innerHash)
			}
		})
	}
	// The signature given separately as well must be the file's.
	if _, err := v.Verify(context.Background(), schemapin.Request{Schema: file(``), Signature: sig, PublicKeyPEM: pem}); err != nil {
		t.Fatalf("the same signature given twice: %v", err)
	}
	if _, err := v.Verify(context.Background(), schemapin.Request{Schema: file(``), Signature: strings.TrimSpace(string(readVector(t, "schema.sig.b64"))), PublicKeyPEM: pem}); errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("another signature given beside the file's: %v, want invalid_request", err)
	}
}
