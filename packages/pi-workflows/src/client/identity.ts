// One stable client ID per installation: the ID this client's requests carry, stored
// user-only next to the state so every process of this client kind sends the same one.
//
// Why stable: the server keys durable receipts by (client ID, idempotency key). A retry after
// a lost connection adopts the stored receipt, and finds a submission still validating, only
// under the same client ID (docs/CLIENT-PROTOCOL.md, "Client identity and reconnects").
//
// Where: `<state dir>/clients/pi.id` (directory 0700, file 0600); the Rust CLI keeps its own
// `cli.id` there. A directory of its own keeps client files apart from the server's; one file
// per client kind means the two implementations never share a file or race on it, and the
// server's command rows show which kind of client sent a command. The ID is not a secret (any
// client of the user's socket may send any ID): user-only is hygiene, like the rest of the
// state directory.
//
// Created atomically: written to a temporary file (O_EXCL, 0600, synced) and hard-linked to
// its name, which fails when another process was first (then its ID is read, so two first uses
// agree). A corrupt file is replaced by rename with a warning; it never stops the client.
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { OPAQUE_ID_BYTES_MAX, OPAQUE_ID_BYTES_MIN, OPAQUE_ID_PATTERN } from "./protocol.js";

/** The directory of client identity files, inside the state directory. */
export const CLIENTS_DIR = "clients";
const CLIENTS_DIR_MODE = 0o700;
const ID_FILE_MODE = 0o600;
/** An identity file holds one ID and a newline; anything longer is corrupt. */
const ID_FILE_BYTES_MAX = OPAQUE_ID_BYTES_MAX + 1;
/** Rounds of "missing, create, another process won, read theirs" before giving up. */
const CREATE_ROUNDS_MAX = 3;
/** Random bytes of a new ID (96 bits: installations never collide). */
const ID_RANDOM_BYTES = 12;
/** Identities remembered per process (a warning once, a fallback ID stable for the process). */
const CACHED_IDS_MAX = 16;

/** A client kind: its identity file and the prefix of its IDs. */
export interface ClientKind {
  file: string;
  prefix: string;
}

/** The TypeScript client (the Pi extension and scripts). */
export const PI_CLIENT: ClientKind = Object.freeze({ file: "pi.id", prefix: "pi" });

export type LoadedClientId =
  | { how: "existing" | "created"; id: string }
  | { how: "replaced"; id: string; why: string };

export function isValidId(id: string): boolean {
  const bytes = Buffer.byteLength(id, "utf8");
  return bytes >= OPAQUE_ID_BYTES_MIN && bytes <= OPAQUE_ID_BYTES_MAX && OPAQUE_ID_PATTERN.test(id);
}

export function newId(prefix: string): string {
  return `${prefix}-${randomBytes(ID_RANDOM_BYTES).toString("hex")}`;
}

/** The state directory of a socket (`<state>/server/server.sock`); else the socket's directory. */
export function stateDirOfSocket(socketPath: string): string {
  const parent = path.dirname(path.resolve(socketPath));
  return path.basename(parent) === "server" ? path.dirname(parent) : parent;
}

export function clientIdFile(stateDir: string, kind: ClientKind = PI_CLIENT): string {
  return path.join(stateDir, CLIENTS_DIR, kind.file);
}

class Corrupt extends Error {}

/** Read the installation's ID, creating it on first use and replacing a corrupt file. Throws on I/O errors. */
export function loadOrCreateClientId(stateDir: string, kind: ClientKind = PI_CLIENT): LoadedClientId {
  const dir = path.join(stateDir, CLIENTS_DIR);
  ensurePrivateDir(dir);
  const file = path.join(dir, kind.file);
  for (let round = 0; round < CREATE_ROUNDS_MAX; round++) {
    let existing: string | undefined;
    try {
      existing = readId(file);
    } catch (error) {
      if (!(error instanceof Corrupt)) throw error;
      const id = newId(kind.prefix);
      publish(dir, file, id, "replace");
      return { how: "replaced", id, why: error.message };
    }
    if (existing !== undefined) return { how: "existing", id: existing };
    const id = newId(kind.prefix);
    if (publish(dir, file, id, "ifAbsent")) return { how: "created", id };
    // Another process created it between our read and our link: use theirs.
  }
  throw new Error(`the client ID file ${file} keeps disappearing while it is created`);
}

const cached = new Map<string, string>();

/**
 * The installation's ID, never throwing: when the file cannot be read or written (a read-only
 * state directory), a random ID for this process, with a warning (retries in this process still
 * adopt their receipts; a later process cannot).
 */
export function installationClientId(stateDir: string, kind: ClientKind = PI_CLIENT, warn: (message: string) => void = defaultWarn): string {
  const file = clientIdFile(stateDir, kind);
  const known = cached.get(file);
  if (known !== undefined) return known;
  let id: string;
  try {
    const loaded = loadOrCreateClientId(stateDir, kind);
    if (loaded.how === "replaced") warn(`the client ID file ${file} was unusable (${loaded.why}); it was replaced with a new ID`);
    id = loaded.id;
  } catch (error) {
    id = newId(kind.prefix);
    warn(`${(error as Error).message}; this process uses the temporary client ID ${id}: commands still retry safely, but a later process cannot adopt their receipts`);
  }
  if (cached.size >= CACHED_IDS_MAX) cached.clear();
  cached.set(file, id);
  return id;
}

function defaultWarn(message: string): void {
  process.emitWarning(message, { code: "PI_WORKFLOWS_CLIENT_ID" });
}

/** The stored ID; undefined when there is no file yet; `Corrupt` when it is unusable. */
function readId(file: string): string | undefined {
  let fd: number;
  try {
    // O_NOFOLLOW: a symbolic link in place of the file is corrupt, never followed.
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "ELOOP") throw new Corrupt("it is a symbolic link");
    throw error;
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new Corrupt("it is not a regular file");
    const buffer = Buffer.alloc(ID_FILE_BYTES_MAX + 1);
    let length = 0;
    for (;;) {
      const read = fs.readSync(fd, buffer, length, buffer.length - length, null);
      if (read === 0) break;
      length += read;
      if (length > ID_FILE_BYTES_MAX) throw new Corrupt(`it holds more than ${ID_FILE_BYTES_MAX} bytes`);
    }
    let text = buffer.subarray(0, length).toString("utf8");
    if (text.endsWith("\n")) text = text.slice(0, -1);
    if (!isValidId(text)) throw new Corrupt("it holds no valid client ID");
    // Made user-only if someone widened it.
    if ((stat.mode & 0o777) !== ID_FILE_MODE) {
      try {
        fs.fchmodSync(fd, ID_FILE_MODE);
      } catch {
        // Tidiness only: the ID is no secret.
      }
    }
    return text;
  } finally {
    fs.closeSync(fd);
  }
}

/** Write `id` to a temporary file and give it its name atomically; false when another process was first. */
function publish(dir: string, file: string, id: string, how: "ifAbsent" | "replace"): boolean {
  const temporary = path.join(dir, `.${path.basename(file)}.${newId("tmp")}`);
  const fd = fs.openSync(temporary, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, ID_FILE_MODE);
  try {
    fs.fchmodSync(fd, ID_FILE_MODE); // exact, whatever the umask
    fs.writeSync(fd, `${id}\n`);
    fs.fsyncSync(fd);
  } catch (error) {
    fs.closeSync(fd);
    fs.rmSync(temporary, { force: true });
    throw error;
  }
  fs.closeSync(fd);
  try {
    if (how === "replace") {
      fs.renameSync(temporary, file);
    } else {
      try {
        fs.linkSync(temporary, file);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
        throw error;
      }
    }
  } finally {
    // After a link (or a failed rename) the temporary name is left over.
    fs.rmSync(temporary, { force: true });
  }
  syncDir(dir);
  return true;
}

/** The new name survives a crash (were it lost, the next use would only create another ID). */
function syncDir(dir: string): void {
  try {
    const fd = fs.openSync(dir, fs.constants.O_RDONLY);
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    // Durability of a new name is best effort.
  }
}

function ensurePrivateDir(dir: string): void {
  try {
    fs.mkdirSync(dir, { mode: CLIENTS_DIR_MODE });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  const stat = fs.lstatSync(dir);
  if (!stat.isDirectory()) throw new Error(`could not prepare ${dir}: it is not a directory`);
  if ((stat.mode & 0o777) !== CLIENTS_DIR_MODE) fs.chmodSync(dir, CLIENTS_DIR_MODE);
}
