package auth_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"symbi/internal/auth"
)

// unsigned makes a compact JWS of header and claims with the signature sig.
func compact(header, claims any, sig []byte) string {
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding.EncodeToString
	return enc(h) + "." + enc(c) + "." + enc(sig)
}

// mangle changes the character at i of part (0 header, 1 payload, 2 signature).
func mangle(tok string, part, i int) string {
	parts := strings.Split(tok, ".")
	b := []byte(parts[part])
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	parts[part] = string(b)
	return strings.Join(parts, ".")
}

// resign replaces the payload of tok, keeping its header and signature.
func swapPayload(tok string, claims map[string]any) string {
	parts := strings.Split(tok, ".")
	c, _ := json.Marshal(claims)
	parts[1] = base64.RawURLEncoding.EncodeToString(c)
	return strings.Join(parts, ".")
}

func TestJWTVerify(t *testing.T) {
	rsaS, ecS, edS := auth.GenTestSigners(t)
	psS := auth.TestSigner{"rsa-1", jose.PS256, rsaS.Priv}
	rs512 := auth.TestSigner{"rsa-1", jose.RS512, rsaS.Priv}
	srv := auth.NewTestJWKSServer(t, rsaS.Public(), ecS.Public(), edS.Public())
	cfg := srv.JWTConfig()
	j := auth.MustNewJWT(t, cfg)
	customCfg := cfg
	customCfg.Claim = "email"
	custom := auth.MustNewJWT(t, customCfg)

	now := time.Now().Unix()
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(rsaS.Priv.Public()))})
	hs256 := func(secret []byte) string {
		h, _ := json.Marshal(map[string]any{"alg": "HS256", "kid": "rsa-1", "typ": "JWT"})
		c, _ := json.Marshal(auth.ValidClaimsWithNBF())
		in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(in))
		return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	good := rsaS.Sign(t, auth.ValidClaimsWithNBF())

	tests := []struct {
		name   string
		j      *auth.JWT
		token  string
		reason error  // nil: accepted
		msg    string // substring of the error, or the caller id when accepted
	}{
		{"RS256", j, good, nil, "alice"},
		{"RS512", j, rs512.Sign(t, auth.ValidClaimsWithNBF()), nil, "alice"},
		{"PS256", j, psS.Sign(t, auth.ValidClaimsWithNBF()), nil, "alice"},
		{"ES256", j, ecS.Sign(t, auth.ValidClaimsWithNBF()), nil, "alice"},
		{"EdDSA", j, edS.Sign(t, auth.ValidClaimsWithNBF()), nil, "alice"},
		{"audience in an array", j, ecS.Sign(t, auth.ValidClaimsWithNBF("aud", []string{"other", auth.TestAudience})), nil, "alice"},
		{"jwt sub with a pipe", j, ecS.Sign(t, auth.ValidClaimsWithNBF("sub", "auth0|abc123")), nil, "auth0|abc123"},
		{"expired within the leeway", j, ecS.Sign(t, auth.ValidClaimsWithNBF("exp", now-10)), nil, "alice"},
		{"configured claim", custom, ecS.Sign(t, auth.ValidClaimsWithNBF("email", "alice@example.com")), nil, "alice@example.com"},

		{"wrong issuer", j, ecS.Sign(t, auth.ValidClaimsWithNBF("iss", "https://evil.example")), auth.ErrIssuer, `iss "https://evil.example", want "https://issuer.example"`},
		{"issuer with a trailing slash", j, ecS.Sign(t, auth.ValidClaimsWithNBF("iss", auth.TestIssuer+"/")), auth.ErrIssuer, "want"},
		{"no issuer", j, ecS.Sign(t, auth.ValidClaimsWithNBF("iss", nil)), auth.ErrIssuer, `iss ""`},
		{"wrong audience", j, ecS.Sign(t, auth.ValidClaimsWithNBF("aud", "https://other.example")), auth.ErrAudience, "aud does not contain"},
		{"no audience", j, ecS.Sign(t, auth.ValidClaimsWithNBF("aud", nil)), auth.ErrAudience, "aud does not contain"},
		{"expired", j, ecS.Sign(t, auth.ValidClaimsWithNBF("exp", now-120)), auth.ErrExpired, "has passed"},
		{"no exp", j, ecS.Sign(t, auth.ValidClaimsWithNBF("exp", nil)), auth.ErrExpired, "no exp claim"},
		{"nbf in the future", j, ecS.Sign(t, auth.ValidClaimsWithNBF("nbf", now+120)), auth.ErrNotYetValid, "nbf"},
		{"iat in the future", j, ecS.Sign(t, auth.ValidClaimsWithNBF("iat", now+120)), auth.ErrNotYetValid, "iat"},
		{"exp not a number", j, ecS.Sign(t, auth.ValidClaimsWithNBF("exp", "tomorrow")), auth.ErrMalformed, "registered claim exp"},
		// Claim names are case-sensitive: "Aud", "EXP" are other claims, never these.
		{"aud only in capitals", j, ecS.Sign(t, auth.ValidClaimsWithNBF("aud", nil, "AUD", auth.TestAudience)), auth.ErrAudience, "aud does not contain"},
		// (In this order: encoding/json let a later case-folded name overwrite the real one.)
		{"aud for another, Aud for us", j, ecS.SignRaw(t, fmt.Sprintf(`{"iss":%q,"aud":"other","Aud":%q,"exp":%d,"sub":"alice"}`, auth.TestIssuer, auth.TestAudience, time.Now().Add(time.Hour).Unix())), auth.ErrAudience, "aud does not contain"},
		{"expired exp, Exp in the future", j, ecS.SignRaw(t, fmt.Sprintf(`{"iss":%q,"aud":%q,"exp":%d,"Exp":%d,"sub":"alice"}`, auth.TestIssuer, auth.TestAudience, time.Now().Add(-time.Hour).Unix(), time.Now().Add(time.Hour).Unix())), auth.ErrExpired, "has passed"},
		{"a claim twice", j, ecS.SignRaw(t, fmt.Sprintf(`{"iss":%q,"aud":%q,"exp":%d,"sub":"alice","sub":"bob"}`, auth.TestIssuer, auth.TestAudience, time.Now().Add(time.Hour).Unix())), auth.ErrMalformed, `duplicate member "sub"`},
		{"a lone surrogate", j, ecS.SignRaw(t, fmt.Sprintf(`{"iss":%q,"aud":%q,"exp":%d,"sub":"alice","name":"\udc00"}`, auth.TestIssuer, auth.TestAudience, time.Now().Add(time.Hour).Unix())), auth.ErrMalformed, `lone surrogate`},
		{"missing sub", j, ecS.Sign(t, auth.ValidClaimsWithNBF("sub", nil)), auth.ErrCallerID, `no "sub" claim`},
		{"sub not a string", j, ecS.Sign(t, auth.ValidClaimsWithNBF("sub", 42)), auth.ErrCallerID, "not a string"},
		{"sub with a space", j, ecS.Sign(t, auth.ValidClaimsWithNBF("sub", "alice smith")), auth.ErrCallerID, "is not a caller id"},
		{"sub reserved", j, ecS.Sign(t, auth.ValidClaimsWithNBF("sub", "stdio")), auth.ErrCallerID, "reserved"},
		{"configured claim missing", custom, ecS.Sign(t, auth.ValidClaimsWithNBF()), auth.ErrCallerID, `no "email" claim`},
		{"scope not a string", j, ecS.Sign(t, auth.ValidClaimsWithNBF("scope", []string{"a"})), auth.ErrMalformed, "scope"},
		{"alg none", j, compact(map[string]any{"alg": "none", "kid": "rsa-1"}, auth.ValidClaimsWithNBF(), nil), auth.ErrAlgorithm, `alg "none"`},
		{"HS256 with the public key as secret", j, hs256(rsaPEM), auth.ErrAlgorithm, `alg "HS256"`},
		{"HS256 with the modulus as secret", j, hs256(auth.TestKeyRSA.N.Bytes()), auth.ErrAlgorithm, `alg "HS256"`},
		{"unknown kid", j, auth.TestSigner{"nope", jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF()), auth.ErrUnknownKey, `kid "nope" is not in the issuer's key set`},
		{"no kid among several keys", j, auth.TestSigner{"", jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF()), auth.ErrUnknownKey, "no kid, and the issuer has 3 keys"},
		{"kid of a key of another type", j, auth.TestSigner{"rsa-1", jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF()), auth.ErrUnknownKey, `key "rsa-1" cannot verify alg ES256`},
		{"signed by another key under a known kid", j, auth.TestSigner{"ec-1", jose.ES256, must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))}.Sign(t, auth.ValidClaimsWithNBF()), auth.ErrSignature, "does not verify"},
		{"tampered payload", j, swapPayload(good, auth.ValidClaimsWithNBF("sub", "mallory")), auth.ErrSignature, "does not verify"},
		{"tampered payload byte", j, mangle(good, 1, 5), auth.ErrSignature, "does not verify"},
		{"tampered signature", j, mangle(good, 2, 10), auth.ErrSignature, "does not verify"},
		{"truncated signature", j, good[:len(good)-4], auth.ErrSignature, "does not verify"},
		{"not a JWS", j, "not-a-token", auth.ErrMalformed, "not a compact JWS"},
		{"four parts", j, good + ".x", auth.ErrMalformed, "not a compact JWS"},
		{"claims not an object", j, rsaSignRaw(t, rsaS, []byte(`["a"]`)), auth.ErrMalformed, "not a JSON object"},
		{"too long", j, strings.Repeat("a", auth.MaxJWTBytes+1), auth.ErrMalformed, "over the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ti, err := tt.j.Verify(context.Background(), tt.token, nil)
			if tt.reason == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				c, ok := auth.FromTokenInfo(ti)
				if !ok || c.ID != tt.msg || c.Method != auth.MethodJWT {
					t.Fatalf("caller %+v, %v; want %s by jwt", c, ok, tt.msg)
				}
				return
			}
			if ti != nil || !errors.Is(err, sdkauth.ErrInvalidToken) || !errors.Is(err, tt.reason) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, error %v; want ErrInvalidToken and %q with %q", ti, err, tt.reason, tt.msg)
			}
		})
	}
}

// rsaSignRaw signs payload bytes as they are.
func rsaSignRaw(t *testing.T, s auth.TestSigner, payload []byte) string {
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: s.Alg, Key: jose.JSONWebKey{Key: s.Priv, KeyID: s.Kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := sig.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestJWTEveryByteMangled: a token with any one character changed is refused.
func TestJWTEveryByteMangled(t *testing.T) {
	rsaS, ecS, edS := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, rsaS.Public(), ecS.Public(), edS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Hour // a mangled kid must not fetch
	j := auth.MustNewJWT(t, cfg)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for _, s := range []auth.TestSigner{rsaS, ecS, edS} {
		tok := s.Sign(t, auth.ValidClaimsWithNBF())
		if _, err := j.Verify(context.Background(), tok, nil); err != nil {
			t.Fatal(err)
		}
		for i := range len(tok) {
			if tok[i] == '.' {
				continue
			}
			// Flip the highest of the character's six bits: always one that decodes,
			// even in a segment's last character.
			b := []byte(tok)
			b[i] = alphabet[strings.IndexByte(alphabet, b[i])^32]
			if ti, err := j.Verify(context.Background(), string(b), nil); !errors.Is(err, sdkauth.ErrInvalidToken) {
				t.Fatalf("%s token with byte %d changed: %v, %v", s.Alg, i, ti, err)
			}
		}
	}
	if n := srv.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches", n)
	}
}

func TestJWTTokenInfo(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	j := auth.MustNewJWT(t, srv.JWTConfig())
	exp := time.Now().Add(5 * time.Minute).Unix()
	ti, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF("exp", exp, "scope", "runs:read  runs:write")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ti.UserID != "alice" || ti.Expiration.Unix() != exp || fmt.Sprint(ti.Scopes) != "[runs:read runs:write]" || ti.Extra[auth.ExtraMethod] != auth.MethodJWT {
		t.Fatalf("TokenInfo %+v", ti)
	}
	// With one key in the set, a token without kid uses it.
	if _, err := j.Verify(context.Background(), auth.TestSigner{"", jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF()), nil); err != nil {
		t.Fatalf("no kid, one key: %v", err)
	}
}

// TestJWTKeyRotation: a token naming a new kid makes the set be fetched again.
func TestJWTKeyRotation(t *testing.T) {
	rsaS, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, rsaS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Nanosecond
	j := auth.MustNewJWT(t, cfg)
	if n := srv.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}
	rotated := auth.TestSigner{"ec-2", jose.ES256, ecS.Priv}
	tok := rotated.Sign(t, auth.ValidClaimsWithNBF())
	if _, err := j.Verify(context.Background(), tok, nil); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("before rotation: %v", err)
	}
	srv.SetKeys(t, rsaS.Public(), rotated.Public())
	if _, err := j.Verify(context.Background(), tok, nil); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if n := srv.Fetches.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
	// Known keys are not fetched again.
	for range 5 {
		if _, err := j.Verify(context.Background(), rsaS.Sign(t, auth.ValidClaimsWithNBF()), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.Fetches.Load(); n != 3 {
		t.Fatalf("%d fetches after known kids, want 3", n)
	}
}

// TestJWTUnknownKidFlood: unknown kids do not fetch more than once per MinRefetch.
func TestJWTUnknownKidFlood(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Hour
	j := auth.MustNewJWT(t, cfg)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			tok := auth.TestSigner{fmt.Sprintf("k%d", i), jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF())
			if _, err := j.Verify(context.Background(), tok, nil); !errors.Is(err, auth.ErrUnknownKey) || !errors.Is(err, sdkauth.ErrInvalidToken) {
				t.Errorf("kid k%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if n := srv.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want only the first", n)
	}
}

// TestJWTKeysUnavailable: an issuer that stops answering keeps the last good keys (one
// that answers with no usable key withdraws them), and an unknown kid is then a server
// error, not a refusal — one that tells the caller (anyone:
// the key is looked up before any signature is checked) only that the keys are
// unavailable, the server's log why: the JWK set's URL, the issuer's address.
func TestJWTKeysUnavailable(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Nanosecond
	var logged bytes.Buffer
	cfg.Log = slog.New(slog.NewTextHandler(&logged, nil))
	j := auth.MustNewJWT(t, cfg)
	srv.SetBody(nil, http.StatusServiceUnavailable)
	tok := auth.TestSigner{"new", jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF())
	_, err := j.Verify(context.Background(), tok, nil)
	if !errors.Is(err, auth.ErrKeysUnavailable) || errors.Is(err, sdkauth.ErrInvalidToken) || err.Error() != "issuer keys unavailable (the server's log says why)" {
		t.Fatalf("unknown kid while the issuer is down: %v", err)
	}
	if !strings.Contains(logged.String(), "HTTP 503") || !strings.Contains(logged.String(), cfg.JWKSURL) {
		t.Fatalf("the log: %s", logged.String())
	}
	// The log has a line per failed fetch, not per request: requests waiting on one
	// fetch (anyone may send them) make one line.
	held := srv.Hold()
	before := srv.Fetches.Load()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { j.Verify(context.Background(), tok, nil) })
	}
	for srv.Fetches.Load() == before { // the fetch they wait on has begun
		time.Sleep(time.Millisecond)
	}
	close(held)
	wg.Wait()
	srv.Unhold()
	if lines, failed := strings.Count(logged.String(), "could not be fetched"), srv.Fetches.Load()-1; int32(lines) != failed {
		t.Fatalf("%d log lines for %d failed fetches of 21 requests", lines, failed)
	}
	logged.Reset()
	if _, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF()), nil); err != nil {
		t.Fatalf("known kid while the issuer is down: %v", err)
	}
	// A set the issuer answers with no usable key is not a failed fetch: the issuer
	// withdrew its keys, and the one it had verifies nothing any more (the log says so).
	srv.SetBody([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"new"}]}`), 0)
	if _, err := j.Verify(context.Background(), tok, nil); !errors.Is(err, auth.ErrUnknownKey) || !strings.Contains(logged.String(), "holds no usable key") {
		t.Fatalf("unknown kid with an unusable set: %v (the log: %s)", err, logged.String())
	}
	if _, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF()), nil); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("a withdrawn key after a set without a usable key: %v", err)
	}
}

// TestJWTRefresh: keys older than Refresh are fetched again before a token is verified
// against them, so a key the issuer has removed stops verifying at once — also the first
// token after a long idle time, not only one after a refresh started in the background.
// When that fetch fails, the last good set stands.
func TestJWTRefresh(t *testing.T) {
	rsaS, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, rsaS.Public(), ecS.Public())
	cfg := srv.JWTConfig()
	cfg.Refresh = time.Nanosecond // every set is due for refreshing
	cfg.MinRefetch = time.Nanosecond
	cfg.Log = slog.New(slog.DiscardHandler)
	j := auth.MustNewJWT(t, cfg)
	if _, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF()), nil); err != nil {
		t.Fatalf("a published key: %v", err)
	}
	srv.SetKeys(t, rsaS.Public()) // the issuer removes ec-1
	if _, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF()), nil); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("the first token signed by a removed key: err %v, want ErrUnknownKey", err)
	}
	srv.SetBody([]byte("not a key set"), http.StatusInternalServerError) // the issuer fails
	if _, err := j.Verify(context.Background(), rsaS.Sign(t, auth.ValidClaimsWithNBF()), nil); err != nil {
		t.Fatalf("a key of the last good set while its refresh fails: %v", err)
	}
}

func TestNewJWTRefused(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{ecS.Public()}})
	}))
	defer plain.Close()
	with := func(f func(*auth.JWTConfig)) auth.JWTConfig { c := srv.JWTConfig(); f(&c); return c }
	tests := []struct {
		name string
		cfg  auth.JWTConfig
		msg  string
	}{
		{"private address not allowed", with(func(c *auth.JWTConfig) { c.AllowPrivate = false }), "is a loopback address (--auth-jwks-allow-private allows it)"},
		{"plain http", with(func(c *auth.JWTConfig) { c.JWKSURL = plain.URL }), "plain http is refused (use https, or --auth-jwks-allow-insecure)"},
		{"untrusted certificate", with(func(c *auth.JWTConfig) { c.RootCAs = nil }), "certificate"},
		{"no JWKS URL", with(func(c *auth.JWTConfig) { c.JWKSURL = "" }), "JWKS URL is required"},
		{"no issuer", with(func(c *auth.JWTConfig) { c.Issuer = "" }), "issuer is required"},
		{"no audience", with(func(c *auth.JWTConfig) { c.Audience = "" }), "audience is required"},
		{"expiry as the caller", with(func(c *auth.JWTConfig) { c.Claim = "exp" }), `the claim "exp" cannot name the caller (it is the token's expiry)`},
		{"token id as the caller", with(func(c *auth.JWTConfig) { c.Claim = "jti" }), `the claim "jti" cannot name the caller`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := auth.NewJWT(context.Background(), tt.cfg); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %v, want %q", err, tt.msg)
			}
		})
	}
	// Plain http on loopback, with both opt-ins.
	if _, err := auth.NewJWT(context.Background(), with(func(c *auth.JWTConfig) { c.JWKSURL = plain.URL; c.AllowInsecure = true })); err != nil {
		t.Fatalf("plain http with opt-ins: %v", err)
	}
}

// TestJWKSWeakRSAKey: an RSA key of fewer than 2048 bits (RFC 7518 §3.3, §3.5) is
// skipped: a token it signs is refused as signed by an unknown key, and a set holding no
// other key is refused at start, naming the key and its size — crypto/rsa would otherwise
// refuse one under 1024 bits at every token, as a bad signature.
func TestJWKSWeakRSAKey(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	weak := auth.TestSigner{"weak", jose.RS256, must(rsa.GenerateKey(rand.Reader, 1024))}
	srv := auth.NewTestJWKSServer(t, weak.Public(), ecS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Hour
	j := auth.MustNewJWT(t, cfg)
	if _, err := j.Verify(context.Background(), weak.Sign(t, auth.ValidClaimsWithNBF()), nil); !errors.Is(err, auth.ErrUnknownKey) {
		t.Errorf("a token of the 1024-bit key: %v, want ErrUnknownKey", err)
	}
	if _, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF()), nil); err != nil {
		t.Errorf("a token of the set's other key: %v", err)
	}
	only, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{weak.Public()}})
	srv.SetBody(only, 0)
	want := `no usable signature key among its 1 keys (the RSA key "weak" has 1024 bits, fewer than the 2048 RFC 7518 requires)`
	if _, err := auth.NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a set of one 1024-bit key: %v, want %q", err, want)
	}
}

// TestJWKSKeysSkipped: a set's keys that are not public signature keys are not used.
func TestJWKSKeysSkipped(t *testing.T) {
	rsaS, ecS, edS := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t)
	private := jose.JSONWebKey{Key: ecS.Priv, KeyID: "ec-1"}
	enc := rsaS.Public()
	enc.Use = "enc"
	restricted := edS.Public()
	restricted.Algorithm = "ES256"
	set := map[string]any{"keys": []any{
		json.RawMessage(`{"kty":"oct","k":"c2VjcmV0","kid":"hmac"}`),
		json.RawMessage(`{"kty":"XYZ","kid":"future"}`),
		private, enc, restricted,
		jose.JSONWebKey{Key: must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)).Public(), KeyID: "other"},
	}}
	body, _ := json.Marshal(set)
	srv.SetBody(body, 0)
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Hour
	j := auth.MustNewJWT(t, cfg)
	for _, s := range []auth.TestSigner{ecS, rsaS, edS} {
		if _, err := j.Verify(context.Background(), s.Sign(t, auth.ValidClaimsWithNBF()), nil); !errors.Is(err, auth.ErrUnknownKey) {
			t.Errorf("%s: %v, want ErrUnknownKey", s.Kid, err)
		}
	}
	srv.SetBody([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`), 0)
	if _, err := auth.NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "no usable signature key among its 1 keys") {
		t.Fatalf("an unusable set: %v", err)
	}
	srv.SetBody([]byte(`[]`), 0)
	if _, err := auth.NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "not a JWK set") {
		t.Fatalf("not a set: %v", err)
	}
	// The set's limits: bytes, then keys.
	good, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{ecS.Public()}})
	padded := append(bytes.TrimSuffix(good, []byte("}")), []byte(`,"pad":"`+strings.Repeat("x", auth.MaxJWKSBytes)+`"}`)...)
	srv.SetBody(padded, 0)
	if _, err := auth.NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprint(auth.MaxJWKSBytes)) {
		t.Fatalf("a set over %d bytes: %v", auth.MaxJWKSBytes, err)
	}
	many := make([]jose.JSONWebKey, auth.MaxJWKSKeys+1)
	for i := range many {
		many[i] = ecS.Public()
		many[i].KeyID = fmt.Sprint("k", i)
	}
	body, _ = json.Marshal(jose.JSONWebKeySet{Keys: many})
	srv.SetBody(body, 0)
	if _, err := auth.NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprint(auth.MaxJWKSKeys)) {
		t.Fatalf("a set of %d keys: %v", len(many), err)
	}
}

// TestMiddleware: the verifiers behind go-sdk's RequireBearerToken answer 200 with the
// caller, 401 with a WWW-Authenticate naming the metadata, and 500 when the keys cannot
// be had.
func TestMiddleware(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Nanosecond
	j := auth.MustNewJWT(t, cfg)
	handler := sdkauth.RequireBearerToken(j.Verify, &sdkauth.RequireBearerTokenOptions{
		ResourceMetadataURL: "https://symbi.example" + auth.MetadataPath,
		ClockSkew:           auth.Leeway,
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := auth.FromTokenInfo(sdkauth.TokenInfoFromContext(r.Context()))
		fmt.Fprintf(w, "%s %s %v", c.ID, c.Method, ok)
	}))
	mcp := httptest.NewServer(handler)
	defer mcp.Close()
	call := func(token string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, mcp.URL, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body)), resp.Header.Get("WWW-Authenticate")
	}
	if code, body, _ := call(ecS.Sign(t, auth.ValidClaimsWithNBF("exp", time.Now().Unix()-5))); code != 200 || body != "alice jwt true" {
		t.Fatalf("good token: %d %q", code, body)
	}
	code, body, www := call(ecS.Sign(t, auth.ValidClaimsWithNBF("aud", "other")))
	if code != 401 || !strings.Contains(body, "invalid token: wrong audience") || www != `Bearer resource_metadata="https://symbi.example/.well-known/oauth-protected-resource"` {
		t.Fatalf("bad audience: %d %q %q", code, body, www)
	}
	srv.SetBody(nil, http.StatusBadGateway)
	if code, body, _ := call(auth.TestSigner{"new", jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF())); code != 500 || !strings.Contains(body, "issuer keys unavailable") {
		t.Fatalf("keys unavailable: %d %q", code, body)
	}
}

func TestMetadata(t *testing.T) {
	b, err := json.Marshal(auth.Metadata(auth.TestAudience, []string{auth.TestIssuer}))
	if err != nil || string(b) != `{"resource":"https://symbi.example/mcp","authorization_servers":["https://issuer.example"],"bearer_methods_supported":["header"]}` {
		t.Fatalf("%s %v", b, err)
	}
}

// TestKeysUnavailableOverHTTP: an unauthenticated client — any compact JWS naming an
// unknown kid, no valid signature needed — sending a token while the issuer cannot be
// reached is told that the keys are unavailable, and not the JWK set's URL (its query) or
// the fetch's transport error.
func TestKeysUnavailableOverHTTP(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	cfg := srv.JWTConfig()
	cfg.JWKSURL += "?tenant_secret=s3cr3t"
	cfg.MinRefetch = time.Nanosecond
	cfg.Log = slog.New(slog.DiscardHandler)
	j := auth.MustNewJWT(t, cfg)
	srv.Close() // the issuer goes away: the refetch fails at the transport
	handler := sdkauth.RequireBearerToken(j.Verify, &sdkauth.RequireBearerTokenOptions{ClockSkew: auth.Leeway})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	mcp := httptest.NewServer(handler)
	defer mcp.Close()
	// Signed by a key the issuer never published.
	tok := auth.TestSigner{"attacker-kid", jose.ES256, auth.TestKeyP256}.Sign(t, auth.ValidClaimsWithNBF())
	req, _ := http.NewRequest(http.MethodGet, mcp.URL, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "issuer keys unavailable") || strings.Contains(string(body), "s3cr3t") || strings.Contains(string(body), "dial tcp") {
		t.Fatalf("HTTP %d body reveals internal fetch details to an unauthenticated caller: %s", resp.StatusCode, body)
	}
}

// TestJWTKeyOpsWithoutVerifyNotUsed: a JWK whose key_ops (RFC 7517 §4.3) lack "verify" —
// an encryption key the issuer publishes beside its signing keys — verifies no token,
// whoever holds its private half: it is skipped like a key of another use.
func TestJWTKeyOpsWithoutVerifyNotUsed(t *testing.T) {
	rsaS, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t)
	pub := rsaS.Public()
	pub.Use = "" // key_ops alone states the purpose (RFC 7517: use and key_ops SHOULD NOT both be given)
	raw, err := json.Marshal(pub)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["key_ops"] = []string{"encrypt", "wrapKey"}
	body, _ := json.Marshal(map[string]any{"keys": []any{m, ecS.Public()}})
	srv.SetBody(body, 0)
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Hour
	j := auth.MustNewJWT(t, cfg)
	ti, err := j.Verify(context.Background(), rsaS.Sign(t, auth.ValidClaimsWithNBF()), nil)
	if err == nil {
		t.Fatalf("a token signed with the key the issuer declares for encryption only (key_ops [encrypt wrapKey]) was accepted as %q", ti.UserID)
	}
	if !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("refused with %v, want ErrUnknownKey (the key is not a signature key)", err)
	}
}

// TestJWTIssuerEmptiesItsKeySet: an issuer that answers its JWK set with no usable key
// (here none at all, as after withdrawing a leaked one) has withdrawn its keys: the key it
// had verifies no token from the next fetch on, though the server started with it.
func TestJWTIssuerEmptiesItsKeySet(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	cfg := srv.JWTConfig()
	cfg.Refresh = time.Nanosecond // every token waits for a fresh set
	cfg.MinRefetch = time.Nanosecond
	cfg.Log = slog.New(slog.DiscardHandler)
	j := auth.MustNewJWT(t, cfg)
	if _, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF()), nil); err != nil {
		t.Fatalf("a published key: %v", err)
	}
	srv.SetBody([]byte(`{"keys":[]}`), 0) // the issuer withdraws every key
	before := srv.Fetches.Load()
	ti, err := j.Verify(context.Background(), ecS.Sign(t, auth.ValidClaimsWithNBF()), nil)
	if srv.Fetches.Load() == before {
		t.Fatal("no refresh was made")
	}
	if err == nil {
		t.Fatalf("after the issuer answered an empty key set, a token signed by the withdrawn key still verified (caller %q)", ti.UserID)
	}
}

// TestJWTCritIsNotABadSignature: a token marking a header critical (crit) — one the server
// does not understand, or a crit that is not even a list of names — is refused as
// malformed, naming crit, before any key or signature is looked at: not as a bad
// signature, which would send an operator to the keys when the signature may be good.
func TestJWTCritIsNotABadSignature(t *testing.T) {
	_, ecS, _ := auth.GenTestSigners(t)
	srv := auth.NewTestJWKSServer(t, ecS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Hour
	j := auth.MustNewJWT(t, cfg)
	for name, opts := range map[string]*jose.SignerOptions{
		"unsupported": (&jose.SignerOptions{}).WithType("JWT").WithHeader("urn:example:ext", "x").WithCritical("urn:example:ext"),
		"malformed":   (&jose.SignerOptions{}).WithType("JWT").WithHeader("crit", "exp"),
	} {
		sig, err := jose.NewSigner(jose.SigningKey{Algorithm: ecS.Alg, Key: jose.JSONWebKey{Key: ecS.Priv, KeyID: ecS.Kid}}, opts)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(sig).Claims(auth.ValidClaimsWithNBF()).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		_, err = j.Verify(context.Background(), tok, nil)
		if err == nil {
			t.Fatalf("%s crit: a token with a critical header was accepted", name)
		}
		if errors.Is(err, auth.ErrSignature) || !errors.Is(err, auth.ErrMalformed) || !strings.Contains(err.Error(), "crit") {
			t.Fatalf("%s crit: a correctly signed token refused as %q: the refusal should name the critical header", name, err)
		}
	}
}
