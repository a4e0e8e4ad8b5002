package journal

import (
	"crypto/ed25519"
	"crypto/subtle"
	"sync"
)

// derived is the key of the seed last read: a store is opened, and its key file read and
// checked, for every run, but deriving the key from the seed (a fixed-base scalar
// multiplication) is done again only when the seed differs.
var derived struct {
	sync.Mutex
	key ed25519.PrivateKey // its first ed25519.SeedSize bytes are the seed
}

// keyFromSeed returns ed25519.NewKeyFromSeed(seed), the same key value as the last call
// with the same seed. The returned key is shared: callers never modify it.
func keyFromSeed(seed []byte) ed25519.PrivateKey {
	derived.Lock()
	defer derived.Unlock()
	if derived.key != nil && subtle.ConstantTimeCompare(derived.key[:ed25519.SeedSize], seed) == 1 {
		return derived.key
	}
	derived.key = ed25519.NewKeyFromSeed(seed)
	return derived.key
}
