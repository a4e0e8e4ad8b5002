package schemapin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"symbi/internal/schemapin"
)

func ExampleVerifier_Verify() {
	dir := filepath.Join("..", "..", "testdata", "schemapin")
	schema, _ := os.ReadFile(filepath.Join(dir, "schema.signed.json")) // holds a "signature" member
	key, _ := os.ReadFile(filepath.Join(dir, "signer.pub.pem"))

	v := schemapin.NewVerifier(os.Getenv)
	res, err := v.Verify(context.Background(), schemapin.Request{Schema: string(schema), PublicKeyPEM: string(key)})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(res.Verified, res.Message)
	// Output: true signature verified
}
