package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/invoke"
	"symbi/internal/mcpserver"
	"symbi/internal/policy"
	"symbi/internal/project"
	"symbi/internal/runs"
	"symbi/internal/schemapin"
)

// Serve a project in process and call list_agents with the go-sdk client over an
// in-memory transport. symbi mcp does the same over stdin and stdout with
// mcpserver.NewStdioTransport.
func Example() {
	dir, err := os.MkdirTemp("", "symbi-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"agents/assistant.symbi": "metadata { description = \"Answers questions\" }\nagent assistant {\n  capabilities = [\"answer\"]\n}\n",
		"agents/runner.symbi":    "agent runner(command: String) {}\n",
	}
	if err := os.Mkdir(filepath.Join(dir, "agents"), 0o755); err != nil {
		log.Fatal(err)
	}
	for rel, content := range files {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
			log.Fatal(err)
		}
	}

	// What the server serves: the pinned project, its registry snapshot, the governed
	// runner (no provider here, so invoke_agent would answer no_provider) and a
	// SchemaPin verifier.
	quiet := slog.New(slog.DiscardHandler)
	p, err := project.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	reg, err := p.LoadRegistry(quiet)
	if err != nil {
		log.Fatal(err)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Log: quiet})
	defer runner.Shutdown(context.Background())
	server := mcpserver.New(mcpserver.Config{
		Project: p, Registry: reg, Runs: runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg}), Log: quiet,
		Schemas: schemapin.NewVerifier(os.Getenv),
	})

	ctx := context.Background()
	clientEnd, serverEnd := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, serverEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1"}, nil).Connect(ctx, clientEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ss.Wait()
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_agents", Arguments: map[string]any{}})
	if err != nil {
		log.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out struct {
		Agents []project.Entry `json:"agents"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		log.Fatal(err)
	}
	for _, a := range out.Agents {
		if a.Invocable {
			fmt.Printf("%s (%s): invocable — %s\n", a.Name, a.File, a.Description)
		} else {
			fmt.Printf("%s (%s): refused — %s\n", a.Name, a.File, a.Reason)
		}
	}
	// Output:
	// assistant (agents/assistant.symbi): invocable — Answers questions
	// runner (agents/runner.symbi): refused — rule 4 at 1:14: agent "runner" declares parameters
}
