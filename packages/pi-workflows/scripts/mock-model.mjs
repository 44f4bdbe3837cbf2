#!/usr/bin/env node
// Scripted OpenAI-compatible mock model for offline tests of Pi 1.6 (recipe: shared/docs/pi-api.md §11):
// OpenAI Chat Completions with streaming SSE, as Pi's `openai-completions` provider API sends and reads it.
//
// Usage: node scripts/mock-model.mjs [--port N] [--script fixed|echo|hang]
//   Listens on 127.0.0.1 (port 0 by default) and prints {"port":N} as its first stdout line.
//   POST /v1/chat/completions answers as a streaming (SSE) chat completion; GET /v1/models lists "mock-model".
//
// Scripts (default from --script or MOCK_SCRIPT, default "fixed"); a marker in the latest user message
// overrides the default for that request:
//   fixed       reply with MOCK_FIXED_TEXT (default "Hello from the mock model.")      marker [mock:fixed]
//   echo        reply with the rest of the line after the first "ECHO:" in the prompt,
//               e.g. 'ECHO: {"answer":42}' -> '{"answer":42}'                         marker [mock:echo]
//   hang        accept the request and never answer (for timeout/abort tests)      marker [mock:hang]
//   slow        stream one chunk every 500 ms for ~60 s                             marker [mock:slow]
//   big=N       reply with N characters of "x"                                      marker [mock:big=N]
//   error       answer HTTP 400 (a non-retryable provider error)                    marker [mock:error]
//   tool        call Pi's `bash` tool with the rest of the line after "BASH:", then, once the tool
//               result arrives, reply "Tool finished: <first 200 chars of the result>" marker [mock:tool]
//
// A headless workflow step (the request offers a `workflow` tool and the prompt names a
// "requestId"): fixed and echo submit their reply (parsed as JSON when it is JSON) with one
// `workflow` submit call instead, then answer the tool result with a short text.
//
// Every request is appended as one JSON line {n, time, method, url, auth, body} to the file named by
// MOCK_REQUEST_LOG (if set). The process exits on SIGTERM/SIGINT or when stdin closes (if stdin is a pipe).
import fs from "node:fs";
import http from "node:http";

const args = process.argv.slice(2);
const argValue = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const port = Number(argValue("--port") ?? process.env.MOCK_PORT ?? 0);
const defaultScript = argValue("--script") ?? process.env.MOCK_SCRIPT ?? "fixed";
const fixedText = process.env.MOCK_FIXED_TEXT ?? "Hello from the mock model.";
const logFile = process.env.MOCK_REQUEST_LOG;
let counter = 0;

const textOf = (content) =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? content.filter((part) => part && part.type === "text").map((part) => part.text).join("")
      : "";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function chooseScript(userText) {
  const marker = /\[mock:([a-z]+)(?:=(\d+))?\]/.exec(userText);
  const [name, arg] = marker ? [marker[1], marker[2]] : defaultScript.split("=");
  return { name, arg: arg === undefined ? undefined : Number(arg) };
}

function echoText(userText) {
  const match = /ECHO:[ \t]*([^\n]*)/.exec(userText);
  return match ? match[1].replace(/\[mock:[a-z]+(?:=\d+)?\]/g, "").trim() : "";
}

const sockets = new Set();
const server = http.createServer(async (req, res) => {
  let raw = "";
  for await (const chunk of req) raw += chunk;
  const n = ++counter;
  let body = null;
  try {
    body = raw ? JSON.parse(raw) : null;
  } catch {
    body = { unparsable: raw.slice(0, 1000) };
  }
  if (logFile) {
    fs.appendFileSync(
      logFile,
      JSON.stringify({ n, time: Date.now(), method: req.method, url: req.url, auth: req.headers.authorization ?? null, body }) + "\n",
    );
  }
  if (req.method === "GET" && req.url.endsWith("/models")) {
    res.writeHead(200, { "content-type": "application/json" });
    return res.end(JSON.stringify({ object: "list", data: [{ id: "mock-model", object: "model" }] }));
  }
  if (req.method !== "POST" || !req.url.endsWith("/chat/completions") || !body) {
    res.writeHead(404, { "content-type": "application/json" });
    return res.end(JSON.stringify({ error: { message: "not found", type: "invalid_request_error" } }));
  }

  const messages = Array.isArray(body.messages) ? body.messages : [];
  const userText = textOf([...messages].reverse().find((m) => m.role === "user")?.content);
  const script = chooseScript(userText);
  const id = `chatcmpl-mock-${n}`;
  let closed = false;
  res.on("close", () => {
    closed = true;
  });

  if (script.name === "hang") return; // never answer; the socket stays open until the client goes away
  if (script.name === "error") {
    res.writeHead(400, { "content-type": "application/json" });
    return res.end(JSON.stringify({ error: { message: "mock model: scripted bad request", type: "invalid_request_error" } }));
  }

  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const send = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
  const created = Math.floor(Date.now() / 1000);
  const chunk = (delta, finish = null) =>
    send({ id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }] });
  const finish = () => {
    chunk({}, "stop");
    send({ id, object: "chat.completion.chunk", created, model: body.model, choices: [],
      usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 } });
    res.write("data: [DONE]\n\n");
    res.end();
  };
  const say = (text) => {
    chunk({ role: "assistant", content: "" });
    for (let i = 0; i < text.length; i += 4096) chunk({ content: text.slice(i, i + 4096) });
    finish();
  };

  if (script.name === "slow") {
    chunk({ role: "assistant", content: "" });
    for (let i = 0; i < 120 && !closed; i++) {
      chunk({ content: `tick${i} ` });
      await sleep(500);
    }
    if (!closed) finish();
    return;
  }
  // Pi 1.6 may send `system` messages in mid-conversation (prompt or tool changes), so "the tool result
  // just came back" is decided on the last message that is not a system/developer message.
  const last = messages.filter((m) => m.role !== "system" && m.role !== "developer").at(-1) ?? {};
  if (script.name === "tool" && last.role === "tool") return say(`Tool finished: ${textOf(last.content).slice(0, 200)}`);
  const callTool = (name, params) => {
    chunk({ role: "assistant", content: null,
      tool_calls: [{ index: 0, id: `call_mock_${n}`, type: "function", function: { name, arguments: "" } }] });
    chunk({ tool_calls: [{ index: 0, function: { arguments: JSON.stringify(params) } }] });
    chunk({}, "tool_calls");
    send({ id, object: "chat.completion.chunk", created, model: body.model, choices: [],
      usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 } });
    res.write("data: [DONE]\n\n");
    res.end();
  };
  if (script.name === "tool") {
    const command = /BASH:[ \t]*([^\n]*)/.exec(userText)?.[1]?.replace(/\[mock:[a-z]+(?:=\d+)?\]/g, "").trim() ?? "true";
    return callTool("bash", { command });
  }
  if (script.name === "big") return say("x".repeat(script.arg ?? 300_000));
  const reply = script.name === "echo" ? echoText(userText) : fixedText;
  // A headless workflow step (its bridge offers the `workflow` tool and the prompt names the
  // requestId): submit the reply through the tool, as the step's contract asks.
  const requestId = /"requestId": "([^"]+)"/.exec(userText)?.[1];
  const offersWorkflow = Array.isArray(body.tools) && body.tools.some((tool) => tool?.function?.name === "workflow");
  if (requestId && offersWorkflow) {
    if (last.role === "tool") return say(`Submitted: ${textOf(last.content).slice(0, 200)}`);
    let output = reply;
    try {
      output = JSON.parse(reply);
    } catch {}
    return callTool("workflow", { action: "submit", requestId, output });
  }
  return say(reply);
});

server.on("connection", (socket) => {
  sockets.add(socket);
  socket.on("close", () => sockets.delete(socket));
});

function shutdown() {
  server.close();
  for (const socket of sockets) socket.destroy();
  setTimeout(() => process.exit(0), 100).unref();
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
let stdinIsPipe = false;
try {
  stdinIsPipe = fs.fstatSync(0).isFIFO();
} catch {}
if (stdinIsPipe) {
  process.stdin.on("end", shutdown);
  process.stdin.on("error", shutdown);
  process.stdin.resume();
}

server.listen(port, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
