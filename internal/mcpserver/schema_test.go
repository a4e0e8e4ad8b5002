package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var update = flag.Bool("update", false, "rewrite testdata/tools.golden.json")

// TestToolSchemas compares the advertised tools — name, title, description, input and
// output schemas, annotations — with testdata/tools.golden.json.
func TestToolSchemas(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
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
	wantTools := []string{"invoke_agent", "list_agents", "parse_dsl", "get_agent_dsl", "get_agents_md", "verify_schema",
		"start_run", "run_events", "run_status", "cancel_run", "list_runs", "resolve_run", "approve_run"}
	for _, n := range wantTools {
		if !names[n] {
			t.Errorf("tool %s is not listed", n)
		}
	}
	if len(names) != len(wantTools) {
		t.Errorf("%d tools listed, want %d", len(names), len(wantTools))
	}
}

// mcpSchemaProblems lists how a tool's input or output schema, as sent on the wire,
// breaks MCP's rules: the schema is a JSON object whose top-level "type" is exactly the
// string "object" (clients such as the TypeScript SDK reject ["null","object"] and every
// other form), "properties" is an object of schemas, every "required" name is a declared
// property, and the schema resolves as JSON Schema.
func mcpSchemaProblems(which string, raw json.RawMessage) []string {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return []string{which + ": not a JSON object"}
	}
	var problems []string
	if ty, ok := m["type"].(string); !ok || ty != "object" {
		problems = append(problems, fmt.Sprintf("%s: top-level type is %v, must be \"object\"", which, m["type"]))
	}
	props, _ := m["properties"].(map[string]any)
	if p, ok := m["properties"]; ok && props == nil {
		problems = append(problems, fmt.Sprintf("%s: properties is %T, must be an object", which, p))
	}
	req, _ := m["required"].([]any)
	for _, r := range req {
		name, _ := r.(string)
		if _, ok := props[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s: required %v is not a declared property", which, r))
		}
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		problems = append(problems, fmt.Sprintf("%s: %v", which, err))
	} else if _, err := s.Resolve(nil); err != nil {
		problems = append(problems, fmt.Sprintf("%s: does not resolve: %v", which, err))
	}
	return problems
}

// TestToolSchemasFollowMCP checks every advertised tool's schemas, as a client receives
// them, against MCP's rules, so that no future result type can regress them (a pointer
// result type once made an output schema's type ["null","object"], which every
// TypeScript-SDK client refused).
func TestToolSchemasFollowMCP(t *testing.T) {
	cs := serve(t, testProject(t, nil), serveOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	nameRule := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	for _, tool := range res.Tools {
		if !nameRule.MatchString(tool.Name) {
			t.Errorf("tool name %q breaks MCP's naming rule", tool.Name)
		}
		for which, schema := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
			raw, err := json.Marshal(schema)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range mcpSchemaProblems(which, raw) {
				t.Errorf("%s: %s", tool.Name, p)
			}
		}
	}
}

// TestMCPSchemaProblems shows the rules check can fail: each broken schema is caught.
func TestMCPSchemaProblems(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type":["null","object"],"properties":{}}`, `top-level type is [null object]`},
		{`{"properties":{}}`, `top-level type is <nil>`},
		{`{"type":"array"}`, `top-level type is array`},
		{`[]`, `not a JSON object`},
		{`{"type":"object","properties":[]}`, `properties is []interface {}`},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, `required b is not a declared property`},
		{`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`, `does not resolve`},
	} {
		got := strings.Join(mcpSchemaProblems("s", json.RawMessage(tc.schema)), "; ")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want one containing %q", tc.schema, got, tc.want)
		}
	}
	if p := mcpSchemaProblems("s", json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`)); len(p) != 0 {
		t.Errorf("a good schema has problems: %v", p)
	}
}
