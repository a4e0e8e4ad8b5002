package schemapin

import (
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"symbi/internal/errcode"
)

// FuzzParseKeyBody: whatever a key URL answers, parseKeyBody refuses it with an
// invalid-request error of bounded length (it quotes at most a few hundred bytes of the
// body), or yields a P-256 key whose fingerprint is the digest of the key's one DER
// encoding — no other encoding of the same key is taken, whose different fingerprint
// would pass a revocation of it — and revoked fingerprints in their normal form.
func FuzzParseKeyBody(f *testing.F) {
	for _, name := range []string{"keydoc.json", "keydoc.revoked.json", "malformed.pub.pem", "p384.pub.pem"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schemapin", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		if name == "keydoc.json" {
			// A good key with revocations that are no fingerprints, long ones.
			doc, _, _ := strings.Cut(string(b), `"revoked_keys"`)
			f.Add([]byte(doc + `"revoked_keys":["` + strings.Repeat("x", 3000) + `"]}`))
			f.Add([]byte(doc + `"revoked_keys":[{"k":"` + strings.Repeat("x", 3000) + `"}]}`))
		}
	}
	for _, s := range []string{
		"",
		"{}",
		`{"public_key_pem":1}`,
		`{"public_key_pem":"x","revoked_keys":{}}`,
		`{"public_key_pem":"-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"}`,
		`{"public_key_pem":"","revoked_keys":["sha256:` + strings.Repeat("A", 64) + `"]}`,
		`{"public_key_pem":"","revoked_keys":[[[[1]]]]}`,
		"-----BEGIN " + strings.Repeat("X", 2000) + "-----\nAA==\n-----END " + strings.Repeat("X", 2000) + "-----\n",
		"<html>-----BEGIN PUBLIC KEY-----",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		src, err := parseKeyBody(body)
		if err != nil {
			if src != nil {
				t.Fatalf("refused (%v) and returned a key", err)
			}
			if c := errcode.Of(err); c != errcode.InvalidRequest {
				t.Fatalf("refused with code %q: %v", c, err)
			}
			if n := len(err.Error()); n > 1024 {
				t.Fatalf("a refusal of %d bytes: %.200s…", n, err)
			}
			return
		}
		if src.key == nil || src.key.key == nil || src.key.key.Curve != elliptic.P256() {
			t.Fatalf("accepted %+v, not a P-256 key", src.key)
		}
		der, err := x509.MarshalPKIXPublicKey(src.key.key)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(der)
		if want := "sha256:" + hex.EncodeToString(sum[:]); src.key.fingerprint != want {
			t.Fatalf("fingerprint %s, the key's DER encoding has %s", src.key.fingerprint, want)
		}
		for fp := range src.revoked {
			if norm, ok := normalizeFingerprint(fp); !ok || norm != fp {
				t.Fatalf("revoked fingerprint %q is not in normal form", fp)
			}
		}
	})
}
