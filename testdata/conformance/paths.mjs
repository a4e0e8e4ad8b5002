// The TypeScript MCP SDK's client on the paths
// sdk-client.mjs never takes, so that the SDK validates what symbi sends there — every
// tool result's structuredContent against the tool's outputSchema (callTool throws on a
// mismatch), the run resource, and JSON-RPC errors. Run by cmd/symbi's
// conformance_paths_test.go, one scenario per invocation:
//
//   paths       parse_dsl of every file of testdata/dsl (valid and invalid); invoke_agent's
//               inference_failed and timeout, start_run's run that fails, and run_status of
//               each; system_prompt and its limit; verify_schema's public_key_url refusals;
//               a delegated agent's permission request held by a @gate("human") forbid:
//               awaiting_approval with approval.request_id and approval.title, approve_run
//               without and with the wrong request_id, then naming it, and the run's end.
//   hashes      SYMBI_JOURNAL_TEXT=hashes: a released run without its text
//               (text_retained false), and a held answer approved.
//   ledger      runs whose journal was tampered with, deleted or pruned (symbi audit prune),
//               and a run its server was killed in (abandoned), answered by a new server:
//               journal_problem, journal_pruned, abandoned and its reason.
//   no-agents-md  a project without AGENTS.md: get_agents_md not_found, no resource.
//   no-provider   a server without a model: no_provider.
//
// Each check prints one JSON line {"check", "ok", "detail"}; the process exits 0 when it
// has run every check of its scenario.

import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync, writeFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";

const cfg = JSON.parse(process.argv[2]);
const requestOptions = { timeout: 300_000 };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function report(check, ok, detail = "") {
  process.stdout.write(JSON.stringify({ check, ok, detail: String(detail) }) + "\n");
}

async function check(name, fn) {
  try {
    report(name, true, (await fn()) ?? "");
  } catch (err) {
    report(name, false, err instanceof Error ? `${err.name}: ${err.message}` : String(err));
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// connect starts symbi mcp on cfg.project with env (added to cfg.env) and lists the tools,
// so that the SDK validates every result against the outputSchema it listed.
async function connect(env = {}) {
  const transport = new StdioClientTransport({
    command: cfg.symbi,
    args: ["mcp", "--project", cfg.project, ...(cfg.args ?? [])],
    env: { ...cfg.env, ...env },
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr?.on("data", (b) => { stderr += b; });
  const client = new Client({ name: "symbi-conformance-paths", version: "1" });
  await client.connect(transport, requestOptions);
  const { tools } = await client.listTools(undefined, requestOptions);
  assert(tools.every((t) => t.outputSchema?.type === "object"), "a tool without an object outputSchema");
  return { client, transport, stderr: () => stderr };
}

const call = (client, name, args) => client.callTool({ name, arguments: args }, undefined, requestOptions);

async function callOK(client, name, args) {
  const res = await call(client, name, args);
  assert(res.isError !== true, `${name}: isError: ${JSON.stringify(res.content)}`);
  assert(res.structuredContent && typeof res.structuredContent === "object", `${name}: no structuredContent`);
  return res.structuredContent;
}

async function callErr(client, name, args, code) {
  const res = await call(client, name, args);
  assert(res.isError === true, `${name}: not a tool error: ${JSON.stringify(res).slice(0, 400)}`);
  const text = res.content?.[0]?.text ?? "";
  assert(res.structuredContent?.error?.code === code && text.startsWith(code + ": "),
    `${name}: want ${code}, got ${res.structuredContent?.error?.code}: ${text}`);
  return res;
}

// readRun reads symbi://runs/{id} and returns its JSON, which must be run_status's.
async function readRun(client, id) {
  const res = await client.readResource({ uri: `symbi://runs/${id}` }, requestOptions);
  assert(res.contents.length === 1 && res.contents[0].mimeType === "application/json", `contents ${JSON.stringify(res.contents).slice(0, 300)}`);
  const st = JSON.parse(res.contents[0].text);
  const tool = await callOK(client, "run_status", { run_id: id });
  assert(JSON.stringify(st) === JSON.stringify(tool), `the resource is not run_status: ${JSON.stringify(st)} vs ${JSON.stringify(tool)}`);
  return st;
}

// untilDone long-polls run_events until the run has ended; returns the last page.
async function untilDone(client, id) {
  for (let cursor = 0, polls = 0; ; polls++) {
    const page = await callOK(client, "run_events", { run_id: id, after: cursor, wait_ms: 30000, limit: 1000 });
    if (page.done) return page;
    assert(polls < 100, `run ${id} never ended`);
    cursor = page.next_cursor;
  }
}

// untilAwaiting long-polls run_events until the run awaits approval.
async function untilAwaiting(client, id) {
  for (let cursor = 0, polls = 0; ; polls++) {
    const page = await callOK(client, "run_events", { run_id: id, after: cursor, wait_ms: 30000, limit: 1000 });
    if (page.status === "awaiting_approval") return page;
    assert(!page.done && polls < 100, `run ${id} is ${page.status}, done ${page.done}: it never awaited approval`);
    cursor = page.next_cursor;
  }
}

async function paths() {
  const { client } = await connect();
  // parse_dsl: every file of testdata/dsl, as content, every view of the result
  // (channels, memories, webhooks, schedules, types, functions, with blocks, policies)
  // validated by the SDK.
  for (const kind of ["valid", "invalid"]) {
    await check(`parse_dsl/${kind} files`, async () => {
      const dir = join(cfg.dslDir, kind);
      const files = readdirSync(dir).filter((f) => f.endsWith(".symbi") || f.endsWith(".dsl"));
      assert(files.length > 0, `no files in ${dir}`);
      const wrong = [];
      for (const f of files) {
        const bytes = readFileSync(join(dir, f));
        let content;
        try { content = new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch { continue; } // JSON carries only UTF-8
        const sc = await callOK(client, "parse_dsl", { content });
        if (sc.valid !== (kind === "valid")) wrong.push(`${f}: valid ${sc.valid}`);
      }
      assert(wrong.length === 0, wrong.join("; "));
      return `${files.length} files`;
    });
  }
  // A model run that fails, and one whose deadline passes: the coded errors with their
  // audit reference, and run_status of each run.
  for (const [name, args, code] of [
    ["inference_failed", { agent: "helper", prompt: "fail" }, "inference_failed"],
    ["timeout", { agent: "slow", prompt: "hang" }, "timeout"],
  ]) {
    await check(`invoke_agent/${name}`, async () => {
      const res = await callErr(client, "invoke_agent", args, code);
      const id = res.structuredContent.audit?.run_id;
      assert(UUID.test(id), `no audit reference: ${JSON.stringify(res.structuredContent)}`);
      const st = await readRun(client, id);
      assert(st.status === code && st.released === false && st.reason && st.ended_at, `run_status ${JSON.stringify(st)}`);
      return st.reason;
    });
  }
  await check("start_run/fails", async () => {
    const sc = await callOK(client, "start_run", { agent: "helper", prompt: "fail" });
    const last = await untilDone(client, sc.run_id);
    assert(last.status === "inference_failed", `status ${last.status}`);
    const st = await readRun(client, sc.run_id);
    assert(st.status === "inference_failed" && st.reason, `run_status ${JSON.stringify(st)}`);
    const { runs } = await callOK(client, "list_runs", { status: "inference_failed" });
    assert(runs.some((r) => r.run_id === sc.run_id), "not listed");
  });
  await check("invoke_agent/system_prompt", async () => {
    const res = await call(client, "invoke_agent", { agent: "helper", prompt: "sys", system_prompt: "be brief" });
    assert(res.isError !== true && res.structuredContent.audit?.records === 5, `result ${JSON.stringify(res).slice(0, 300)}`);
    await callErr(client, "invoke_agent", { agent: "helper", prompt: "x", system_prompt: "s".repeat(65537) }, "limit_exceeded");
  });
  await check("verify_schema/public_key_url refused", async () => {
    const schema = readFileSync(join(cfg.schemapin, "schema.signed.json"), "utf8");
    const pem = readFileSync(join(cfg.schemapin, "signer.pub.pem"), "utf8");
    const out = [];
    for (const args of [
      { schema, public_key_url: "https://127.0.0.1:1/key.pem" },
      { schema, public_key_url: "https://169.254.169.254/key.pem" },
      { schema, public_key_url: "http://example.com/key.pem" },
      { schema, public_key_pem: pem, public_key_url: "https://example.com/key.pem" },
    ]) {
      const res = await call(client, "verify_schema", args);
      assert(res.isError === true && typeof res.structuredContent?.error?.code === "string", `${args.public_key_url}: ${JSON.stringify(res).slice(0, 300)}`);
      out.push(res.structuredContent.error.code);
    }
    return out.join(",");
  });
  // A delegated agent's permission request, held by the gated forbid of execute.
  await check("delegated gate/permission request", async () => {
    const sc = await callOK(client, "start_run", { agent: "gated", prompt: "run the tests", workspace: cfg.workspace });
    await untilAwaiting(client, sc.run_id);
    const st = await readRun(client, sc.run_id);
    const a = st.approval;
    assert(st.status === "awaiting_approval" && a?.request_id && a.title === "go test ./..." && a.gate === "commands-review",
      `run_status ${JSON.stringify(st)}`);
    const { runs } = await callOK(client, "list_runs", { status: "awaiting_approval" });
    const listed = runs.find((r) => r.run_id === sc.run_id);
    assert(listed && listed.approval?.request_id === a.request_id && listed.approval.title === undefined, `list_runs ${JSON.stringify(listed)}`);
    await callErr(client, "approve_run", { run_id: sc.run_id, decision: "approve", reason: "checked" }, "invalid_request");
    await callErr(client, "approve_run", { run_id: sc.run_id, decision: "approve", reason: "checked", request_id: "answer" }, "invalid_transition");
    await callErr(client, "approve_run", { run_id: sc.run_id, decision: "approve", reason: "checked", request_id: "no-such-request" }, "invalid_transition");
    const decided = await callOK(client, "approve_run", { run_id: sc.run_id, decision: "approve", request_id: a.request_id, reason: "tests are fine" });
    assert(decided.approval?.decision === "approve" && decided.approval.request_id === a.request_id, `approve_run ${JSON.stringify(decided)}`);
    const last = await untilDone(client, sc.run_id);
    assert(last.status === "completed", `the run ended ${last.status}`);
    const end = await readRun(client, sc.run_id);
    assert(end.status === "completed" && end.released === true && end.approval?.title === "go test ./..." &&
      end.approval.decision === "approve" && end.approval.via === "approve_run", `run_status ${JSON.stringify(end)}`);
    await callErr(client, "approve_run", { run_id: sc.run_id, decision: "reject", reason: "checked", request_id: a.request_id }, "invalid_transition");
    return `approve_run: status ${decided.status}; end: ${end.text}`;
  });
  await client.close();
}

async function hashes() {
  const { client } = await connect({ SYMBI_JOURNAL_TEXT: "hashes" });
  let id;
  await check("hashes/run_status text_retained false", async () => {
    const res = await call(client, "invoke_agent", { agent: "helper", prompt: "digest only" });
    assert(res.isError !== true && res.content[0].text === "loopback answer: digest only", `invoke_agent ${JSON.stringify(res).slice(0, 300)}`);
    id = res.structuredContent.audit.run_id;
    const st = await readRun(client, id);
    assert(st.status === "completed" && st.released === true && st.text_retained === false && st.text === undefined, `run_status ${JSON.stringify(st)}`);
    const page = await callOK(client, "run_events", { run_id: id });
    assert(page.done && page.events.length === 5, `run_events ${JSON.stringify(page).slice(0, 300)}`);
    const { runs } = await callOK(client, "list_runs", {});
    assert(runs.some((r) => r.run_id === id && r.text_retained === false), `list_runs ${JSON.stringify(runs).slice(0, 300)}`);
  });
  await check("hashes/held answer approved", async () => {
    const sc = await callOK(client, "start_run", { agent: "helper", prompt: "review:hashes" });
    await untilAwaiting(client, sc.run_id);
    const held = await readRun(client, sc.run_id);
    assert(held.status === "awaiting_approval" && held.approval?.gate === "conformance-review", `run_status ${JSON.stringify(held)}`);
    // Its approver (the stdio caller) sees what it decides, though the journal keeps only
    // the digest.
    assert(typeof held.approval?.text === "string" && held.approval.text.length > 0, `approval.text in hashes mode: ${JSON.stringify(held.approval)}`);
    const st = await callOK(client, "approve_run", { run_id: sc.run_id, decision: "approve", reason: "checked" });
    assert(st.status === "completed" && st.released === true, `approve_run ${JSON.stringify(st)}`);
    return JSON.stringify(st.approval);
  });
  await client.close();
}

async function ledger() {
  // The first server: three runs that complete and one in flight when it is killed.
  const first = await connect();
  const ids = {};
  await check("ledger/first server runs", async () => {
    for (const name of ["tampered", "deleted", "pruned"]) {
      const res = await call(first.client, "invoke_agent", { agent: "helper", prompt: name });
      assert(res.isError !== true, `${name}: ${JSON.stringify(res.content)}`);
      ids[name] = { id: res.structuredContent.audit.run_id, path: res.structuredContent.audit.path };
    }
    const sc = await callOK(first.client, "start_run", { agent: "helper", prompt: "hang" });
    ids.abandoned = { id: sc.run_id, path: sc.audit.path };
    for (let cursor = 0, polls = 0; cursor < 2; polls++) { // the model has the request
      const page = await callOK(first.client, "run_events", { run_id: sc.run_id, after: cursor, wait_ms: 30000 });
      cursor = page.next_cursor;
      assert(polls < 100, "the model never had the request");
    }
  });
  const pid = first.transport.pid;
  process.kill(pid, "SIGKILL");
  await new Promise((resolve) => first.transport.onclose = resolve);
  // Between the servers: a journal's line altered, one deleted, one pruned.
  const t = ids.tampered.path, lines = readFileSync(t, "utf8").split("\n");
  lines[2] = lines[2].replace("loopback answer", "loopback ANSWER");
  writeFileSync(t, lines.join("\n"));
  unlinkSync(ids.deleted.path);
  execFileSync(cfg.symbi, ["audit", "prune", "--project", cfg.project, "--run-id", ids.pruned.id], { env: { ...cfg.env } });

  const { client } = await connect();
  for (const [name, want] of [["tampered", "journal_problem"], ["deleted", "journal_problem"], ["pruned", "journal_pruned"], ["abandoned", "abandoned"]]) {
    await check(`ledger/${name}`, async () => {
      const { id } = ids[name];
      const st = await readRun(client, id);
      if (want === "journal_problem") assert(typeof st.journal_problem === "string" && st.journal_problem !== "" && st.text === undefined, `run_status ${JSON.stringify(st)}`);
      if (want === "journal_pruned") assert(st.journal_pruned === true, `run_status ${JSON.stringify(st)}`);
      if (want === "abandoned") assert(st.status === "abandoned" && st.reason, `run_status ${JSON.stringify(st)}`);
      const ev = await call(client, "run_events", { run_id: id });
      const evs = ev.isError ? `error ${ev.structuredContent?.error?.code}` : `${ev.structuredContent.events.length} events, ${ev.structuredContent.status}`;
      const res = await call(client, "resolve_run", { run_id: id, resolution: "rejected", note: name });
      const rs = res.isError ? `error ${res.structuredContent?.error?.code}` : `resolved ${res.structuredContent.resolution?.value}`;
      const c = await call(client, "cancel_run", { run_id: id });
      const cs = c.isError ? `error ${c.structuredContent?.error?.code}` : `already_finished ${c.structuredContent.already_finished}`;
      return `status ${st.status}; ${st.journal_problem ?? ""}; run_events: ${evs}; resolve_run: ${rs}; cancel_run: ${cs}`;
    });
  }
  await check("ledger/list_runs", async () => {
    const { runs } = await callOK(client, "list_runs", {});
    for (const name of Object.keys(ids)) assert(runs.some((r) => r.run_id === ids[name].id), `${name} not listed`);
    const abandoned = await callOK(client, "list_runs", { status: "abandoned" });
    assert(abandoned.runs.some((r) => r.run_id === ids.abandoned.id), "the abandoned run is not listed as abandoned");
    return runs.map((r) => `${r.status}${r.journal_problem ? "!" : ""}${r.journal_pruned ? "~" : ""}`).join(",");
  });
  await client.close();
}

async function noAgentsMD() {
  const { client } = await connect();
  await check("no-agents-md/get_agents_md", async () => {
    await callErr(client, "get_agents_md", {}, "not_found");
  });
  await check("no-agents-md/resources", async () => {
    const { resources } = await client.listResources(undefined, requestOptions);
    assert(resources.length === 0, `resources ${JSON.stringify(resources)}`);
    try {
      await client.readResource({ uri: "file:///AGENTS.md" }, requestOptions);
    } catch (err) {
      assert(err instanceof McpError, `not an MCP error: ${err}`);
      return `JSON-RPC error ${err.code}`;
    }
    throw new Error("reading AGENTS.md succeeded");
  });
  await client.close();
}

async function noProvider() {
  const { client } = await connect();
  for (const tool of ["invoke_agent", "start_run"]) {
    await check(`no-provider/${tool}`, async () => {
      await callErr(client, tool, { agent: "helper", prompt: "x" }, "no_provider");
    });
  }
  await client.close();
}

const scenarios = { paths, hashes, ledger, "no-agents-md": noAgentsMD, "no-provider": noProvider };
scenarios[cfg.scenario]().catch((err) => {
  process.stderr.write(`paths.mjs: ${err?.stack ?? err}\n`);
  process.exit(1);
});
