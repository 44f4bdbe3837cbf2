// A connected pair of Unix stream sockets, for the startup snapshot build's rehearsal
// (runner-snapshot.ts). A runner's channel is a Unix socket (fd 3), and V8 compiles a function
// at its first call: a rehearsal over real sockets leaves node:net's reading and writing path
// compiled in the snapshot, where the in-memory pair left it to every runner.
//
// The listening socket lives in a fresh directory of the user's own (0700), so no other user
// can connect in its place, and the socket file and its directory are gone before the pair is
// returned: the connected ends need neither.
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";

/**
 * The longest Unix socket path Linux takes (`sun_path` holds 108 bytes with its NUL). A longer
 * one is refused here: libuv would bind a truncated path, outside the private directory.
 */
export const SOCKET_PATH_BYTES_MAX = 107;
/** The longest the pair may take to connect (it takes well under a millisecond). */
export const CONNECT_MS_MAX = 1_000;

/** Two connected ends: what one writes, the other reads. Rejects (and leaves nothing) on failure. */
export async function unixSocketPair(): Promise<[Duplex, Duplex]> {
  const dir = mkdtempSync(path.join(tmpdir(), "pi-workflows-pair-"));
  const server = net.createServer();
  let client: net.Socket | undefined;
  let timer: NodeJS.Timeout | undefined;
  let accepted: Promise<net.Socket> | undefined;
  try {
    const failed = new Promise<never>((_, reject) => {
      server.once("error", reject);
      timer = setTimeout(() => reject(new Error(`the socket pair did not connect within ${CONNECT_MS_MAX} ms`)), CONNECT_MS_MAX);
    });
    failed.catch(() => undefined); // a later error of the closed server is nobody's
    accepted = new Promise<net.Socket>((resolve) => server.once("connection", resolve));
    const address = path.join(dir, "pair.sock");
    if (Buffer.byteLength(address) > SOCKET_PATH_BYTES_MAX) {
      throw Object.assign(new Error(`the temp dir's path is too long for a Unix socket`), { code: "ENAMETOOLONG" });
    }
    await Promise.race([new Promise<void>((resolve) => server.listen(address, resolve)), failed]);
    client = net.connect(address);
    const connectFailed = new Promise<never>((_, reject) => client!.once("error", reject));
    connectFailed.catch(() => undefined); // a later error is the channel's (it listens too)
    const peer = await Promise.race([accepted, failed, connectFailed]);
    return [client, peer];
  } catch (error) {
    client?.destroy();
    // A connection accepted after the limit must not hold the process open.
    void accepted?.then((late) => late.destroy());
    throw error;
  } finally {
    clearTimeout(timer);
    // Stops listening; the connection made stays open.
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
