package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// policyCopy copies the repository's policies/ into a fresh project directory
// and adds extra files (relative path → content).
func policyCopy(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir("../../policies", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range extra {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPolicyCheck(t *testing.T) {
	tests := []struct {
		name   string
		args   func(t *testing.T) []string
		code   int
		stdout []string
		stderr []string
	}{
		{
			name:   "repository policies",
			args:   func(t *testing.T) []string { return []string{"--project", "../.."} },
			stdout: []string{"mode: cedar\n", "policies/respond.cedar\n  permit respond (4:1)\n", "policies/secrets.cedar\n  forbid no-private-keys (3:1)\n", "policies/mcp-server/size.cedar\n  forbid mcp-server-max-response (3:1)\n"},
		},
		{
			name: "broken copy",
			args: func(t *testing.T) []string {
				return []string{"--project", policyCopy(t, map[string]string{
					"policies/broken.cedar":            "permit (principal, action, resource)\nwhen { context.response like };\n",
					"policies/mcp-server/broken.cedar": "forbid (",
				})}
			},
			code:   1,
			stdout: []string{"mode: deny_all\n"},
			stderr: []string{"policies/broken.cedar:2:31: parse error", "policies/mcp-server/broken.cedar:1:9: parse error", "deny_all: every response would be denied"},
		},
		{
			name:   "no policies",
			args:   func(t *testing.T) []string { return []string{"--project", t.TempDir()} },
			stdout: []string{"mode: default\n", "digest: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n", "built-in default permits respond"},
		},
		{
			name:   "missing project",
			args:   func(t *testing.T) []string { return []string{"--project", filepath.Join(t.TempDir(), "nope")} },
			code:   1,
			stderr: []string{"not_found"},
		},
		{
			name:   "stray argument",
			args:   func(t *testing.T) []string { return []string{"extra"} },
			code:   2,
			stderr: []string{"unexpected arguments"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, "", append([]string{"policy", "check"}, tt.args(t)...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tt.code, out, errOut)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
		})
	}
}

func TestPolicyCheckJSON(t *testing.T) {
	dir := policyCopy(t, map[string]string{"policies/broken.cedar": "forbid ("})
	code, out, _ := runCLI(t, "", "policy", "check", "--json", "--project", dir)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	var got policyCheckOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Mode != "deny_all" || len(got.Problems) != 1 || got.Problems[0].File != "policies/broken.cedar" || got.Problems[0].Line != 1 || got.Problems[0].Column != 9 {
		t.Fatalf("output %+v", got)
	}
	if len(got.Files) != 4 || got.Files[0].File != "policies/broken.cedar" {
		t.Fatalf("files %+v", got.Files)
	}

	code, out, _ = runCLI(t, "", "policy", "check", "--json", "--project", "../..")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	got = policyCheckOutput{}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Mode != "cedar" || len(got.Problems) != 0 || len(got.Digest) != 64 || got.Files[1].Policies[0].ID != "no-private-keys" || got.Files[1].Policies[0].Effect != "forbid" {
		t.Fatalf("output %+v", got)
	}
}
