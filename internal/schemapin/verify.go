// Package schemapin verifies SchemaPin tool-schema signatures.
//
// A schema document is a JSON object. Its top-level "signature" member, when present,
// must be a string holding the signature and is removed before canonicalizing; the
// signature may instead (or also) be given separately. When both are given they must
// be identical, else the request is malformed. A document in SchemaPin's signed-schema
// file form — {"schema": {...}, "signature": "...", "signed_at"?: ..., "metadata"?: ...},
// no other member — is signed over its "schema" member alone, as SchemaPin's signer and
// verifier have it; the result's message says that signed_at and metadata are not covered.
//
// Canonical form (compatible with SchemaPin's json.dumps(schema, sort_keys=True,
// separators=(",", ":"), ensure_ascii=False) for the documents SchemaPin signs):
//   - input must be valid UTF-8 with no escaped lone surrogate, hold exactly one JSON
//     value, no duplicate object keys, and nest at most MaxDepth levels;
//   - no white space outside strings;
//   - object members sorted by key, recursively, in byte order of the UTF-8 keys
//     (which is Unicode code point order);
//   - strings written as UTF-8 with only these escapes: \" \\ \n \r \t \b \f, and
//     \u00xx (lowercase hex) for the other control characters below U+0020;
//   - numbers written exactly as they appear in the input: they are not normalized,
//     so 1.0 stays 1.0 and 1e2 stays 1e2.
//
// Signature: ECDSA over the P-256 curve of the SHA-256 digest of the canonical bytes
// (what "openssl dgst -sha256 -sign" makes), encoded in standard base64 with padding.
// Also accepted, for interoperability: ECDSA-with-SHA-256 applied to that 32-byte digest
// as the message — what SchemaPin's reference libraries make when they pass the schema
// hash to a SHA-256 ECDSA signer, i.e. ECDSA over SHA-256(SHA-256(canonical)). Both bind
// the key holder to the same canonical bytes; the result's message says which form
// verified. The decoded bytes may be an ASN.1 DER ECDSA-Sig-Value or the raw 64-byte
// concatenation r||s (32 bytes each, big-endian).
//
// Keys: a PEM "PUBLIC KEY" block (SubjectPublicKeyInfo) of an ECDSA P-256 key, given
// inline or fetched from a URL whose body is either that PEM or a key document
// {"public_key_pem": "...", "revoked_keys": ["sha256:<hex>", ...]} in the style of
// .well-known/schemapin.json. A key whose fingerprint — "sha256:" + hex SHA-256 of the
// DER SubjectPublicKeyInfo — is listed in revoked_keys fails verification.
//
// Fetching a key URL follows the rules of package safefetch: https only (http with
// SYMBI_SCHEMAPIN_ALLOW_INSECURE=1), no proxy, no redirects, a body of at most
// MaxKeyDocBytes, one timeout (DefaultTimeout) for the whole exchange. Every
// connection's resolved address is checked as it is made: loopback, private,
// link-local, carrier-grade NAT and other special-purpose addresses are refused unless
// SYMBI_SCHEMAPIN_ALLOW_PRIVATE=1; unspecified, multicast, broadcast and cloud metadata
// addresses (169.254.169.254, fd00:ec2::254) are always refused.
//
// Outcome: a missing, undecodable or wrong signature, or a revoked key, is a Result
// with Verified false and the reason in Message. Malformed input, exceeded limits and
// fetch failures are errors carrying an errcode.
package schemapin

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
	"time"

	"symbi/internal/errcode"
)

// Limits on request fields.
const (
	MaxSchemaBytes = 1 << 20  // Request.Schema
	MaxKeyURLBytes = 8 << 10  // Request.PublicKeyURL
	MaxKeyDocBytes = 64 << 10 // Request.PublicKeyPEM and a fetched key body
)

// Request asks for one schema to be verified. It is also the input of the
// verify_schema tool.
type Request struct {
	Schema       string `json:"schema" jsonschema:"the tool schema JSON document; a top-level signature member is removed before canonicalizing, and a SchemaPin signed-schema file ({schema, signature, signed_at, metadata}) is verified over its schema member"`
	Signature    string `json:"signature,omitempty" jsonschema:"base64 ECDSA P-256 signature (DER or raw r||s); must equal the document's signature member if both are given"`
	PublicKeyPEM string `json:"public_key_pem,omitempty" jsonschema:"PEM public key (works offline)"`
	PublicKeyURL string `json:"public_key_url,omitempty" jsonschema:"https URL of a PEM key or a .well-known/schemapin.json-style key document"`
}

// Result is the outcome of a verification. It is also the output of the
// verify_schema tool.
type Result struct {
	Verified       bool   `json:"verified" jsonschema:"whether the signature verified with a key that is not revoked"`
	Message        string `json:"message" jsonschema:"why the schema verified or not"`
	SchemaHash     string `json:"schema_hash" jsonschema:"hex SHA-256 of the canonical schema bytes"`
	KeyFingerprint string `json:"key_fingerprint" jsonschema:"sha256: and the hex SHA-256 of the key's DER SubjectPublicKeyInfo"`
	Revoked        bool   `json:"revoked" jsonschema:"whether the key document revokes the key"`
}

// Verifier verifies schemas. Its fields may be changed before first use.
type Verifier struct {
	// Timeout bounds one key fetch; zero or less means DefaultTimeout.
	Timeout time.Duration
	// RootCAs, when set, replaces the system roots for key URLs.
	RootCAs *x509.CertPool

	allowInsecure bool
	allowPrivate  bool
}

// NewVerifier returns a Verifier configured from the environment:
// SYMBI_SCHEMAPIN_ALLOW_INSECURE=1 permits http key URLs and
// SYMBI_SCHEMAPIN_ALLOW_PRIVATE=1 permits private addresses. Any other value,
// including unset, keeps the refusal.
func NewVerifier(getenv func(string) string) *Verifier {
	return &Verifier{
		Timeout:       DefaultTimeout,
		allowInsecure: getenv("SYMBI_SCHEMAPIN_ALLOW_INSECURE") == "1",
		allowPrivate:  getenv("SYMBI_SCHEMAPIN_ALLOW_PRIVATE") == "1",
	}
}

// Verify checks r's signature. See the package comment for which outcomes are a
// Result with Verified false and which are errors.
func (v *Verifier) Verify(ctx context.Context, r Request) (*Result, error) {
	if len(r.Schema) > MaxSchemaBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "schema is %d bytes, over the %d-byte limit", len(r.Schema), MaxSchemaBytes)
	}
	if len(r.PublicKeyURL) > MaxKeyURLBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "public_key_url is %d bytes, over the %d-byte limit", len(r.PublicKeyURL), MaxKeyURLBytes)
	}
	if len(r.PublicKeyPEM) > MaxKeyDocBytes {
		return nil, errcode.Errorf(errcode.LimitExceeded, "public_key_pem is %d bytes, over the %d-byte limit", len(r.PublicKeyPEM), MaxKeyDocBytes)
	}
	switch {
	case r.PublicKeyPEM != "" && r.PublicKeyURL != "":
		return nil, errcode.Errorf(errcode.InvalidRequest, "give public_key_pem or public_key_url, not both")
	case r.PublicKeyPEM == "" && r.PublicKeyURL == "":
		return nil, errcode.Errorf(errcode.InvalidRequest, "a key is required: public_key_pem or public_key_url")
	}

	canonical, docSig, hasDocSig, signedFile, err := splitSignature([]byte(r.Schema))
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	sig := strings.TrimSpace(r.Signature)
	if hasDocSig && sig != "" && docSig != sig {
		return nil, errcode.Errorf(errcode.InvalidRequest, "the signature argument differs from the schema's signature member")
	}
	if sig == "" {
		sig = docSig
	}

	var src *keySource
	if r.PublicKeyPEM != "" {
		k, err := parsePublicKeyPEM([]byte(r.PublicKeyPEM))
		if err != nil {
			return nil, err
		}
		src = &keySource{key: k}
	} else {
		body, err := v.fetchKey(ctx, r.PublicKeyURL)
		if err != nil {
			return nil, err
		}
		if src, err = parseKeyBody(body); err != nil {
			return nil, fmt.Errorf("key URL: %w", err)
		}
	}

	digest := sha256.Sum256(canonical)
	res := &Result{SchemaHash: hex.EncodeToString(digest[:]), KeyFingerprint: src.key.fingerprint}
	switch {
	case src.revoked[src.key.fingerprint]:
		res.Revoked = true
		res.Message = "key " + src.key.fingerprint + " is revoked by its key document"
	case sig == "":
		res.Message = "no signature: give the signature argument or a signature member in the schema"
	default:
		raw, err := base64.StdEncoding.Strict().DecodeString(sig)
		hashed := sha256.Sum256(digest[:])
		switch {
		case err == nil && strings.ContainsAny(sig, "\r\n"):
			// The decoder skips line breaks: one signature would have endless spellings.
			res.Message = "signature is not valid standard base64: it holds a line break"
		case err != nil:
			res.Message = "signature is not valid standard base64: " + err.Error()
		case verifySignature(src.key.key, digest[:], raw):
			res.Verified = true
			res.Message = "signature verified"
		case verifySignature(src.key.key, hashed[:], raw):
			res.Verified = true
			res.Message = "signature verified (over the SHA-256 digest as the signed message, the SchemaPin reference form)"
		default:
			res.Message = "signature does not match this schema and key"
		}
	}
	if signedFile {
		res.Message += signedFileNote
	}
	return res, nil
}

// signedFileNote ends the message of a result for a document in SchemaPin's signed-schema
// file form: what its signature covers, and what it does not.
const signedFileNote = `; the document is a SchemaPin signed-schema file: the signature covers its "schema" member only, not "signed_at" or "metadata"`

// verifySignature accepts an ASN.1 DER signature or a raw 64-byte r||s.
func verifySignature(key *ecdsa.PublicKey, digest, sig []byte) bool {
	if ecdsa.VerifyASN1(key, digest, sig) {
		return true
	}
	if len(sig) != 64 {
		return false
	}
	r := new(big.Int).SetBytes(sig[:32])
	s := new(big.Int).SetBytes(sig[32:])
	return ecdsa.Verify(key, digest, r, s)
}
