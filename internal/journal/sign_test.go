package journal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestSignRFC8032 checks sign against the first test vectors of RFC 8032, section 7.1.
func TestSignRFC8032(t *testing.T) {
	for _, tc := range []struct{ seed, pub, msg, sig string }{
		{"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
			"e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"},
		{"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
			"92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
	} {
		seed, _ := hex.DecodeString(tc.seed)
		msg, _ := hex.DecodeString(tc.msg)
		key := keyFromSeed(seed)
		if got := hex.EncodeToString(key.Public().(ed25519.PublicKey)); got != tc.pub {
			t.Errorf("public key %s, want %s", got, tc.pub)
		}
		if got := hex.EncodeToString(sign(key, msg)); got != tc.sig {
			t.Errorf("signature of %q: %s, want %s", tc.msg, got, tc.sig)
		}
	}
}

// TestSignMatchesStdlib requires sign to return crypto/ed25519.Sign's bytes for many keys
// and messages of every size a line can have.
func TestSignMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 31, 32, 63, 64, 65, 127, 128, 600, 4096, MaxRecordBytes}
	for i := range 200 {
		seed := make([]byte, ed25519.SeedSize)
		for j := range seed {
			seed[j] = byte(rng.Uint32())
		}
		msg := make([]byte, sizes[i%len(sizes)])
		for j := range msg {
			msg[j] = byte(rng.Uint32())
		}
		checkSign(t, seed, msg)
	}
}

// FuzzSign compares sign with crypto/ed25519.Sign on any seed and message.
func FuzzSign(f *testing.F) {
	f.Add([]byte("seed"), []byte(""))
	f.Add(bytes.Repeat([]byte{0xff}, 32), []byte(SignatureContext+`{"v":1}`))
	f.Fuzz(func(t *testing.T, s, msg []byte) {
		seed := sha256.Sum256(s)
		checkSign(t, seed[:], msg)
	})
}

func checkSign(t *testing.T, seed, msg []byte) {
	t.Helper()
	want := ed25519.NewKeyFromSeed(seed)
	key := keyFromSeed(seed)
	if !bytes.Equal(key, want) {
		t.Fatalf("keyFromSeed(%x) differs from ed25519.NewKeyFromSeed", seed)
	}
	if got, w := sign(key, msg), ed25519.Sign(want, msg); !bytes.Equal(got, w) {
		t.Fatalf("seed %x, %d-byte message: signature %x, crypto/ed25519 %x", seed, len(msg), got, w)
	}
}

// TestKeyFromSeedCache: the same seed gives the same key value, a different seed its own.
func TestKeyFromSeedCache(t *testing.T) {
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
