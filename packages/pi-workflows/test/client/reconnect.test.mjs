// Client identity and reconnects of the TypeScript client against the real server (the Rust
// binary built by `cargo build`/`cargo test`): a Unix-socket proxy between client and server
// drops connections at chosen moments (after the server committed and answered, before the
// answer reached the client; while a submission validates; while a watch is live). The client
// reconnects and resends with the same client ID and idempotency key under a new request ID,
// and the stored receipt is adopted. The client ID is stable across clients and processes and
// stored user-only.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, mkdirSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { removeTempDirs } from "../support/fixtures.mjs";
import {
  clientIdFile,
  installationClientId,
  PI_CLIENT,
  RETRIES_MAX,
  WorkflowClient,
} from "../../dist/client/index.js";

const packageDir = fileURLToPath(new URL("../../", import.meta.url));
const binary = process.env.PI_WORKFLOWS_BIN ?? path.resolve(packageDir, "../../target/debug/pi-workflows");
const state = mkdtempSync("/tmp/piwtr-");
const agentDir = mkdtempSync("/tmp/piwtra-");
const env = { ...process.env, PI_WORKFLOWS_PACKAGE_DIR: packageDir, PI_CODING_AGENT_DIR: agentDir };
delete env.PI_WORKFLOWS_RUNNER;
const serverSocket = path.join(state, "server", "server.sock");
const { version } = JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8"));

const chain = path.join(state, "chain.workflow.ts");
const slow = path.join(state, "slow.workflow.ts");
const checked = path.join(state, "checked.workflow.ts");
const opened = [];
/** The proxies' socket dirs, removed with the state dirs after the tests. */
const proxyDirs = [];

function cli(...args) {
  const result = spawnSync(binary, ["--state-dir", state, ...args], { env, encoding: "utf8" });
  assert.equal(result.status, 0, `pi-workflows ${args.join(" ")}: ${result.stderr}`);
  return result.stdout;
}

async function connect(socketPath, options = {}) {
  const client = await WorkflowClient.connect(socketPath, { packageVersion: version, stateDir: state, ...options });
  opened.push(client);
  return client;
}

before(() => {
  assert.ok(existsSync(binary), `${binary} is missing: build the Rust binary first (cargo build)`);
  writeFileSync(
    chain,
    `import { compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({ name: "chain", startAt: "a", nodes: { a: compute({ run: () => 1 }), b: compute({ run: () => 2 }) }, edges: [{ from: "a", to: "b" }] });
`,
  );
  const nodes = Array.from({ length: 20 }, (_, i) => `n${i + 1}: compute({ run: async () => { await new Promise((r) => setTimeout(r, 100)); return ${i + 1}; } }),`);
  const edges = Array.from({ length: 19 }, (_, i) => `{ from: "n${i + 1}", to: "n${i + 2}" }`);
  writeFileSync(
    slow,
    `import { compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({ name: "slow", startAt: "n1", nodes: { ${nodes.join(" ")} }, edges: [${edges.join(", ")}] });
`,
  );
  // The step's own check takes 1.5 s (blocking, as a synchronous validate may).
  writeFileSync(
    checked,
    `import { agent, compute, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "checked",
  startAt: "ask",
  nodes: {
    ask: agent({
      prompt: "Give a summary.",
      expectedOutput: '{"summary": string}',
      validate: (output) => { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1500); return output; },
    }),
    done: compute({ run: ({ outputs }) => outputs.ask }),
  },
  edges: [{ from: "ask", to: "done" }],
});
`,
  );
  cli("server", "start");
});

after(() => {
  for (const client of opened) client.close();
  spawnSync(binary, ["--state-dir", state, "server", "stop"], { env });
  removeTempDirs([state, agentDir, ...proxyDirs]);
});

/**
 * A proxy to the server: the n-th connection follows `plans[n]`, later ones `then`. Plans:
 * `forward`; `dropAnswer` (forward hello and the first request, swallow the server's answer and
 * close both sides); `dropAfter` (close `ms` after the first request); `dropAfterLines` (close
 * after the server sent `lines` lines, hello included).
 */
async function startProxy(plans, then = { kind: "forward" }, onDrop = () => {}) {
  const dir = mkdtempSync("/tmp/piwtx-");
  proxyDirs.push(dir);
  const socketPath = path.join(dir, "proxy.sock");
  const log = { requests: [], dropped: [], connections: 0 };
  const server = net.createServer((client) => {
    const plan = plans[log.connections] ?? then;
    log.connections += 1;
    const upstream = net.createConnection(serverSocket);
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) {
      socket.on("error", close);
      socket.on("close", close);
    }
    let fromServer = 0;
    onLines(upstream, (line) => {
      if (closed) return;
      fromServer += 1;
      if (plan.kind === "dropAnswer" && fromServer === 2) {
        log.dropped.push(JSON.parse(line.toString("utf8")));
        onDrop();
        return close();
      }
      client.write(line);
      if (plan.kind === "dropAfterLines" && fromServer >= plan.lines) close();
    });
    let fromClient = 0;
    onLines(client, (line) => {
      if (closed) return;
      fromClient += 1;
      log.requests.push(JSON.parse(line.toString("utf8")));
      upstream.write(line);
      if (plan.kind === "dropAfter" && fromClient === 1) {
        setTimeout(() => {
          onDrop();
          close();
        }, plan.ms);
      }
    });
  });
  await new Promise((resolve) => server.listen(socketPath, resolve));
  return { socketPath, log, close: () => server.close() };
}

function onLines(socket, onLine) {
  let held = Buffer.alloc(0);
  socket.on("data", (chunk) => {
    held = Buffer.concat([held, chunk]);
    for (let end = held.indexOf(10); end >= 0; end = held.indexOf(10)) {
      const line = held.subarray(0, end + 1);
      held = held.subarray(end + 1);
      onLine(line);
    }
  });
}

/** The requests for one key: same client ID and payload, a new request ID each. */
function assertOneIdentity(requests, key, clientId, expected) {
  const keyed = requests.filter((request) => request.idempotencyKey === key);
  assert.equal(keyed.length, expected, JSON.stringify(requests, null, 1));
  assert.ok(keyed.every((request) => request.clientId === clientId), JSON.stringify(keyed));
  assert.equal(new Set(keyed.map((request) => request.requestId)).size, expected, "a new request ID per attempt");
  assert.ok(keyed.every((request) => JSON.stringify(request.payload) === JSON.stringify(keyed[0].payload)));
}

async function viewUntil(client, runId, check) {
  for (let i = 0; i < 600; i++) {
    const { view } = await client.call("view.run.get", { runId });
    if (check(view)) return view;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`run ${runId} never reached the expected view`);
}

test("a run.start whose answer is lost after commit is resent with the same key and adopted", async () => {
  const proxy = await startProxy([{ kind: "dropAnswer" }]);
  const client = await connect(proxy.socketPath);
  const runId = `run-tsr-${Date.now()}`;
  const key = `start-${runId}`;
  const answer = await client.request("run.start", { runId, idempotencyKey: key, payload: { workflow: chain, projectPath: state, executionMode: "headless" } });
  assert.equal(proxy.log.dropped.length, 1, "the proxy swallowed the first answer");
  assert.equal(proxy.log.dropped[0].outcome, "accepted", "the first attempt committed");
  assert.equal(proxy.log.connections, 2, "one reconnect");
  assert.equal(answer.outcome, "adopted", JSON.stringify(answer.error));
  assert.deepEqual(answer.receipt, proxy.log.dropped[0].receipt, "the stored receipt, unchanged");
  assert.equal(answer.receipt.runId, runId);
  assertOneIdentity(proxy.log.requests, key, client.clientId, 2);
  // Applied once: one run under that ID, and it ran to its end.
  const direct = await connect(serverSocket);
  const list = await direct.call("run.list", { payload: { limit: 200 } });
  assert.equal(JSON.stringify(list).split(`"${runId}"`).length - 1, 1, JSON.stringify(list));
  await viewUntil(direct, runId, (view) => view.display.status === "completed");
  proxy.close();
});

test("interaction.submit stays pending across a reconnect and answers its one verdict", async () => {
  const direct = await connect(serverSocket);
  const runId = `run-tss-${Date.now()}`;
  const sessionId = `session-${runId}`;
  await direct.call("run.start", { runId, payload: { workflow: checked, projectPath: state, executionMode: "interactive", originSessionId: sessionId } });
  // The session's coordinator (its epoch outlives the proxied connection's loss).
  const { epoch } = await direct.watchSession(sessionId, () => {}, { coordinator: true });
  await viewUntil(direct, runId, (view) => view.display.status === "waiting" && view.display.activity.kind === "none");
  let atDrop;
  const proxy = await startProxy([{ kind: "dropAfter", ms: 400 }], { kind: "forward" }, () => {
    atDrop = direct.call("view.run.get", { runId });
  });
  const client = await connect(proxy.socketPath);
  const key = `submit-${runId}`;
  const answer = await client.request("interaction.submit", { runId, idempotencyKey: key, payload: { output: { summary: "done" }, coordinator: { sessionId, epoch } } });
  const dropped = (await atDrop).view;
  assert.notEqual(dropped.display.status, "completed", "the verdict was not in when the connection was lost");
  assert.ok(["accepted", "adopted"].includes(answer.outcome), JSON.stringify(answer));
  assert.equal(answer.receipt.outcome, "accepted", "answered with the step's verdict");
  assertOneIdentity(proxy.log.requests, key, client.clientId, 2);
  const final = await viewUntil(direct, runId, (view) => view.display.status === "completed" && view.display.activity.kind === "none");
  assert.equal(final.run.completedSteps, 2);
  const status = await direct.call("run.status", { runId, payload: { includeResult: true } });
  assert.deepEqual(status.result, { summary: "done" });
  proxy.close();
});

test("a coordinator's submission resent after a reconnect carries the restored watch's new epoch", async () => {
  const direct = await connect(serverSocket);
  const runId = `run-tse-${Date.now()}`;
  const sessionId = `session-${runId}`;
  await direct.call("run.start", { runId, payload: { workflow: checked, projectPath: state, executionMode: "interactive", originSessionId: sessionId } });
  await viewUntil(direct, runId, (view) => view.display.status === "waiting" && view.display.activity.kind === "none");
  // The proxied client is the session's coordinator; its connection drops while the check runs.
  let atDrop;
  const proxy = await startProxy([{ kind: "dropAfter", ms: 600 }], { kind: "forward" }, () => {
    atDrop = direct.call("view.run.get", { runId });
  });
  const client = await connect(proxy.socketPath);
  const epochs = [];
  const { epoch } = await client.watchSession(sessionId, () => {}, { coordinator: true, onEpoch: (claimed) => epochs.push(claimed) });
  const key = `submit-${runId}`;
  const answer = await client.request("interaction.submit", { runId, idempotencyKey: key, payload: { output: { summary: "done" }, coordinator: { sessionId, epoch } } });
  assert.notEqual((await atDrop).view.display.status, "completed", "the verdict was not in when the connection was lost");
  assert.ok(["accepted", "adopted"].includes(answer.outcome), JSON.stringify(answer));
  assert.equal(answer.receipt.outcome, "accepted", "answered with the step's verdict");
  assert.equal(epochs.length, 2, "the restore claimed the session again");
  assert.ok(epochs[1] > epochs[0], JSON.stringify(epochs));
  const sent = proxy.log.requests.filter((request) => request.idempotencyKey === key);
  assert.deepEqual(
    sent.map((request) => request.payload.coordinator.epoch),
    [epochs[0], epochs[0], epochs[1]],
    "the first resend is fenced; the next carries the new epoch",
  );
  assert.equal(new Set(sent.map((request) => request.requestId)).size, 3, "a new request ID per attempt");
  const final = await viewUntil(direct, runId, (view) => view.display.status === "completed" && view.display.activity.kind === "none");
  assert.equal(final.run.completedSteps, 2, "one verdict, one completion");
  proxy.close();
});

test("a watch is restored after a reconnect from the held revision, under the ID its caller holds", async () => {
  const direct = await connect(serverSocket);
  const runId = `run-tsw-${Date.now()}`;
  await direct.call("run.start", { runId, payload: { workflow: slow, projectPath: state, executionMode: "headless" } });
  await viewUntil(direct, runId, (view) => view.display.status === "running");
  // hello, the watch's answer and two events; then the connection is gone.
  const proxy = await startProxy([{ kind: "dropAfterLines", lines: 4 }]);
  const client = await connect(proxy.socketPath);
  const views = [];
  let finished;
  const done = new Promise((resolve) => (finished = resolve));
  const watch = await client.watchRun(runId, (view, revision) => {
    views.push({ revision, connections: proxy.log.connections });
    if (view.display.status === "completed" && view.display.activity.kind === "none") finished(view);
  });
  const final = await done;
  assert.ok(views.some((seen) => seen.connections === 2), `views arrived after the reconnect: ${JSON.stringify(views)}`);
  assert.ok(views.every((seen, i) => i === 0 || seen.revision >= views[i - 1].revision), JSON.stringify(views));
  const watches = proxy.log.requests.filter((request) => request.operation === "view.run.watch");
  assert.equal(watches.length, 2, "one restore");
  assert.equal(typeof watches[1].payload.sinceRevision, "number", "restored from the held revision");
  assert.deepEqual(final, (await direct.call("view.run.get", { runId })).view, "the materialized view equals a fresh read");
  await watch.unwatch();
  proxy.close();
});

test("reconnects are bounded and end with what happened and what to do; a refusal is never resent", async () => {
  const proxy = await startProxy([], { kind: "dropAnswer" });
  const client = await connect(proxy.socketPath);
  const started = Date.now();
  await assert.rejects(client.request("run.list"), (error) => {
    assert.equal(error.code, "connectionLost");
    assert.match(error.message, /run\.list/);
    assert.match(error.message, new RegExp(`${RETRIES_MAX} reconnect attempt`));
    assert.match(error.message, /server status/);
    return true;
  });
  assert.equal(proxy.log.requests.length, 1 + RETRIES_MAX, "the first send and its resends");
  assert.ok(Date.now() - started >= 1_400, "the backoff waits");
  proxy.close();

  const forward = await startProxy([]);
  const other = await connect(forward.socketPath);
  const refused = await other.request("view.run.get", { runId: "run-none" });
  assert.equal(refused.outcome, "notFound");
  assert.equal(forward.log.requests.length, 1);
  forward.close();
});

test("the client ID is the installation's: stable across clients and processes, user-only, repaired", async (t) => {
  const first = await connect(serverSocket);
  const second = await connect(serverSocket);
  assert.equal(first.clientId, second.clientId);
  assert.match(first.clientId, /^pi-[0-9a-f]{24}$/);
  const file = clientIdFile(state, PI_CLIENT);
  assert.equal(readFileSync(file, "utf8"), `${first.clientId}\n`);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.equal(statSync(path.dirname(file)).mode & 0o777, 0o700);
  // Another process reads the same ID.
  const script = `import { installationClientId } from ${JSON.stringify(path.join(packageDir, "dist/client/index.js"))}; process.stdout.write(installationClientId(${JSON.stringify(state)}));`;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout, first.clientId);
  // An explicit ID (tests) wins.
  const chosen = await connect(serverSocket, { clientId: "test-client-1" });
  assert.equal(chosen.clientId, "test-client-1");

  // A corrupt file is replaced with a warning; an unusable directory falls back to one ID
  // for the process, with a warning.
  const corrupt = mkdtempSync("/tmp/piwti-");
  t.after(() => rmSync(corrupt, { recursive: true, force: true }));
  mkdirSync(path.join(corrupt, "clients"), { mode: 0o700 });
  writeFileSync(path.join(corrupt, "clients", "pi.id"), "not a valid id\n");
  const warnings = [];
  const replaced = installationClientId(corrupt, PI_CLIENT, (message) => warnings.push(message));
  assert.match(replaced, /^pi-/);
  assert.equal(readFileSync(path.join(corrupt, "clients", "pi.id"), "utf8"), `${replaced}\n`);
  assert.match(warnings.join("\n"), /was unusable/);
  const unusable = mkdtempSync("/tmp/piwti-");
  t.after(() => rmSync(unusable, { recursive: true, force: true }));
  writeFileSync(path.join(unusable, "clients"), "a file, not a directory");
  const fallback = installationClientId(unusable, PI_CLIENT, (message) => warnings.push(message));
  assert.match(fallback, /^pi-/);
  assert.equal(installationClientId(unusable, PI_CLIENT, () => assert.fail("warned twice")), fallback, "stable within the process");
  assert.match(warnings.at(-1), /temporary client ID/);
});
