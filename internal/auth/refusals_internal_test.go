package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/proctest"
)

// claimsVerifier is a verifier of claims only, for checkClaims at a fixed time.
func claimsVerifier() *JWT {
	return &JWT{cfg: JWTConfig{Issuer: TestIssuer, Audience: TestAudience, Claim: DefaultClaim}}
}

// claimsJSON is c as a token payload.
func claimsJSON(t *testing.T, c map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFromTokenInfoEveryMethod: FromTokenInfo reads back a caller of each of the four
// methods (stdio, token, jwt, none).
func TestFromTokenInfoEveryMethod(t *testing.T) {
	for _, m := range []string{MethodStdio, MethodToken, MethodJWT, MethodNone} {
		c, ok := FromTokenInfo(&sdkauth.TokenInfo{UserID: "alice", Extra: map[string]any{ExtraMethod: m}})
		if !ok || c != (Caller{ID: "alice", Method: m}) {
			t.Errorf("method %q: got %+v, %v", m, c, ok)
		}
	}
}

// TestCallersWithoutCredentials: the stdio caller is "stdio" by method stdio, the
// unauthenticated loopback caller "anonymous" by method none.
func TestCallersWithoutCredentials(t *testing.T) {
	if Stdio != (Caller{ID: "stdio", Method: "stdio"}) {
		t.Errorf("Stdio = %+v", Stdio)
	}
	if Anonymous != (Caller{ID: "anonymous", Method: "none"}) {
		t.Errorf("Anonymous = %+v", Anonymous)
	}
}

// TestRefusalCutsPresentedText: a refusal quotes at most 64 bytes of a value taken
// from the presented token.
func TestRefusalCutsPresentedText(t *testing.T) {
	long := strings.Repeat("x", 1000)
	now := time.Unix(1_800_000_000, 0)
	_, err := claimsVerifier().checkClaims(claimsJSON(t, map[string]any{"iss": long, "aud": TestAudience, "exp": now.Unix() + 60, "sub": "alice"}), now)
	if !errors.Is(err, ErrIssuer) {
		t.Fatalf("a wrong issuer: %v", err)
	}
	if strings.Contains(err.Error(), strings.Repeat("x", 65)) || !strings.Contains(err.Error(), strings.Repeat("x", 64)+`"...`) {
		t.Fatalf("the refusal quotes the presented issuer uncut (%d bytes): %.200s", len(err.Error()), err)
	}
}

// TestJWTSizeLimit: a JWT of 32 KiB (the README's limit) is not refused for its size;
// one byte more is.
func TestJWTSizeLimit(t *testing.T) {
	j, _, _ := ecJWT(t, 0, time.Hour)
	at := strings.Repeat("a", 32<<10)
	if _, err := j.Verify(context.Background(), at, nil); err == nil || strings.Contains(err.Error(), "over the") {
		t.Fatalf("a token of exactly 32 KiB: %v, want a refusal not for its size", err)
	}
	if _, err := j.Verify(context.Background(), at+"a", nil); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "over the 32768-byte limit") {
		t.Fatalf("a token of 32 KiB + 1: %v, want refused for its size", err)
	}
}

// TestJWTSameKidSeveralKeys: when the set holds several keys under one kid, a token
// that verifies with any of them is accepted, whichever comes first.
func TestJWTSameKidSeveralKeys(t *testing.T) {
	GenTestKeys(t)
	other := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	first, second := TestSigner{"k", jose.ES256, TestKeyP256}, TestSigner{"k", jose.ES256, other}
	srv := NewTestJWKSServer(t, first.Public(), second.Public())
	cfg := srv.QuietJWTConfig()
	cfg.MinRefetch = time.Hour
	j := MustNewJWT(t, cfg)
	for name, s := range map[string]TestSigner{"first": first, "second": second} {
		if ti, err := j.Verify(context.Background(), s.Sign(t, ValidClaims()), nil); err != nil || ti.UserID != "alice" {
			t.Errorf("signed by the %s key of kid k: %v, %v", name, ti, err)
		}
	}
}

// must is v, or a panic on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestIssuerExact: iss must equal the configured issuer byte for byte, not merely
// under case folding.
func TestIssuerExact(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	_, err := claimsVerifier().checkClaims(claimsJSON(t, map[string]any{"iss": strings.ToUpper(TestIssuer), "aud": TestAudience, "exp": now.Unix() + 60, "sub": "alice"}), now)
	if !errors.Is(err, ErrIssuer) {
		t.Fatalf("iss in capitals: %v, want ErrIssuer", err)
	}
}

// TestNewJWTNegativeDurations: a negative Refresh, MinRefetch or Timeout is refused.
func TestNewJWTNegativeDurations(t *testing.T) {
	base := JWTConfig{JWKSURL: "https://192.0.2.1/jwks", Issuer: TestIssuer, Audience: TestAudience}
	for name, f := range map[string]func(*JWTConfig){
		"Refresh":    func(c *JWTConfig) { c.Refresh = -time.Second },
		"MinRefetch": func(c *JWTConfig) { c.MinRefetch = -time.Second },
		"Timeout":    func(c *JWTConfig) { c.Timeout = -time.Second },
	} {
		cfg := base
		f(&cfg)
		if _, err := NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "negative duration") || errcode.Of(err) != errcode.InvalidRequest {
			t.Errorf("negative %s: %v, want invalid_request naming the negative duration", name, err)
		}
	}
}

// TestClaimNotCaller: every claim docs/http.md lists as saying something of the token
// (exp, nbf, iat, aud, iss, jti, scope) is refused as the caller claim at start.
func TestClaimNotCaller(t *testing.T) {
	for _, c := range []string{"exp", "nbf", "iat", "aud", "iss", "jti", "scope"} {
		cfg := JWTConfig{JWKSURL: "https://192.0.2.1/jwks", Issuer: TestIssuer, Audience: TestAudience, Claim: c}
		if _, err := NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "cannot name the caller") {
			t.Errorf("claim %q: %v, want refused as the caller claim", c, err)
		}
	}
}

// TestDocumentedDefaults: keys are refreshed every 10 minutes and refetched for an
// unknown kid at most every 30 seconds by default, and exp, nbf and iat have 30 s leeway.
func TestDocumentedDefaults(t *testing.T) {
	GenTestKeys(t)
	srv := NewTestJWKSServer(t, TestSigner{"ec", jose.ES256, TestKeyP256}.Public())
	j := MustNewJWT(t, srv.QuietJWTConfig())
	if j.keys.refresh != 10*time.Minute || j.keys.minRefetch != 30*time.Second {
		t.Errorf("refresh %v, min refetch %v; want 10m0s and 30s", j.keys.refresh, j.keys.minRefetch)
	}
	now := time.Unix(1_800_000_000, 0)
	check := func(kv ...any) error {
		c := map[string]any{"iss": TestIssuer, "aud": TestAudience, "exp": now.Unix() + 60, "sub": "alice"}
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		_, err := claimsVerifier().checkClaims(claimsJSON(t, c), now)
		return err
	}
	for _, tc := range []struct {
		name   string
		kv     []any
		reason error
	}{
		{"exp 30 s ago", []any{"exp", now.Unix() - 30}, nil},
		{"exp 31 s ago", []any{"exp", now.Unix() - 31}, ErrExpired},
		{"nbf in 30 s", []any{"nbf", now.Unix() + 30}, nil},
		{"nbf in 31 s", []any{"nbf", now.Unix() + 31}, ErrNotYetValid},
		{"iat in 30 s", []any{"iat", now.Unix() + 30}, nil},
		{"iat in 31 s", []any{"iat", now.Unix() + 31}, ErrNotYetValid},
	} {
		if err := check(tc.kv...); (tc.reason == nil) != (err == nil) || (tc.reason != nil && !errors.Is(err, tc.reason)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.reason)
		}
	}
}

// TestAlgorithms: each documented algorithm — RS256/384/512, PS256/384/512,
// ES256/384/512 (P-256, P-384, P-521) and EdDSA — verifies with a key of its type.
func TestAlgorithms(t *testing.T) {
	GenTestKeys(t)
	signers := []TestSigner{
		{"rs256", jose.RS256, TestKeyRSA}, {"rs384", jose.RS384, TestKeyRSA}, {"rs512", jose.RS512, TestKeyRSA},
		{"ps256", jose.PS256, TestKeyRSA}, {"ps384", jose.PS384, TestKeyRSA}, {"ps512", jose.PS512, TestKeyRSA},
		{"es256", jose.ES256, TestKeyP256}, {"es384", jose.ES384, TestKeyP384}, {"es512", jose.ES512, TestKeyP521},
		{"eddsa", jose.EdDSA, TestKeyEd25519},
	}
	var pubs []jose.JSONWebKey
	for _, s := range signers {
		pubs = append(pubs, s.Public())
	}
	srv := NewTestJWKSServer(t, pubs...)
	cfg := srv.QuietJWTConfig()
	cfg.MinRefetch = time.Hour
	j := MustNewJWT(t, cfg)
	for _, s := range signers {
		if ti, err := j.Verify(context.Background(), s.Sign(t, ValidClaims()), nil); err != nil || ti.UserID != "alice" {
			t.Errorf("%s: %v, %v", s.Alg, ti, err)
		}
	}
}

// ecJWT is a JWT verifier of the keys of a JWK set served on loopback holding one P-256
// key, s's; refresh and minRefetch are its durations when not 0.
func ecJWT(t *testing.T, refresh, minRefetch time.Duration) (*JWT, TestSigner, *TestJWKSServer) {
	t.Helper()
	GenTestKeys(t)
	s := TestSigner{"ec", jose.ES256, TestKeyP256}
	srv := NewTestJWKSServer(t, s.Public())
	cfg := srv.QuietJWTConfig()
	if refresh != 0 {
		cfg.Refresh = refresh
	}
	if minRefetch != 0 {
		cfg.MinRefetch = minRefetch
	}
	return MustNewJWT(t, cfg), s, srv
}

// TestClaimsNull: a payload that is JSON null is not a claims object: malformed.
func TestClaimsNull(t *testing.T) {
	if _, err := claimsVerifier().checkClaims([]byte("null"), time.Now()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("claims null: %v, want ErrMalformed", err)
	}
}

// TestStaleKeysWithinMinRefetch: keys due for refreshing that may not be fetched again
// yet (MinRefetch) still verify a token: the last good set stands.
func TestStaleKeysWithinMinRefetch(t *testing.T) {
	j, s, srv := ecJWT(t, time.Nanosecond, time.Hour)
	if _, err := j.Verify(context.Background(), s.Sign(t, ValidClaims()), nil); err != nil {
		t.Fatalf("a known key of a set due for refreshing, within MinRefetch: %v", err)
	}
	if n := srv.Fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
}

// TestRecentFailedFetchIsUnavailable: an unknown kid soon after a failed fetch (too
// soon to fetch again) is answered "issuer keys unavailable", not refused as unknown.
func TestRecentFailedFetchIsUnavailable(t *testing.T) {
	j, _, srv := ecJWT(t, 0, time.Hour)
	j.keys.mu.Lock()
	j.keys.tried = j.keys.tried.Add(-2 * time.Hour) // a fetch may be made
	j.keys.mu.Unlock()
	srv.SetStatus(http.StatusServiceUnavailable)
	tok := TestSigner{"new", jose.ES256, TestKeyP256}.Sign(t, ValidClaims())
	for i := range 2 { // the first fetches and fails; the second may not fetch
		_, err := j.Verify(context.Background(), tok, nil)
		if !errors.Is(err, ErrKeysUnavailable) || errors.Is(err, sdkauth.ErrInvalidToken) {
			t.Fatalf("request %d: %v, want ErrKeysUnavailable", i+1, err)
		}
	}
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

// TestCancelledWaitIsUnavailable: a request that stops waiting for a fetch (its
// context ends) is answered "issuer keys unavailable" at once; the fetch goes on for the
// others.
func TestCancelledWaitIsUnavailable(t *testing.T) {
	j, _, srv := ecJWT(t, 0, time.Nanosecond)
	held := srv.Hold()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	newKey := TestSigner{"new", jose.ES256, TestKeyP256}
	tok := newKey.Sign(t, ValidClaims())
	_, err := j.Verify(ctx, tok, nil)
	if !errors.Is(err, ErrKeysUnavailable) || errors.Is(err, sdkauth.ErrInvalidToken) {
		t.Fatalf("a cancelled request waiting for a fetch: %v, want ErrKeysUnavailable", err)
	}
	srv.SetKeys(t, TestSigner{"ec", jose.ES256, TestKeyP256}.Public(), newKey.Public())
	j.keys.mu.Lock()
	done := j.keys.inflight
	j.keys.mu.Unlock()
	if done == nil {
		t.Fatal("the fetch the cancelled request started is not running")
	}
	close(held)
	<-done // the fetch ends although its first waiter left
	if _, err := j.Verify(context.Background(), tok, nil); err != nil {
		t.Fatalf("after the fetch: %v", err)
	}
}

// TestRefreshResetsAge: a successful refresh makes the keys fresh again: the next
// token does not fetch them again.
func TestRefreshResetsAge(t *testing.T) {
	j, s, srv := ecJWT(t, time.Hour, time.Nanosecond)
	j.keys.mu.Lock()
	j.keys.fetched = j.keys.fetched.Add(-2 * time.Hour) // due for refreshing
	j.keys.mu.Unlock()
	for range 3 {
		if _, err := j.Verify(context.Background(), s.Sign(t, ValidClaims()), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (start, one refresh)", n)
	}
}

// TestRefetchSetsTried: every fetch, not only the first, starts the MinRefetch
// interval: a flood of unknown kids makes one fetch.
func TestRefetchSetsTried(t *testing.T) {
	j, _, srv := ecJWT(t, 0, time.Hour)
	j.keys.mu.Lock()
	j.keys.tried = j.keys.tried.Add(-2 * time.Hour)
	j.keys.mu.Unlock()
	for i := range 5 {
		tok := TestSigner{fmt.Sprint("unknown-", i), jose.ES256, TestKeyP256}.Sign(t, ValidClaims())
		if _, err := j.Verify(context.Background(), tok, nil); !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("unknown kid %d: %v", i, err)
		}
	}
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (start, one refetch)", n)
	}
}

// waitersInLookup counts goroutines blocked in keySet.lookup's select.
func waitersInLookup() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "(*keySet).lookup") {
			n++
		}
	}
	return n
}

// TestOneFetchAtATime: while a fetch runs, another request waits for it rather than
// starting a second one, even once MinRefetch has passed.
func TestOneFetchAtATime(t *testing.T) {
	j, _, srv := ecJWT(t, 0, time.Nanosecond)
	held := srv.Hold()
	var wg sync.WaitGroup
	for i := range 2 {
		tok := TestSigner{fmt.Sprint("unknown-", i), jose.ES256, TestKeyP256}.Sign(t, ValidClaims())
		wg.Go(func() { j.Verify(context.Background(), tok, nil) })
		for waitersInLookup() < i+1 { // this request waits on a fetch
			runtime.Gosched()
		}
	}
	close(held)
	wg.Wait()
	if n := srv.Fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (start, one refetch both requests waited on)", n)
	}
}

// TestJWKSAtMostMaxKeys: a set of exactly MaxJWKSKeys (100) keys is read.
func TestJWKSAtMostMaxKeys(t *testing.T) {
	GenTestKeys(t)
	keys := make([]jose.JSONWebKey, 100)
	for i := range keys {
		keys[i] = TestSigner{fmt.Sprint("k", i), jose.ES256, TestKeyP256}.Public()
	}
	body, _ := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if got, err := parseJWKS(body); err != nil || len(got) != 100 {
		t.Fatalf("a set of 100 keys: %d keys, %v", len(got), err)
	}
}

// TestJWKSFetchTimeout: JWTConfig.Timeout bounds the fetch.
func TestJWKSFetchTimeout(t *testing.T) {
	GenTestKeys(t)
	srv := NewTestJWKSServer(t, TestSigner{"ec", jose.ES256, TestKeyP256}.Public())
	cfg := srv.QuietJWTConfig()
	cfg.Timeout = time.Nanosecond
	if _, err := NewJWT(context.Background(), cfg); err == nil {
		t.Fatal("a fetch bounded by 1 ns succeeded")
	}
}

// sampleHash is a well-formed token hash.
const sampleHash = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestTokenFileExactlyMaxBytes: a token file of exactly MaxTokenFileBytes (1 MiB) is
// read, by ParseTokens and by LoadTokens.
func TestTokenFileExactlyMaxBytes(t *testing.T) {
	entry := "alice " + sampleHash + "\n"
	pad := MaxTokenFileBytes - len(entry)
	data := entry + strings.Repeat("#", pad-1) + "\n"
	if len(data) != MaxTokenFileBytes {
		t.Fatalf("test setup: %d bytes", len(data))
	}
	if tok, err := ParseTokens([]byte(data)); err != nil || tok.Len() != 1 {
		t.Fatalf("ParseTokens of exactly 1 MiB: %v, %v", tok, err)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := LoadTokens(path); err != nil || tok.Len() != 1 {
		t.Fatalf("LoadTokens of exactly 1 MiB: %v, %v", tok, err)
	}
}

// TestTokenHashNotHex: a hash of 64 lowercase characters that are not all hex digits
// is refused.
func TestTokenHashNotHex(t *testing.T) {
	line := "alice " + sampleHash[:len(sampleHash)-2] + "zz\n"
	_, err := ParseTokens([]byte(line))
	var le *LineError
	if !errors.Is(err, ErrInvalidTokenFile) || !errors.As(err, &le) || le.Line != 1 || !strings.Contains(err.Error(), "64 lowercase hex") {
		t.Fatalf("%q: %v, want line 1 refused as not hex", line, err)
	}
}

// TestAddTokenHoldsLockWhileDelivering: AddToken holds an exclusive lock on the file
// from its checks until the token is handed over.
func TestAddTokenHoldsLockWhileDelivering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	var lockErr error
	deliver := func(string) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		lockErr = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if lockErr == nil {
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
		}
		return nil
	}
	if _, err := AddToken(path, "alice", bytes.NewReader(make([]byte, 32)), deliver); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(lockErr, unix.EWOULDBLOCK) {
		t.Fatalf("another lock on the file while the token is delivered: %v, want EWOULDBLOCK", lockErr)
	}
}

// TestAddTokenSizeLimit: AddToken appends an entry that brings the file to exactly
// MaxTokenFileBytes, and refuses (limit_exceeded, file unchanged) one that would pass it.
func TestAddTokenSizeLimit(t *testing.T) {
	const entryLen = len("bob ") + len(sampleHash) + 1
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		over int // bytes past the limit the entry would bring the file
	}{{"to the limit", 0}, {"past the limit", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			entry := "alice " + sampleHash + "\n"
			size := MaxTokenFileBytes - entryLen + tc.over
			data := entry + strings.Repeat("#", size-len(entry)-1) + "\n"
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := AddToken(path, "bob", bytes.NewReader(make([]byte, 32)), nil)
			after, _ := os.ReadFile(path)
			if tc.over == 0 {
				if err != nil || len(after) != MaxTokenFileBytes {
					t.Fatalf("an add to exactly %d bytes: %v (file %d bytes)", MaxTokenFileBytes, err, len(after))
				}
				return
			}
			if err == nil || errcode.Of(err) != errcode.LimitExceeded || !bytes.Equal(after, []byte(data)) {
				t.Fatalf("an add past %d bytes: %v (code %s, file %d bytes, was %d)", MaxTokenFileBytes, err, errcode.Of(err), len(after), len(data))
			}
		})
	}
}

// TestAddTokenNotDeliveredReturnsNoToken: a token that could not be handed over is
// not returned.
func TestAddTokenNotDeliveredReturnsNoToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	tok, err := AddToken(path, "alice", bytes.NewReader(make([]byte, 32)), func(string) error { return errors.New("closed pipe") })
	if !errors.Is(err, ErrNotDelivered) || tok != "" {
		t.Fatalf("AddToken with a failed delivery: %q, %v; want no token and ErrNotDelivered", tok, err)
	}
}

// TestLoadTokensNeedsAnEntry: LoadTokens refuses a file without an entry.
func TestLoadTokensNeedsAnEntry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# nobody yet\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := LoadTokens(path); !errors.Is(err, ErrInvalidTokenFile) || !strings.Contains(err.Error(), "no token") {
		t.Fatalf("LoadTokens of a file without entries: %v, %v", tok, err)
	}
}

// TestTokenFileErrorsAreInvalidRequest: a malformed token file is refused with
// invalid_request, by ParseTokens and LoadTokens, and LoadTokens names the file and line.
func TestTokenFileErrorsAreInvalidRequest(t *testing.T) {
	data := []byte("alice " + sampleHash + "\nbob sha256:00\n")
	if _, err := ParseTokens(data); errcode.Of(err) != errcode.InvalidRequest {
		t.Errorf("ParseTokens: %v (code %s), want invalid_request", err, errcode.Of(err))
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadTokens(path)
	if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("LoadTokens: %v (code %s), want invalid_request naming %s and line 2", err, errcode.Of(err), path)
	}
}

// TestAddTokenEntryDurableBeforeDelivery: when the token is handed over, its entry is
// already in the file.
func TestAddTokenEntryDurableBeforeDelivery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	var inFile bool
	tok, err := AddToken(path, "alice", bytes.NewReader(make([]byte, 32)), func(token string) error {
		data, err := os.ReadFile(path)
		inFile = err == nil && strings.Contains(string(data), fmt.Sprintf("alice sha256:%x\n", sha256.Sum256([]byte(token))))
		return nil
	})
	if err != nil || tok == "" {
		t.Fatal(err)
	}
	if !inFile {
		t.Fatal("the token was handed over before its entry was in the file")
	}
}

// makeKeysStale makes j's keys due for refreshing and fetchable now.
func makeKeysStale(j *JWT) {
	j.keys.mu.Lock()
	j.keys.fetched = j.keys.fetched.Add(-2 * time.Hour)
	j.keys.tried = j.keys.tried.Add(-2 * time.Hour)
	j.keys.mu.Unlock()
}

// TestKidlessTokenAfterWithdrawal: docs/http.md — keys are "refreshed every 10
// minutes", and after a refresh answered with no usable key "every token is refused, as
// signed by an unknown key, until the issuer publishes one". A token without kid (accepted
// when the set holds one key) is accepted again once the issuer republishes a key and the
// set is due for refreshing.
func TestKidlessTokenAfterWithdrawal(t *testing.T) {
	GenTestKeys(t)
	s := TestSigner{"a", jose.ES256, TestKeyP256}
	kidless := TestSigner{"", jose.ES256, TestKeyP256}
	srv := NewTestJWKSServer(t, s.Public())
	cfg := srv.QuietJWTConfig()
	cfg.Refresh = time.Hour
	cfg.MinRefetch = time.Hour
	j := MustNewJWT(t, cfg)
	if _, err := j.Verify(context.Background(), kidless.Sign(t, ValidClaims()), nil); err != nil {
		t.Fatalf("a token without kid, one key: %v", err)
	}
	srv.SetKeys(t) // the issuer withdraws its key
	makeKeysStale(j)
	if _, err := j.Verify(context.Background(), kidless.Sign(t, ValidClaims()), nil); err == nil {
		t.Fatal("accepted after the issuer withdrew its key")
	}
	srv.SetKeys(t, s.Public()) // and publishes one again
	makeKeysStale(j)           // an hour later: due for refreshing, and fetchable
	before := srv.Fetches.Load()
	_, err := j.Verify(context.Background(), kidless.Sign(t, ValidClaims()), nil)
	if err != nil {
		t.Fatalf("a token without kid, the issuer publishing one key again, the set due for refreshing: %v (fetches during the request: %d)", err, srv.Fetches.Load()-before)
	}
}

// TestKidlessTokenStaleSetOfTwo: a set of two keys, due for refreshing, that the
// issuer has since cut to one: a token without kid makes the set be fetched ("a set older
// than refresh starts a fetch", keySet.lookup) and is then verified by the one key.
func TestKidlessTokenStaleSetOfTwo(t *testing.T) {
	GenTestKeys(t)
	a := TestSigner{"a", jose.ES256, TestKeyP256}
	b := TestSigner{"b", jose.ES384, TestKeyP384}
	srv := NewTestJWKSServer(t, a.Public(), b.Public())
	cfg := srv.QuietJWTConfig()
	cfg.Refresh = time.Hour
	cfg.MinRefetch = time.Hour
	j := MustNewJWT(t, cfg)
	srv.SetKeys(t, a.Public()) // the issuer retires b
	makeKeysStale(j)
	before := srv.Fetches.Load()
	_, err := j.Verify(context.Background(), TestSigner{"", jose.ES256, TestKeyP256}.Sign(t, ValidClaims()), nil)
	if err != nil {
		t.Fatalf("a token without kid, the stale set (2 keys) now 1 key at the issuer: %v (fetches during the request: %d)", err, srv.Fetches.Load()-before)
	}
}

// TestAddTokenFailedWriteLeavesFileLoadable: AddToken refuses "a file LoadTokens
// would refuse", and a token no one was given must not hold a name (its doc comment): an
// append that fails part-way (here the file-size limit, as a full disk would) leaves the
// file as it was and loadable — a partial entry left behind would make the whole file
// invalid (the server then refuses to start, every caller locked out), and a whole entry
// left behind would hold the name for a token nobody received. The add runs in a child
// process: RLIMIT_FSIZE is the process's.
func TestAddTokenFailedWriteLeavesFileLoadable(t *testing.T) {
	if path := os.Getenv("SYMBI_TEST_ADDTOKEN_CHILD"); path != "" {
		addTokenUnderFSizeLimit(path)
		return
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if _, err := AddToken(path, "alice", bytes.NewReader(make([]byte, 32)), nil); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAddTokenFailedWriteLeavesFileLoadable$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SYMBI_TEST_ADDTOKEN_CHILD="+path)
	out, err := cmd.CombinedOutput()
	t.Logf("child: %v\n%s", err, out)
	if err != nil {
		t.Fatalf("child failed: %v", err)
	}
	after, _ := os.ReadFile(path)
	if _, err := LoadTokens(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("after a failed add, the token file is %q (was %q) and LoadTokens says: %v", after, before, err)
	}
}

// addTokenUnderFSizeLimit adds a token to the file at path with room for 10 bytes of its
// entry under the file size limit, and prints what AddToken said.
func addTokenUnderFSizeLimit(path string) {
	st, err := os.Stat(path)
	if err != nil {
		fmt.Println("stat:", err)
		os.Exit(1)
	}
	restore, err := proctest.LimitFileSize(uint64(st.Size() + 10))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	_, addErr := AddToken(path, "bob", bytes.NewReader(make([]byte, 32)), nil)
	restore()
	fmt.Println("AddToken past the file size limit:", addErr)
	if addErr == nil {
		fmt.Println("the add succeeded past the file size limit: the test cannot show anything")
		os.Exit(1)
	}
}
