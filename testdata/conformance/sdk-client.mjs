// The TypeScript MCP SDK's client against the real symbi binary over stdio.
//
// Run by cmd/symbi's TestConformanceTypeScriptSDK, which builds symbi, starts a loopback
// model and writes a fresh project; run by hand:
//
//   node sdk-client.mjs '{"symbi":"/path/to/symbi","project":"/path/to/project",
//     "env":{"OPENAI_BASE_URL":"http://127.0.0.1:PORT/v1"},"protocolVersion":"2025-11-25",
//     "schemapin":"/path/to/testdata/schemapin"}'
//
// The project must hold the agents and policy of cmd/symbi's conformance project, and the
// model must answer "hang" by holding the request and "leak" with text the policy forbids.
//
// Each check prints one JSON line {"check", "ok", "detail"}; the process exits 0 when it
// has run every check (failures included) and 1 when it could not run them.

import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";

const cfg = JSON.parse(process.argv[2]);
const requestOptions = { timeout: 300_000 }; // generous: the checks wait for events, not the clock

const STAGES = ["admitted", "journal opened", "request sent", "response received", "policy decided"];
const TOOLS = ["get_agent_dsl", "get_agents_md", "invoke_agent", "list_agents", "parse_dsl", "verify_schema"];

function report(check, ok, detail = "") {
  process.stdout.write(JSON.stringify({ check, ok, detail: String(detail) }) + "\n");
}

async function check(name, fn) {
  try {
    const detail = await fn();
    report(name, true, detail ?? "");
  } catch (err) {
    report(name, false, err instanceof Error ? `${err.name}: ${err.message}` : String(err));
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

function textOf(res) {
  assert(Array.isArray(res.content) && res.content.length === 1 && res.content[0].type === "text",
    `content is not exactly one text item: ${JSON.stringify(res.content)}`);
  return res.content[0].text;
}

// expectToolError asserts res is a tool error (isError, never a protocol error) with code,
// in the text and in structuredContent.
function expectToolError(res, code) {
  assert(res.isError === true, `isError is ${res.isError}, want true: ${JSON.stringify(res)}`);
  const text = textOf(res);
  assert(text.startsWith(code + ": "), `text ${JSON.stringify(text)} does not start with "${code}: "`);
  assert(res.structuredContent?.error?.code === code,
    `structuredContent.error.code is ${res.structuredContent?.error?.code}, want ${code}`);
  return text;
}

function expectOK(res) {
  assert(res.isError !== true, `isError: ${JSON.stringify(res.content)}`);
  return textOf(res);
}

// connect starts symbi and initializes at cfg.protocolVersion (the SDK always offers its
// latest; the transport rewrites the offer), recording the version the server answered.
async function connect() {
  const transport = new StdioClientTransport({
    command: cfg.symbi,
    args: ["mcp", "--project", cfg.project],
    env: cfg.env,
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (b) => { stderr += b; });
  const negotiated = {};
  const wire = []; // every message, in the order it was sent or received
  const send = transport.send.bind(transport);
  transport.send = (msg, opts) => {
    wire.push({ out: true, msg });
    if (msg.method === "initialize" && cfg.protocolVersion) {
      msg = { ...msg, params: { ...msg.params, protocolVersion: cfg.protocolVersion } };
      negotiated.id = msg.id;
    }
    return send(msg, opts);
  };
  let onmessage;
  Object.defineProperty(transport, "onmessage", {
    get: () => onmessage,
    set: (fn) => {
      onmessage = fn && ((msg, extra) => {
        wire.push({ out: false, msg });
        if (msg.id !== undefined && msg.id === negotiated.id && msg.result) negotiated.version = msg.result.protocolVersion;
        return fn(msg, extra);
      });
    },
  });
  const client = new Client({ name: "symbi-conformance", version: "1" });
  await client.connect(transport, requestOptions);
  return { client, negotiated, wire, stderr: () => stderr };
}

const call = (client, name, args, opts = {}) =>
  client.callTool({ name, arguments: args }, undefined, { ...requestOptions, ...opts });

async function main() {
  const { client, negotiated, wire } = await connect();

  await check("initialize", () => {
    assert(negotiated.version === cfg.protocolVersion,
      `server answered protocol version ${negotiated.version}, offered ${cfg.protocolVersion}`);
    const info = client.getServerVersion();
    assert(info?.name === "symbi", `serverInfo.name is ${info?.name}`);
    const caps = client.getServerCapabilities();
    assert(caps?.tools && caps?.resources, `capabilities lack tools or resources: ${JSON.stringify(caps)}`);
    return negotiated.version;
  });

  // listTools validates the result with the SDK's own schema (an output schema whose
  // top-level type is not "object" throws here) and compiles every outputSchema.
  let tools = [];
  await check("tools/list", async () => {
    ({ tools } = await client.listTools(undefined, requestOptions));
    const names = tools.map((t) => t.name).sort();
    assert(JSON.stringify(names) === JSON.stringify(TOOLS), `tools ${names}`);
    for (const t of tools) {
      assert(t.inputSchema?.type === "object" && t.outputSchema?.type === "object", `${t.name}: schema type is not "object"`);
      assert(t.description && t.annotations, `${t.name}: no description or annotations`);
    }
    return names.join(",");
  });

  // Every tool with good arguments: callTool validates structuredContent against the
  // tool's outputSchema and throws when it does not match.
  await check("invoke_agent/ok", async () => {
    const res = await call(client, "invoke_agent", { agent: "helper", prompt: "hello" });
    const text = expectOK(res);
    assert(text === "loopback answer: hello", `text ${JSON.stringify(text)}`);
    const sc = res.structuredContent;
    assert(sc.agent === "helper" && /^[0-9a-f-]{36}$/.test(sc.agent_id), `agent ${sc.agent} ${sc.agent_id}`);
    const a = sc.audit;
    assert(a && a.records === 5 && /^[0-9a-f]{64}$/.test(a.head) && /^[0-9a-f]{64}$/.test(a.public_key) && a.path.startsWith("/"),
      `audit ${JSON.stringify(a)}`);
    return a.run_id;
  });
  await check("list_agents/ok", async () => {
    const res = await call(client, "list_agents", {});
    expectOK(res);
    const names = res.structuredContent.agents.map((a) => `${a.name}:${a.invocable}`);
    assert(names.join(",") === "dup:false,dup:false,helper:true,refused:false,slow:true", `agents ${names}`);
  });
  await check("parse_dsl/ok", async () => {
    const res = await call(client, "parse_dsl", { content: "agent a {\n  capabilities = [\"x\"]\n}\n" });
    expectOK(res);
    assert(res.structuredContent.valid === true, `valid ${res.structuredContent.valid}`);
    const bad = await call(client, "parse_dsl", { content: "agent a {" });
    expectOK(bad);
    assert(bad.structuredContent.valid === false && bad.structuredContent.errors.length > 0, "a syntax error is not a result");
    const file = await call(client, "parse_dsl", { file: "./agents/helper.symbi" }); // "./" is the current directory
    expectOK(file);
    assert(file.structuredContent.valid === true, `file: valid ${file.structuredContent.valid}`);
  });
  await check("get_agent_dsl/ok", async () => {
    const res = await call(client, "get_agent_dsl", { agent: "helper" });
    const text = expectOK(res);
    assert(text.includes("agent helper") && res.structuredContent.file === "agents/helper.symbi", `source ${text}`);
  });
  await check("get_agents_md/ok", async () => {
    const res = await call(client, "get_agents_md", {});
    const text = expectOK(res);
    assert(text.startsWith("# Test project") && res.structuredContent.path === "AGENTS.md", `AGENTS.md ${text}`);
  });
  await check("verify_schema/ok", async () => {
    const read = (f) => readFileSync(join(cfg.schemapin, f), "utf8");
    const res = await call(client, "verify_schema", { schema: read("schema.signed.json"), public_key_pem: read("signer.pub.pem") });
    expectOK(res);
    assert(res.structuredContent.verified === true, `verified ${res.structuredContent.verified}: ${res.structuredContent.message}`);
    const wrong = await call(client, "verify_schema", { schema: read("schema.signed.json"), public_key_pem: read("wrong.pub.pem") });
    expectOK(wrong);
    assert(wrong.structuredContent.verified === false, "a wrong key verified");
  });

  // Every tool with bad arguments: a coded tool error, validated like any result.
  const bad = [
    ["invoke_agent", {}, "invalid_request"],
    ["invoke_agent", { agent: "helper", prompt: 42 }, "invalid_request"],
    ["invoke_agent", { agent: "helper", prompt: "x", extra: true }, "invalid_request"],
    ["invoke_agent", { agent: "nobody", prompt: "x" }, "unknown_agent"],
    ["invoke_agent", { agent: "refused", prompt: "x" }, "refused_definition"],
    ["invoke_agent", { agent: "helper", prompt: "x".repeat(65537) }, "limit_exceeded"],
    ["invoke_agent", { agent: "helper", prompt: "leak" }, "policy_denied"],
    ["list_agents", { extra: 1 }, "invalid_request"],
    ["parse_dsl", {}, "invalid_request"],
    ["parse_dsl", { file: "agents/helper.symbi", content: "agent a {}" }, "invalid_request"],
    ["parse_dsl", { file: "AGENTS.md" }, "invalid_request"],
    ["parse_dsl", { file: "../outside.symbi" }, "protected_path"],
    ["get_agent_dsl", {}, "invalid_request"],
    ["get_agent_dsl", { agent: "nobody" }, "unknown_agent"],
    ["get_agents_md", { file: "x" }, "invalid_request"],
    ["verify_schema", { schema: "{}" }, "invalid_request"],
    ["verify_schema", { schema: "[1]", public_key_pem: "x" }, "invalid_request"],
  ];
  for (const [tool, args, code] of bad) {
    const label = JSON.stringify(args).slice(0, 60);
    await check(`${tool}/bad ${label}`, async () => {
      const res = await call(client, tool, args);
      expectToolError(res, code);
      if (code === "policy_denied") {
        assert(res.structuredContent.audit?.records === 5, `a withheld answer carries no receipt: ${JSON.stringify(res.structuredContent)}`);
        assert(!textOf(res).includes("FORBIDDEN"), "the withheld text was released");
      }
    });
  }
  await check("tools/call unknown tool", async () => {
    let res;
    try {
      res = await call(client, "no_such_tool", {});
    } catch (err) {
      assert(err instanceof McpError, `not an MCP error: ${err}`);
      return `protocol error ${err.code}`;
    }
    assert(res.isError === true, "an unknown tool succeeded");
    return "tool error";
  });

  await check("resources/list", async () => {
    const { resources } = await client.listResources(undefined, requestOptions);
    assert(resources.length === 1 && resources[0].uri === "file:///AGENTS.md" && resources[0].mimeType === "text/markdown",
      `resources ${JSON.stringify(resources)}`);
  });
  await check("resources/read", async () => {
    const res = await client.readResource({ uri: "file:///AGENTS.md" }, requestOptions);
    assert(res.contents.length === 1 && res.contents[0].text.startsWith("# Test project") && res.contents[0].mimeType === "text/markdown",
      `contents ${JSON.stringify(res.contents)}`);
  });
  await check("resources/read unknown", async () => {
    try {
      await client.readResource({ uri: "file:///etc/passwd" }, requestOptions);
    } catch (err) {
      assert(err instanceof McpError, `not an MCP error: ${err}`);
      return `protocol error ${err.code}`;
    }
    throw new Error("reading an unknown resource succeeded");
  });

  // Progress: symbi sends one notification per stage, in order, each before the result.
  // The SDK (1.x) dispatches notifications a microtask later than responses, so a
  // notification that arrives in the same read as the result reaches onprogress after the
  // request has been retired and is dropped as "unknown token" (typescript-sdk issue
  // 2580, a client race no server can avoid): onprogress must see an in-order prefix of
  // the stages (empty when all arrive in one read), and the wire must carry all of them
  // before the result.
  await check("progress", async () => {
    const seen = [];
    const res = await call(client, "invoke_agent", { agent: "helper", prompt: "progress" }, {
      onprogress: (p) => seen.push(p),
    });
    expectOK(res);
    const req = wire.find((m) => m.out && m.msg.method === "tools/call" && m.msg.params?.arguments?.prompt === "progress");
    const token = req?.msg.params?._meta?.progressToken;
    assert(token !== undefined, "the SDK sent no progress token");
    const after = wire.slice(wire.indexOf(req));
    const resultAt = after.findIndex((m) => !m.out && m.msg.id === req.msg.id);
    const isOurs = (m) => !m.out && m.msg.method === "notifications/progress" && m.msg.params.progressToken === token;
    assert(resultAt > 0 && !after.slice(resultAt).some(isOurs), "a progress notification arrived after the result");
    const sent = after.slice(0, resultAt).filter(isOurs);
    const messages = sent.map((m) => m.msg.params.message);
    assert(JSON.stringify(messages) === JSON.stringify(STAGES), `stages on the wire ${JSON.stringify(messages)}`);
    sent.forEach((m, i) => assert(m.msg.params.progress === i + 1 && m.msg.params.total === STAGES.length, `notification ${i}: ${JSON.stringify(m.msg.params)}`));
    const delivered = seen.map((p) => p.message);
    // Possibly none: when all five arrive in one read with the result, the SDK drops all.
    assert(JSON.stringify(delivered) === JSON.stringify(STAGES.slice(0, delivered.length)),
      `onprogress saw ${JSON.stringify(delivered)}`);
    return `wire: ${messages.join(", ")}; onprogress: ${delivered.length} of ${STAGES.length}`;
  });

  // Cancellation: abort once the request has reached the model (the model holds "hang"
  // forever). The SDK sends notifications/cancelled; the test then reads the journal.
  await check("cancel", async () => {
    const ac = new AbortController();
    const pending = call(client, "invoke_agent", { agent: "helper", prompt: "hang" }, {
      signal: ac.signal,
      onprogress: (p) => { if (p.message === "request sent") ac.abort("conformance cancel"); },
    });
    try {
      await pending;
    } catch (err) {
      assert(ac.signal.aborted, `the call failed before it was aborted: ${err}`);
      return "aborted";
    }
    throw new Error("the aborted call returned a result");
  });

  // The server keeps serving after all of the above.
  await check("still serving", async () => {
    expectOK(await call(client, "list_agents", {}));
  });
  await client.close();
}

main().catch((err) => {
  process.stderr.write(`conformance: ${err?.stack ?? err}\n`);
  process.exit(1);
});
