package schemapin_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
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

// TestObjectNestingCounted: objects count toward the nesting limit as arrays do — 1,000
// nested objects are accepted, 1,001 are refused with limit_exceeded.
func TestObjectNestingCounted(t *testing.T) {
	nest := func(n int) []byte {
		return []byte(strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n))
	}
	if _, err := schemapin.Canonicalize(nest(schemapin.MaxDepth)); err != nil {
		t.Fatalf("%d nested objects refused: %v", schemapin.MaxDepth, err)
	}
	_, err := schemapin.Canonicalize(nest(schemapin.MaxDepth + 1))
	if !errors.Is(err, errcode.LimitExceeded) || !strings.Contains(err.Error(), "deeper than 1000") {
		t.Fatalf("%d nested objects: error %v, want limit_exceeded", schemapin.MaxDepth+1, err)
	}
}

// TestUnclosedContainerRefused: a document whose array or object is never closed is
// malformed, whether it is the top-level value or nested in one.
func TestUnclosedContainerRefused(t *testing.T) {
	for _, in := range []string{`[1`, `{"a":1`, `[[1]`, `{"a":{}`, `[`, `{`} {
		out, err := schemapin.Canonicalize([]byte(in))
		if err == nil {
			t.Errorf("%q accepted, canonical %q", in, out)
			continue
		}
		if !errors.Is(err, errcode.InvalidRequest) || !errors.Is(err, schemapin.ErrMalformed) {
			t.Errorf("%q: error %v (code %s), want invalid_request wrapping ErrMalformed", in, err, errcode.Of(err))
		}
	}
}

// vectorKeyDER returns the DER SubjectPublicKeyInfo of the vectors' signing key.
func vectorKeyDER(t *testing.T) []byte {
	t.Helper()
	block, _ := pem.Decode(readVector(t, "signer.pub.pem"))
	if block == nil {
		t.Fatal("signer.pub.pem holds no PEM block")
	}
	return block.Bytes
}

// verifyInline verifies the vectors' schema and DER signature with the inline key pemText.
func verifyInline(t *testing.T, pemText string) (*schemapin.Result, error) {
	t.Helper()
	return schemapin.NewVerifier(env(nil)).Verify(context.Background(), schemapin.Request{
		Schema:       string(readVector(t, "schema.json")),
		Signature:    strings.TrimSpace(string(readVector(t, "schema.sig.b64"))),
		PublicKeyPEM: pemText,
	})
}

// TestPEMHeadersRefused: a PEM block carrying headers (Proc-Type, Comment, …) is not a
// key, even when its bytes are the signer's key.
func TestPEMHeadersRefused(t *testing.T) {
	withHeaders := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Headers: map[string]string{"Comment": "x"}, Bytes: vectorKeyDER(t)}))
	res, err := verifyInline(t, withHeaders)
	if !errors.Is(err, errcode.InvalidRequest) || !strings.Contains(err.Error(), "PEM headers are not allowed") {
		t.Fatalf("got %+v, error %v; want invalid_request refusing the headers", res, err)
	}
}

// TestMalformedKeyDERNamed: a PUBLIC KEY block whose bytes are not a
// SubjectPublicKeyInfo is refused with invalid_request naming the parser's reason.
func TestMalformedKeyDERNamed(t *testing.T) {
	junk := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("not a key at all")}))
	res, err := verifyInline(t, junk)
	if !errors.Is(err, errcode.InvalidRequest) || !strings.Contains(err.Error(), "public key: asn1:") && !strings.Contains(err.Error(), "public key: x509:") {
		t.Fatalf("got %+v, error %v; want invalid_request naming the parse error", res, err)
	}
}

// TestOtherKeyKindsRefused: an RSA or Ed25519 key is refused with invalid_request naming
// its kind.
func TestOtherKeyKindsRefused(t *testing.T) {
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for kind, pub := range map[string]any{"Ed25519": edPub, "RSA": &rsaKey.PublicKey} {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		res, err := verifyInline(t, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
		if want := "public key: " + kind + " key, want ECDSA P-256"; !errors.Is(err, errcode.InvalidRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s key: got %+v, error %v; want invalid_request containing %q", kind, res, err, want)
		}
	}
}

// keyDocServer serves each path's body over TLS on loopback; the Verifier it returns
// trusts it and permits loopback.
func keyDocServer(t *testing.T, docs map[string]string) (*httptest.Server, *schemapin.Verifier) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	v := schemapin.NewVerifier(env(map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}))
	v.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	return srv, v
}

// quotedKey is the signer's PEM as the inside of a JSON string.
func quotedKey(t *testing.T) string {
	return strings.ReplaceAll(strings.TrimSpace(string(readVector(t, "signer.pub.pem"))), "\n", `\n`)
}

// TestRevocationListReadWhole: every entry of revoked_keys is read — the key is revoked
// when its fingerprint is listed after other fingerprints, not only first.
func TestRevocationListReadWhole(t *testing.T) {
	other1 := "sha256:" + strings.Repeat("0", 64)
	other2 := "sha256:" + strings.Repeat("ab", 32)
	srv, v := keyDocServer(t, map[string]string{
		"/second": `{"public_key_pem":"` + quotedKey(t) + `","revoked_keys":["` + other1 + `","` + fingerprintOf(t) + `"]}`,
		"/third":  `{"public_key_pem":"` + quotedKey(t) + `","revoked_keys":["` + other1 + `","` + other2 + `","` + fingerprintOf(t) + `"]}`,
	})
	for _, path := range []string{"/second", "/third"} {
		res, err := v.Verify(context.Background(), schemapin.Request{Schema: string(readVector(t, "schema.signed.json")), PublicKeyURL: srv.URL + path})
		if err != nil || res.Verified || !res.Revoked {
			t.Errorf("%s: got %+v, %v; want revoked", path, res, err)
		}
	}
}

// TestRevokedFingerprintForm: a revoked_keys entry is exactly "sha256:" and 64 hex digits;
// a bare digest, 62 or 66 digits, non-hex digits and a non-string are refused with
// invalid_request naming the entry.
func TestRevokedFingerprintForm(t *testing.T) {
	entries := map[string]string{
		"/bare":    `"` + strings.Repeat("ab", 32) + `"`,
		"/short":   `"sha256:` + strings.Repeat("ab", 31) + `"`,
		"/long":    `"sha256:` + strings.Repeat("ab", 33) + `"`,
		"/non-hex": `"sha256:` + strings.Repeat("gh", 32) + `"`,
		"/number":  `12345`,
	}
	docs := map[string]string{}
	for path, e := range entries {
		docs[path] = `{"public_key_pem":"` + quotedKey(t) + `","revoked_keys":[` + e + `]}`
	}
	srv, v := keyDocServer(t, docs)
	for path, e := range entries {
		res, err := v.Verify(context.Background(), schemapin.Request{Schema: string(readVector(t, "schema.signed.json")), PublicKeyURL: srv.URL + path})
		want := "revoked_keys[0] " + e + " is not sha256:<64 hex digits>"
		if !errors.Is(err, errcode.InvalidRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %+v, error %v; want invalid_request containing %q", path, res, err, want)
		}
	}
}

// TestKeyURLLengthBoundary: a public_key_url of exactly MaxKeyURLBytes (8,192 bytes) is
// fetched; one byte more is limit_exceeded.
func TestKeyURLLengthBoundary(t *testing.T) {
	srv, v := keyDocServer(t, map[string]string{"/key.pem": string(readVector(t, "signer.pub.pem"))})
	pad := func(n int) string {
		u := srv.URL + "/key.pem?p="
		return u + strings.Repeat("a", n-len(u))
	}
	schema := string(readVector(t, "schema.signed.json"))
	res, err := v.Verify(context.Background(), schemapin.Request{Schema: schema, PublicKeyURL: pad(schemapin.MaxKeyURLBytes)})
	if err != nil || !res.Verified {
		t.Fatalf("a key URL of exactly %d bytes: %+v, %v; want verified", schemapin.MaxKeyURLBytes, res, err)
	}
	_, err = v.Verify(context.Background(), schemapin.Request{Schema: schema, PublicKeyURL: pad(schemapin.MaxKeyURLBytes + 1)})
	if !errors.Is(err, errcode.LimitExceeded) || !strings.Contains(err.Error(), "public_key_url is 8193 bytes") {
		t.Fatalf("a key URL of %d bytes: error %v, want limit_exceeded", schemapin.MaxKeyURLBytes+1, err)
	}
}

// TestInlineKeyLengthBoundary: a public_key_pem of exactly MaxKeyDocBytes (64 KiB) is
// accepted; one byte more is limit_exceeded.
func TestInlineKeyLengthBoundary(t *testing.T) {
	key := string(readVector(t, "signer.pub.pem"))
	res, err := verifyInline(t, key+strings.Repeat("\n", schemapin.MaxKeyDocBytes-len(key)))
	if err != nil || !res.Verified {
		t.Fatalf("an inline key of exactly %d bytes: %+v, %v; want verified", schemapin.MaxKeyDocBytes, res, err)
	}
	_, err = verifyInline(t, key+strings.Repeat("\n", schemapin.MaxKeyDocBytes+1-len(key)))
	if !errors.Is(err, errcode.LimitExceeded) || !strings.Contains(err.Error(), "public_key_pem is 65537 bytes") {
		t.Fatalf("an inline key of %d bytes: error %v, want limit_exceeded", schemapin.MaxKeyDocBytes+1, err)
	}
}

// TestRevokedWithoutSignature: a revoked key is reported revoked whether or not a
// signature is given — revocation is decided before the signature is looked at.
func TestRevokedWithoutSignature(t *testing.T) {
	srv, v := keyDocServer(t, map[string]string{"/revoked": string(readVector(t, "keydoc.revoked.json"))})
	res, err := v.Verify(context.Background(), schemapin.Request{Schema: string(readVector(t, "schema.json")), PublicKeyURL: srv.URL + "/revoked"})
	if err != nil || res.Verified || !res.Revoked || !strings.Contains(res.Message, "is revoked") {
		t.Fatalf("got %+v, %v; want revoked", res, err)
	}
}

// TestSignatureBase64Canonical: a signature spelled in base64 with non-zero padding bits
// (which a lenient decoder reads as the same bytes) is not valid standard base64: one
// signature has one spelling.
func TestSignatureBase64Canonical(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	sig := strings.TrimSpace(string(readVector(t, "schema.sig.raw.b64"))) // 64 bytes: ends "x=="
	if !strings.HasSuffix(sig, "==") {
		t.Fatalf("raw signature %q does not end in ==", sig)
	}
	i := len(sig) - 3
	last := strings.IndexByte(alphabet, sig[i])
	if last < 0 || last&0xF != 0 {
		t.Fatalf("raw signature %q: last data character has padding bits set", sig)
	}
	spelled := sig[:i] + string(alphabet[last|1]) + "=="
	res, err := verifyInline(t, string(readVector(t, "signer.pub.pem")))
	if err != nil || !res.Verified {
		t.Fatalf("the vector itself: %+v, %v", res, err)
	}
	res, err = schemapin.NewVerifier(env(nil)).Verify(context.Background(), schemapin.Request{
		Schema: string(readVector(t, "schema.json")), Signature: spelled, PublicKeyPEM: string(readVector(t, "signer.pub.pem")),
	})
	if err != nil || res.Verified || !strings.Contains(res.Message, "not valid standard base64") {
		t.Fatalf("%q (padding bits set): %+v, %v; want verified:false, not valid standard base64", spelled, res, err)
	}
}

// TestRawSignatureExactly64: the raw form is exactly 64 bytes, r||s; the same r and s
// with a zero byte added (65 bytes) do not verify.
func TestRawSignatureExactly64(t *testing.T) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(readVector(t, "schema.sig.raw.b64"))))
	if err != nil || len(raw) != 64 {
		t.Fatalf("raw vector: %d bytes, %v", len(raw), err)
	}
	padded := append(append(append([]byte{}, raw[:32]...), 0), raw[32:]...)
	res, err := schemapin.NewVerifier(env(nil)).Verify(context.Background(), schemapin.Request{
		Schema: string(readVector(t, "schema.json")), Signature: base64.StdEncoding.EncodeToString(padded), PublicKeyPEM: string(readVector(t, "signer.pub.pem")),
	})
	if err != nil || res.Verified {
		t.Fatalf("r||0||s (65 bytes): %+v, %v; want not verified", res, err)
	}
}

// TestOptInExactlyOne: SYMBI_SCHEMAPIN_ALLOW_INSECURE and SYMBI_SCHEMAPIN_ALLOW_PRIVATE
// take effect only when exactly "1": any other value keeps plain http and loopback refused.
func TestOptInExactlyOne(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(keyServer(t))
	defer tlsSrv.Close()
	plainSrv := httptest.NewServer(keyServer(t))
	defer plainSrv.Close()
	schema := string(readVector(t, "schema.signed.json"))
	for _, val := range []string{"true", "yes", "01", " 1", "1 ", "11"} {
		v := schemapin.NewVerifier(env(map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1", "SYMBI_SCHEMAPIN_ALLOW_INSECURE": val}))
		if _, err := v.Verify(context.Background(), schemapin.Request{Schema: schema, PublicKeyURL: plainSrv.URL + "/key.pem"}); !errors.Is(err, errcode.InvalidRequest) || !strings.Contains(err.Error(), "plain http is refused") {
			t.Errorf("ALLOW_INSECURE=%q: error %v, want plain http refused", val, err)
		}
		v = schemapin.NewVerifier(env(map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": val}))
		v.RootCAs = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
		if _, err := v.Verify(context.Background(), schemapin.Request{Schema: schema, PublicKeyURL: tlsSrv.URL + "/key.pem"}); !errors.Is(err, errcode.InvalidRequest) || !strings.Contains(err.Error(), "is a loopback address") {
			t.Errorf("ALLOW_PRIVATE=%q: error %v, want loopback refused", val, err)
		}
	}
}
