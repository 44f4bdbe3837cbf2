#!/usr/bin/env node
// Benchmark (not a test: it prints figures and asserts nothing about time) of the extension
// inside the real pinned Pi 1.6.0 (RPC mode), against the real `pi-workflows` server binary and
// the in-process loopback mock model of the e2e harness (test/extension/support/e2e.mjs):
//
//   1. step delivery: a step message the server holds → its custom message in Pi, over a
//      workflow of N chained agent steps the mock model submits at once. t1 = Pi's RPC event
//      stream shows `message_start` of that `pi-workflows-step` message (its hidden
//      workflowMessageId). t0, three ways:
//        - committed: a client reading `view.session.window` every --poll-gap ms first sees
//          the step pending (within one read of its commit);
//        - eligible: the same, pending with no open turn and the run not paused (the previous
//          step's turn is over, so the extension may send it);
//        - session watch: a second, non-coordinator client's `view.session.watch` first shows
//          it pending (the feed the extension's coordinator watch reads too). A step the
//          extension found by its own read before the feed published it has no sample here.
//      Baseline: a plain user `prompt` written to Pi's stdin → `message_start` of that user message.
//   2. widget update: t0 = a second client's `run.pause` / `run.resume` receipt (the change is
//      committed); t1 = the extension's next `setWidget`/`setStatus` record on Pi's stdout
//      (`extension_ui_request`) that shows the new status.
//      Baseline: the same client's `run.status` round trip. Also shown: commit → the second
//      client's own session watch showing it (the server's part of the figure).
//   3. memory: VmRSS / VmHWM (/proc/<pid>/status) of a Pi process with the extension after one
//      session with one completed run, versus Pi with `--no-extensions` doing the same turns
//      (a step-like prompt the mock model answers with a `workflow` tool call that Pi lacks);
//      also the figure-1 Pi right after its N-step run against that Pi after N such prompts.
//
//   node packages/pi-workflows/bench/pi-latency.mjs [--steps N] [--widget N] [--prompts N] [--poll-gap MS] [--json]
//   (or `npm run bench:pi -- [flags]` in packages/pi-workflows; it does not build: `npm run build` first)
//
// Needs the pinned Pi (scripts/install-pi.sh), the server binary (cargo build --locked, or
// PI_WORKFLOWS_BIN) and the built package (npm run build). Everything runs below a private
// /tmp dir (PI_CODING_AGENT_DIR, state dir, sessions); every process it started is ended at
// the end, also on error or Ctrl+C.
import fs from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { extensionPath, Harness, missingPi, piBin, Rpc, serverBinary, sleep, textOf, WAIT_MS } from "../test/extension/support/e2e.mjs";

const { values: args } = parseArgs({
  options: {
    steps: { type: "string", default: "30" },
    widget: { type: "string", default: "" },
    prompts: { type: "string", default: "" },
    "poll-gap": { type: "string", default: "2" },
    json: { type: "boolean", default: false },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (args.help) {
  console.log("usage: node bench/pi-latency.mjs [--steps N (30)] [--widget N (= steps)] [--prompts N (= steps)] [--poll-gap MS (2; 0 = no poller)] [--json]");
  process.exit(0);
}
const STEPS = positive(args.steps, "--steps");
const WIDGET_N = args.widget ? positive(args.widget, "--widget") : STEPS;
const PROMPTS = args.prompts ? positive(args.prompts, "--prompts") : STEPS;
/** Between two `view.session.window` reads of the step poller (0: no poller). */
const POLL_GAP_MS = Number(args["poll-gap"]);
if (!(POLL_GAP_MS >= 0)) throw new Error(`--poll-gap must be a number of ms ≥ 0, got ${args["poll-gap"]}`);

function positive(value, name) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, got ${value}`);
  return n;
}

for (const [what, missing] of [
  ["the pinned Pi", missingPi],
  ["the server binary", fs.existsSync(serverBinary) ? undefined : `${serverBinary} is missing: cargo build --locked in the repository root, or set PI_WORKFLOWS_BIN`],
  ["the built extension", fs.existsSync(extensionPath) ? undefined : `${extensionPath} is missing: npm run build in packages/pi-workflows`],
]) {
  if (missing) {
    console.error(`bench: ${what}: ${missing}`);
    process.exit(2);
  }
}

const now = () => performance.now();
const log = (message) => process.stderr.write(`[bench ${(now() / 1000).toFixed(1)}s] ${message}\n`);

// ---------------------------------------------------------------------------------------------
// Timestamps of Pi's stdout records (the harness's Rpc keeps the records, not when they came).
function tap(rpc) {
  const records = [];
  let buffered = "";
  rpc.child.stdout.on("data", (chunk) => {
    const at = now();
    buffered += chunk;
    for (let i = buffered.indexOf("\n"); i >= 0; i = buffered.indexOf("\n")) {
      const line = buffered.slice(0, i).replace(/\r$/, "");
      buffered = buffered.slice(i + 1);
      if (!line) continue;
      try {
        records.push({ at, record: JSON.parse(line) });
      } catch {
        // not a JSON line: Rpc's own parser says so
      }
    }
  });
  return records;
}

/** Bound on each wait (as the harness's), and the bench's quicker look (the harness polls every 100 ms). */
const FAST_POLL_MS = 5;


/** Waits until `records` holds one after index `from` that `match` accepts; returns it. */
async function nextRecord(records, from, match, what, context = () => "") {
  const deadline = Date.now() + WAIT_MS;
  let i = from;
  for (;;) {
    for (; i < records.length; i++) if (match(records[i].record)) return { ...records[i], index: i };
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${context()}`);
    await sleep(FAST_POLL_MS);
  }
}

let requestCount = 0;
/** One RPC command, its response picked from the tapped records (Rpc.send polls every 100 ms). */
async function command(rpc, records, body) {
  const id = `bench${++requestCount}`;
  const mark = records.length;
  rpc.child.stdin.write(JSON.stringify({ id, ...body }) + "\n");
  const { record } = await nextRecord(records, mark, (r) => r.type === "response" && r.id === id, `a response to ${body.type}`, rpc.context);
  if (record.success !== true) throw new Error(`${body.type} failed: ${JSON.stringify(record)}`);
  return record;
}

/** After a prompt: agent_end, then get_state until Pi is not streaming. */
async function settled(rpc, records, from) {
  await nextRecord(records, from, (r) => r.type === "agent_end", "agent_end", rpc.context);
  for (;;) {
    if ((await command(rpc, records, { type: "get_state" })).data.isStreaming === false) return;
    await sleep(FAST_POLL_MS);
  }
}

// ---------------------------------------------------------------------------------------------
function stepsWorkflow(n) {
  const nodes = [];
  const edges = [];
  for (let i = 1; i <= n; i++) {
    nodes.push(`    s${i}: agent({ prompt: "Bench step ${i}: pick a number.", expectedOutput: '{"n": a number}' }),`);
    if (i > 1) edges.push(`{ from: "s${i - 1}", to: "s${i}" }`);
  }
  return `import { agent, defineWorkflow } from "pi-workflows";
export default defineWorkflow({
  name: "bench-steps",
  startAt: "s1",
  nodes: {
${nodes.join("\n")}
  },
  edges: [${edges.join(", ")}],
});
`;
}

const isStepStart = (r) => r.type === "message_start" && r.message?.role === "custom" && r.message.customType === "pi-workflows-step";
const isTerminal = (r) => r.type === "message_end" && r.message?.role === "custom" && r.message.customType === "pi-workflows-terminal";

/** Figure 1: step messages, and the plain-prompt baseline, in one Pi process. */
async function stepLatency(h) {
  fs.writeFileSync(h.workflowPath("bench-steps"), stepsWorkflow(STEPS));
  const rpc = h.rpc();
  const records = tap(rpc);
  await rpc.prompt("hello");
  await rpc.idle();
  const { sessionId } = await rpc.state();

  // The probe: a second client, not a coordinator, watching the session's view. Its events
  // come from the server's session feed, which the extension's own watch also reads.
  const probe = await h.probe();
  const watched = { created: new Map(), eligible: new Map() }; // workflowMessageId → first time seen
  const polled = { created: new Map(), eligible: new Map() };
  const note = (into, view, at) => {
    const paused = view.activeRun?.display?.status === "paused";
    for (const m of view.messages ?? []) {
      if (m.kind !== "step" || m.status !== "pending") continue;
      if (!into.created.has(m.workflowMessageId)) into.created.set(m.workflowMessageId, at);
      if (!view.openTurn && !paused && !into.eligible.has(m.workflowMessageId)) into.eligible.set(m.workflowMessageId, at);
    }
  };
  let views = 0;
  await probe.watchSession(sessionId, (view) => {
    views++;
    note(watched, view, now());
  });
  // A third client reading `view.session.window` in a loop: when the step was committed, to
  // within one read (the feed above publishes 50 ms after a commit: the server's RUN_FEED_INTERVAL_MS).
  const poller = await h.probe();
  let polling = POLL_GAP_MS > 0;
  let reads = 0;
  let pollError;
  const pollLoop = (async () => {
    try {
      while (polling) {
        const view = await poller.sessionWindow(sessionId);
        reads++;
        note(polled, view, now());
        await sleep(POLL_GAP_MS);
      }
    } catch (error) {
      pollError = error; // the poller's client closed (cleanup after a failure) or failed
    }
  })();

  log(`figure 1: a workflow of ${STEPS} agent steps`);
  const started = now();
  const from = rpc.notifications().length;
  await rpc.prompt(`/workflow start ${h.workflowPath("bench-steps")}`);
  const runId = await rpc.startedRun(from);
  await nextRecord(records, 0, isTerminal, "the run's terminal message", rpc.context);
  const runMs = now() - started;
  polling = false;
  await pollLoop;
  poller.close();
  if (pollError) throw new Error(`the step poller failed: ${pollError.message}`);
  await rpc.idle();
  const display = (await h.runView(runId))?.display;
  if (display?.status !== "completed") throw new Error(`the bench run ended ${JSON.stringify(display)}`);
  await sleep(1_000); // as figure 3: let it settle
  const memoryAfterSteps = memoryOf(rpc.child.pid);

  const shown = new Map();
  for (const { at, record } of records) {
    if (!isStepStart(record)) continue;
    const id = record.message.details?.workflowMessageId;
    if (typeof id === "string" && !shown.has(id)) shown.set(id, at);
  }
  const latency = (from) => {
    const samples = [];
    for (const [id, t1] of shown) if (from.has(id)) samples.push(t1 - from.get(id));
    return samples;
  };
  const figures = {
    polledCreated: latency(polled.created),
    polledEligible: latency(polled.eligible),
    watchedCreated: latency(watched.created),
  };
  // Where a step's commit falls against the previous step's turn: after its agent_end (> 0)?
  const agentEnds = records.filter((r) => r.record.type === "agent_end").map((r) => r.at);
  const afterTurnEnd = [];
  for (const [id, t0] of polled.created) {
    const before = agentEnds.filter((at) => at <= t0).at(-1);
    if (before !== undefined && id !== [...shown.keys()][0]) afterTurnEnd.push(t0 - before);
  }
  if (shown.size !== STEPS) log(`warning: Pi showed ${shown.size} step messages for ${STEPS} steps`);
  for (const [name, samples] of Object.entries(figures)) if (samples.length !== shown.size && (POLL_GAP_MS > 0 || !name.startsWith("polled"))) log(`warning: ${name}: ${samples.length} of ${shown.size} steps seen`);

  // Baseline: plain prompts in the same Pi process.
  log(`figure 1 baseline: ${PROMPTS} plain prompts`);
  const prompts = [];
  for (let i = 1; i <= PROMPTS; i++) {
    const text = `bench ping ${i}`;
    const mark = records.length;
    const t0 = now();
    const response = command(rpc, records, { type: "prompt", message: text });
    response.catch(() => {}); // awaited below; a failure before that must not be unhandled
    const seen = await nextRecord(records, mark, (r) => r.type === "message_start" && r.message?.role === "user" && textOf(r.message.content) === text, `the prompt "${text}"`, rpc.context);
    prompts.push(seen.at - t0);
    await response;
    await settled(rpc, records, mark);
  }
  return { rpc, records, probe, sessionId, ...figures, afterTurnEnd, memoryAfterSteps, prompts, runMs, views, reads };
}

// ---------------------------------------------------------------------------------------------
const widgetStatus = (r) => {
  if (r.type !== "extension_ui_request") return undefined;
  if (r.method === "setWidget" && r.widgetKey === "pi-workflows") return /· (\w+)/.exec(r.widgetLines?.[0] ?? "")?.[1];
  if (r.method === "setStatus" && r.statusKey === "pi-workflows") return /^wf \S+ (\w+)/.exec(r.statusText ?? "")?.[1];
  return undefined;
};

/** Figure 2: pause/resume by a second client → the widget; baseline run.status round trips. */
async function widgetLatency(h, { rpc, records, probe, sessionId }) {
  // When the second client's own session watch shows the change (the feed's publication).
  const feedSeen = [];
  await probe.watchSession(sessionId, (view) => feedSeen.push({ at: now(), status: view.activeRun?.display?.status }));
  log(`figure 2: ${WIDGET_N} pause/resume pairs on a waiting checkpoint`);
  const from = rpc.notifications().length;
  await rpc.prompt(`/workflow start ${h.workflowPath("gate")}`);
  const runId = await rpc.startedRun(from);
  const waitStatus = (status, mark) =>
    nextRecord(records, mark, (r) => widgetStatus(r) === status, `the widget to show ${status}`, () => `${rpc.context()}\nwidget: ${lastWidget(records)}`);
  await waitStatus("waiting", 0);
  await rpc.idle();
  await sleep(200); // the checkpoint's message and its branch report settle

  const phaseStart = records.length;
  const pause = [];
  const resume = [];
  const callMs = { pause: [], resume: [] };
  const feedMs = [];
  for (let i = 0; i < WIDGET_N; i++) {
    for (const [op, status, into] of [
      ["run.pause", "paused", pause],
      ["run.resume", "waiting", resume],
    ]) {
      const mark = records.length;
      const sent = now();
      await probe.call(op, { runId, payload: {} });
      const t0 = now();
      callMs[op === "run.pause" ? "pause" : "resume"].push(t0 - sent);
      const feedMark = feedSeen.length;
      const seen = await waitStatus(status, mark);
      into.push(seen.at - t0);
      const feed = feedSeen.slice(feedMark).find((v) => v.status === status);
      if (feed) feedMs.push(feed.at - t0);
      await sleep(20);
    }
  }
  const phase = records.slice(phaseStart).map((r) => r.record);
  const ui = phase.filter((r) => r.type === "extension_ui_request");
  const counts = {
    setWidget: ui.filter((r) => r.method === "setWidget").length,
    setStatus: ui.filter((r) => r.method === "setStatus").length,
    messages: phase.filter((r) => r.type === "message_end" && r.message?.role === "custom").length,
    turns: phase.filter((r) => r.type === "agent_start").length,
  };
  const status = [];
  for (let i = 0; i < WIDGET_N * 2; i++) {
    const t0 = now();
    await probe.call("run.status", { runId, payload: {} });
    status.push(now() - t0);
  }
  await probe.call("run.cancel", { runId, payload: {} }).catch(() => {});
  return { pause, resume, status, callMs, feedMs, counts };
}

function lastWidget(records) {
  for (let i = records.length - 1; i >= 0; i--) {
    const r = records[i].record;
    if (r.type === "extension_ui_request" && r.method === "setWidget") return JSON.stringify(r.widgetLines);
  }
  return "(none)";
}

// ---------------------------------------------------------------------------------------------
function memoryOf(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1]);
  return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
}

/** Figure 3: one Pi with the extension and one completed run; one Pi without extensions, same turns. */
async function memory(h) {
  log("figure 3: memory of a Pi with the extension (one completed run) and one without extensions");
  const withDir = path.join(h.root, "sessions-mem-ext");
  const withoutDir = path.join(h.root, "sessions-mem-plain");
  fs.mkdirSync(withDir);
  fs.mkdirSync(withoutDir);

  const ext = h.rpc([], { sessionDir: withDir });
  const extRecords = tap(ext);
  await ext.prompt("hello");
  await ext.idle();
  const from = ext.notifications().length;
  await ext.prompt(`/workflow start ${h.workflowPath("pick")}`);
  const runId = await ext.startedRun(from);
  await nextRecord(extRecords, 0, isTerminal, "the pick run's terminal message", ext.context);
  await ext.idle();
  const display = (await h.runView(runId))?.display;
  if (display?.status !== "completed") throw new Error(`the pick run ended ${JSON.stringify(display)}`);

  // The same turns without the extension: hello; a step-like prompt (the mock model calls the
  // `workflow` tool, which Pi does not know: an error result, then "STEP-DONE"); one more reply.
  // Then more step-like prompts, for the figure-1 Pi after its STEPS steps.
  const plain = new Rpc(["--session-dir", withoutDir, "--no-extensions"], h.env, h.proj);
  h.children.push(plain);
  const plainRecords = tap(plain);
  const turn = async (text) => {
    const mark = plainRecords.length;
    await command(plain, plainRecords, { type: "prompt", message: text });
    await settled(plain, plainRecords, mark);
  };
  const stepLike = (i) => `Bench step ${i}: pick a number, then call the workflow tool with {"action": "submit", "requestId": "req-bench-${i}"}.`;
  await turn("hello");
  await turn(stepLike(1));
  await turn("the workflow ended");
  await sleep(1_000); // let both settle (timers, the extension's poll)
  const result = { ext: memoryOf(ext.child.pid), plain: memoryOf(plain.child.pid) };
  for (let i = 2; i <= STEPS; i++) await turn(stepLike(i));
  await sleep(1_000);
  result.plainSteps = memoryOf(plain.child.pid);
  return result;
}

// ---------------------------------------------------------------------------------------------
function quantile(samples, q) {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  // nearest rank
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}
const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(1)} ms` : "n/a");
const mib = (kb) => `${(kb / 1024).toFixed(1)} MiB`;
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}×` : "n/a");

function printTable(rows) {
  const head = ["figure", "value", "baseline", "ratio"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ");
  console.log(line(head));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const r of rows) console.log(line(r));
}

// ---------------------------------------------------------------------------------------------
let harness;
let cleaning;
async function cleanup() {
  cleaning ??= (async () => {
    if (!harness) return;
    const root = harness.root;
    await harness.close().catch((error) => log(`cleanup: ${error.message}`));
    killLeftovers(root);
  })();
  return cleaning;
}

/** Any process still running with this bench's private dirs in its environment: end its group. */
function killLeftovers(root) {
  const ownGroup = process.getpgid?.(process.pid) ?? -1;
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let environ;
    try {
      environ = fs.readFileSync(`/proc/${name}/environ`, "utf8");
    } catch {
      continue;
    }
    if (!environ.includes(`PI_CODING_AGENT_DIR=${root}/`)) continue;
    const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z") continue;
    const pgid = Number(fields[2]);
    try {
      if (pgid !== ownGroup && pgid > 1) process.kill(-pgid, "SIGKILL");
      else process.kill(Number(name), "SIGKILL");
      log(`cleanup: killed leftover pid ${name} (group ${pgid})`);
    } catch {
      // gone
    }
  }
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    log(`${signal}: cleaning up`);
    cleanup().finally(() => process.exit(130));
  });
}

async function main() {
  const begun = now();
  log(`Pi ${piBin}; server ${serverBinary}; steps ${STEPS}, widget pairs ${WIDGET_N}, prompts ${PROMPTS}`);
  harness = await Harness.create({ outputs: [{ n: 42 }], tag: "bench" });
  const h = harness;
  const one = await stepLatency(h);
  const two = await widgetLatency(h, one);
  const three = await memory(h);
  const totalS = (now() - begun) / 1000;

  const widgetAll = [...two.pause, ...two.resume];
  const rows = [];
  const pair = (label, samples, base) => {
    for (const [q, name] of [
      [0.5, "p50"],
      [0.99, "p99"],
    ]) {
      const v = quantile(samples, q);
      const b = quantile(base, q);
      rows.push([`${label}, ${name} (n=${samples.length})`, ms(v), ms(b), ratio(v, b)]);
    }
  };
  pair("1. step committed → visible in Pi", one.polledCreated, one.prompts);
  pair("   step eligible → visible in Pi", one.polledEligible, one.prompts);
  pair("   step in session watch → visible", one.watchedCreated, one.prompts);
  pair("2. widget after pause/resume commit", widgetAll, two.status);
  pair("   of which: commit → session watch", two.feedMs, two.status);
  rows.push(["3. Pi VmRSS, extension + 1 run", mib(three.ext.rss), mib(three.plain.rss), ratio(three.ext.rss, three.plain.rss)]);
  rows.push(["   Pi VmHWM, extension + 1 run", mib(three.ext.hwm), mib(three.plain.hwm), ratio(three.ext.hwm, three.plain.hwm)]);
  rows.push(["   added by the extension (RSS / HWM)", `${mib(three.ext.rss - three.plain.rss)} / ${mib(three.ext.hwm - three.plain.hwm)}`, "", ""]);
  rows.push([`   Pi VmRSS, extension + ${STEPS}-step run`, mib(one.memoryAfterSteps.rss), mib(three.plainSteps.rss), ratio(one.memoryAfterSteps.rss, three.plainSteps.rss)]);
  rows.push([`   Pi VmHWM, extension + ${STEPS}-step run`, mib(one.memoryAfterSteps.hwm), mib(three.plainSteps.hwm), ratio(one.memoryAfterSteps.hwm, three.plainSteps.hwm)]);

  console.log("");
  console.log(`pi-workflows in Pi 1.6.0 (RPC mode), ${new Date().toISOString()}, whole run ${totalS.toFixed(0)} s`);
  console.log("baselines: 1 — a plain RPC prompt → its user message_start (same Pi); 2 — run.status round trip (same client); 3 — Pi --no-extensions, same turns (step-like prompts)");
  printTable(rows);
  console.log("");
  const bench = memoryOf(one.rpc.child.pid);
  console.log(
    [
      `${STEPS}-step run: ${(one.runMs / 1000).toFixed(1)} s, ${(one.runMs / STEPS).toFixed(0)} ms a step (model turns included)`,
      `a step is committed ${ms(quantile(one.afterTurnEnd, 0.5))} (p50) after the previous step's agent_end in Pi`,
      `step poller: ${one.reads} session-window reads, ${POLL_GAP_MS} ms apart; session watch: ${one.views} views`,
      `${WIDGET_N * 2} pause/resume changes drew ${two.counts.setWidget} setWidget and ${two.counts.setStatus} setStatus records, added ${two.counts.messages} workflow messages and started ${two.counts.turns} model turns`,
      `run.pause call p50 ${ms(quantile(two.callMs.pause, 0.5))}, run.resume call p50 ${ms(quantile(two.callMs.resume, 0.5))}`,
      `the figure-1/2 Pi at the end (${STEPS} steps, ${PROMPTS} prompts, ${WIDGET_N * 2} widget changes): VmRSS ${mib(bench.rss)}, VmHWM ${mib(bench.hwm)}`,
    ].join("\n"),
  );
  if (args.json) {
    console.log(
      JSON.stringify({
        stepCommitted: one.polledCreated,
        stepEligible: one.polledEligible,
        stepWatched: one.watchedCreated,
        prompts: one.prompts,
        widgetPause: two.pause,
        widgetResume: two.resume,
        widgetFeed: two.feedMs,
        runStatus: two.status,
        memoryKiB: { ...three, afterSteps: one.memoryAfterSteps, bench },
      }),
    );
  }
}

try {
  await main();
} catch (error) {
  console.error(`bench failed: ${error.stack ?? error}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
