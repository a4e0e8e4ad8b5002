package auth

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"symbi/internal/errcode"
	"symbi/internal/strictjson"
)

// Limits and defaults of JWT verification.
const (
	MaxJWTBytes       = 32 << 10
	Leeway            = 30 * time.Second // clock skew allowed on exp, nbf and iat
	DefaultClaim      = "sub"
	DefaultRefresh    = 10 * time.Minute
	DefaultMinRefetch = 30 * time.Second
)

// Algorithms are the JWS algorithms a token may use.
var Algorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.EdDSA,
}

// JWTConfig configures JWT verification. JWKSURL, Issuer and Audience are required.
type JWTConfig struct {
	JWKSURL  string // the issuer's JWK set (jwks_uri)
	Issuer   string // the exact iss of accepted tokens
	Audience string // a value aud must contain: this server's resource identifier
	Claim    string // the claim holding the caller id; "" means DefaultClaim

	// RootCAs, when set, replaces the system roots for the JWK set fetch.
	RootCAs *x509.CertPool
	// AllowPrivate permits a JWKSURL on a loopback or private address (an identity
	// provider on the local network); AllowInsecure permits a plain http JWKSURL.
	AllowPrivate, AllowInsecure bool

	// Refresh is the age after which the keys are fetched again; 0 means DefaultRefresh.
	Refresh time.Duration
	// MinRefetch is the least time between two fetches, however many unknown key ids
	// tokens name; 0 means DefaultMinRefetch.
	MinRefetch time.Duration
	// Timeout bounds one fetch; 0 means safefetch.DefaultTimeout.
	Timeout time.Duration
	// Log receives why the issuer's keys could not be fetched, once per failed fetch,
	// which a caller is not told (the JWK set's URL, the issuer's address); nil means
	// slog.Default().
	Log *slog.Logger
}

// JWT verifies JWT access tokens for one issuer and audience. It is safe for concurrent
// use.
type JWT struct {
	cfg  JWTConfig
	keys *keySet
}

// NewJWT checks cfg and fetches the issuer's keys: a JWKSURL that cannot be fetched, or
// that holds no usable key, is an error.
func NewJWT(ctx context.Context, cfg JWTConfig) (*JWT, error) {
	switch {
	case cfg.JWKSURL == "":
		return nil, errcode.Errorf(errcode.InvalidRequest, "auth: the JWKS URL is required")
	case cfg.Issuer == "":
		return nil, errcode.Errorf(errcode.InvalidRequest, "auth: the issuer is required")
	case cfg.Audience == "":
		return nil, errcode.Errorf(errcode.InvalidRequest, "auth: the audience is required")
	case cfg.Refresh < 0 || cfg.MinRefetch < 0 || cfg.Timeout < 0:
		return nil, errcode.Errorf(errcode.InvalidRequest, "auth: negative duration")
	}
	if _, err := url.Parse(cfg.JWKSURL); err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "auth: JWKS URL: %v", err)
	}
	if cfg.Claim == "" {
		cfg.Claim = DefaultClaim
	}
	if notCaller[cfg.Claim] {
		// Such a claim never names a caller: every token would be refused, or a new
		// token (jti) be a new caller.
		return nil, errcode.Errorf(errcode.InvalidRequest, "auth: the claim %s cannot name the caller (it is the token's %s)", quote(cfg.Claim), notCallerWhy[cfg.Claim])
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.MinRefetch == 0 {
		cfg.MinRefetch = DefaultMinRefetch
	}
	ks := newKeySet(cfg)
	if err := ks.init(ctx); err != nil {
		return nil, err
	}
	return &JWT{cfg: cfg, keys: ks}, nil
}

// notCaller are the registered claims that say something of the token, not who holds it.
var notCaller = map[string]bool{"exp": true, "nbf": true, "iat": true, "aud": true, "iss": true, "jti": true, "scope": true}

var notCallerWhy = map[string]string{"exp": "expiry", "nbf": "start", "iat": "issue time", "aud": "audience",
	"iss": "issuer", "jti": "id, new with each token", "scope": "scopes"}

// Verify is a sdkauth.TokenVerifier: it checks token as the package comment says. The
// TokenInfo names the caller, with method MethodJWT, the token's scopes and its exp.
func (j *JWT) Verify(ctx context.Context, token string, _ *http.Request) (*sdkauth.TokenInfo, error) {
	if len(token) > MaxJWTBytes {
		return nil, refuse(ErrMalformed, "%d bytes, over the %d-byte limit", len(token), MaxJWTBytes)
	}
	sig, err := jose.ParseSignedCompact(token, Algorithms)
	if err != nil {
		var alg *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &alg) {
			return nil, refuse(ErrAlgorithm, "alg %s (accepted: %s)", quote(string(alg.Got)), algorithmNames())
		}
		return nil, refuse(ErrMalformed, "not a compact JWS: %v", err)
	}
	h := sig.Signatures[0].Header
	_, crit := sig.Signatures[0].Protected.ExtraHeaders["crit"]
	if _, inHeader := h.ExtraHeaders["crit"]; crit || inHeader {
		// Whatever it names — an extension go-jose would honour (b64), one it would not, or
		// no list at all — a JWT here has no critical header: refused before any key or
		// signature is looked at, as malformed, which it is for this server.
		return nil, refuse(ErrMalformed, "the token marks a header critical (crit), which this server does not accept")
	}
	alg := jose.SignatureAlgorithm(h.Algorithm)
	candidates, err := j.keys.lookup(ctx, h.KeyID)
	if errors.Is(err, ErrKeysUnavailable) {
		// Anyone may send a token naming an unknown key: the answer says the keys are
		// unavailable; the failed fetch was logged, once.
		return nil, fmt.Errorf("%w (the server's log says why)", ErrKeysUnavailable)
	}
	if err != nil {
		return nil, err
	}
	var payload []byte
	fitting := 0
	for _, k := range candidates {
		if !fits(k, alg) {
			continue
		}
		fitting++
		if payload, err = sig.Verify(k.Key); err == nil {
			break
		}
	}
	switch {
	case fitting == 0:
		return nil, refuse(ErrUnknownKey, "key %s cannot verify alg %s", quote(h.KeyID), alg)
	case err != nil:
		return nil, refuse(ErrSignature, "the signature does not verify with key %s", quote(h.KeyID))
	}
	return j.checkClaims(payload, time.Now())
}

// checkClaims checks the claims of a verified payload at now.
func (j *JWT) checkClaims(payload []byte, now time.Time) (*sdkauth.TokenInfo, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(payload, &all); err != nil || all == nil {
		return nil, refuse(ErrMalformed, "the claims are not a JSON object")
	}
	// One meaning for every reader: no claim named twice (the last would win here, the
	// first elsewhere), and each registered claim read by its exact name — claim names
	// are case-sensitive (RFC 7519 §4), so "Aud" or "EXP" are other, private claims, never
	// the audience or the expiry (encoding/json's struct decoding would take them for it).
	if err := strictjson.Check(payload, strictjson.Options{Single: true, NoLoneSurrogates: true}); err != nil {
		return nil, refuse(ErrMalformed, "the claims: %v", err)
	}
	var std registeredClaims
	for _, c := range []struct {
		name string
		dst  any
	}{{"iss", &std.Issuer}, {"aud", &std.Audience}, {"exp", &std.Expiry}, {"nbf", &std.NotBefore}, {"iat", &std.IssuedAt}} {
		if raw, ok := all[c.name]; ok {
			if err := json.Unmarshal(raw, c.dst); err != nil {
				return nil, refuse(ErrMalformed, "registered claim %s: %v", c.name, err)
			}
		}
	}
	switch {
	case std.Issuer != j.cfg.Issuer:
		return nil, refuse(ErrIssuer, "iss %s, want %q", quote(std.Issuer), j.cfg.Issuer)
	case !std.Audience.Contains(j.cfg.Audience):
		return nil, refuse(ErrAudience, "aud does not contain %q", j.cfg.Audience)
	case std.Expiry == nil:
		return nil, refuse(ErrExpired, "no exp claim")
	case now.Add(-Leeway).After(std.Expiry.Time()):
		return nil, refuse(ErrExpired, "exp %s has passed", std.Expiry.Time().UTC().Format(time.RFC3339))
	case std.NotBefore != nil && now.Add(Leeway).Before(std.NotBefore.Time()):
		return nil, refuse(ErrNotYetValid, "nbf %s is in the future", std.NotBefore.Time().UTC().Format(time.RFC3339))
	case std.IssuedAt != nil && now.Add(Leeway).Before(std.IssuedAt.Time()):
		return nil, refuse(ErrNotYetValid, "iat %s is in the future", std.IssuedAt.Time().UTC().Format(time.RFC3339))
	}
	var id string
	raw, ok := all[j.cfg.Claim]
	if !ok {
		return nil, refuse(ErrCallerID, "no %q claim", j.cfg.Claim)
	}
	if err := json.Unmarshal(raw, &id); err != nil {
		return nil, refuse(ErrCallerID, "the %q claim is not a string", j.cfg.Claim)
	}
	if err := checkCallerID(id); err != nil {
		return nil, refuse(ErrCallerID, "the %q claim: %v", j.cfg.Claim, err)
	}
	var scopes []string
	if raw, ok := all["scope"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, refuse(ErrMalformed, "the scope claim is not a string")
		}
		scopes = strings.Fields(s)
	}
	return &sdkauth.TokenInfo{
		UserID:     id,
		Scopes:     scopes,
		Expiration: std.Expiry.Time(),
		Extra:      map[string]any{ExtraMethod: MethodJWT},
	}, nil
}

// registeredClaims are the registered claims checked (RFC 7519 §4.1), each read by its
// exact name (checkClaims); the caller claim, which may be sub, is read on its own.
type registeredClaims struct {
	Issuer    string
	Audience  jwt.Audience
	Expiry    *jwt.NumericDate
	NotBefore *jwt.NumericDate
	IssuedAt  *jwt.NumericDate
}

// fits reports whether k may verify a signature made with alg: a public signature key of
// the type alg needs, not restricted to another algorithm.
func fits(k jose.JSONWebKey, alg jose.SignatureAlgorithm) bool {
	if k.Algorithm != "" && k.Algorithm != string(alg) {
		return false
	}
	switch alg {
	case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512:
		return keyType(k) == "RSA"
	case jose.ES256:
		return keyType(k) == "P-256"
	case jose.ES384:
		return keyType(k) == "P-384"
	case jose.ES512:
		return keyType(k) == "P-521"
	case jose.EdDSA:
		return keyType(k) == "Ed25519"
	}
	return false
}

func algorithmNames() string {
	names := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, " ")
}

// unavailable is the error for keys that cannot be had: not a refusal of the token.
func unavailable(err error) error {
	return fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
}
