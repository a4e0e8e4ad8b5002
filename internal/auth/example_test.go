package auth_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"symbi/internal/auth"
)

// An operator adds a token for a caller (symbi token add); the server loads the file
// and authenticates the callers that present it.
func ExampleAddToken() {
	dir, _ := os.MkdirTemp("", "symbi-tokens")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tokens")

	// In real use the random source is crypto/rand.Reader.
	token, err := auth.AddToken(path, "ci-bot", bytes.NewReader(make([]byte, 32)), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token:", token)
	file, _ := os.ReadFile(path)
	fmt.Printf("file: %s", file)

	tokens, err := auth.LoadTokens(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := tokens.Verify(context.Background(), token, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	caller, _ := auth.FromTokenInfo(info)
	fmt.Printf("caller: %+v\n", caller)
	_, err = tokens.Verify(context.Background(), "symbi_guess", nil)
	fmt.Println(err)
	// Output:
	// token: symbi_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA
	// file: ci-bot sha256:3e5c027de6fab14c59bc1dde3209a24afcd49900cf156b3bf48c1dae3461938c
	// caller: {ID:ci-bot Method:token}
	// invalid token: unknown token: no such token
}
