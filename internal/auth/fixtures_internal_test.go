package auth

// The JWT test fixtures of both test packages: declared here, in package auth, and
// exported so that the external tests (package auth_test) use them as auth.X.

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TestIssuer and TestAudience are the iss and aud the verifiers under test accept.
const (
	TestIssuer   = "https://issuer.example"
	TestAudience = "https://symbi.example/mcp"
)

// TestSigner is a test key: its private half signs, its public half is published.
type TestSigner struct {
	Kid  string                  // the key id, in the published key and in each token's header
	Alg  jose.SignatureAlgorithm // the algorithm it signs with
	Priv crypto.Signer           // the private key
}

// Public is the public half of s as a JWK for signatures, with s's key id.
func (s TestSigner) Public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: s.Priv.Public(), KeyID: s.Kid, Use: "sig"}
}

// signer is a JOSE signer of s, with a "JWT" typ header, failing t if it cannot be made.
func (s TestSigner) signer(t testing.TB) jose.Signer {
	t.Helper()
	key := jose.JSONWebKey{Key: s.Priv, KeyID: s.Kid}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: s.Alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// Sign makes a compact JWS of claims with s (its header names s's kid when it is not
// empty).
func (s TestSigner) Sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	tok, err := jwt.Signed(s.signer(t)).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// SignRaw makes a compact JWS of the exact payload bytes with s (claims a map cannot
// hold: a name twice).
func (s TestSigner) SignRaw(t testing.TB, payload string) string {
	t.Helper()
	jws, err := s.signer(t).Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The shared keys of every documented type, made once per process by GenTestKeys.
var (
	testKeysOnce   sync.Once
	TestKeyRSA     *rsa.PrivateKey   // RSA 2048
	TestKeyP256    *ecdsa.PrivateKey // EC P-256
	TestKeyP384    *ecdsa.PrivateKey // EC P-384
	TestKeyP521    *ecdsa.PrivateKey // EC P-521
	TestKeyEd25519 ed25519.PrivateKey
)

// GenTestKeys makes the shared keys (TestKeyRSA, TestKeyP256, TestKeyP384, TestKeyP521,
// TestKeyEd25519) once, failing t if they could not be made.
func GenTestKeys(t testing.TB) {
	testKeysOnce.Do(func() {
		TestKeyRSA, _ = rsa.GenerateKey(rand.Reader, 2048)
		TestKeyP256, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		TestKeyP384, _ = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		TestKeyP521, _ = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
		_, TestKeyEd25519, _ = ed25519.GenerateKey(rand.Reader)
	})
	if TestKeyRSA == nil || TestKeyP256 == nil || TestKeyP384 == nil || TestKeyP521 == nil || TestKeyEd25519 == nil {
		t.Fatal("key generation failed")
	}
}

// GenTestSigners returns signers of the shared keys: "rsa-1" (RS256), "ec-1" (ES256,
// P-256) and "ed-1" (EdDSA).
func GenTestSigners(t testing.TB) (rsaS, ecS, edS TestSigner) {
	GenTestKeys(t)
	return TestSigner{"rsa-1", jose.RS256, TestKeyRSA}, TestSigner{"ec-1", jose.ES256, TestKeyP256}, TestSigner{"ed-1", jose.EdDSA, TestKeyEd25519}
}

// validClaims are valid claims for alice, with an nbf when nbf, changed by the given
// pairs (a nil value deletes).
func validClaims(nbf bool, kv ...any) map[string]any {
	now := time.Now().Unix()
	c := map[string]any{"iss": TestIssuer, "aud": TestAudience, "sub": "alice", "exp": now + 300, "iat": now}
	if nbf {
		c["nbf"] = now - 10
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// ValidClaims are valid claims for alice without nbf (iss, aud, sub, exp in 300 s, iat
// now), changed by the given pairs (a nil value deletes).
func ValidClaims(kv ...any) map[string]any { return validClaims(false, kv...) }

// ValidClaimsWithNBF are ValidClaims with an nbf of 10 s ago, changed by the given pairs
// (a nil value deletes).
func ValidClaimsWithNBF(kv ...any) map[string]any { return validClaims(true, kv...) }

// TestJWKSServer is an issuer's key endpoint on loopback TLS whose answer can change or
// be held.
type TestJWKSServer struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	status  int
	held    chan struct{} // when set, a fetch is answered once it is closed
	Fetches atomic.Int32  // the fetches begun
}

// NewTestJWKSServer starts a TestJWKSServer publishing keys, closed when t ends.
func NewTestJWKSServer(t testing.TB, keys ...jose.JSONWebKey) *TestJWKSServer {
	s := &TestJWKSServer{}
	s.SetKeys(t, keys...)
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Fetches.Add(1)
		s.mu.Lock()
		body, status, held := s.body, s.status, s.held
		s.mu.Unlock()
		if held != nil {
			<-held
		}
		if status != 0 {
			http.Error(w, "down", status)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(body)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes of the untrusted-certificate cases
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// SetKeys makes s answer the set of keys (status 200).
func (s *TestJWKSServer) SetKeys(t testing.TB, keys ...jose.JSONWebKey) {
	body, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	s.SetBody(body, 0)
}

// SetBody makes s answer body, or fail with status when it is not 0.
func (s *TestJWKSServer) SetBody(body []byte, status int) {
	s.mu.Lock()
	s.body, s.status = body, status
	s.mu.Unlock()
}

// SetStatus makes s fail with status (0: answer its body again), its body kept.
func (s *TestJWKSServer) SetStatus(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

// Hold makes every fetch wait, from now on, until the returned channel is closed.
func (s *TestJWKSServer) Hold() chan struct{} {
	held := make(chan struct{})
	s.mu.Lock()
	s.held = held
	s.mu.Unlock()
	return held
}

// Unhold makes fetches begun from now on be answered at once again.
func (s *TestJWKSServer) Unhold() {
	s.mu.Lock()
	s.held = nil
	s.mu.Unlock()
}

// JWTConfig is a config for a verifier of s's keys, TestIssuer and TestAudience; its Log
// is nil (slog.Default()).
func (s *TestJWKSServer) JWTConfig() JWTConfig {
	return JWTConfig{
		JWKSURL:      s.URL + "/jwks",
		Issuer:       TestIssuer,
		Audience:     TestAudience,
		RootCAs:      s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs,
		AllowPrivate: true,
		Timeout:      time.Minute,
	}
}

// QuietJWTConfig is JWTConfig with a Log that discards.
func (s *TestJWKSServer) QuietJWTConfig() JWTConfig {
	cfg := s.JWTConfig()
	cfg.Log = slog.New(slog.DiscardHandler)
	return cfg
}

// MustNewJWT starts a verifier of cfg, failing the test if it cannot.
func MustNewJWT(t *testing.T, cfg JWTConfig) *JWT {
	t.Helper()
	j, err := NewJWT(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
