package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// TestJWKSKeysMemberExact: the JWK set decides who may authenticate, and its "keys"
// member is read by its exact name, once, as a key's key_ops are: a set naming it twice
// ({"keys":[A],"keys":[B]}: encoding/json keeps B, a reader keeping the first sees A) or
// spelling it otherwise ("Keys": B to encoding/json, no keys to a reader going by RFC
// 7517) is refused, not read as trusting B.
func TestJWKSKeysMemberExact(t *testing.T) {
	jwk := func(kid string) string {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Use: "sig"})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a, b := jwk("a"), jwk("b")
	for name, body := range map[string]string{
		"keys twice":            `{"keys":[` + a + `],"keys":[` + b + `]}`,
		"Keys beside keys":      `{"keys":[` + a + `],"Keys":[` + b + `]}`,
		"only KEYS":             `{"KEYS":[` + b + `]}`,
		"empty keys, then Keys": `{"keys":[],"Keys":[` + b + `]}`,
	} {
		keys, err := parseJWKS([]byte(body))
		if err == nil {
			ids := []string{}
			for _, k := range keys {
				ids = append(ids, k.KeyID)
			}
			t.Errorf("%s: accepted, trusting keys %q", name, ids)
		} else if !strings.Contains(err.Error(), "keys") {
			t.Errorf("%s: refused with %v; want the keys member named", name, err)
		}
	}
}

// TestJWKSKeysMemberExactAccepts: a set with one "keys" member is read, other members
// passed over, whatever their order.
func TestJWKSKeysMemberExactAccepts(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(jose.JSONWebKey{Key: &k.PublicKey, KeyID: "a", Use: "sig"})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"keys":[` + string(b) + `]}`, `{"x":{"keys":1},"keys":[` + string(b) + `],"y":[]}`} {
		if keys, err := parseJWKS([]byte(body)); err != nil || len(keys) != 1 || keys[0].KeyID != "a" {
			t.Errorf("%.60s…: keys %v, err %v; want key a", body, keys, err)
		}
	}
}
