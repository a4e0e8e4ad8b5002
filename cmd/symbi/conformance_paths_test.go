package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestConformanceTypeScriptSDKPaths: the TypeScript SDK, which validates what the server
// sends (each tool's structuredContent against its outputSchema), on the paths
// sdk-client.mjs does not take:
//
//   - a delegated agent's permission request held at a @gate("human") forbid:
//     awaiting_approval with approval.request_id and approval.title, approve_run's
//     request_id (missing: invalid_request; another wait: invalid_transition), its result
//     while the run goes on, and the run's end with the decided approval;
//   - a released run without its text (SYMBI_JOURNAL_TEXT=hashes: text_retained false),
//     and a held answer approved there;
//   - runs answered from the ledger whose journal was altered or deleted
//     (journal_problem), pruned (journal_pruned), or cut off by a killed server
//     (abandoned), through run_status, the run resource, run_events, resolve_run,
//     cancel_run and list_runs;
//   - parse_dsl of every file of testdata/dsl (channels, memories, webhooks, schedules,
//     types, functions, with blocks);
//   - invoke_agent's inference_failed and timeout and the run_status of those runs,
//     start_run's run that fails, system_prompt and its limit, verify_schema's
//     public_key_url refusals, get_agents_md's not_found (and no AGENTS.md resource),
//     no_provider.
//
// testdata/conformance/paths.mjs runs them; each scenario here is one invocation.
func TestConformanceTypeScriptSDKPaths(t *testing.T) {
	node := nodeClients(t)
	schemapin, err := filepath.Abs(schemaVectorDir)
	if err != nil {
		t.Fatal(err)
	}
	dslDir, err := filepath.Abs(filepath.Join("..", "..", "testdata", "dsl"))
	if err != nil {
		t.Fatal(err)
	}
	fake := confFakeAgent(t)
	model := conformanceModel(t)
	modelEnv := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"),
		"OPENAI_BASE_URL": model.URL(), "CHAT_MODEL": "loopback-test"}

	t.Run("paths", func(t *testing.T) {
		t.Parallel()
		dir := newE2EProject(t)
		writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), confGatePolicy)
		root, ws, execFile := confGatedAgent(t, fake, dir)
		confRunScenario(t, node, map[string]any{"scenario": "paths", "project": dir, "env": modelEnv,
			"args": []string{"--executors", execFile, "--workspace-root", root}, "workspace": ws, "dslDir": dslDir, "schemapin": schemapin},
			"parse_dsl/valid files", "parse_dsl/invalid files", "invoke_agent/inference_failed", "invoke_agent/timeout", "start_run/fails",
			"invoke_agent/system_prompt", "verify_schema/public_key_url refused", "delegated gate/permission request")
		verifyJournals(t, dir)
	})
	t.Run("hashes", func(t *testing.T) {
		t.Parallel()
		dir := newE2EProject(t)
		writeFile(t, filepath.Join(dir, "policies", "gate.cedar"), confGatePolicy)
		confRunScenario(t, node, map[string]any{"scenario": "hashes", "project": dir, "env": modelEnv},
			"hashes/run_status text_retained false", "hashes/held answer approved")
		verifyJournals(t, dir)
	})
	t.Run("ledger", func(t *testing.T) {
		t.Parallel()
		dir := newE2EProject(t)
		confRunScenario(t, node, map[string]any{"scenario": "ledger", "project": dir, "env": modelEnv},
			"ledger/first server runs", "ledger/tampered", "ledger/deleted", "ledger/pruned", "ledger/abandoned", "ledger/list_runs")
	})
	t.Run("no-agents-md", func(t *testing.T) {
		t.Parallel()
		dir := newE2EProject(t)
		if err := os.Remove(filepath.Join(dir, "AGENTS.md")); err != nil {
			t.Fatal(err)
		}
		confRunScenario(t, node, map[string]any{"scenario": "no-agents-md", "project": dir, "env": modelEnv},
			"no-agents-md/get_agents_md", "no-agents-md/resources")
	})
	t.Run("no-provider", func(t *testing.T) {
		t.Parallel()
		dir := newE2EProject(t)
		confRunScenario(t, node, map[string]any{"scenario": "no-provider", "project": dir,
			"env": map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME")}},
			"no-provider/invoke_agent", "no-provider/start_run")
	})
}

// confRunScenario runs paths.mjs with cfg (symbi added) and requires every
// check it printed to pass and each of required to have run.
func confRunScenario(t *testing.T, node string, cfg map[string]any, required ...string) {
	t.Helper()
	cfg["symbi"] = symbiBin
	raw, _ := json.Marshal(cfg)
	ran := confRunChecks(t, node, "paths.mjs", raw, 8*time.Minute)
	for _, want := range required {
		if !ran[want] {
			t.Errorf("check %q did not run", want)
		}
	}
}

// TestConformanceSDKOnError runs sdk-client.mjs through onerror.mjs, which records every
// error the TypeScript SDK reports through onerror and adds the check "sdk/onerror": a
// line on stdout the SDK cannot parse, a notification that fails the SDK's schema, or a
// response to a request the client has cancelled, which the SDK would otherwise drop
// silently, fail it — all but the SDK's documented progress race and the answer to a
// cancelled call.
func TestConformanceSDKOnError(t *testing.T) {
	node := nodeClients(t)
	schemapinDir, err := filepath.Abs(schemaVectorDir)
	if err != nil {
		t.Fatal(err)
	}
	fake := confFakeAgent(t)
	version := conformanceVersions[len(conformanceVersions)-1]
	t.Run("stdio", func(t *testing.T) {
		t.Parallel()
		confRunSDKScript(t, "onerror.mjs", node, fake, schemapinDir, version, confStdio, "sdk/onerror")
	})
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		confRunSDKScript(t, "onerror.mjs", node, fake, schemapinDir, version, confHTTPTokens, "sdk/onerror")
	})
}

// TestConformanceGoSDKSubscribe: the go-sdk client — one of the conformance suite's three
// clients (README, "Tested clients": at its default 2026-07-28 over stdio) — subscribes to
// a run and is notified as it goes on (under 2026-07-28 with subscriptions/listen,
// docs/mcp-tools.md), over stdio and over HTTP with a bearer token.
func TestConformanceGoSDKSubscribe(t *testing.T) {
	model := conformanceModel(t)
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"), "OPENAI_BASE_URL": model.URL(), "CHAT_MODEL": "loopback-test"}
	follow := func(t *testing.T, cs *mcp.ClientSession, updated <-chan string, name string) {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		defer cancel()
		t.Logf("negotiated protocol %s", cs.InitializeResult().ProtocolVersion)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_run", Arguments: map[string]any{"agent": "helper", "prompt": "hold:" + name}})
		if err != nil || res.IsError {
			t.Fatalf("start_run: %v %+v", err, res)
		}
		id, _ := res.StructuredContent.(map[string]any)["run_id"].(string)
		uri := "symbi://runs/" + id
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatalf("subscribing to %s: %v", uri, err)
		}
		if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": "release:" + name}}); err != nil || r.IsError {
			t.Fatalf("release: %v %+v", err, r)
		}
		for {
			select {
			case got := <-updated:
				if got != uri {
					t.Fatalf("notified of %s, want %s", got, uri)
				}
			case <-time.After(time.Minute):
				t.Fatalf("never notified of the run's end (%s)", uri)
			}
			r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			if err != nil {
				t.Fatal(err)
			}
			var st struct{ Status string }
			if json.Unmarshal([]byte(r.Contents[0].Text), &st); st.Status == "completed" {
				return
			}
		}
	}
	t.Run("stdio", func(t *testing.T) {
		dir := newE2EProject(t)
		updated := make(chan string, 100)
		s := startSymbi(t, dir, modelEnv(model), &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
		})
		follow(t, s.session, updated, "stdio")
	})
	t.Run("http token", func(t *testing.T) {
		dir := newE2EProject(t)
		tokens := filepath.Join(t.TempDir(), "tokens")
		alice := confTokenAdd(t, tokens, "alice")
		srv := confServeHTTP(t, dir, env, []string{"--auth-tokens", tokens})
		updated := make(chan string, 100)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "conformance", Version: "1"}, &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
		}).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.url, HTTPClient: &http.Client{Transport: httpBearer{token: alice, base: tr}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		follow(t, cs, updated, "http")
		cs.Close()
		srv.stop(t)
	})
}

// TestConformanceInspectorPermissionGate: the MCP Inspector CLI (whose SDK validates each
// result against its tool's outputSchema) on the paths its table does not take. Over HTTP with tokens: a delegated agent's permission request held by a
// @gate("human") forbid — alice's run, which bob decides (four eyes): alice's run_status
// names the request without its title (text the agent chose, docs/runs.md item 7), bob's
// shows the title, list_runs shows it to no one, alice may not approve her own run, an
// approve_run without request_id is invalid_request, bob's naming it lets the run go on
// to complete, and the title is then every reader's. Over stdio: get_agents_md's
// refusals (unknown argument; not_found without AGENTS.md, whose resource is then not
// listed) — the one tool the Inspector table calls with no bad arguments — and
// parse_dsl's syntax error, a result (valid=false), not a tool error.
func TestConformanceInspectorPermissionGate(t *testing.T) {
	t.Parallel() // its own project, model and servers: the Inspector's node start-ups overlap
	node := nodeClients(t)
	fake := confFakeAgent(t)
	model := conformanceModel(t)

	t.Run("http", func(t *testing.T) {
		dir := newE2EProject(t)
		root, ws, execFile := confGatedAgent(t, fake, dir)
		tokens := filepath.Join(t.TempDir(), "tokens")
		alice, bob := confTokenAdd(t, tokens, "alice"), confTokenAdd(t, tokens, "bob")
		srv := confServeHTTP(t, dir, map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"),
			"OPENAI_BASE_URL": model.URL(), "CHAT_MODEL": "loopback-test"},
			[]string{"--auth-tokens", tokens, "--executors", execFile, "--workspace-root", root})
		as := func(token string) confInspect {
			return func(t *testing.T, args ...string) (int, []byte, string) {
				return confInspectorURL(t, node, srv.url, []string{"Authorization: Bearer " + token}, args...)
			}
		}
		var id string
		confRunInspector(t, as(alice), "start_run", confToolCall("start_run", "agent=gated", "prompt=run the tests", "workspace="+ws), func(r inspectorResult) error {
			if r.IsError || r.StructuredContent["status"] != "running" {
				return fmt.Errorf("result %+v", r)
			}
			id, _ = r.StructuredContent["run_id"].(string)
			return nil
		})
		if id == "" {
			t.Fatal("start_run gave no run id")
		}
		var request string
		t.Run("alice run_status awaiting_approval without the title", func(t *testing.T) {
			for deadline := time.Now().Add(hangGuard); ; {
				code, out, stderr := as(alice)(t, confToolCall("run_status", "run_id="+id)...)
				var r inspectorResult
				if code != 0 || json.Unmarshal(out, &r) != nil || r.IsError {
					t.Fatalf("inspector exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
				}
				st := r.StructuredContent
				if st["status"] == "awaiting_approval" {
					a, _ := st["approval"].(map[string]any)
					request, _ = a["request_id"].(string)
					if request == "" || a["gate"] != "commands-review" || a["title"] != nil || strings.Contains(string(out), "go test ./...") {
						t.Fatalf("alice, who may not approve her run, sees %v", st)
					}
					return
				}
				if st["status"] != "running" || time.Now().After(deadline) {
					t.Fatalf("run %s: %v, want it awaiting approval", id, st)
				}
			}
		})
		if request == "" {
			t.Fatal("the run never awaited approval of a request")
		}
		confRunInspector(t, as(bob), "bob run_status shows the title", confToolCall("run_status", "run_id="+id), func(r inspectorResult) error {
			a, _ := r.StructuredContent["approval"].(map[string]any)
			if r.IsError || r.StructuredContent["status"] != "awaiting_approval" || a["request_id"] != request || a["title"] != "go test ./..." {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		})
		confRunInspector(t, as(bob), "bob list_runs awaiting_approval without the title", confToolCall("list_runs", "status=awaiting_approval"), func(r inspectorResult) error {
			runs, _ := r.StructuredContent["runs"].([]any)
			if r.IsError || len(runs) != 1 {
				return fmt.Errorf("result %+v", r)
			}
			if a, _ := runs[0].(map[string]any)["approval"].(map[string]any); a["request_id"] != request || a["title"] != nil {
				return fmt.Errorf("listed approval %v", a)
			}
			return nil
		})
		confRunInspector(t, as(alice), "alice approve_run own run", confToolCall("approve_run", "run_id="+id, "decision=approve", "reason=checked", "request_id="+request), toolError("access_denied"))
		confRunInspector(t, as(bob), "bob approve_run without request_id", confToolCall("approve_run", "run_id="+id, "decision=approve", "reason=checked"), toolError("invalid_request"))
		confRunInspector(t, as(bob), "bob approve_run answer", confToolCall("approve_run", "run_id="+id, "decision=approve", "reason=checked", "request_id=answer"), toolError("invalid_transition"))
		confRunInspector(t, as(bob), "bob approve_run", confToolCall("approve_run", "run_id="+id, "decision=approve", "request_id="+request, "reason=tests only"), func(r inspectorResult) error {
			a, _ := r.StructuredContent["approval"].(map[string]any)
			if r.IsError || a["decision"] != "approve" || a["approver"] != "bob" || a["request_id"] != request {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		})
		t.Run("alice run_status completed with the title", func(t *testing.T) {
			cursor := 0.0 // long-polled from the last event seen, so that wait_ms waits
			for deadline := time.Now().Add(hangGuard); ; {
				code, out, stderr := as(alice)(t, confToolCall("run_events", "run_id="+id, "after="+strconv.FormatFloat(cursor, 'f', -1, 64), "limit=1000", "wait_ms=30000")...)
				var r inspectorResult
				if code != 0 || json.Unmarshal(out, &r) != nil || r.IsError {
					t.Fatalf("inspector exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
				}
				if r.StructuredContent["done"] == true {
					break
				}
				if next, ok := r.StructuredContent["next_cursor"].(float64); ok {
					cursor = next
				}
				if time.Now().After(deadline) {
					t.Fatalf("run %s never ended: %v", id, r.StructuredContent)
				}
			}
			code, out, stderr := as(alice)(t, confToolCall("run_status", "run_id="+id)...)
			var r inspectorResult
			if code != 0 || json.Unmarshal(out, &r) != nil {
				t.Fatalf("inspector exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
			}
			a, _ := r.StructuredContent["approval"].(map[string]any)
			if r.IsError || r.StructuredContent["status"] != "completed" || r.StructuredContent["released"] != true || a["title"] != "go test ./..." || a["decision"] != "approve" {
				t.Fatalf("result %+v", r)
			}
		})
		srv.stop(t)
		verifyJournals(t, dir)
	})

	t.Run("stdio", func(t *testing.T) {
		dir := newE2EProject(t)
		inspect := func(t *testing.T, args ...string) (int, []byte, string) {
			return inspector(t, node, dir, model, args...)
		}
		confRunInspector(t, inspect, "get_agents_md unknown argument", confToolCall("get_agents_md", "file=x"), toolError("invalid_request"))
		confRunInspector(t, inspect, "parse_dsl syntax error", confToolCall("parse_dsl", "content=agent a {"), func(r inspectorResult) error {
			if errs, _ := r.StructuredContent["errors"].([]any); r.IsError || r.StructuredContent["valid"] != false || len(errs) == 0 {
				return fmt.Errorf("result %+v", r)
			}
			return nil
		})
		if err := os.Remove(filepath.Join(dir, "AGENTS.md")); err != nil {
			t.Fatal(err)
		}
		confRunInspector(t, inspect, "get_agents_md not_found", confToolCall("get_agents_md"), toolError("not_found"))
		confRunInspector(t, inspect, "resources/list without AGENTS.md", []string{"--method", "resources/list"}, func(r inspectorResult) error {
			if len(r.Resources) != 0 {
				return fmt.Errorf("resources %+v", r.Resources)
			}
			return nil
		})
	})
}

// confGatedAgent gives the project dir the delegated agent "gated" (the fake ACP agent,
// fake, asking to execute "go test ./..." in its workspace) and the permission policies
// that hold that request at a gate; it returns the workspace root granted, the workspace
// in it, and the executors file.
func confGatedAgent(t *testing.T, fake, dir string) (root, ws, execFile string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "policies", "tools.cedar"), gatePermissionPolicy)
	root = t.TempDir()
	ws = filepath.Join(root, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	script, _ := json.Marshal(map[string]any{"forbid_terminal": true, "steps": []any{
		map[string]any{"message": "Running the tests. "},
		map[string]any{"permission": map[string]any{"tool_call_id": "t1", "kind": "execute", "title": "go test ./...", "locations": []string{"$CWD"}}, "expect": "allow"},
		map[string]any{"message": "Done."},
	}})
	aux := t.TempDir()
	scriptFile := filepath.Join(aux, "gated.json")
	writeFile(t, scriptFile, string(script))
	ex, _ := json.Marshal(map[string]any{"executors": map[string]any{"gated": map[string]any{"command": []string{fake, "--script", scriptFile}}}})
	execFile = filepath.Join(aux, "executors.json")
	writeFile(t, execFile, string(ex))
	if err := os.Chmod(execFile, 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "agents", "gated.symbi"), "metadata { executor = \"gated\" }\nagent gated {}\n")
	return root, ws, execFile
}
