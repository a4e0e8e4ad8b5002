package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"symbi/internal/auth"
)

// FuzzParseTokens: whatever the text, ParseTokens either refuses it with a token-file
// error or returns entries that each authenticate their own caller only.
func FuzzParseTokens(f *testing.F) {
	for _, seed := range []string{
		"alice " + hashA + "\n",
		"# ops\n\nalice " + hashA + "\nbob " + hashB,
		"alice " + hashA + "\r\n",
		"alice  " + hashA,
		"stdio " + hashA,
		"alice sha256:",
		"alice " + hashA + "\nalice " + hashB,
		"\t#\n \n",
		"a\x00b " + hashA,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := auth.ParseTokens(data)
		if err != nil {
			if !errors.Is(err, auth.ErrInvalidTokenFile) || tok != nil {
				t.Fatalf("error %v (tokens %v) is not a token-file refusal", err, tok)
			}
			return
		}
		if tok.Len() == 0 {
			t.Fatal("accepted a file without a token")
		}
		// Re-reading the accepted entries gives the same count; each caller id is valid.
		n := 0
		for _, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimLeft(line, " \t")
			if trimmed == "" || trimmed[0] == '#' {
				continue
			}
			id, _, _ := strings.Cut(line, " ")
			if !auth.ValidCallerID(id) || auth.Reserved(id) {
				t.Fatalf("accepted caller id %q", id)
			}
			n++
		}
		if n != tok.Len() {
			t.Fatalf("%d entry lines, %d tokens", n, tok.Len())
		}
		// No hash is the hash of the file text itself: an unknown token is refused.
		if ti, err := tok.Verify(context.Background(), string(data), nil); err == nil {
			t.Fatalf("the file text authenticated as %q", ti.UserID)
		}
	})
}

// FuzzJWTVerify: no string but the seed's signed token (and its equivalent encodings)
// is accepted, and every refusal is an invalid-token error.
func FuzzJWTVerify(f *testing.F) {
	_, ecS, _ := auth.GenTestSigners(f)
	srv := auth.NewTestJWKSServer(f, ecS.Public())
	cfg := srv.JWTConfig()
	cfg.MinRefetch = 1 << 62 // never fetch again: a fuzzed kid must not reach the server
	j, err := auth.NewJWT(context.Background(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	good := ecS.Sign(f, auth.ValidClaimsWithNBF("sub", "fuzz-seed"))
	f.Add(good)
	f.Add(good[:strings.LastIndexByte(good, '.')+1])
	f.Add(compact(map[string]any{"alg": "none"}, auth.ValidClaimsWithNBF(), nil))
	f.Add(compact(map[string]any{"alg": "ES256", "kid": "ec-1", "crit": []string{"x"}}, auth.ValidClaimsWithNBF(), make([]byte, 64)))
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		ti, err := j.Verify(context.Background(), token, nil)
		if err == nil {
			if ti.UserID != "fuzz-seed" {
				t.Fatalf("accepted %q as %q", token, ti.UserID)
			}
			return
		}
		if !errors.Is(err, sdkauth.ErrInvalidToken) {
			t.Fatalf("error %v is not an invalid token", err)
		}
	})
}
