// Reading a digest-bound ContentRef in 512 KiB parts, verified before it is parsed.
import { createHash } from "node:crypto";
import type { RunnerSession } from "./session.js";
import { ProtocolError } from "./channel.js";

export const CONTENT_PART_BYTES = 512 * 1024;

export interface ContentRef {
  digest: string;
  mediaType: string;
  byteLength: number;
}

export async function readContent(session: RunnerSession, ref: ContentRef): Promise<Buffer> {
  if (typeof ref?.digest !== "string" || !Number.isInteger(ref.byteLength) || ref.byteLength < 0) {
    throw new ProtocolError("malformed content reference");
  }
  const parts: Buffer[] = [];
  let offset = 0;
  while (offset < ref.byteLength) {
    const length = Math.min(CONTENT_PART_BYTES, ref.byteLength - offset);
    const response = await session.send("content.read", { digest: ref.digest, mediaType: ref.mediaType, offset, length });
    const part = response.result as { offset?: number; length?: number; totalLength?: number; dataBase64?: string } | undefined;
    const bytes = Buffer.from(part?.dataBase64 ?? "", "base64");
    if (part?.offset !== offset || bytes.length !== length || (part.length !== undefined && part.length !== length)) {
      throw new ProtocolError(`content part at ${offset} has the wrong range or length`);
    }
    if (part.totalLength !== undefined && part.totalLength !== ref.byteLength) throw new ProtocolError("content total length differs from its reference");
    parts.push(bytes);
    offset += length;
  }
  const content = Buffer.concat(parts);
  const digest = createHash("sha256").update(content).digest("hex");
  if (content.length !== ref.byteLength || digest !== ref.digest.replace(/^sha256:/, "")) {
    throw new ProtocolError("content does not match its digest");
  }
  return content;
}
