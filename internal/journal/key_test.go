package journal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"testing"
)

// TestKeyFromSeed: the key of RFC 8032's first test vector, and the cache: the same seed
// gives the same key value, a different seed its own.
func TestKeyFromSeed(t *testing.T) {
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	if got := hex.EncodeToString(keyFromSeed(seed).Public().(ed25519.PublicKey)); got != "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a" {
		t.Errorf("RFC 8032 test 1: public key %s", got)
	}
	a, b := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	ka := keyFromSeed(a)
	if again := keyFromSeed(a); &again[0] != &ka[0] {
		t.Error("the same seed derived its key again")
	}
	kb := keyFromSeed(b)
	if bytes.Equal(ka, kb) || !bytes.Equal(kb, ed25519.NewKeyFromSeed(b)) || !bytes.Equal(keyFromSeed(a), ed25519.NewKeyFromSeed(a)) {
		t.Error("a changed seed did not give its own key")
	}
}
