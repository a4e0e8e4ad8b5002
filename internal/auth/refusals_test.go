package auth_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"symbi/internal/auth"
	"symbi/internal/errcode"
)

// TestJWKSUseNotSig: the package comment says a key "whose "use" is not
// "sig" ... is not used" — not only "enc": a key published for any other use (an
// unknown value) never verifies a token.
func TestJWKSUseNotSig(t *testing.T) {
	rsaS, ecS, _ := auth.GenTestSigners(t)
	other := rsaS.Public()
	other.Use = "tls-client" // neither "sig" nor "enc"
	srv := auth.NewTestJWKSServer(t, ecS.Public(), other)
	cfg := srv.JWTConfig()
	cfg.MinRefetch = time.Hour
	j := auth.MustNewJWT(t, cfg)
	if _, err := j.Verify(context.Background(), rsaS.Sign(t, auth.ValidClaimsWithNBF()), nil); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("a token signed with a key whose use is %q: %v, want ErrUnknownKey", other.Use, err)
	}
	// A set whose only key has such a use holds no usable key.
	srv.SetKeys(t, other)
	if _, err := auth.NewJWT(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "no usable signature key") {
		t.Fatalf("a set whose only key has use %q: %v, want no usable signature key", other.Use, err)
	}
}

// TestAddTokenAtLimit: "The file holds at most MaxTokens entries": symbi
// token add on a file that already holds MaxTokens refuses (limit_exceeded) and leaves the
// file as it was.
func TestAddTokenAtLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	full := manyTokens(auth.MaxTokens)
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadTokens(path); err != nil {
		t.Fatalf("a file of exactly MaxTokens entries: %v", err)
	}
	_, err := auth.AddToken(path, "one-more", fixedRandom(7), nil)
	if err == nil || errcode.Of(err) != errcode.LimitExceeded {
		t.Fatalf("AddToken on a file of MaxTokens entries: %v, want limit_exceeded", err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, []byte(full)) {
		t.Fatalf("the refused add changed the file (%d bytes, was %d)", len(got), len(full))
	}
	if _, err := auth.LoadTokens(path); err != nil {
		t.Fatalf("the file no longer loads after the refused add: %v", err)
	}
}
