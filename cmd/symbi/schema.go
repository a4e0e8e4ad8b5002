package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"symbi/internal/errcode"
	"symbi/internal/schemapin"
)

var cmdSchemaVerify = &command{
	name:    "schema verify",
	args:    "SCHEMA.json (--key PEMFILE | --key-url URL) [--signature B64] [--json]",
	summary: "verify the SchemaPin signature of a tool schema (exit 0 verified, 1 not verified or error)",
}

func init() {
	cmdSchemaVerify.run = runSchemaVerify
	register(cmdSchemaVerify)
}

// runSchemaVerify runs symbi schema verify.
func runSchemaVerify(e *env, args []string) int {
	fs := newFlags(e, cmdSchemaVerify)
	keyFile := fs.String("key", "", "`PEMFILE` holding the ECDSA P-256 public key (offline)")
	keyURL := fs.String("key-url", "", "`URL` of a PEM key or a .well-known/schemapin.json-style key document")
	sig := fs.String("signature", "", "`B64` signature, if the schema has no signature member")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	// Flags may come before or after the schema file.
	var files []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) != 1 || (*keyFile == "") == (*keyURL == "") {
		msg := "give exactly one of --key and --key-url"
		if len(files) != 1 {
			msg = "want exactly one SCHEMA.json"
		}
		fmt.Fprintf(e.stderr, "symbi schema verify: %s\n\n", msg)
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "symbi schema verify: %s\n", errcode.Text(err))
		return 1
	}
	schema, err := readBounded(files[0], schemapin.MaxSchemaBytes, "schema")
	if err != nil {
		return fail(err)
	}
	req := schemapin.Request{Schema: schema, Signature: *sig, PublicKeyURL: *keyURL}
	if *keyFile != "" {
		if req.PublicKeyPEM, err = readBounded(*keyFile, schemapin.MaxKeyDocBytes, "key"); err != nil {
			return fail(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := schemapin.NewVerifier(e.getenv).Verify(ctx, req)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		if !printJSON(e, "schema verify", res) {
			return 1
		}
	} else {
		status := "NOT VERIFIED"
		if res.Verified {
			status = "verified"
		}
		fmt.Fprintf(e.stdout, "%s: %s\nschema_hash: %s\nkey_fingerprint: %s\nrevoked: %v\n",
			status, res.Message, res.SchemaHash, res.KeyFingerprint, res.Revoked)
	}
	if !res.Verified {
		return 1
	}
	return 0
}

// readBounded reads the named file, at most limit bytes: a larger one is refused with
// limit_exceeded, naming its size, without being read whole.
func readBounded(name string, limit int, what string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", errcode.Errorf(errcode.NotFound, "%s: %w", what, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return "", errcode.Errorf(errcode.InvalidRequest, "%s: %w", what, err)
	}
	if len(b) > limit {
		// Refused here, with the file's own size, as verify_schema names the size of the
		// argument it was given; a pipe's size is not known beyond what was read.
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > int64(limit) {
			return "", errcode.Errorf(errcode.LimitExceeded, "%s is %d bytes, over the %d-byte limit", what, st.Size(), limit)
		}
		return "", errcode.Errorf(errcode.LimitExceeded, "%s is more than %d bytes, over the %d-byte limit", what, limit, limit)
	}
	return string(b), nil
}
