// The TypeScript MCP SDK's client against the real symbi binary over stdio, or over
// Streamable HTTP (StreamableHTTPClientTransport).
//
// Run by cmd/symbi's TestConformanceTypeScriptSDK (stdio) and
// TestConformanceTypeScriptSDKHTTP, which build symbi, start a loopback model and write a
// fresh project; run by hand:
//
//   node sdk-client.mjs '{"symbi":"/path/to/symbi","project":"/path/to/project",
//     "env":{"OPENAI_BASE_URL":"http://127.0.0.1:PORT/v1"},"protocolVersion":"2025-11-25",
//     "schemapin":"/path/to/testdata/schemapin"}'
//
// Over HTTP the server is already running (symbi mcp --http, with the project's env and
// args): "transport":"http" and "url" its /mcp URL replace "symbi", "env" and "args",
// and "caller"/"callerAuth" are who run_status and list_runs must name (over stdio:
// stdio, stdio). With --auth-tokens, "token" is the caller's bearer token and "other"
// a second caller's, whose checks (and the unauthenticated client's) run too:
//
//   "transport": "http", "url": "http://127.0.0.1:PORT/mcp", "project": "/path/to/project",
//   "caller": "alice", "callerAuth": "token", "token": "symbi_…",
//   "other": {"caller": "bob", "token": "symbi_…"}
//
// The project must hold the agents and policy of cmd/symbi's conformance project, and the
// model must answer "hang" by holding the request, "leak" with text the policy forbids,
// "hold:NAME" only once a request "release:NAME" has arrived (before or after it),
// "review:NAME" with "CUSTOMER ACME: NAME", and anything else with "loopback answer: " and
// the prompt. The project's policies must also hold, with a forbid annotated
// @gate("human") @id("conformance-review"), every answer naming CUSTOMER ACME.
//
// With "delegated" (and "args" naming --executors FILE and --workspace-root ROOT, and the
// env naming FAKE_ACP_SCRIPT) the delegated agent's checks run too:
//
//   "args": ["--executors", "/path/executors.json", "--workspace-root", "/path/root"],
//   "delegated": {"agent": "coder", "executor": "fake", "workspace": "/path/root/ws",
//     "resolved": "/path/root/ws" (symbolic links resolved), "file": "notes.txt" (in the
//     workspace), "content": its content, "prompt": "...", "answer": "...",
//     "outside": "/elsewhere", "relative": "ws",
//     "symlink": "/path/root/escape" (a link to a directory outside the root)}
//
// The fake ACP agent's script (cmd/symbi's conformance test writes it) must think, report
// a read tool call, read file through fs/read_text_file, be refused an execute permission
// and answer with exactly "answer".
//
// Each check prints one JSON line {"check", "ok", "detail"}; the process exits 0 when it
// has run every check (failures included) and 1 when it could not run them.

import { createHash, createPublicKey, verify } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError, ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const cfg = JSON.parse(process.argv[2]);
const HTTP = cfg.transport === "http";
// Who the server names as the caller of this client's runs and resolutions.
const CALLER = cfg.caller ?? "stdio", CALLER_AUTH = cfg.callerAuth ?? "stdio";
const HANG_GUARD_MS = 300_000; // generous: the checks wait for events, not the clock
const requestOptions = { timeout: HANG_GUARD_MS };

const STAGES = ["admitted", "journal opened", "request sent", "response received", "policy decided"];
const TOOLS = ["approve_run", "cancel_run", "get_agent_dsl", "get_agents_md", "invoke_agent", "list_agents", "list_runs", "parse_dsl",
  "resolve_run", "run_events", "run_status", "start_run", "verify_schema"];
const RUN_EVENTS = ["started", "inference_requested", "inference_finished", "policy_evaluated", "terminated"];
const RUN_URI = "symbi://runs/";
const MISSING_RUN = "0190a000-0000-7000-8000-000000000000"; // a well-formed run id no run has
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX64 = /^[0-9a-f]{64}$/;

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

// httpTransport is a StreamableHTTPClientTransport to cfg.url sending token (if any) as
// its bearer token, as a client configured with headers (docs/http.md) does.
function httpTransport(token, opts = {}) {
  return new StreamableHTTPClientTransport(new URL(cfg.url), {
    ...opts,
    ...(token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : {}),
  });
}

// connect starts symbi (over HTTP: opens a session as the caller of token, by default
// cfg.token) and initializes at cfg.protocolVersion (the SDK always offers its latest;
// the transport rewrites the offer), recording the version the server answered.
async function connect(token = cfg.token) {
  const transport = HTTP ? httpTransport(token) : new StdioClientTransport({
    command: cfg.symbi,
    args: ["mcp", "--project", cfg.project, ...(cfg.args ?? [])],
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
  return { client, transport, negotiated, wire, stderr: () => stderr };
}

const call = (client, name, args, opts = {}) =>
  client.callTool({ name, arguments: args }, undefined, { ...requestOptions, ...opts });

// callOK calls a tool that must succeed and returns its structuredContent (validated by
// the SDK against the tool's outputSchema).
async function callOK(client, name, args) {
  const res = await call(client, name, args);
  expectOK(res);
  assert(res.structuredContent && typeof res.structuredContent === "object", `${name}: no structuredContent`);
  return res.structuredContent;
}

// startRun starts a run of helper and checks start_run's answer: the run is running (the
// model holds "hang" and "hold:NAME" prompts) and the audit reference names its journal.
async function startRun(client, prompt) {
  const sc = await callOK(client, "start_run", { agent: "helper", prompt });
  assert(sc.status === "running", `status ${sc.status}, want running`);
  assert(UUID.test(sc.run_id) && sc.agent === "helper" && UUID.test(sc.agent_id), `run ${sc.run_id} agent ${sc.agent} ${sc.agent_id}`);
  const a = sc.audit;
  assert(a && a.run_id === sc.run_id && a.path.startsWith("/") && a.path.endsWith(`.${sc.run_id}.jsonl`) &&
    HEX64.test(a.public_key) && a.records >= 1 && HEX64.test(a.head), `audit ${JSON.stringify(a)}`);
  return sc;
}

// publicKey is the Ed25519 public key of an audit reference's public_key (hex).
const publicKey = (hex) => createPublicKey({
  key: Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), Buffer.from(hex, "hex")]), format: "der", type: "spki",
});

// OUTPUT_TYPES are the records that carry a run's output in clear or its digest, or a
// delegated agent's words: run_events serves them without their line (withheld, with
// line_sha256) until the run has released its text.
const OUTPUT_TYPES = ["inference_finished", "session_finished", "agent_message", "agent_thought", "tool_call_update", "plan",
  // text a delegated agent chose (titles, paths, its name), withheld as its answer is
  "session_started", "tool_call", "permission_decided", "fs_read", "fs_write", "approval_requested",
  // the digest of the text judged, which gives a short answer away to whoever hashes guesses
  "policy_evaluated", "policy_reevaluated"];

// HELD_TYPES are the records of a model run held at a gate that run_events withholds
// while it is not released: the answer, and its digest in the decision and the request.
const HELD_TYPES = "inference_finished,policy_evaluated,approval_requested";

// lineHash is the SHA-256 of a journal line with its newline: the next line's prev.
const lineHash = (line) => createHash("sha256").update(line + "\n", "utf8").digest("hex");

// checkEvent verifies an event as a client would offline: its line is
// {"payload":P,"signature":"S"} (docs/journal-format.md), S signs "symbi-journal-v1\n"+P
// with the project's key, P's seq, type and time are the event's, and P's prev is prev
// (the SHA-256 of the previous line with its newline; undefined for seq 0). A withheld
// event (output the run has not released: docs/runs.md) has no line but its hash and why.
// Returns the event's line hash, the next event's prev.
function checkEvent(ev, key, runId, prev) {
  if (ev.line === undefined) {
    assert(OUTPUT_TYPES.includes(ev.type) && HEX64.test(ev.line_sha256) && typeof ev.withheld === "string" && ev.withheld !== "",
      `event ${ev.seq} (${ev.type}) has no line: ${JSON.stringify(ev)}`);
    return ev.line_sha256;
  }
  assert(ev.line_sha256 === undefined && ev.withheld === undefined, `event ${ev.seq} has its line and is withheld: ${JSON.stringify(ev).slice(0, 300)}`);
  const prefix = '{"payload":', sep = ',"signature":"';
  assert(typeof ev.line === "string" && ev.line.startsWith(prefix) && ev.line.endsWith('"}'), `event ${ev.seq}: line ${JSON.stringify(ev.line)}`);
  const sig = ev.line.slice(ev.line.length - 2 - 88, ev.line.length - 2);
  assert(ev.line.slice(ev.line.length - 2 - 88 - sep.length, ev.line.length - 2 - 88) === sep, `event ${ev.seq}: no signature`);
  const payload = ev.line.slice(prefix.length, ev.line.length - 2 - 88 - sep.length);
  assert(verify(null, Buffer.from("symbi-journal-v1\n" + payload, "utf8"), key, Buffer.from(sig, "base64")),
    `event ${ev.seq}: the signature does not verify`);
  const p = JSON.parse(payload);
  assert(p.seq === ev.seq && p.type === ev.type && p.time === ev.time && p.run_id === runId,
    `event ${JSON.stringify({ seq: ev.seq, type: ev.type, time: ev.time })} does not match its signed payload ${payload.slice(0, 200)}`);
  const want = prev ?? "0".repeat(64);
  assert(p.prev === want, `event ${ev.seq}: prev ${p.prev}, want ${want}`);
  return lineHash(ev.line);
}

// readEvents reads a run's events from cursor 0 in pages of limit, long-polling each page,
// until done: every page holds at most limit events, cursors neither skip nor repeat, and
// every event verifies against its signed line, or follows the chain by its hash while
// withheld. A run that completed (released its text) is then read again in one page:
// every event whole now, each once-withheld line the one its hash named; the events
// returned are those.
async function readEvents(client, runId, limit, key) {
  const all = [];
  let cursor = 0, pages = 0, last, prev, withheld = 0;
  for (;;) {
    last = await callOK(client, "run_events", { run_id: runId, after: cursor, limit, wait_ms: 30000 });
    pages++;
    assert(last.events.length <= limit, `${last.events.length} events in a page of limit ${limit}`);
    last.events.forEach((ev, i) => {
      assert(ev.seq === cursor + i, `event seq ${ev.seq} at cursor ${cursor}+${i}: a gap or a repeat`);
      prev = checkEvent(ev, key, runId, prev);
      if (ev.line === undefined) withheld++;
      all.push(ev);
    });
    assert(last.next_cursor === cursor + last.events.length, `next_cursor ${last.next_cursor} after ${last.events.length} events from ${cursor}`);
    cursor = last.next_cursor;
    if (last.done) break;
    assert(pages < 1000, "run_events never reported done");
  }
  if (last.status !== "completed") return { events: all, pages, last, withheld };
  const whole = await callOK(client, "run_events", { run_id: runId, limit: 1000 });
  assert(whole.events.length === all.length && whole.done, `read again: ${whole.events.length} events, done ${whole.done}; ${all.length} before`);
  prev = undefined;
  whole.events.forEach((ev, i) => {
    assert(ev.line !== undefined, `event ${ev.seq} (${ev.type}) of a completed run is withheld: ${ev.withheld}`);
    prev = checkEvent(ev, key, runId, prev);
    const before = all[i];
    assert(ev.seq === before.seq && ev.type === before.type && ev.time === before.time && prev === (before.line_sha256 ?? lineHash(before.line)),
      `event ${ev.seq} read again differs: ${JSON.stringify(before).slice(0, 300)}`);
  });
  return { events: whole.events, pages, last, withheld };
}

// listAll pages through list_runs with args in pages of limit: each run once, newest
// first (run ids are UUIDv7), none with its text.
async function listAll(client, args, limit) {
  const runs = [];
  let after;
  for (let pages = 1; ; pages++) {
    const page = await callOK(client, "list_runs", { ...args, limit, ...(after ? { after } : {}) });
    assert(page.runs.length <= limit, `${page.runs.length} runs in a page of limit ${limit}`);
    for (const r of page.runs) {
      assert(runs.length === 0 || r.run_id < runs[runs.length - 1].run_id, `run ${r.run_id} listed after ${runs[runs.length - 1]?.run_id}: not newest first, or twice`);
      assert(r.text === undefined, `list_runs carries the text of ${r.run_id}`);
      assert(r.caller === CALLER && r.caller_auth === CALLER_AUTH,
        `run ${r.run_id}: caller ${r.caller}, caller_auth ${r.caller_auth}; want ${CALLER}, ${CALLER_AUTH}`);
      runs.push(r);
    }
    if (!page.next_cursor) return runs;
    assert(page.runs.length === limit, `a page of ${page.runs.length} runs before the last`);
    after = page.next_cursor;
    assert(pages < 1000, "list_runs never ended");
  }
}

// resourceUpdates collects notifications/resources/updated (through the SDK's
// notification handler); next(uri) waits for the next one of uri (at most HANG_GUARD_MS:
// only a hang reaches it).
function resourceUpdates(client) {
  const queue = [];
  let waiter;
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    queue.push(n.params.uri);
    waiter?.();
  });
  return {
    // pending reports whether an update for uri has arrived and not been taken.
    pending(uri) {
      return queue.includes(uri);
    },
    async next(uri) {
      const guard = Date.now() + HANG_GUARD_MS;
      for (;;) {
        const i = queue.indexOf(uri);
        if (i >= 0) {
          queue.splice(i, 1);
          return;
        }
        const left = guard - Date.now();
        assert(left > 0, `no notifications/resources/updated for ${uri}`);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, left);
          waiter = () => { clearTimeout(timer); waiter = undefined; resolve(); };
        });
      }
    },
  };
}

// readRun reads symbi://runs/{runId} and returns its JSON (run_status's).
async function readRun(client, runId) {
  const uri = RUN_URI + runId;
  const res = await client.readResource({ uri }, requestOptions);
  assert(res.contents.length === 1 && res.contents[0].uri === uri && res.contents[0].mimeType === "application/json",
    `contents ${JSON.stringify(res.contents).slice(0, 300)}`);
  const st = JSON.parse(res.contents[0].text);
  assert(st.run_id === runId, `the resource of ${runId} is run ${st.run_id}`);
  return st;
}

// expectRefused asserts that fn, connecting or sending over HTTP, fails with the SDK's
// StreamableHTTPError of HTTP status, and returns its message.
async function expectRefused(status, fn) {
  try {
    await fn();
  } catch (err) {
    assert(err instanceof StreamableHTTPError && err.code === status,
      `want a StreamableHTTPError ${status}, got ${err?.constructor?.name} ${err?.code}: ${err?.message}`);
    return err.message;
  }
  throw new Error(`not refused: want HTTP ${status}`);
}

// The human gate (docs/runs.md, "Human approval gates"): the project's gated forbid
// @id("conformance-review") holds every answer naming GATE_MARKER — the model's answer to
// "review:NAME" is GATE_MARKER + ": " + NAME — for a person. approver is who may decide
// this client's runs ({client, caller, auth}): this client over stdio (the one caller
// approves its own runs), the other caller over HTTP with tokens (four eyes), nobody for
// the anonymous HTTP caller. Every result, tool errors included, is validated by the SDK
// against its tool's outputSchema. Every held run ends: approved, rejected or cancelled.
const GATE = "conformance-review", GATE_MARKER = "CUSTOMER ACME";
const gateText = (name) => `${GATE_MARKER}: ${name}`;
// The events of a run waiting at the gate, and of one decided.
const GATE_EVENTS = ["started", "inference_requested", "inference_finished", "policy_evaluated", "approval_requested"];
const GATE_DECIDED = [...GATE_EVENTS, "approval_decided", "terminated"];

async function gateChecks(client, approver) {
  const self = approver?.client === client;
  const waiting = new Set(); // held runs not yet decided: cancelled by the last check
  const payloadOf = (ev) => JSON.parse(ev.line).payload.data;
  // awaitHeld long-polls a run's events until it waits at the gate.
  const awaitHeld = async (runId) => {
    for (let cursor = 0, polls = 0; ; polls++) {
      const page = await callOK(client, "run_events", { run_id: runId, after: cursor, wait_ms: 30000 });
      if (page.status === "awaiting_approval") return page;
      assert(!page.done && page.status === "running" && polls < 100, `run ${runId} is ${page.status}, done ${page.done}: it never awaited approval`);
      cursor = page.next_cursor;
    }
  };
  // decidedEvents reads a decided run's events (every one verified; the answer withheld
  // unless released) and checks the decision's records.
  const decidedEvents = async (runId, key, decision, reason, end) => {
    const { events, last } = await readEvents(client, runId, 100, key);
    const types = events.map((e) => e.type);
    assert(JSON.stringify(types) === JSON.stringify(GATE_DECIDED) && last.done === true, `events ${types}, done ${last.done}`);
    const d = payloadOf(events[5]), t = payloadOf(events[6]);
    assert(d.decision === decision && d.approver === approver.caller && d.approver_auth === approver.auth && d.via === "approve_run" &&
      d.reason === reason && !d.request_id, `approval_decided ${JSON.stringify(d)}`);
    assert(t.reason === end && t.released === (end === "completed"), `terminated ${JSON.stringify(t)}`);
    return events;
  };

  let first; // held by invoke_agent; approved (or, without an approver, cancelled)
  await check("gate/invoke_agent approval_required", async () => {
    const res = await call(client, "invoke_agent", { agent: "helper", prompt: "review:approve" });
    const text = expectToolError(res, "approval_required");
    const a = res.structuredContent.audit;
    assert(a && UUID.test(a.run_id) && a.path.endsWith(`.${a.run_id}.jsonl`) && HEX64.test(a.public_key) &&
      a.records === GATE_EVENTS.length && HEX64.test(a.head), `audit ${JSON.stringify(a)}`);
    assert(text.includes(GATE) && text.includes(a.run_id), `the error does not name the gate and the run: ${text}`);
    assert(!JSON.stringify(res).includes(GATE_MARKER), `the held answer was served: ${JSON.stringify(res)}`);
    first = { run_id: a.run_id, key: publicKey(a.public_key) };
    waiting.add(a.run_id);
    return text;
  });
  await check("gate/run_status awaiting_approval", async () => {
    assert(first, "invoke_agent held no run");
    const st = await callOK(client, "run_status", { run_id: first.run_id });
    const a = st.approval;
    assert(st.status === "awaiting_approval" && st.released === false && st.text === undefined && st.ended_at === undefined &&
      st.caller === CALLER && st.caller_auth === CALLER_AUTH && st.records === GATE_EVENTS.length, `run_status ${JSON.stringify(st)}`);
    assert(a && a.gate === GATE && a.request_id === undefined && a.requested_at && Date.parse(a.deadline) > Date.parse(a.requested_at) &&
      a.decision === undefined && a.approver === undefined, `approval ${JSON.stringify(a)}`);
    // An approver sees what it decides; no one else is shown the held answer.
    if (self) {
      assert(a.text === gateText("approve"), `approval.text ${JSON.stringify(a.text)}: this caller may approve the run`);
    } else {
      assert(a.text === undefined && !JSON.stringify(st).includes(GATE_MARKER), `the held answer shown to a caller who may not approve it: ${JSON.stringify(st)}`);
    }
    const res = await readRun(client, first.run_id);
    assert(JSON.stringify(res) === JSON.stringify(st), `the resource is not run_status: ${JSON.stringify(res)} vs ${JSON.stringify(st)}`);
    const listed = await listAll(client, { status: "awaiting_approval" }, 100);
    assert(listed.some((r) => r.run_id === first.run_id) && listed.every((r) => r.status === "awaiting_approval"),
      `list_runs awaiting_approval: ${JSON.stringify(listed).slice(0, 400)}`);
    return `approval.text ${a.text === undefined ? "absent" : "present"}; deadline ${a.deadline}`;
  });
  // run_events of the waiting run: the answer's line withheld (no one is shown the held
  // text through run_events), its hash chaining the next line; the gate's records whole.
  await check("gate/run_events withheld", async () => {
    assert(first, "invoke_agent held no run");
    const page = await callOK(client, "run_events", { run_id: first.run_id });
    const types = page.events.map((e) => e.type);
    assert(page.status === "awaiting_approval" && page.done === false && page.next_cursor === GATE_EVENTS.length &&
      JSON.stringify(types) === JSON.stringify(GATE_EVENTS), `page ${JSON.stringify(page).slice(0, 400)}`);
    let prev;
    for (const ev of page.events) prev = checkEvent(ev, first.key, first.run_id, prev);
    const f = page.events[2];
    const held = page.events.filter((e) => e.line === undefined).map((e) => e.type).join();
    assert(f.line === undefined && HEX64.test(f.line_sha256) && f.withheld.includes("not released") && held === HELD_TYPES,
      `withheld ${held}: inference_finished ${JSON.stringify(f)}`);
    assert(!JSON.stringify(page).includes(GATE_MARKER), "run_events served the held answer");
    return f.withheld;
  });
  if (HTTP) {
    // Four eyes: a caller may not approve a run it started.
    await check("http/gate approve_run own run access_denied", async () => {
      assert(first, "invoke_agent held no run");
      const text = expectToolError(await call(client, "approve_run", { run_id: first.run_id, decision: "approve", reason: "checked" }), "access_denied");
      assert(text.includes(`"${CALLER}" may not approve_run`) && text.includes(first.run_id) && text.includes("may not approve a run it started"),
        `the error does not name the caller, the run and the rule: ${text}`);
      const st = await callOK(client, "run_status", { run_id: first.run_id });
      assert(st.status === "awaiting_approval" && st.approval?.decision === undefined, `the run after the refusal: ${JSON.stringify(st)}`);
      return text;
    });
  }
  if (approver && !self) {
    // The other caller may approve the run: it may read it while it waits, and sees the
    // held answer in run_status — not in run_events.
    await check("http/gate other caller run_status approval.text", async () => {
      assert(first, "invoke_agent held no run");
      const st = await callOK(approver.client, "run_status", { run_id: first.run_id });
      assert(st.status === "awaiting_approval" && st.caller === CALLER && st.approval?.gate === GATE && st.approval.text === gateText("approve"),
        `the approver's run_status ${JSON.stringify(st)}`);
      const { runs } = await callOK(approver.client, "list_runs", { status: "awaiting_approval" });
      assert(runs.some((r) => r.run_id === first.run_id), `the approver's list of waiting runs ${JSON.stringify(runs).slice(0, 400)}`);
      const page = await callOK(approver.client, "run_events", { run_id: first.run_id });
      assert(page.events.length === GATE_EVENTS.length && page.events[2].line === undefined && !JSON.stringify(page).includes(GATE_MARKER),
        `the approver's run_events ${JSON.stringify(page).slice(0, 400)}`);
    });
  }
  if (approver) {
    await check("gate/approve_run approve", async () => {
      assert(first, "invoke_agent held no run");
      const st = await callOK(approver.client, "approve_run", { run_id: first.run_id, decision: "approve", reason: "no customer data" });
      waiting.delete(first.run_id);
      const a = st.approval;
      assert(st.status === "completed" && st.released === true && st.text === gateText("approve") && st.caller === CALLER && st.ended_at,
        `approve_run ${JSON.stringify(st)}`);
      assert(a?.gate === GATE && a.decision === "approve" && a.approver === approver.caller && a.approver_auth === approver.auth &&
        a.via === "approve_run" && a.reason === "no customer data" && a.decided_at && a.text === undefined, `approval ${JSON.stringify(a)}`);
      // The requester reads the released answer, and every event whole now.
      const mine = await callOK(client, "run_status", { run_id: first.run_id });
      assert(mine.status === "completed" && mine.released === true && mine.text === gateText("approve") && mine.records === GATE_DECIDED.length,
        `the requester's run_status ${JSON.stringify(mine)}`);
      // Released: the gate's records are served whole, their digest the released text's.
      const events = await decidedEvents(first.run_id, first.key, "approve", "no customer data", "completed");
      const pe = payloadOf(events[3]), ar = payloadOf(events[4]);
      assert(pe.decision === "deny" && pe.gate === GATE && pe.policy_ids.join() === GATE &&
        pe.text_sha256 === createHash("sha256").update(gateText("approve"), "utf8").digest("hex"), `policy_evaluated ${JSON.stringify(pe)}`);
      assert(ar.gate === GATE && ar.text_sha256 === pe.text_sha256 && ar.text_bytes === Buffer.byteLength(gateText("approve")) &&
        ar.timeout_ms > 0 && !ar.request_id, `approval_requested ${JSON.stringify(ar)}`);
      // Decided: there is nothing left to decide.
      expectToolError(await call(approver.client, "approve_run", { run_id: first.run_id, decision: "reject", reason: "checked" }), "invalid_transition");
      return st.text;
    });
    await check("gate/approve_run reject", async () => {
      const run = await startRun(client, "review:reject");
      waiting.add(run.run_id);
      await awaitHeld(run.run_id);
      const st = await callOK(approver.client, "approve_run", { run_id: run.run_id, decision: "reject", reason: "names a customer" });
      waiting.delete(run.run_id);
      assert(st.status === "policy_denied" && st.released === false && st.text === undefined && st.reason.includes(GATE) &&
        st.reason.includes(`rejected by ${approver.caller}: names a customer`) && !JSON.stringify(st).includes(GATE_MARKER), `approve_run ${JSON.stringify(st)}`);
      assert(st.approval?.decision === "reject" && st.approval.approver === approver.caller, `approval ${JSON.stringify(st.approval)}`);
      // Never released: the answer's line stays withheld, and its digest's.
      const events = await decidedEvents(run.run_id, publicKey(run.audit.public_key), "reject", "names a customer", "policy_denied");
      const held = events.filter((e) => e.line === undefined).map((e) => e.type).join();
      assert(events[2].line === undefined && held === HELD_TYPES, `withheld ${held}: inference_finished ${JSON.stringify(events[2])}`);
      const mine = await callOK(client, "run_status", { run_id: run.run_id });
      assert(mine.status === "policy_denied" && mine.text === undefined && !JSON.stringify(mine).includes(GATE_MARKER), `the requester's run_status ${JSON.stringify(mine)}`);
      return st.reason;
    });
  }
  // cancel_run ends a waiting run cancelled — this one, and any the checks above left
  // waiting (without an approver, invoke_agent's).
  await check("gate/cancel_run held", async () => {
    const run = await startRun(client, "review:cancel");
    waiting.add(run.run_id);
    await awaitHeld(run.run_id);
    const keys = new Map([[run.run_id, publicKey(run.audit.public_key)]]);
    if (first) keys.set(first.run_id, first.key);
    const ended = [];
    for (const id of waiting) {
      const c = await callOK(client, "cancel_run", { run_id: id });
      waiting.delete(id);
      assert(c.already_finished === false && c.status === "cancelled" && c.released === false && c.text === undefined &&
        c.approval?.gate === GATE && c.approval.decision === undefined && !JSON.stringify(c).includes(GATE_MARKER), `cancel_run ${JSON.stringify(c)}`);
      const { events, last } = await readEvents(client, id, 100, keys.get(id));
      const types = events.map((e) => e.type);
      assert(JSON.stringify(types) === JSON.stringify([...GATE_EVENTS, "terminated"]) && last.status === "cancelled" &&
        payloadOf(events[5]).reason === "cancelled" && events[2].line === undefined, `events ${types}, status ${last.status}`);
      if (approver) {
        expectToolError(await call(approver.client, "approve_run", { run_id: id, decision: "approve", reason: "checked" }), "invalid_transition");
      }
      ended.push(id);
    }
    return `cancelled ${ended.join(", ")}`;
  });
}

// httpChecks are the checks of Streamable HTTP itself: the session, and with bearer
// tokens (cfg.token) what a client without one, with a wrong one, or with another
// caller's (cfg.other) may do: nothing, and nothing with the runs of this client's caller
// (held and hung, run by the checks above).
async function httpChecks(client, transport, held, hung) {
  await check("http/session", () => {
    assert(typeof transport.sessionId === "string" && transport.sessionId !== "", `session id ${transport.sessionId}`);
    assert(transport.protocolVersion === cfg.protocolVersion,
      `the transport sends MCP-Protocol-Version ${transport.protocolVersion}, negotiated ${cfg.protocolVersion}`);
  });
  if (!cfg.token) {
    // Without authentication this caller may not approve its own runs, and there is no
    // one else.
    await gateChecks(client, undefined);
    return;
  }

  // A client without a token: the server answers 401 and the SDK (without an OAuth
  // provider) fails to connect with the status; the 401 names the protected resource
  // metadata, which names this resource.
  await check("http/no token", async () => {
    const msg = await expectRefused(401, () => new Client({ name: "no-token", version: "1" }).connect(httpTransport(undefined), requestOptions));
    const res = await fetch(cfg.url, {
      method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: cfg.protocolVersion, capabilities: {}, clientInfo: { name: "raw", version: "1" } } }),
    });
    const metaURL = `${new URL(cfg.url).origin}/.well-known/oauth-protected-resource/mcp`;
    const www = res.headers.get("www-authenticate");
    assert(res.status === 401 && www === `Bearer resource_metadata="${metaURL}"`, `raw POST: ${res.status}, WWW-Authenticate ${www}`);
    const meta = await (await fetch(metaURL)).json();
    assert(meta.resource === cfg.url && JSON.stringify(meta.bearer_methods_supported) === '["header"]',
      `protected resource metadata ${JSON.stringify(meta)}`);
    return msg;
  });
  await check("http/wrong token", () =>
    expectRefused(401, () => new Client({ name: "wrong-token", version: "1" }).connect(httpTransport("symbi_not-a-token"), requestOptions)));
  // A client that speaks OAuth (an auth provider without tokens): the SDK follows the
  // 401's resource_metadata to the metadata, finds no authorization server it can use
  // (static tokens name none) and fails to connect: an auth error, never a session.
  await check("http/no token, OAuth client", async () => {
    const fetched = [];
    const provider = {
      get redirectUrl() { return "http://127.0.0.1:9/callback"; },
      get clientMetadata() { return { redirect_uris: ["http://127.0.0.1:9/callback"], client_name: "symbi-conformance" }; },
      clientInformation: () => undefined,
      saveClientInformation: () => {},
      tokens: () => undefined,
      saveTokens: () => {},
      redirectToAuthorization: (u) => { fetched.push(`redirect ${u}`); },
      saveCodeVerifier: () => {},
      codeVerifier: () => "verifier",
    };
    const recording = async (u, init) => {
      const res = await fetch(u, init);
      fetched.push(`${init?.method ?? "GET"} ${new URL(String(u)).pathname} ${res.status}`);
      return res;
    };
    const t = new StreamableHTTPClientTransport(new URL(cfg.url), { authProvider: provider, fetch: recording });
    let failed;
    try {
      await new Client({ name: "oauth", version: "1" }).connect(t, requestOptions);
    } catch (err) {
      failed = `${err?.constructor?.name}: ${err?.message}`;
    }
    assert(failed, `connected without a token: ${fetched.join("; ")}`);
    assert(fetched[0] === "POST /mcp 401" && fetched.includes("GET /.well-known/oauth-protected-resource/mcp 200") &&
      !fetched.some((f) => f.startsWith("redirect")) && t.sessionId === undefined, `requests ${fetched.join("; ")}`);
    return `${fetched.join("; ")}; ${failed}`;
  });
  assert(cfg.other?.token, "cfg.other: a second caller's token is needed with cfg.token");
  // A session is bound to the caller that opened it: another caller's token cannot use it.
  await check("http/session bound to its caller", async () => {
    const t = httpTransport(cfg.other.token, { sessionId: transport.sessionId });
    await t.start();
    try {
      return await expectRefused(403, () => t.send({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }));
    } finally {
      await t.close();
    }
  });

  // Another caller: its own session, every tool result validated against its tool's
  // outputSchema (listTools first: the SDK validates with the schemas it listed), denied
  // every run of this client's caller with the coded tool error access_denied.
  let other;
  await check("http/other caller connects", async () => {
    other = await connect(cfg.other.token);
    const { tools } = await other.client.listTools(undefined, requestOptions);
    assert(tools.length === TOOLS.length, `tools ${tools.map((t) => t.name)}`);
  });
  const denied = (tool, args, action) => check(`http/other caller ${tool} access_denied`, async () => {
    assert(other, "the other caller did not connect");
    const res = await call(other.client, tool, args);
    const text = expectToolError(res, "access_denied");
    for (const want of [cfg.other.caller, action, held?.run_id]) {
      assert(text.includes(want), `the error does not name ${want}: ${text}`);
    }
    return text;
  });
  await denied("run_status", { run_id: held?.run_id }, "read_run");
  await denied("run_events", { run_id: held?.run_id }, "read_run");
  await denied("cancel_run", { run_id: held?.run_id }, "cancel_run");
  await denied("resolve_run", { run_id: held?.run_id, resolution: "rejected" }, "resolve_run");
  // approve_run is the other way round: by default a caller may approve only runs it did
  // not start. The other caller may (the run, completed, is then not awaiting approval);
  // this client's caller may not.
  await check("http/other caller approve_run not awaiting approval", async () => {
    assert(other, "the other caller did not connect");
    return expectToolError(await call(other.client, "approve_run", { run_id: held?.run_id, decision: "approve", reason: "checked" }), "invalid_transition");
  });
  await check("http/approve_run own run access_denied", async () => {
    const text = expectToolError(await call(client, "approve_run", { run_id: held?.run_id, decision: "approve", reason: "checked" }), "access_denied");
    assert(text.includes(`"${CALLER}" may not approve_run`), `the error does not name the caller and the action: ${text}`);
    return text;
  });
  await check("http/other caller resources denied", async () => {
    assert(other, "the other caller did not connect");
    const refused = [];
    for (const [what, fn] of [
      ["resources/read", () => other.client.readResource({ uri: RUN_URI + held?.run_id }, requestOptions)],
      ["resources/subscribe", () => other.client.subscribeResource({ uri: RUN_URI + hung?.run_id }, requestOptions)],
    ]) {
      try {
        await fn();
      } catch (err) {
        // The JSON-RPC error's message is the coded error's text.
        assert(err instanceof McpError && err.message.includes(`access_denied: caller "${cfg.other.caller}" may not read_run`),
          `${what}: not an access_denied MCP error: ${err}`);
        refused.push(`${what}: JSON-RPC error ${err.code}: ${err.message}`);
        continue;
      }
      throw new Error(`${what} of another caller's run succeeded`);
    }
    return refused.join("; ");
  });
  // Each caller lists only its own runs; the other caller's run is named its.
  await check("http/other caller list_runs", async () => {
    assert(other, "the other caller did not connect");
    const res = await call(other.client, "invoke_agent", { agent: "helper", prompt: "other caller" });
    assert(expectOK(res) === "loopback answer: other caller", `invoke_agent: ${textOf(res)}`);
    const runId = res.structuredContent.audit.run_id;
    const { runs } = await callOK(other.client, "list_runs", {});
    assert(runs.length === 1 && runs[0].run_id === runId && runs[0].caller === cfg.other.caller && runs[0].caller_auth === "token",
      `the other caller's runs ${JSON.stringify(runs).slice(0, 400)}`);
    const st = await callOK(other.client, "run_status", { run_id: runId });
    assert(st.caller === cfg.other.caller && st.caller_auth === "token" && st.status === "completed", `run_status ${JSON.stringify(st)}`);
    const mine = await listAll(client, {}, 100);
    assert(!mine.some((r) => r.run_id === runId) && mine.some((r) => r.run_id === held?.run_id), `this caller lists ${mine.map((r) => r.run_id)}`);
    const ex = await call(client, "run_status", { run_id: runId });
    expectToolError(ex, "access_denied");
  });
  // The human gate, four eyes: this caller's runs decided by the other caller.
  await gateChecks(client, other && { client: other.client, caller: cfg.other.caller, auth: "token" });
  await other?.client.close();
}

async function main() {
  const { client, transport, negotiated, wire } = await connect();

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
    const want = ["dup:false", "dup:false", "helper:true", "refused:false", "slow:true"];
    if (cfg.delegated) {
      want.push(`${cfg.delegated.agent}:true`);
      want.sort(); // the registry lists by name
    }
    assert(names.join(",") === want.join(","), `agents ${names}, want ${want}`);
    const helper = res.structuredContent.agents.find((a) => a.name === "helper");
    assert(helper.mode === "text_response" && helper.executor === undefined, `helper: mode ${helper.mode}, executor ${helper.executor}`);
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

  // Runs. The model holds "hold:NAME" until a run asks it "release:NAME", so a run is
  // running for exactly as long as a check needs; every wait is for an event.
  const release = async (name) => {
    const res = await call(client, "invoke_agent", { agent: "helper", prompt: `release:${name}` });
    assert(expectOK(res) === `loopback answer: release:${name}`, `release:${name}: ${textOf(res)}`);
  };
  let held, key; // the run of "hold:events", then its public key
  await check("start_run/ok", async () => {
    held = await startRun(client, "hold:events");
    key = publicKey(held.audit.public_key);
    return held.run_id;
  });
  // A long poll: read the held run's events, waiting for each, until the model has the
  // request (started, inference_requested); then poll again with wait_ms while the model
  // is released: the poll answers with the next event. A page may be empty only when
  // wait_ms passed first (a busy machine), and is then asked again.
  await check("run_events/long poll", async () => {
    let cursor = 0;
    const types = [];
    const poll = async () => {
      const page = await callOK(client, "run_events", { run_id: held.run_id, after: cursor, limit: 1, wait_ms: 30000 });
      assert(page.events.length <= 1 && page.next_cursor === cursor + page.events.length, `page ${JSON.stringify(page).slice(0, 300)}`);
      assert(page.events.length === 1 || (!page.done && page.status === "running"), `an empty page of a run that ended: ${JSON.stringify(page)}`);
      for (const ev of page.events) {
        assert(ev.seq === cursor, `event seq ${ev.seq} at cursor ${cursor}`);
        types.push(ev.type);
        cursor++;
      }
      return page;
    };
    for (let polls = 0; types.length < 2; polls++) {
      const page = await poll();
      assert(page.status === "running" && !page.done, `the held run is ${page.status}, done ${page.done}`);
      assert(polls < 100, "the held run's first events never came");
    }
    assert(types.join(",") === "started,inference_requested", `events while held: ${types}`);
    const pending = poll(); // nothing after the cursor until the model answers
    await release("events");
    let polls = 1, page = await pending;
    while (page.events.length === 0) {
      assert(polls++ < 100, "the long poll never returned the next event");
      page = await poll();
    }
    assert(page.events[0].type === "inference_finished", `the long poll returned ${page.events[0].type}`);
    return `next event ${page.events[0].type} after ${polls} poll(s)`;
  });
  await check("run_events/ok", async () => {
    const { events, pages, last } = await readEvents(client, held.run_id, 2, key);
    const types = events.map((e) => e.type);
    assert(JSON.stringify(types) === JSON.stringify(RUN_EVENTS), `event types ${types}`);
    assert(last.status === "completed" && last.done === true, `last page: status ${last.status}, done ${last.done}`);
    const again = await callOK(client, "run_events", { run_id: held.run_id, after: events.length });
    assert(again.events.length === 0 && again.done && again.next_cursor === events.length, `reading past the end: ${JSON.stringify(again)}`);
    const all = await callOK(client, "run_events", { run_id: held.run_id });
    assert(JSON.stringify(all.events) === JSON.stringify(events), "one page of every event differs from the pages of 2");
    return `${events.length} events in ${pages} pages of 2`;
  });
  // Output the policy withheld is never served: a denied answer's inference_finished is
  // served without its line (its hash and why), the chain followed through the hash.
  await check("run_events/withheld", async () => {
    const res = await call(client, "invoke_agent", { agent: "helper", prompt: "leak" });
    expectToolError(res, "policy_denied");
    const runId = res.structuredContent.audit?.run_id;
    assert(UUID.test(runId), `the denial names no run: ${JSON.stringify(res.structuredContent)}`);
    const { events, last, withheld } = await readEvents(client, runId, 100, publicKey(res.structuredContent.audit.public_key));
    const types = events.map((e) => e.type);
    assert(last.status === "policy_denied" && JSON.stringify(types) === JSON.stringify(RUN_EVENTS), `status ${last.status}, events ${types}`);
    const f = events[types.indexOf("inference_finished")], pe = events[types.indexOf("policy_evaluated")];
    assert(withheld === 2 && f.line === undefined && pe.line === undefined,
      `withheld ${withheld}: inference_finished ${JSON.stringify(f).slice(0, 300)}, policy_evaluated ${JSON.stringify(pe).slice(0, 300)}`);
    const page = JSON.stringify(await callOK(client, "run_events", { run_id: runId }));
    const st = await callOK(client, "run_status", { run_id: runId });
    assert(!page.includes("FORBIDDEN") && st.text === undefined && st.released === false, "the withheld text was served");
    return f.withheld;
  });
  await check("run_status/ok", async () => {
    const st = await callOK(client, "run_status", { run_id: held.run_id });
    assert(st.status === "completed" && st.released === true && st.text === "loopback answer: hold:events", `status ${JSON.stringify(st)}`);
    assert(st.records === RUN_EVENTS.length && HEX64.test(st.head) && st.started_at && st.ended_at && st.caller === CALLER &&
      st.caller_auth === CALLER_AUTH &&
      st.journal === held.audit.path && st.agent === "helper" && st.agent_id === held.agent_id && st.resolution === undefined,
      `status ${JSON.stringify(st)}`);
    const unresolved = await callOK(client, "list_runs", { resolution: "unresolved" });
    assert(unresolved.runs.some((r) => r.run_id === held.run_id), "a completed run without a resolution is not unresolved");
  });
  await check("resolve_run/ok", async () => {
    const first = await callOK(client, "resolve_run", { run_id: held.run_id, resolution: "accepted" });
    assert(first.status === "completed" && first.resolution?.value === "accepted" && first.resolution.revisions === 1 &&
      first.resolution.caller === CALLER && first.resolution.caller_auth === CALLER_AUTH && first.resolution.time, `first resolution ${JSON.stringify(first)}`);
    const revised = await callOK(client, "resolve_run", { run_id: held.run_id, resolution: "needs_followup", note: "check the sources" });
    const r = revised.resolution;
    assert(revised.status === "completed" && r?.value === "needs_followup" && r.note === "check the sources" && r.revisions === 2,
      `revised resolution ${JSON.stringify(revised)}`);
    const st = await callOK(client, "run_status", { run_id: held.run_id });
    assert(st.resolution?.value === "needs_followup" && st.resolution.revisions === 2 && st.status === "completed", `run_status ${JSON.stringify(st.resolution)}`);
  });
  let hung; // the run of "hang", cancelled
  await check("cancel_run/ok", async () => {
    hung = await startRun(client, "hang");
    // Wait until the model has the request, then cancel it.
    for (let cursor = 0, polls = 0; cursor < 2; polls++) {
      const page = await callOK(client, "run_events", { run_id: hung.run_id, after: cursor, wait_ms: 30000 });
      cursor = page.next_cursor;
      assert(page.status === "running" && polls < 100, `the hanging run is ${page.status}`);
    }
    const c = await callOK(client, "cancel_run", { run_id: hung.run_id });
    assert(c.already_finished === false && c.status === "cancelled" && c.released === false && c.text === undefined,
      `cancel_run: ${JSON.stringify(c)}`);
    const again = await callOK(client, "cancel_run", { run_id: hung.run_id });
    assert(again.already_finished === true && again.status === "cancelled", `second cancel_run: ${JSON.stringify(again)}`);
    const { events } = await readEvents(client, hung.run_id, 100, publicKey(hung.audit.public_key));
    const last = events[events.length - 1];
    assert(last.type === "terminated" && JSON.parse(last.line).payload.data.reason === "cancelled", `last event ${last.line}`);
    const st = await callOK(client, "run_status", { run_id: hung.run_id });
    assert(st.status === "cancelled" && st.ended_at && st.records === events.length, `run_status ${JSON.stringify(st)}`);
    return c.reason;
  });
  await check("list_runs/ok", async () => {
    const everything = await callOK(client, "list_runs", {});
    assert(everything.next_cursor === undefined && everything.runs.length >= 3, `one page: ${everything.runs.length} runs, next_cursor ${everything.next_cursor}`);
    const paged = await listAll(client, {}, 2);
    assert(JSON.stringify(paged.map((r) => r.run_id)) === JSON.stringify(everything.runs.map((r) => r.run_id)),
      "pages of 2 list other runs than one page");
    for (const id of [held.run_id, hung.run_id]) assert(paged.some((r) => r.run_id === id), `run ${id} is not listed`);
    const first = await callOK(client, "list_runs", { limit: 1 });
    assert(first.runs.length === 1 && first.runs[0].run_id === paged[0].run_id && typeof first.next_cursor === "string" && first.next_cursor !== "",
      `limit 1: ${JSON.stringify(first).slice(0, 300)}`);
    const second = await callOK(client, "list_runs", { limit: 1, after: first.next_cursor });
    assert(second.runs.length === 1 && second.runs[0].run_id === paged[1].run_id, `the page after ${first.next_cursor}: ${JSON.stringify(second).slice(0, 300)}`);
    return `${paged.length} runs`;
  });
  await check("list_runs/filters", async () => {
    const cancelled = await listAll(client, { status: "cancelled" }, 1);
    assert(cancelled.length >= 1 && cancelled.every((r) => r.status === "cancelled") && cancelled.some((r) => r.run_id === hung.run_id),
      `status cancelled: ${cancelled.map((r) => `${r.run_id}:${r.status}`)}`);
    const completed = await listAll(client, { status: "completed", agent: "helper" }, 2);
    assert(completed.every((r) => r.status === "completed" && r.agent === "helper") && completed.some((r) => r.run_id === held.run_id),
      `status completed, agent helper: ${completed.map((r) => `${r.run_id}:${r.status}`)}`);
    const followup = await listAll(client, { resolution: "needs_followup" }, 2);
    assert(followup.length === 1 && followup[0].run_id === held.run_id && followup[0].resolution.revisions === 2,
      `resolution needs_followup: ${JSON.stringify(followup).slice(0, 300)}`);
    const accepted = await listAll(client, { resolution: "accepted" }, 2);
    assert(accepted.length === 0, `resolution accepted (revised since): ${accepted.map((r) => r.run_id)}`);
    const unresolved = await listAll(client, { resolution: "unresolved" }, 2);
    assert(unresolved.every((r) => r.resolution === undefined) && !unresolved.some((r) => r.run_id === held.run_id) &&
      unresolved.some((r) => r.run_id === hung.run_id), `unresolved: ${unresolved.map((r) => r.run_id)}`);
    const nobody = await listAll(client, { agent: "nobody" }, 2);
    assert(nobody.length === 0, `agent nobody: ${nobody.map((r) => r.run_id)}`);
  });

  // A run held while the bad arguments are tried: resolving it is invalid_transition.
  let running;
  await check("start_run/ok held", async () => {
    running = await startRun(client, "hold:bad");
  });
  const runArg = (v) => (v === "$running" ? running?.run_id : v === "$done" ? held?.run_id : v);

  // Every tool with bad arguments: a coded tool error, validated like any result. A run
  // id "$running" is the held run's, "$done" a completed run's.
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
    ["start_run", {}, "invalid_request"],
    ["start_run", { agent: "helper" }, "invalid_request"],
    ["start_run", { agent: "helper", prompt: "x", extra: 1 }, "invalid_request"],
    ["start_run", { agent: "nobody", prompt: "x" }, "unknown_agent"],
    ["start_run", { agent: "refused", prompt: "x" }, "refused_definition"],
    ["run_events", {}, "invalid_request"],
    ["run_events", { run_id: MISSING_RUN }, "run_not_found"],
    ["run_events", { run_id: "../../etc/passwd" }, "invalid_request"],
    ["run_events", { run_id: "$running", limit: 0 }, "invalid_request"],
    ["run_events", { run_id: "$running", limit: 1001 }, "invalid_request"],
    ["run_events", { run_id: "$running", wait_ms: 30001 }, "invalid_request"],
    ["run_events", { run_id: "$running", wait_ms: -1 }, "invalid_request"],
    ["run_events", { run_id: "$running", after: -1 }, "invalid_request"],
    ["run_events", { run_id: "$done", after: 99 }, "invalid_request"],
    ["run_events", { run_id: "$running", after: "x" }, "invalid_request"],
    ["run_status", {}, "invalid_request"],
    ["run_status", { run_id: MISSING_RUN }, "run_not_found"],
    ["run_status", { run_id: "" }, "invalid_request"],
    ["cancel_run", {}, "invalid_request"],
    ["cancel_run", { run_id: MISSING_RUN }, "run_not_found"],
    ["list_runs", { limit: 0 }, "invalid_request"],
    ["list_runs", { limit: 1001 }, "invalid_request"],
    ["list_runs", { after: "not-a-cursor" }, "invalid_request"],
    ["list_runs", { status: "finished" }, "invalid_request"],
    ["list_runs", { resolution: "maybe" }, "invalid_request"],
    ["list_runs", { extra: 1 }, "invalid_request"],
    ["resolve_run", { run_id: MISSING_RUN, resolution: "accepted" }, "run_not_found"],
    ["resolve_run", { run_id: "$done" }, "invalid_request"],
    ["resolve_run", { run_id: "$done", resolution: "maybe" }, "invalid_request"],
    ["resolve_run", { run_id: "$done", resolution: "accepted", note: "n".repeat(4097) }, "limit_exceeded"],
    ["resolve_run", { run_id: "$running", resolution: "accepted" }, "invalid_transition"],
    ["approve_run", {}, "invalid_request"],
    ["approve_run", { run_id: MISSING_RUN, decision: "approve", reason: "checked" }, "run_not_found"],
    ["approve_run", { run_id: "$done", decision: "approve", reason: "checked", extra: 1 }, "invalid_request"],
  ];
  // The delegated agent's, named (their paths are long), each error text naming the rule
  // (the clear message) it refuses by.
  const d = cfg.delegated;
  if (d) {
    const ws = (workspace, agent = d.agent) => ({ agent, prompt: "x", workspace });
    bad.push(
      ["invoke_agent", { agent: d.agent, prompt: "x" }, "refused_definition", "delegated agent", "runs only through start_run"],
      ["start_run", ws(d.outside), "invalid_request", "workspace outside every root", "inside a workspace root"],
      ["start_run", ws(d.relative), "invalid_request", "relative workspace", "absolute workspace"],
      ["start_run", ws(d.symlink), "invalid_request", "workspace a symbolic link out of the root", "inside a workspace root"],
      ["start_run", ws(`${d.symlink}/.`), "invalid_request", "workspace through a symbolic link out of the root", "inside a workspace root"],
      ["start_run", ws(`${d.workspace}/../../outside`), "invalid_request", "workspace .. out of the root", "inside a workspace root"],
      ["start_run", ws(`${d.workspace}/${d.file}`), "invalid_request", "workspace a file", "existing directory"],
      ["start_run", ws(`${d.workspace}/missing`), "invalid_request", "workspace missing", "existing directory"],
      ["start_run", { agent: d.agent, prompt: "x" }, "invalid_request", "no workspace: the project, outside the granted roots", "inside a workspace root"],
      ["start_run", ws(d.workspace, "helper"), "invalid_request", "workspace for a text_response agent", "workspace is for delegated agents"],
    );
  }
  for (const [tool, args, code, name, mentions] of bad) {
    const label = name ?? JSON.stringify(args).slice(0, 60);
    await check(`${tool}/bad ${label}`, async () => {
      const res = await call(client, tool, Object.fromEntries(Object.entries(args).map(([k, v]) => [k, k === "run_id" ? runArg(v) : v])));
      expectToolError(res, code);
      if (mentions) assert(textOf(res).includes(mentions), `the error does not say ${JSON.stringify(mentions)}: ${textOf(res)}`);
      if (code === "run_not_found") {
        assert(textOf(res).includes(MISSING_RUN), `the error does not name the run: ${textOf(res)}`);
      }
      if (code === "policy_denied") {
        assert(res.structuredContent.audit?.records === 5, `a withheld answer carries no receipt: ${JSON.stringify(res.structuredContent)}`);
        assert(!textOf(res).includes("FORBIDDEN"), "the withheld text was released");
      }
    });
  }
  await check("resolve_run/bad leaves the run running", async () => {
    let st;
    try {
      st = await callOK(client, "run_status", { run_id: running.run_id });
    } finally {
      await release("bad");
    }
    assert(st.status === "running" && st.resolution === undefined, `the held run after the bad arguments: ${JSON.stringify(st)}`);
    const { last } = await readEvents(client, running.run_id, 100, key);
    assert(last.status === "completed", `the released run is ${last.status}`);
  });
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

  // The run resource template, symbi://runs/{run_id}: run_status's JSON.
  await check("resources/templates/list", async () => {
    const { resourceTemplates } = await client.listResourceTemplates(undefined, requestOptions);
    assert(resourceTemplates.length === 1 && resourceTemplates[0].uriTemplate === RUN_URI + "{run_id}" &&
      resourceTemplates[0].mimeType === "application/json" && resourceTemplates[0].name === "run",
      `resource templates ${JSON.stringify(resourceTemplates)}`);
  });
  await check("resources/read run", async () => {
    const st = await readRun(client, held.run_id);
    const tool = await callOK(client, "run_status", { run_id: held.run_id });
    assert(st.status === "completed" && st.text === "loopback answer: hold:events" && st.resolution?.value === "needs_followup",
      `resource ${JSON.stringify(st)}`);
    assert(JSON.stringify(st) === JSON.stringify(tool), `the resource is not run_status: ${JSON.stringify(st)} vs ${JSON.stringify(tool)}`);
    const c = await readRun(client, hung.run_id);
    assert(c.status === "cancelled" && c.released === false, `cancelled run's resource ${JSON.stringify(c)}`);
  });
  await check("resources/read unknown run", async () => {
    const refused = [];
    for (const uri of [RUN_URI + MISSING_RUN, RUN_URI + "../x", "symbi://runs/"]) {
      try {
        await client.readResource({ uri }, requestOptions);
      } catch (err) {
        assert(err instanceof McpError, `${uri}: not an MCP error: ${err}`);
        refused.push(`${uri}: ${err.code}`);
        continue;
      }
      throw new Error(`reading ${uri} succeeded`);
    }
    return refused.join("; ");
  });
  // Subscriptions: subscribe to a run the model holds, release it, and get
  // notifications/resources/updated for its URI until the resource reads completed; then,
  // subscribed to a run that ended earlier, a resolution notifies too.
  const updates = resourceUpdates(client);
  await check("resources/subscribe", async () => {
    assert(client.getServerCapabilities()?.resources?.subscribe === true, `capabilities ${JSON.stringify(client.getServerCapabilities())}`);
    const run = await startRun(client, "hold:subscribe");
    const uri = RUN_URI + run.run_id;
    await client.subscribeResource({ uri }, requestOptions);
    assert((await readRun(client, run.run_id)).status === "running", "the held run is not running");
    await release("subscribe");
    const seen = [];
    for (;;) {
      await updates.next(uri);
      const st = await readRun(client, run.run_id);
      seen.push(`${st.status}/${st.records}`);
      if (st.status === "completed") break;
      assert(st.status === "running", `after a notification the run reads ${st.status}`);
    }
    const done = await readRun(client, run.run_id);
    assert(done.text === "loopback answer: hold:subscribe" && done.records === RUN_EVENTS.length, `completed run ${JSON.stringify(done)}`);
    // The cancelled run ended before this check began: subscribed now, its resolution is
    // the change that notifies.
    const other = RUN_URI + hung.run_id;
    await client.subscribeResource({ uri: other }, requestOptions);
    const resolved = await callOK(client, "resolve_run", { run_id: hung.run_id, resolution: "superseded", note: "cancelled by the suite" });
    assert(resolved.status === "cancelled" && resolved.resolution?.value === "superseded", `resolve_run ${JSON.stringify(resolved)}`);
    await updates.next(other);
    const st = await readRun(client, hung.run_id);
    assert(st.resolution?.value === "superseded" && st.resolution.revisions === 1 && st.status === "cancelled", `after the resolution ${JSON.stringify(st)}`);
    return `the resource (status/records) read after each notification: ${seen.join(", ")}`;
  });
  // Unsubscribed, a run's changes no longer notify: two finished runs subscribed, one
  // unsubscribed, both resolved — the unsubscribed one first. The other's update arrives;
  // the unsubscribed one's, which would have come before it, has not.
  await check("resources/unsubscribe", async () => {
    const runId = async (prompt) => (await callOK(client, "invoke_agent", { agent: "helper", prompt })).audit.run_id;
    const [dropped, kept] = [await runId("unsubscribed"), await runId("still subscribed")];
    for (const id of [dropped, kept]) await client.subscribeResource({ uri: RUN_URI + id }, requestOptions);
    await client.unsubscribeResource({ uri: RUN_URI + dropped }, requestOptions);
    for (const id of [dropped, kept]) await callOK(client, "resolve_run", { run_id: id, resolution: "accepted" });
    await updates.next(RUN_URI + kept);
    assert(!updates.pending(RUN_URI + dropped), `an update for ${dropped} after it was unsubscribed`);
  });
  await check("resources/subscribe unknown run", async () => {
    const refused = [];
    for (const uri of [RUN_URI + MISSING_RUN, RUN_URI + "../x", "symbi://other/1"]) {
      try {
        await client.subscribeResource({ uri }, requestOptions);
      } catch (err) {
        assert(err instanceof McpError, `${uri}: not an MCP error: ${err}`);
        refused.push(`${uri}: ${err.code}`);
        continue;
      }
      throw new Error(`subscribing to ${uri} succeeded`);
    }
    return refused.join("; ");
  });

  // Delegated agents: the fake ACP agent, registered with --executors, run by start_run in
  // a workspace of a granted --workspace-root; every result validated by the SDK against
  // its tool's outputSchema as any other. (The refused calls are in the table above.)
  if (d) {
    await check("delegated/list_agents", async () => {
      const { agents } = await callOK(client, "list_agents", {});
      const e = agents.find((a) => a.name === d.agent);
      assert(e && e.invocable === true && e.mode === "delegated" && e.executor === d.executor && e.reason === "" &&
        e.reasons.length === 0 && e.file === `agents/${d.agent}.symbi` && e.agents.join() === d.agent, `entry ${JSON.stringify(e)}`);
      const refused = agents.find((a) => a.name === "refused");
      assert(refused.mode === "" && refused.executor === undefined, `a refused agent's mode ${JSON.stringify(refused.mode)}, executor ${refused.executor}`);
      return `${e.name}: mode ${e.mode}, executor ${e.executor}`;
    });
    let run;
    await check("delegated/start_run", async () => {
      const sc = await callOK(client, "start_run", { agent: d.agent, prompt: d.prompt, workspace: d.workspace });
      assert(sc.status === "running" && UUID.test(sc.run_id) && sc.agent === d.agent && UUID.test(sc.agent_id),
        `start_run ${JSON.stringify(sc)}`);
      const a = sc.audit;
      assert(a && a.run_id === sc.run_id && a.path.endsWith(`.${sc.run_id}.jsonl`) && HEX64.test(a.public_key) && a.records >= 1,
        `audit ${JSON.stringify(a)}`);
      run = sc;
      return sc.run_id;
    });
    let events;
    await check("delegated/run_events", async () => {
      assert(run, "start_run gave no run");
      // Pages of 2, each a long poll (wait_ms 30000) until done; every event verifies.
      const r = await readEvents(client, run.run_id, 2, publicKey(run.audit.public_key));
      events = r.events;
      assert(r.last.status === "completed" && r.last.done === true, `last page: status ${r.last.status}, done ${r.last.done}`);
      const types = events.map((e) => e.type);
      const recs = events.map((e) => JSON.parse(e.line).payload);
      // The agent's reports and symbi's decisions run concurrently: only the order the
      // journal's state machine requires is asserted.
      assert(types[0] === "started" && types[1] === "session_started" &&
        types.slice(-3).join() === "session_finished,policy_evaluated,terminated", `event types ${types}`);
      for (const want of ["agent_thought", "tool_call", "permission_decided", "fs_read", "agent_message"]) {
        assert(types.includes(want), `no ${want} event: ${types}`);
      }
      const session = recs[1].data;
      assert(session.executor === d.executor && session.workspace === d.resolved && session.agent_name === "fake-acp-agent" &&
        session.session_id && Array.isArray(session.command), `session_started ${JSON.stringify(session)}`);
      const read = recs.find((p) => p.type === "fs_read").data;
      const allowed = recs.findIndex((p) => p.type === "permission_decided" && p.data.request_id === read.request_id);
      assert(read.path === d.file && read.bytes === Buffer.byteLength(d.content) &&
        read.sha256 === createHash("sha256").update(d.content).digest("hex"), `fs_read ${JSON.stringify(read)}`);
      assert(allowed >= 0 && allowed < types.indexOf("fs_read") && recs[allowed].data.decision === "allow" && recs[allowed].data.kind === "read",
        `the read's decision ${JSON.stringify(recs[allowed])}`);
      const denied = recs.find((p) => p.type === "permission_decided" && p.data.kind === "execute")?.data;
      assert(denied?.decision === "deny" && denied.policy_ids.includes("tools-no-execute") && denied.tool_call_id === "t1",
        `the execute permission's decision ${JSON.stringify(denied)}`);
      const said = recs.filter((p) => p.type === "agent_message").map((p) => p.data.text).join("");
      assert(said === d.answer, `agent_message text ${JSON.stringify(said)}`);
      const finished = recs[recs.length - 3].data;
      assert(finished.outcome === "completed" && finished.stop_reason === "end_turn", `session_finished ${JSON.stringify(finished)}`);
      const end = recs[recs.length - 1].data;
      assert(end.reason === "completed" && end.released === true, `terminated ${JSON.stringify(end)}`);
      return `${events.length} events in ${r.pages} pages of 2 (${r.withheld} withheld while it ran): ${types.join(",")}`;
    });
    await check("delegated/run_status", async () => {
      assert(run, "start_run gave no run");
      const st = await callOK(client, "run_status", { run_id: run.run_id });
      assert(st.status === "completed" && st.released === true && st.text === d.answer && st.agent === d.agent &&
        st.agent_id === run.agent_id && st.journal === run.audit.path && st.caller === CALLER && st.caller_auth === CALLER_AUTH && st.ended_at &&
        (events === undefined || st.records === events.length), `run_status ${JSON.stringify(st)}`);
    });
    await check("delegated/resources/read run", async () => {
      assert(run, "start_run gave no run");
      const st = await readRun(client, run.run_id);
      const tool = await callOK(client, "run_status", { run_id: run.run_id });
      assert(st.status === "completed" && st.text === d.answer, `resource ${JSON.stringify(st)}`);
      assert(JSON.stringify(st) === JSON.stringify(tool), `the resource is not run_status: ${JSON.stringify(st)} vs ${JSON.stringify(tool)}`);
    });
    await check("delegated/list_runs", async () => {
      assert(run, "start_run gave no run");
      // The refused start_runs (the table above) started no run.
      const runs = await listAll(client, { agent: d.agent }, 1);
      assert(runs.length === 1 && runs[0].run_id === run.run_id && runs[0].status === "completed", `runs of ${d.agent}: ${JSON.stringify(runs)}`);
    });
  }

  if (HTTP) await httpChecks(client, transport, held, hung);
  else await gateChecks(client, { client, caller: CALLER, auth: CALLER_AUTH });

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

  // ping, and logging/setLevel of the logging capability the server declares.
  await check("ping", async () => {
    await client.ping(requestOptions);
  });
  await check("logging/setLevel", async () => {
    assert(client.getServerCapabilities()?.logging !== undefined, `capabilities ${JSON.stringify(client.getServerCapabilities())}`);
    await client.setLoggingLevel("warning", requestOptions);
  });
  // The server keeps serving after all of the above.
  await check("still serving", async () => {
    expectOK(await call(client, "list_agents", {}));
  });
  // Over HTTP a client ends its session with DELETE; the session is then gone.
  if (HTTP) {
    await check("http/terminate session", async () => {
      const id = transport.sessionId;
      await transport.terminateSession();
      const t = httpTransport(cfg.token, { sessionId: id });
      await t.start();
      try {
        return await expectRefused(404, () => t.send({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }));
      } finally {
        await t.close();
      }
    });
  }
  await client.close();
}

main().catch((err) => {
  process.stderr.write(`conformance: ${err?.stack ?? err}\n`);
  process.exit(1);
});
