// Strict JSONL framing for `pi --mode rpc`: records are split on LF only (never U+2028/U+2029, so no
// `readline`), an optional trailing CR is stripped, and every record is bounded. A record longer than
// `maxLineBytes` is dropped without buffering it; only its first bytes are kept so the caller can still
// tell what kind of record it was (Pi writes `{"type":"…"` or `{"id":"…","type":"response"` first).

export type RpcLine = { kind: "json"; value: unknown } | { kind: "invalid" } | { kind: "oversized"; head: string };

const HEAD_BYTES = 256;
const LF = 0x0a;

export class JsonlReader {
  private parts: Buffer[] = [];
  private size = 0;
  private dropping = false;
  private head = "";

  constructor(
    private readonly maxLineBytes: number,
    private readonly onLine: (line: RpcLine) => void,
  ) {}

  push(chunk: Buffer): void {
    let start = 0;
    while (start < chunk.length) {
      const newline = chunk.indexOf(LF, start);
      const end = newline === -1 ? chunk.length : newline;
      this.append(chunk.subarray(start, end));
      if (newline === -1) return;
      this.flush();
      start = newline + 1;
    }
  }

  /** Call at end of stream: a final unterminated record is still delivered. */
  end(): void {
    if (this.size > 0 || this.dropping) this.flush();
  }

  private append(piece: Buffer): void {
    if (piece.length === 0) return;
    if (!this.dropping && this.size + piece.length > this.maxLineBytes) {
      this.head = Buffer.concat([...this.parts, piece]).subarray(0, HEAD_BYTES).toString("utf8");
      this.parts = [];
      this.dropping = true;
    }
    if (this.dropping) {
      this.size += piece.length;
      return;
    }
    this.parts.push(piece);
    this.size += piece.length;
  }

  private flush(): void {
    if (this.dropping) {
      this.onLine({ kind: "oversized", head: this.head });
    } else {
      let text = Buffer.concat(this.parts, this.size).toString("utf8");
      if (text.endsWith("\r")) text = text.slice(0, -1);
      if (text.length > 0) {
        try {
          this.onLine({ kind: "json", value: JSON.parse(text) as unknown });
        } catch {
          this.onLine({ kind: "invalid" });
        }
      }
    }
    this.parts = [];
    this.size = 0;
    this.dropping = false;
    this.head = "";
  }
}

export function encodeCommand(command: Record<string, unknown>): string {
  // JSON.stringify escapes LF inside strings, so one command is always exactly one line.
  return `${JSON.stringify(command)}\n`;
}

/** Best-effort record type of a dropped oversized record, from its head. */
export function oversizedType(head: string): string | undefined {
  return /^\{(?:"id":"(?:[^"\\]|\\.)*",)?"type":"([a-z_]+)"/.exec(head)?.[1];
}

/** The fields of Pi RPC records (responses, events, messages, content parts) that the executor reads. */
export interface RpcRecord {
  type?: unknown;
  id?: unknown;
  success?: unknown;
  error?: unknown;
  data?: unknown;
  method?: unknown;
  message?: unknown;
  assistantMessageEvent?: unknown;
  delta?: unknown;
  role?: unknown;
  content?: unknown;
  text?: unknown;
  stopReason?: unknown;
  errorMessage?: unknown;
  isStreaming?: unknown;
  isCompacting?: unknown;
  /** `agent_settled` (Pi >= 1.1). */
  aborted?: unknown;
  /** Prompt response data (Pi >= 1.6): "started" | "queued" | "handled". */
  disposition?: unknown;
}

export function isRecord(value: unknown): value is RpcRecord {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
