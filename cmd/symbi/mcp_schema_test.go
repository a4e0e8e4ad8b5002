package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestE2EVerifySchemaAgreesWithCLI: on every SchemaPin vector, the verify_schema tool of
// the real server and "symbi schema verify --json" give the same result, or the same
// coded error.
func TestE2EVerifySchemaAgreesWithCLI(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(schemaVectorDir, "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Name, Schema, Key, Signature string
		KeyURL                       string `json:"key_url"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	keys := httptest.NewServer(http.FileServer(http.Dir(schemaVectorDir)))
	defer keys.Close()
	vars := map[string]string{"SYMBI_SCHEMAPIN_ALLOW_INSECURE": "1", "SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}
	env := modelEnv(nil)
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	s := startSymbi(t, newE2EProject(t), env, nil)
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
			tool := map[string]any{"schema": read(vec.Schema)}
			if vec.Signature != "" {
				sig := read(vec.Signature)
				args = append(args, "--signature", sig)
				tool["signature"] = sig
			}
			if vec.KeyURL != "" {
				args = append(args, "--key-url", keys.URL+"/"+vec.KeyURL)
				tool["public_key_url"] = keys.URL + "/" + vec.KeyURL
			} else {
				args = append(args, "--key", filepath.Join(schemaVectorDir, vec.Key))
				tool["public_key_pem"] = read(vec.Key)
			}
			code, stdout, stderr := runSchemaCLI(vars, args...)
			res := s.call(t, "verify_schema", tool)
			if res.IsError {
				want := strings.TrimSuffix(strings.TrimPrefix(stderr, "symbi schema verify: "), "\n")
				if code != 1 || text(res) != want {
					t.Fatalf("tool error %q; CLI exit %d, stderr %q", text(res), code, stderr)
				}
				return
			}
			var fromTool, fromCLI map[string]any
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &fromTool); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(stdout), &fromCLI); err != nil {
				t.Fatalf("CLI stdout %q (stderr %q): %v", stdout, stderr, err)
			}
			if !reflect.DeepEqual(fromTool, fromCLI) {
				t.Fatalf("tool %v\nCLI  %v", fromTool, fromCLI)
			}
			if want := map[bool]int{true: 0, false: 1}[fromCLI["verified"] == true]; code != want {
				t.Fatalf("CLI exit %d for verified=%v", code, fromCLI["verified"])
			}
		})
	}
}
