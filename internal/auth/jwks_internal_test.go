package auth

import "testing"

// TestMayVerify: a JWK verifies tokens only when its key_ops, read by their exact name
// once, are absent or list "verify"; a member named twice or spelled otherwise beside it
// (which encoding/json would read case-insensitively, the last winning) makes the key
// unusable rather than one reader's guess.
func TestMayVerify(t *testing.T) {
	for _, tc := range []struct {
		jwk  string
		want bool
	}{
		{`{"kty":"EC"}`, true},
		{`{"kty":"EC","key_ops":["verify"]}`, true},
		{`{"kty":"EC","key_ops":["sign","verify"]}`, true},
		{`{"kty":"EC","key_ops":["encrypt","wrapKey"]}`, false},
		{`{"kty":"EC","key_ops":[]}`, false},
		{`{"kty":"EC","key_ops":"verify"}`, false},
		{`{"kty":"EC","key_ops":["encrypt"],"KEY_OPS":["verify"]}`, false},
		{`{"kty":"EC","Key_Ops":["verify"]}`, false},
		{`{"kty":"EC","key_ops":["encrypt"],"key_ops":["verify"]}`, false},
	} {
		if got := mayVerify([]byte(tc.jwk)); got != tc.want {
			t.Errorf("mayVerify(%s) = %v, want %v", tc.jwk, got, tc.want)
		}
	}
}
