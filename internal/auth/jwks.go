package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"symbi/internal/strictjson"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"symbi/internal/errcode"
	"symbi/internal/safefetch"
)

// Limits on a JWK set.
const (
	MaxJWKSBytes = 256 << 10
	MaxJWKSKeys  = 100
)

// keySet is the cached JWK set of an issuer and the state of its fetches.
type keySet struct {
	url                 string
	log                 *slog.Logger // told why a fetch failed, once per fetch
	opts                safefetch.Options
	refresh, minRefetch time.Duration

	mu       sync.Mutex
	keys     []jose.JSONWebKey // the last good set, never empty after init
	fetched  time.Time         // when keys were fetched
	tried    time.Time         // when the last fetch started
	lastErr  error             // the outcome of the last finished fetch
	inflight chan struct{}     // closed when the running fetch ends; nil when none runs
}

func newKeySet(cfg JWTConfig) *keySet {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &keySet{
		url: cfg.JWKSURL,
		log: log,
		opts: safefetch.Options{
			AllowInsecure: cfg.AllowInsecure,
			AllowPrivate:  cfg.AllowPrivate,
			InsecureHint:  "use https, or --auth-jwks-allow-insecure",
			PrivateHint:   "--auth-jwks-allow-private allows it",
			RootCAs:       cfg.RootCAs,
			Timeout:       cfg.Timeout,
			MaxBytes:      MaxJWKSBytes,
			Accept:        "application/jwk-set+json, application/json",
		},
		refresh:    cfg.Refresh,
		minRefetch: cfg.MinRefetch,
	}
}

// init fetches the keys for the first time.
func (s *keySet) init(ctx context.Context) error {
	s.tried = time.Now()
	keys, err := s.fetch(ctx)
	if err != nil {
		return err
	}
	s.keys, s.fetched = keys, time.Now()
	return nil
}

// lookup returns the keys the token's kid names. A kid not in the set, or a set older
// than refresh, starts a fetch, unless one ran less than minRefetch ago, and waits for it:
// a key the issuer has removed verifies no token once the set is due for refreshing,
// however long the server was idle. When that fetch fails, the last good set stands (the
// log says why). A token without kid gets the set's only key, and fetches as an unknown
// kid does when the set holds none or several.
func (s *keySet) lookup(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	s.mu.Lock()
	now := time.Now()
	mayFetch := s.inflight == nil && now.Sub(s.tried) >= s.minRefetch
	stale := now.Sub(s.fetched) >= s.refresh
	keys := s.match(kid)
	if len(keys) > 0 && !stale {
		s.mu.Unlock()
		return keys, nil
	}
	if mayFetch {
		// A token without kid fetches as an unknown kid does: the issuer may since
		// have published its one key, or withdrawn all but one.
		s.start()
	}
	done, lastErr, unknown := s.inflight, s.lastErr, s.unknown(kid)
	s.mu.Unlock()
	if done == nil && len(keys) > 0 {
		return keys, nil // due, but fetched moments ago and failed: the last good set stands
	}
	if done == nil {
		// Fetched too recently to fetch again: the last outcome stands.
		if lastErr != nil {
			return nil, unavailable(lastErr)
		}
		return nil, unknown
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, unavailable(ctx.Err())
	}
	s.mu.Lock()
	keys, lastErr, unknown = s.match(kid), s.lastErr, s.unknown(kid)
	s.mu.Unlock()
	switch {
	case len(keys) > 0:
		return keys, nil
	case lastErr != nil:
		return nil, unavailable(lastErr)
	}
	return nil, unknown
}

// unknown is the refusal of a token whose kid matches no key of the set. s.mu is held.
func (s *keySet) unknown(kid string) error {
	if kid == "" {
		return refuse(ErrUnknownKey, "no kid, and the issuer has %d keys", len(s.keys))
	}
	return refuse(ErrUnknownKey, "kid %s is not in the issuer's key set", quote(kid))
}

// match returns the keys with id kid, or the only key for "". s.mu is held.
func (s *keySet) match(kid string) []jose.JSONWebKey {
	if kid == "" {
		if len(s.keys) == 1 {
			return s.keys
		}
		return nil
	}
	var out []jose.JSONWebKey
	for _, k := range s.keys {
		if k.KeyID == kid {
			out = append(out, k)
		}
	}
	return out
}

// start starts a fetch in the background. s.mu is held and no fetch runs. The fetch is
// bounded by its own timeout, not by a request: a caller that stops waiting does not
// cancel it for the others.
func (s *keySet) start() {
	done := make(chan struct{})
	s.inflight, s.tried = done, time.Now()
	go func() {
		keys, err := s.fetch(context.Background())
		switch {
		case errors.Is(err, errNoUsableKey):
			s.log.Error("the issuer's key set holds no usable key: every token is refused until it holds one", "jwks", s.url, "err", err)
		case err != nil:
			// Callers are told only that the keys are unavailable: the log says why, once.
			s.log.Error("the issuer's keys could not be fetched", "jwks", s.url, "err", err)
		}
		s.mu.Lock()
		switch {
		case err == nil:
			s.keys, s.fetched = keys, time.Now()
		case errors.Is(err, errNoUsableKey):
			// The issuer answered, and withdrew every key (or left none symbi may
			// trust): the keys it withdrew verify nothing from now on — every token is
			// refused (an unknown key) until it publishes one.
			s.keys, s.fetched, err = nil, time.Now(), nil
		}
		s.lastErr, s.inflight = err, nil
		s.mu.Unlock()
		close(done)
	}()
}

// fetch downloads and parses the key set.
func (s *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	body, err := safefetch.Get(ctx, s.url, s.opts)
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS %s: %w", s.url, err)
	}
	keys, err := parseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS %s: %w", s.url, err)
	}
	return keys, nil
}

// parseJWKS parses a JWK set and keeps its public signature keys of supported types,
// skipping the others (RFC 7517 §5).
func parseJWKS(body []byte) ([]jose.JSONWebKey, error) {
	if err := keysMemberExact(body); err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "not a JWK set: %v", err)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "not a JWK set: %v", err)
	}
	if len(doc.Keys) > MaxJWKSKeys {
		return nil, errcode.Errorf(errcode.LimitExceeded, "%d keys, more than %d", len(doc.Keys), MaxJWKSKeys)
	}
	var keys []jose.JSONWebKey
	weak := ""
	for _, raw := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			continue
		}
		if !k.Valid() || keyType(k) == "" || (k.Use != "" && k.Use != "sig") || !mayVerify(raw) {
			continue
		}
		if rk, ok := k.Key.(*rsa.PublicKey); ok && rk.N.BitLen() < MinRSABits {
			if weak == "" {
				weak = fmt.Sprintf(" (the RSA key %s has %d bits, fewer than the %d RFC 7518 requires)", errcode.Quote(k.KeyID), rk.N.BitLen(), MinRSABits)
			}
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errcode.Errorf(errcode.InvalidRequest, "%w among its %d keys%s", errNoUsableKey, len(doc.Keys), weak)
	}
	return keys, nil
}

// keysMemberExact refuses a JWK set whose "keys" member is named twice, or spelt otherwise
// beside it or alone ("Keys": encoding/json would read it as keys, a reader going by RFC
// 7517 would not): the set's keys would depend on who reads it. (A key's own members are
// checked with the key: mayVerify.)
func keysMemberExact(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("not a JSON object")
	}
	seen := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		switch {
		case name == "keys" && seen:
			return errors.New(`member "keys" appears twice`)
		case name == "keys":
			seen = true
		case strings.EqualFold(name, "keys"):
			return fmt.Errorf(`member %s is "keys" spelled otherwise`, errcode.Quote(name))
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// errNoUsableKey is a JWK set that parsed but holds no key symbi may verify tokens with.
// At start it is an error; fetched later, it replaces the keys: the issuer withdrew them.
var errNoUsableKey = errors.New("no usable signature key")

// mayVerify reports whether a JWK's key_ops (RFC 7517 §4.3), which go-jose does not read,
// allow verifying signatures: absent, or an array of strings holding "verify". A key for
// encryption only is never trusted to verify a token, whoever holds its private half.
func mayVerify(raw json.RawMessage) bool {
	// By its exact name, once: a member named twice, or "Key_Ops" beside it, would let
	// one reader see another list than the next.
	if strictjson.Check(raw, strictjson.Options{Single: true}) != nil {
		return false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return false
	}
	for name := range members {
		if name != "key_ops" && strings.EqualFold(name, "key_ops") {
			return false
		}
	}
	ops, ok := members["key_ops"]
	if !ok {
		return true
	}
	var list []string
	return json.Unmarshal(ops, &list) == nil && slices.Contains(list, "verify")
}

// MinRSABits is the smallest RSA key a JWK set may sign tokens with (RFC 7518 §3.3 and
// §3.5: "A key of size 2048 bits or larger MUST be used"); a smaller one is skipped like a
// key of an unsupported type.
const MinRSABits = 2048

// keyType names the kind of public key k holds ("RSA", "P-256", "P-384", "P-521",
// "Ed25519"), or "" for anything else: private and symmetric keys included.
func keyType(k jose.JSONWebKey) string {
	switch key := k.Key.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		switch name := key.Curve.Params().Name; name {
		case "P-256", "P-384", "P-521":
			return name
		}
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return ""
}
