// Package auth authenticates the callers of symbi's HTTP transport and names them: static
// bearer tokens, JWT access tokens (symbi as an OAuth 2.1 resource server), and the
// caller identity that runs, journals, the ledger and Cedar policies record.
//
// # Callers
//
// A Caller is an id and the method that authenticated it: MethodStdio (the one caller of
// a stdio server, id "stdio"), MethodToken (a static bearer token), MethodJWT (a JWT
// access token) or MethodNone (HTTP on loopback without authentication, id "anonymous").
// A verifier (Tokens.Verify, JWT.Verify) puts the caller in the go-sdk TokenInfo it
// returns: UserID is the id, Extra["auth_method"] the method; FromTokenInfo reads it
// back in a tool handler.
//
// A caller id is 1 to MaxCallerIDBytes bytes of printable ASCII (0x21 to 0x7E) other
// than the quotes " ' ` and the backslash, and starts with neither '-' nor '#'. So
// "alice", "ci-bot", "auth0|abc123", "alice@example.com" and "248289761001" are ids; a
// space, a control character or a non-ASCII letter is not. The ids "stdio" and
// "anonymous" are reserved: no token and no JWT may claim them.
//
// # The token file
//
// The file given to symbi mcp --auth-tokens holds one entry per line:
//
//	<caller-id> sha256:<64 lowercase hex digits>
//
// the caller id, one space, "sha256:" and the hex SHA-256 of the token's bytes, nothing
// else. Lines end with "\n" (the last may lack it; a "\r" is an error). A line that is
// empty or holds only spaces and tabs, and a line whose first non-blank byte is '#', is
// ignored. No caller id and no hash may appear twice. Any other line makes the whole file
// invalid, and the error names the line. The file holds at most MaxTokens entries and
// MaxTokenFileBytes bytes, at least one entry, and must be a regular file (not a
// symbolic link) that neither group nor others may write: it decides who may call.
// Tokens are never stored in clear.
//
// AddToken (symbi token add) makes a token of TokenPrefix and 43 base64url characters
// (32 random bytes, no padding) and appends its entry. Tokens.Verify accepts any
// presented string: it hashes it and compares the hash with every entry in constant
// time, without stopping at a match. A static token does not expire: revoke it by
// deleting its line and restarting the server. Its TokenInfo carries an Expiration
// StaticTokenLifetime after the request only because go-sdk's RequireBearerToken refuses
// a TokenInfo without one.
//
// # JWT access tokens
//
// JWT.Verify accepts a compact JWS (RFC 7515, RFC 7519) of at most MaxJWTBytes whose
//   - alg is one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512 or
//     EdDSA: never "none", never an HMAC (the issuer's keys are public);
//   - kid names a key of the issuer's JWK set (a token without kid is accepted only when
//     the set holds one key); a key whose "use" is not "sig", or whose "alg" is not the
//     token's, or whose type does not fit the token's alg, is not used;
//   - signature verifies with that key;
//   - iss equals the configured issuer exactly, and aud (a string or an array) contains
//     the configured audience;
//   - exp is present and has not passed, and nbf and iat, when present, are not in the
//     future, each with Leeway for clock skew;
//   - caller claim (JWTConfig.Claim, default "sub") is a string that is a caller id,
//     not a reserved one;
//   - scope, when present, is a string of space-separated scopes (TokenInfo.Scopes).
//
// TokenInfo.Expiration is exp: give RequireBearerToken a ClockSkew of Leeway, so that
// the middleware's own expiry check allows the same skew. Every refusal wraps
// sdkauth.ErrInvalidToken (HTTP 401 under RequireBearerToken) and one of the reason
// errors of this package (ErrExpired, ErrIssuer, ...), and says which check failed. When
// the issuer's keys cannot be fetched, the error wraps ErrKeysUnavailable and not
// ErrInvalidToken (HTTP 500): the token may well be good.
//
// The JWK set is fetched with package safefetch (https only unless
// JWTConfig.AllowInsecure; private addresses only with JWTConfig.AllowPrivate; at most
// MaxJWKSBytes and MaxJWKSKeys keys): once by NewJWT, which fails when it cannot; again
// in the background once the keys are older than JWTConfig.Refresh; and when a token
// names a key id the set lacks, at most once per JWTConfig.MinRefetch, so a flood of
// unknown ids cannot hammer the issuer. A failed fetch keeps the last good keys. Keys
// the set holds that are not public signature keys of a supported type, or whose key_ops
// lack "verify", are skipped (RFC 7517 §5); a set without a usable key fails NewJWT, and
// fetched later replaces the keys: the issuer withdrew them, and every token is refused
// until it publishes one.
//
// # Protected resource metadata
//
// Metadata builds the RFC 9728 document that an HTTP server serves at MetadataPath and
// names in the WWW-Authenticate header of its 401 answers.
package auth

import (
	"errors"
	"fmt"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// How a caller was authenticated.
const (
	MethodStdio = "stdio" // the caller of a stdio server
	MethodToken = "token" // a static bearer token from the token file
	MethodJWT   = "jwt"   // a JWT access token
	MethodNone  = "none"  // HTTP on loopback without authentication
)

// ExtraMethod is the TokenInfo.Extra key under which a verifier records the method.
const ExtraMethod = "auth_method"

// MaxCallerIDBytes is the longest caller id.
const MaxCallerIDBytes = 128

// MetadataPath is where the protected resource metadata is served.
const MetadataPath = "/.well-known/oauth-protected-resource"

// Caller is who calls: an id and how it was authenticated.
type Caller struct {
	ID     string `json:"id"`
	Method string `json:"method"`
}

// The callers that present no credentials.
var (
	Stdio     = Caller{ID: "stdio", Method: MethodStdio}
	Anonymous = Caller{ID: "anonymous", Method: MethodNone}
)

// Reasons a presented token is refused; each refusal also wraps sdkauth.ErrInvalidToken.
var (
	ErrUnknownToken    = errors.New("unknown token")           // a static token not in the file
	ErrMalformed       = errors.New("malformed token")         // not a compact JWS, or claims of the wrong type
	ErrAlgorithm       = errors.New("algorithm not accepted")  // alg outside the allowed list
	ErrUnknownKey      = errors.New("unknown key")             // kid not in the JWK set, or no key fits
	ErrSignature       = errors.New("bad signature")           // the signature does not verify
	ErrIssuer          = errors.New("wrong issuer")            // iss
	ErrAudience        = errors.New("wrong audience")          // aud
	ErrExpired         = errors.New("expired")                 // exp missing or passed
	ErrNotYetValid     = errors.New("not yet valid")           // nbf or iat in the future
	ErrCallerID        = errors.New("no valid caller id")      // the caller claim
	ErrKeysUnavailable = errors.New("issuer keys unavailable") // not a refusal: the JWK set cannot be fetched
)

// refuse returns a refusal for reason: it wraps sdkauth.ErrInvalidToken and reason.
func refuse(reason error, format string, args ...any) error {
	return fmt.Errorf("%w: %w: %s", sdkauth.ErrInvalidToken, reason, fmt.Sprintf(format, args...))
}

// ValidCallerID reports whether id has the syntax of a caller id (see the package
// comment). Reserved ids are valid; Reserved tells them apart.
func ValidCallerID(id string) bool {
	if id == "" || len(id) > MaxCallerIDBytes || id[0] == '-' || id[0] == '#' {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c < 0x21 || c > 0x7e, c == '"', c == '\'', c == '`', c == '\\':
			return false
		}
	}
	return true
}

// Reserved reports whether id is the id of a caller without credentials (Stdio,
// Anonymous), which no token or JWT may claim.
func Reserved(id string) bool { return id == Stdio.ID || id == Anonymous.ID }

// checkCallerID says why id cannot name a token or JWT caller, or returns nil.
func checkCallerID(id string) error {
	switch {
	case !ValidCallerID(id):
		return fmt.Errorf("%s is not a caller id: 1 to %d printable ASCII bytes without quotes, backslash or space, not starting with '-' or '#'", quote(id), MaxCallerIDBytes)
	case Reserved(id):
		return fmt.Errorf("%q is a reserved caller id", id)
	}
	return nil
}

// FromTokenInfo returns the caller a verifier of this package put in ti. ok is false when
// ti is nil, or lacks a valid id or a known method.
func FromTokenInfo(ti *sdkauth.TokenInfo) (c Caller, ok bool) {
	if ti == nil || !ValidCallerID(ti.UserID) {
		return Caller{}, false
	}
	m, _ := ti.Extra[ExtraMethod].(string)
	switch m {
	case MethodStdio, MethodToken, MethodJWT, MethodNone:
		return Caller{ID: ti.UserID, Method: m}, true
	}
	return Caller{}, false
}

// Metadata returns the protected resource metadata (RFC 9728) of resource, the URL
// clients connect to, naming the authorization servers (issuers) whose tokens it takes.
// Bearer tokens go in the Authorization header only.
func Metadata(resource string, authServers []string) *oauthex.ProtectedResourceMetadata {
	return &oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   authServers,
		BearerMethodsSupported: []string{"header"},
	}
}

// quote quotes s for a message, cut to 64 bytes: s may come from a presented token.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
