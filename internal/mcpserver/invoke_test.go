package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/invoke"
	"symbi/internal/loopback"
	"symbi/internal/mcpserver"
)

const denyPolicy = `@id("allow-respond")
permit (principal, action == Action::"respond", resource);

@id("no-forbidden-word")
forbid (principal, action == Action::"respond", resource)
when { context.response like "*FORBIDDEN*" };
`

// invokeContent is the structuredContent of invoke_agent, success or failure.
type invokeContent struct {
	Agent   string        `json:"agent"`
	AgentID string        `json:"agent_id"`
	Audit   *invoke.Audit `json:"audit"`
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestInvokeAgentResults checks how invoke_agent outcomes are translated: the text and
// receipt of a released answer, the audit reference on errors recorded in a journal, and
// none on preflight errors.
func TestInvokeAgentResults(t *testing.T) {
	model := loopback.New(loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		return loopback.Reply{Text: "echo: " + r.Prompt}
	}))
	if err := model.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	dir := testProject(t, map[string]string{"policies/respond.cedar": denyPolicy})
	cs := serve(t, dir, serveOpts{env: map[string]string{"OPENAI_BASE_URL": model.URL(), "CHAT_MODEL": "loopback-test"}})
	noProvider := serve(t, testProject(t, nil), serveOpts{})

	tests := []struct {
		name    string
		cs      *mcp.ClientSession
		args    map[string]any
		text    string // the released text; "" for an error
		agent   string
		code    string
		msg     string
		audited bool // whether an error carries the audit reference
	}{
		{"released", cs, map[string]any{"agent": "helper", "prompt": "hello"}, "echo: hello", "helper", "", "", false},
		{"filename alias", cs, map[string]any{"agent": "alias", "prompt": "hi"}, "echo: hi", "aliased_name", "", "", false},
		{"policy denied", cs, map[string]any{"agent": "helper", "prompt": "say FORBIDDEN"}, "", "", "policy_denied", "no-forbidden-word", true},
		{"unknown agent", cs, map[string]any{"agent": "nobody", "prompt": "hi"}, "", "", "unknown_agent", `"nobody"`, false},
		{"refused definition", cs, map[string]any{"agent": "refused", "prompt": "hi"}, "", "", "refused_definition", "declares parameters", false},
		{"prompt over 64 KiB", cs, map[string]any{"agent": "helper", "prompt": strings.Repeat("x", invoke.MaxPromptBytes+1)}, "", "", "limit_exceeded", "prompt", false},
		{"no provider", noProvider, map[string]any{"agent": "helper", "prompt": "hi"}, "", "", "no_provider", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, tt.cs, "invoke_agent", tt.args)
			var out invokeContent
			decodeStrict(t, structuredJSON(t, res), &out)
			if tt.code != "" {
				wantToolError(t, res, tt.code, tt.msg)
				if strings.Contains(textOf(t, res), "echo:") {
					t.Errorf("the model's text leaked into the error: %s", textOf(t, res))
				}
				if (out.Audit != nil) != tt.audited {
					t.Fatalf("audit reference %+v; want present=%v", out.Audit, tt.audited)
				}
				if out.Audit != nil {
					checkAudit(t, dir, out.Audit)
				}
				return
			}
			if res.IsError || textOf(t, res) != tt.text {
				t.Fatalf("error=%v text %q; want %q", res.IsError, textOf(t, res), tt.text)
			}
			wantID := uuid.NewSHA1(uuid.NameSpaceURL, []byte("symbi://response/"+tt.agent)).String()
			if out.Error != nil || out.Agent != tt.agent || out.AgentID != wantID || out.Audit == nil {
				t.Fatalf("structuredContent %+v; want agent %s agent_id %s and an audit reference", out, tt.agent, wantID)
			}
			checkAudit(t, dir, out.Audit)
			if out.Audit.Records != 5 {
				t.Errorf("receipt records %d, want 5", out.Audit.Records)
			}
		})
	}
}

// checkAudit requires an audit reference naming a journal of dir that exists.
func checkAudit(t *testing.T, dir string, a *invoke.Audit) {
	t.Helper()
	if _, err := uuid.Parse(a.RunID); err != nil || len(a.PublicKey) != 64 || len(a.Head) != 64 || a.Records < 1 {
		t.Fatalf("audit reference %+v", a)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(a.Path) || filepath.Dir(a.Path) != filepath.Join(real, ".symbiont", "governed") {
		t.Fatalf("journal path %s is not in %s/.symbiont/governed", a.Path, real)
	}
	if _, err := os.Stat(a.Path); err != nil {
		t.Fatalf("journal: %v", err)
	}
}

// TestAgentsMDResource checks the resource: listed and readable when AGENTS.md is, not
// listed when it is missing, and an unknown URI is the SDK's resource-not-found error.
func TestAgentsMDResource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	t.Run("present", func(t *testing.T) {
		cs := serve(t, testProject(t, nil), serveOpts{})
		list, err := cs.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Resources) != 1 || list.Resources[0].URI != mcpserver.AgentsMDURI || list.Resources[0].MIMEType != "text/markdown" {
			raw, _ := json.Marshal(list.Resources)
			t.Fatalf("resources %s", raw)
		}
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.AgentsMDURI})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Contents) != 1 || res.Contents[0].Text != testAgentsMD || res.Contents[0].MIMEType != "text/markdown" {
			t.Fatalf("contents %+v", res.Contents)
		}
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///README.md"}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("unknown URI: %v; want resource not found", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		cs := serve(t, t.TempDir(), serveOpts{})
		list, err := cs.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Resources) != 0 {
			t.Fatalf("resources listed without AGENTS.md: %+v", list.Resources)
		}
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpserver.AgentsMDURI}); err == nil {
			t.Fatal("reading the unlisted AGENTS.md resource succeeded")
		}
	})
}
