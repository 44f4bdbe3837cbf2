#!/usr/bin/env node
// A scripted OpenAI Chat Completions mock (streaming SSE, 127.0.0.1 only) that plays a model
// working through pi-workflows steps, for the extension's end-to-end tests:
//   - the last message is a workflow step naming `"action": "submit", "requestId": "R"`: call the
//     `workflow` tool with {action: "submit", requestId: R, output: <next output>};
//   - the last message is the tool's result: "Rejected…" → submit the next output for the same
//     request; anything else → reply "STEP-DONE" and stop;
//   - anything else: reply "MOCK-REPLY".
// Outputs come from MOCK_OUTPUTS (a JSON array), used in order; when they run out the last one
// repeats. Prints {"port":N} first. Every request's roles go to MOCK_REQUEST_LOG (one JSON line each).
import fs from "node:fs";
import http from "node:http";

const outputs = JSON.parse(process.env.MOCK_OUTPUTS ?? '[{"ok":true}]');
const logFile = process.env.MOCK_REQUEST_LOG;
let next = 0;
let requests = 0;

const textOf = (content) =>
  typeof content === "string" ? content : Array.isArray(content) ? content.filter((p) => p && p.type === "text").map((p) => p.text).join("") : "";

function decide(messages) {
  const relevant = messages.filter((m) => m.role !== "system");
  const last = relevant[relevant.length - 1];
  if (!last) return { text: "MOCK-REPLY" };
  if (last.role === "tool") {
    const result = textOf(last.content);
    if (/^Rejected/.test(result)) {
      // The same request again, with the next output.
      for (let i = relevant.length - 1; i >= 0; i--) {
        const call = relevant[i].tool_calls?.[0];
        if (call) {
          const args = JSON.parse(call.function.arguments);
          return { toolCall: { ...args, output: outputs[Math.min(next++, outputs.length - 1)] } };
        }
      }
    }
    return { text: "STEP-DONE" };
  }
  const text = textOf(last.content);
  const step = /"action": "submit", "requestId": "([^"]+)"/.exec(text);
  if (last.role === "user" && step) {
    return { toolCall: { action: "submit", requestId: step[1], output: outputs[Math.min(next++, outputs.length - 1)] } };
  }
  return { text: "MOCK-REPLY" };
}

const server = http.createServer(async (req, res) => {
  let raw = "";
  for await (const chunk of req) raw += chunk;
  if (req.method === "GET" && req.url?.startsWith("/v1/models")) {
    res.writeHead(200, { "content-type": "application/json" });
    return res.end(JSON.stringify({ object: "list", data: [{ id: "mock-model", object: "model" }] }));
  }
  if (req.method !== "POST" || !req.url?.startsWith("/v1/chat/completions")) {
    res.writeHead(404);
    return res.end();
  }
  const body = JSON.parse(raw || "{}");
  const n = ++requests;
  const reply = decide(body.messages ?? []);
  if (logFile) fs.appendFileSync(logFile, JSON.stringify({ n, roles: (body.messages ?? []).map((m) => m.role), reply }) + "\n");
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const id = `chatcmpl-${n}`;
  const created = Math.floor(Date.now() / 1000);
  const send = (o) => res.write(`data: ${JSON.stringify(o)}\n\n`);
  const chunk = (delta, finish = null) => send({ id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }] });
  if (reply.toolCall) {
    chunk({ role: "assistant", content: null });
    chunk({ tool_calls: [{ index: 0, id: `call_wf_${n}`, type: "function", function: { name: "workflow", arguments: "" } }] });
    chunk({ tool_calls: [{ index: 0, function: { arguments: JSON.stringify(reply.toolCall) } }] });
    chunk({}, "tool_calls");
  } else {
    chunk({ role: "assistant", content: "" });
    chunk({ content: reply.text });
    chunk({}, "stop");
  }
  send({ id, object: "chat.completion.chunk", created, model: body.model, choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
  res.write("data: [DONE]\n\n");
  res.end();
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
process.on("SIGTERM", () => process.exit(0));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
