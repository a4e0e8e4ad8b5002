package schemapin

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"

	"symbi/internal/errcode"
)

// publicKey is a parsed ECDSA P-256 key and its fingerprint.
type publicKey struct {
	key         *ecdsa.PublicKey
	fingerprint string // "sha256:" + hex SHA-256 of the DER SubjectPublicKeyInfo
}

// parsePublicKeyPEM accepts exactly one PEM block of type "PUBLIC KEY" holding an
// ECDSA P-256 SubjectPublicKeyInfo, with nothing but white space around it.
func parsePublicKeyPEM(text []byte) (*publicKey, error) {
	block, rest := pem.Decode(text)
	if block == nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: no PEM block found")
	}
	if block.Type != "PUBLIC KEY" {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: PEM block is %q, want \"PUBLIC KEY\"", block.Type)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: data after the PEM block")
	}
	if len(block.Headers) != 0 {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: PEM headers are not allowed")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: %v", err)
	}
	ec, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: %s key, want ECDSA P-256", keyKind(pub))
	}
	if ec.Curve != elliptic.P256() {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: ECDSA %s key, want ECDSA P-256", ec.Curve.Params().Name)
	}
	sum := sha256.Sum256(block.Bytes)
	return &publicKey{key: ec, fingerprint: "sha256:" + hex.EncodeToString(sum[:])}, nil
}

func keyKind(pub any) string {
	switch pub.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", pub)
}

// keyDocument is the .well-known/schemapin.json-style document; other members are ignored.
type keyDocument struct {
	PublicKeyPEM *string  `json:"public_key_pem"`
	RevokedKeys  []string `json:"revoked_keys"`
}

// keySource is what a key URL yielded: the key and the fingerprints it revokes.
type keySource struct {
	key     *publicKey
	revoked map[string]bool
}

// parseKeyBody reads a fetched key: a PEM body, or a JSON key document when the first
// non-space byte is '{'.
func parseKeyBody(body []byte) (*keySource, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		k, err := parsePublicKeyPEM(body)
		if err != nil {
			return nil, err
		}
		return &keySource{key: k}, nil
	}
	if _, err := parse(body); err != nil {
		return nil, fmt.Errorf("key document: %w", err)
	}
	var doc keyDocument
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key document: %v", err)
	}
	if doc.PublicKeyPEM == nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, `key document: no "public_key_pem" member`)
	}
	k, err := parsePublicKeyPEM([]byte(*doc.PublicKeyPEM))
	if err != nil {
		return nil, fmt.Errorf("key document: %w", err)
	}
	src := &keySource{key: k, revoked: map[string]bool{}}
	for i, fp := range doc.RevokedKeys {
		norm, ok := normalizeFingerprint(fp)
		if !ok {
			return nil, errcode.Errorf(errcode.InvalidRequest, "key document: revoked_keys[%d] %q is not sha256:<64 hex digits>", i, fp)
		}
		src.revoked[norm] = true
	}
	return src, nil
}

// normalizeFingerprint checks "sha256:<64 hex digits>" and lowercases the digits.
func normalizeFingerprint(fp string) (string, bool) {
	h, ok := strings.CutPrefix(fp, "sha256:")
	if !ok || len(h) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", false
	}
	return "sha256:" + strings.ToLower(h), true
}
