package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"symbi/internal/errcode"
	"symbi/internal/schemapin"
)

var schemaVectorDir = filepath.Join("..", "..", "testdata", "schemapin")

// runSchemaCLI runs symbi with an environment of its own.
func runSchemaCLI(vars map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code = run(e, args)
	return code, out.String(), errb.String()
}

// TestSchemaVerifyAgreesWithLibrary runs every vector through the CLI and the library
// with the same environment and requires identical outcomes.
func TestSchemaVerifyAgreesWithLibrary(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(schemaVectorDir, "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Name, Schema, Key, Signature, Error string
		KeyURL                              string `json:"key_url"`
		Verified                            bool
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(schemaVectorDir)))
	defer srv.Close()
	vars := map[string]string{"SYMBI_SCHEMAPIN_ALLOW_INSECURE": "1", "SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(schemaVectorDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, vec := range vectors {
		t.Run(vec.Name, func(t *testing.T) {
			args := []string{"schema", "verify", "--json", filepath.Join(schemaVectorDir, vec.Schema)}
			req := schemapin.Request{Schema: read(vec.Schema)}
			if vec.Signature != "" {
				req.Signature = read(vec.Signature)
				args = append(args, "--signature", req.Signature)
			}
			if vec.KeyURL != "" {
				req.PublicKeyURL = srv.URL + "/" + vec.KeyURL
				args = append(args, "--key-url", req.PublicKeyURL)
			} else {
				req.PublicKeyPEM = read(vec.Key)
				args = append(args, "--key", filepath.Join(schemaVectorDir, vec.Key))
			}
			want, wantErr := schemapin.NewVerifier(func(k string) string { return vars[k] }).Verify(context.Background(), req)
			code, stdout, stderr := runSchemaCLI(vars, args...)
			if vec.Error != "" {
				if wantErr == nil || string(errcode.Of(wantErr)) != vec.Error {
					t.Fatalf("library: %+v, %v; want error %s", want, wantErr, vec.Error)
				}
				if code != 1 || stdout != "" || stderr != "symbi schema verify: "+errcode.Text(wantErr)+"\n" {
					t.Fatalf("CLI exit %d, stdout %q, stderr %q; library error %q", code, stdout, stderr, errcode.Text(wantErr))
				}
				return
			}
			if wantErr != nil || want.Verified != vec.Verified {
				t.Fatalf("library: %+v, %v; want verified=%v", want, wantErr, vec.Verified)
			}
			var got schemapin.Result
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("CLI stdout %q: %v (stderr %q)", stdout, err, stderr)
			}
			wantCode := 1
			if want.Verified {
				wantCode = 0
			}
			if got != *want || code != wantCode {
				t.Fatalf("CLI exit %d, %+v; library %+v (exit %d)", code, got, *want, wantCode)
			}
		})
	}
}

func TestSchemaVerifyCLI(t *testing.T) {
	signed := filepath.Join(schemaVectorDir, "schema.signed.json")
	key := filepath.Join(schemaVectorDir, "signer.pub.pem")
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, bytes.Repeat([]byte(" "), schemapin.MaxSchemaBytes+10), 0o600); err != nil {
		t.Fatal(err)
	}
	bigKey := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(bigKey, bytes.Repeat([]byte("\n"), schemapin.MaxKeyDocBytes+10), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		vars   map[string]string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"text verified", nil, []string{"--key", key, signed}, 0, "verified: signature verified\nschema_hash: 0555c2d7", ""},
		{"text not verified", nil, []string{signed, "--key", filepath.Join(schemaVectorDir, "wrong.pub.pem")}, 1, "NOT VERIFIED: signature does not match", ""},
		{"no key", nil, []string{signed}, 2, "", "usage: symbi schema verify"},
		{"two keys", nil, []string{signed, "--key", key, "--key-url", "https://example.com/k"}, 2, "", "usage: symbi schema verify"},
		{"two files", nil, []string{signed, signed, "--key", key}, 2, "", "usage: symbi schema verify"},
		{"missing file", nil, []string{"--key", key, filepath.Join(t.TempDir(), "none.json")}, 1, "", "symbi schema verify: not_found: schema: open"},
		{"schema too large", nil, []string{"--key", key, big}, 1, "", "limit_exceeded: schema is 1048586 bytes, over the 1048576-byte limit"},
		{"key too large", nil, []string{"--key", bigKey, signed}, 1, "", "limit_exceeded: key is 65546 bytes, over the 65536-byte limit"},
		{"plain http refused", nil, []string{"--key-url", "http://127.0.0.1:1/k", signed}, 1, "", "invalid_request: key URL: plain http is refused"},
		{"loopback refused", map[string]string{"SYMBI_SCHEMAPIN_ALLOW_INSECURE": "1"}, []string{"--key-url", "http://127.0.0.1:1/k", signed}, 1, "", "is a loopback address"},
		{"help", nil, []string{"--help"}, 0, "usage: symbi schema verify", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runSchemaCLI(tt.vars, append([]string{"schema", "verify"}, tt.args...)...)
			if code != tt.code || !strings.HasPrefix(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
		})
	}
}

// TestSchemaVerifyCLIPipeTooLarge: a schema read from a pipe, whose size is not known
// beyond what was read, is refused as more than the limit, without being read whole.
func TestSchemaVerifyCLIPipeTooLarge(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "schema.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			wrote <- err
			return
		}
		defer w.Close()
		// More than the limit: the reader stops at limit+1 bytes and closes its end, so
		// this write ends with EPIPE once the reader has gone.
		_, err = w.Write(bytes.Repeat([]byte(" "), 2*schemapin.MaxSchemaBytes))
		wrote <- err
	}()
	code, stdout, stderr := runSchemaCLI(nil, "schema", "verify", "--key", filepath.Join(schemaVectorDir, "signer.pub.pem"), fifo)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "limit_exceeded: schema is more than 1048576 bytes, over the 1048576-byte limit") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if err := <-wrote; err == nil {
		t.Fatal("the whole of an oversized pipe was read")
	}
}
