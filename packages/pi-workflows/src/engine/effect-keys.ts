// Effect identity is derived here, never by workflow code.
import { canonicalJson, sha256Hex } from "../canonical.js";

export function idempotencyKey(runId: string, effectType: string, nodePath: string, visit: number): string {
  return sha256Hex(`${runId}\0${effectType}\0${nodePath}\0${visit}`);
}

export function requestFingerprint(request: unknown): string {
  return sha256Hex(canonicalJson(request));
}
