// What the server adds to a Node runner's environment for the runner process's own sake, and
// takes back before a workflow's code runs: glibc's allocator tunables, read by the dynamic
// loader when the process started (src/server/spawn.rs, `RUNNER_MALLOC_TUNABLES`). A step and
// every process it starts see the environment of the shell that started the server.

/** Keep in step with `TUNABLES_ADDED_ENV` in the server's src/server/spawn.rs. */
export const TUNABLES_ADDED_ENV = "PI_WORKFLOWS_TUNABLES_ADDED";
/** Keep in step with `GLIBC_TUNABLES_ENV` in the server's src/server/spawn.rs. */
export const GLIBC_TUNABLES_ENV = "GLIBC_TUNABLES";

/**
 * Remove the tunables the server added (it marks them), and the mark; a user's own
 * `GLIBC_TUNABLES` (the server adds none then) stays.
 */
export function dropServerTunables(env: NodeJS.ProcessEnv = process.env): void {
  if (env[TUNABLES_ADDED_ENV] === undefined) return;
  delete env[GLIBC_TUNABLES_ENV];
  delete env[TUNABLES_ADDED_ENV];
}
