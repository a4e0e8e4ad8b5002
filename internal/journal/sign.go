package journal

import (
	"crypto/ed25519"
	"crypto/fips140"
	"crypto/subtle"
	"sync"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// sign returns the Ed25519 signature of msg by key. Ed25519 signatures are deterministic
// (RFC 8032): these are the bytes crypto/ed25519.Sign returns, computed by
// curve25519-voi, whose fixed-base scalar multiplication takes about half the time of the
// standard library's here (every journal line and ledger entry is signed on a governed
// run's path; docs/performance.md). In FIPS 140-3 mode the standard library's validated
// module signs.
func sign(key ed25519.PrivateKey, msg []byte) []byte {
	if fips140.Enabled() {
		return ed25519.Sign(key, msg)
	}
	return voi.Sign(voi.PrivateKey(key), msg)
}

// derived is the key of the seed last read: a store is opened, and its key file read and
// checked, for every run, but deriving the key from the seed (a fixed-base scalar
// multiplication) is done again only when the seed differs.
var derived struct {
	sync.Mutex
	seed [ed25519.SeedSize]byte
	key  ed25519.PrivateKey
}

// keyFromSeed returns ed25519.NewKeyFromSeed(seed), the same key value as the last call
// with the same seed. The returned key is shared: callers never modify it.
func keyFromSeed(seed []byte) ed25519.PrivateKey {
	derived.Lock()
	defer derived.Unlock()
	if derived.key != nil && subtle.ConstantTimeCompare(derived.seed[:], seed) == 1 {
		return derived.key
	}
	key := ed25519.NewKeyFromSeed(seed)
	copy(derived.seed[:], seed)
	derived.key = key
	return key
}
