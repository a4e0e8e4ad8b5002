// Package digest names the one digest symbi records everywhere — of definitions,
// prompts, requests, responses, journal lines and policy sets: the lowercase hex SHA-256.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
)

// SHA256Hex returns the lowercase hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
