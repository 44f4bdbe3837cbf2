// esbuild's service process, held only while a bundle is being made. esbuild's API runs its
// work in a child process (its Go binary, `--service --ping`) that stays up after a build and
// pings its host every second: an idle resolver, and a runner that bundled on a cache miss and
// then waits hours for an answer, would wake twice a second for nothing (measured: the
// service and its resolver used 3 ms of CPU a second on an otherwise idle server, three times
// the server's own). So the service is stopped once no build has used it for a short grace,
// and the next build starts a new one (~6–10 ms, against ~1–2 ms for a build on a live one).
//
// Invariant: the service is never stopped while a use is in flight (esbuild's `stop` kills
// the process, failing any build it is running); every use ends by arming the grace again.
import { importModule } from "./module-import.js";

type Esbuild = typeof import("esbuild");

/** How long the service may sit unused before it is stopped: a burst of builds (a listing,
 * several changed workflows) shares one process, and an idle one pings at most once. */
export const ESBUILD_IDLE_STOP_MS = 1_000;

let usesInFlight = 0;
let idleStop: ReturnType<typeof setTimeout> | undefined;

/** Runs `use` with esbuild's API, keeping its service up until `use` settles. */
export async function withEsbuild<T>(use: (esbuild: Esbuild) => Promise<T>): Promise<T> {
  const esbuild = await importModule<Esbuild>("esbuild");
  clearTimeout(idleStop);
  idleStop = undefined;
  usesInFlight += 1;
  try {
    return await use(esbuild);
  } finally {
    usesInFlight -= 1;
    if (usesInFlight === 0) armIdleStop(esbuild);
  }
}

function armIdleStop(esbuild: Esbuild): void {
  idleStop = setTimeout(() => {
    idleStop = undefined;
    if (usesInFlight === 0) void esbuild.stop();
  }, ESBUILD_IDLE_STOP_MS);
  // The grace never keeps a process alive that has nothing else to do.
  idleStop.unref();
}
