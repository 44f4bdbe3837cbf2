// The TypeScript half of the `differential_ts` fuzz driver (fuzz/examples/differential_ts.rs).
// Long-lived: it reads lines of base64 (each the raw bytes of one frame, newline included or
// not), runs them through the built client decoder (packages/pi-workflows/dist/client/
// protocol.js: decodeMessage = decodeFrame + validateMessage, then encodeMessage), and
// answers one JSON line per input, in order:
//   {"ok":"<base64 of encodeMessage(decodeMessage(line))>"}
//   {"error":"frame"|"protocol","code":"<FrameError/ProtocolError code>"}
//   {"encodeError":"<class>:<code>"}   an accepted message that does not re-encode
//   {"crash":"<stack>"}                 anything else thrown (a TypeError, a RangeError, ...)
// It writes {"ready":true} once the decoder is imported. Usage: node decode.mjs [protocol.js]
import { pathToFileURL } from "node:url";

const target = process.argv[2]
  ? pathToFileURL(process.argv[2]).href
  : new URL("../../packages/pi-workflows/dist/client/protocol.js", import.meta.url).href;
const { decodeMessage, encodeMessage, FrameError, ProtocolError } = await import(target);

function classify(error) {
  if (error instanceof FrameError) return { error: "frame", code: error.code };
  if (error instanceof ProtocolError) return { error: "protocol", code: error.code };
  return { crash: String(error?.stack ?? error).slice(0, 2000) };
}

function answer(base64) {
  const line = Buffer.from(base64, "base64");
  let message;
  try {
    message = decodeMessage(line);
  } catch (error) {
    return JSON.stringify(classify(error));
  }
  try {
    return JSON.stringify({ ok: encodeMessage(message).toString("base64") });
  } catch (error) {
    const what = classify(error);
    return JSON.stringify(what.crash ? what : { encodeError: `${what.error}:${what.code}` });
  }
}

let pending = "";
process.stdin.setEncoding("latin1");
process.stdin.on("data", (chunk) => {
  pending += chunk;
  const lines = pending.split("\n");
  pending = lines.pop();
  if (lines.length === 0) return;
  process.stdout.write(lines.map(answer).join("\n") + "\n");
});
process.stdin.on("end", () => process.exit(0));
process.stdout.write(JSON.stringify({ ready: true }) + "\n");
