package schemapin

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"

	"symbi/internal/digest"
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
	// pem.Decode skips whatever comes before a block, broken blocks included: the text
	// must begin with the block (an HTML page quoting someone's key is not a key).
	t := bytes.TrimSpace(text)
	switch n := bytes.Count(t, []byte("-----BEGIN ")); {
	case n > 0 && !bytes.HasPrefix(t, []byte("-----BEGIN ")):
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: data before the PEM block")
	case n > 1:
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: %d PEM blocks (a broken one is skipped by decoders), want exactly one", n)
	}
	block, rest := pem.Decode(t) // from its first byte: white space before it is no data
	if block == nil {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: no PEM block found")
	}
	if block.Type != "PUBLIC KEY" {
		return nil, errcode.Errorf(errcode.InvalidRequest, "public key: PEM block is %s, want \"PUBLIC KEY\"", errcode.Quote(block.Type))
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
	return &publicKey{key: ec, fingerprint: "sha256:" + digest.SHA256Hex(block.Bytes)}, nil
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
	// The document (a .well-known/schemapin.json-style object) is read from its strict
	// parse, each member by its exact name: encoding/json would also take
	// "PUBLIC_KEY_PEM" or a second "Revoked_Keys" for them, which another reader would
	// not. Other members are ignored.
	v, err := parse(body)
	if err != nil {
		return nil, fmt.Errorf("key document: %w", err)
	}
	doc, ok := v.(object)
	if !ok {
		return nil, errcode.Errorf(errcode.InvalidRequest, "key document: not a JSON object")
	}
	raw, present := doc["public_key_pem"]
	pemText, ok := raw.(string)
	switch {
	case !present:
		return nil, errcode.Errorf(errcode.InvalidRequest, `key document: no "public_key_pem" member`)
	case !ok:
		return nil, errcode.Errorf(errcode.InvalidRequest, `key document: "public_key_pem" is not a string`)
	}
	k, err := parsePublicKeyPEM([]byte(pemText))
	if err != nil {
		return nil, fmt.Errorf("key document: %w", err)
	}
	src := &keySource{key: k, revoked: map[string]bool{}}
	var revoked []any
	if r, present := doc["revoked_keys"]; present { // null is not an array either
		if revoked, ok = r.([]any); !ok {
			return nil, errcode.Errorf(errcode.InvalidRequest, `key document: "revoked_keys" is not an array`)
		}
	}
	for i, item := range revoked {
		fp, isString := item.(string)
		norm, ok := normalizeFingerprint(fp)
		if !ok {
			shown := errcode.Quote(fp)
			if !isString {
				shown = errcode.Clip(fmt.Sprint(item))
			}
			return nil, errcode.Errorf(errcode.InvalidRequest, "key document: revoked_keys[%d] %s is not sha256:<64 hex digits>", i, shown)
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
