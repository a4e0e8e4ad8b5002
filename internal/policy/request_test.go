package policy

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"symbi/internal/digest"
	"symbi/internal/project"
)

func TestNewRequest(t *testing.T) {
	src := `metadata {
    description = "Answers questions",
    executor = "orga"
}

agent helper {
    capabilities = ["explain", "code_review"]
}
`
	dir := makeProject(t, map[string]string{"agents/alias.symbi": src}, nil)
	p, err := project.Open(dir)
	must(t, err)
	defer p.Close()
	reg, err := p.LoadRegistry(slog.New(slog.DiscardHandler))
	must(t, err)
	a, err := reg.Resolve("alias")
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	r := NewRequest(a, "run-9", "text", "mcp-server", "stdio")
	if r.Action != ActionRespond || r.Surface != "mcp-server" || r.Caller != "stdio" || r.Agent != "helper" || r.AgentID != AgentID("helper") || r.File != "agents/alias.symbi" ||
		!slices.Equal(r.Capabilities, []string{"explain", "code_review"}) || r.RunID != "run-9" || r.Response != "text" {
		t.Fatalf("request %+v", r)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "agents/alias.symbi"))
	must(t, err)
	if r.SourceSHA256 != digest.SHA256Hex(raw) {
		t.Fatalf("source hash %s", r.SourceSHA256)
	}
	if r.DeclarationSHA256 != digest.SHA256Hex(a.Admission.Declaration) || len(a.Admission.Declaration) == 0 || r.DeclarationSHA256 == r.SourceSHA256 {
		t.Fatalf("declaration hash %s", r.DeclarationSHA256)
	}
}
