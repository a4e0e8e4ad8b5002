package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var update = flag.Bool("update", false, "rewrite testdata/tools.golden.json")

// TestToolSchemas compares the advertised tools — name, title, description, input and
// output schemas, annotations — with testdata/tools.golden.json.
func TestToolSchemas(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	type snapshot struct {
		Name         string               `json:"name"`
		Title        string               `json:"title"`
		Description  string               `json:"description"`
		InputSchema  any                  `json:"inputSchema"`
		OutputSchema any                  `json:"outputSchema"`
		Annotations  *mcp.ToolAnnotations `json:"annotations"`
	}
	var tools []snapshot
	for _, tool := range res.Tools {
		tools = append(tools, snapshot{tool.Name, tool.Title, tool.Description, tool.InputSchema, tool.OutputSchema, tool.Annotations})
	}
	got, err := json.MarshalIndent(tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	golden := filepath.Join("testdata", "tools.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with: go test ./internal/mcpserver -run TestToolSchemas -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the advertised tool schemas differ from %s.\n"+
			"If the change is deliberate, run: go test ./internal/mcpserver -run TestToolSchemas -update\n"+
			"and review the diff of the golden file.\ngot:\n%s", golden, got)
	}
	names := map[string]bool{}
	for _, tool := range tools {
		names[tool.Name] = true
		if tool.InputSchema == nil || tool.OutputSchema == nil || tool.Description == "" {
			t.Errorf("tool %s lacks a description, input schema or output schema", tool.Name)
		}
	}
	for _, n := range []string{"invoke_agent", "list_agents", "parse_dsl", "get_agent_dsl", "get_agents_md", "verify_schema"} {
		if !names[n] {
			t.Errorf("tool %s is not listed", n)
		}
	}
	if len(names) != 6 {
		t.Errorf("%d tools listed, want 6", len(names))
	}
}
