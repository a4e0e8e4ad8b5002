package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"testing"

	"github.com/go-jose/go-jose/v4"

	"symbi/internal/errcode"
)

// FuzzParseJWKS: whatever the JWK set server answers, parseJWKS refuses it with an
// invalid-request or limit error, or returns at most MaxJWKSKeys keys, each a public
// signature key of a supported kind (RSA of at least MinRSABits bits, P-256, P-384,
// P-521, Ed25519) meant for signatures; never a private or symmetric key.
func FuzzParseJWKS(f *testing.F) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	ed, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		f.Fatal(err)
	}
	jwk := func(key any, kid, use string) json.RawMessage {
		b, err := json.Marshal(jose.JSONWebKey{Key: key, KeyID: kid, Use: use})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	set := func(keys ...json.RawMessage) []byte {
		b, err := json.Marshal(map[string]any{"keys": keys})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	for _, seed := range [][]byte{
		set(jwk(&ec.PublicKey, "ec-1", "sig"), jwk(ed, "ed-1", "")),
		set(jwk(ec, "ec-private", "sig")),
		set(jwk(edPriv, "ed-private", "")),
		set(jwk([]byte("0123456789abcdef0123456789abcdef"), "hmac", "sig")),
		set(jwk(&weak.PublicKey, "rsa-weak", "sig")),
		set(jwk(&ec.PublicKey, "ec-enc", "enc")),
		[]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}`),
		[]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`),
		[]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":""}]}`),
		[]byte(`{"keys":[]}`),
		[]byte(`{"keys":null}`),
		[]byte(`{}`),
		[]byte(`[]`),
		[]byte(``),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, err := parseJWKS(body)
		if err != nil {
			if keys != nil {
				t.Fatalf("refused (%v) and returned %d keys", err, len(keys))
			}
			if c := errcode.Of(err); c != errcode.InvalidRequest && c != errcode.LimitExceeded {
				t.Fatalf("refused with code %q: %v", c, err)
			}
			return
		}
		if len(keys) == 0 || len(keys) > MaxJWKSKeys {
			t.Fatalf("%d keys accepted", len(keys))
		}
		for _, k := range keys {
			if !k.IsPublic() || !k.Valid() {
				t.Fatalf("accepted key %q is not a valid public key (%T)", k.KeyID, k.Key)
			}
			if keyType(k) == "" {
				t.Fatalf("accepted key %q of no kind keyType names", k.KeyID)
			}
			if k.Use != "" && k.Use != "sig" {
				t.Fatalf("accepted key %q for use %q", k.KeyID, k.Use)
			}
			switch key := k.Key.(type) {
			case *rsa.PublicKey:
				if key.N.BitLen() < MinRSABits {
					t.Fatalf("accepted RSA key %q of %d bits", k.KeyID, key.N.BitLen())
				}
			case *ecdsa.PublicKey:
				if n := key.Curve.Params().Name; n != "P-256" && n != "P-384" && n != "P-521" {
					t.Fatalf("accepted key %q on curve %s", k.KeyID, n)
				}
			case ed25519.PublicKey:
				if len(key) != ed25519.PublicKeySize {
					t.Fatalf("accepted an Ed25519 key %q of %d bytes", k.KeyID, len(key))
				}
			default:
				t.Fatalf("accepted key %q of type %T", k.KeyID, k.Key)
			}
		}
	})
}
