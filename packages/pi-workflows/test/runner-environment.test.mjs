// The runner takes back what the server added to its environment for the process's own sake
// (glibc's tunables), and only that: a user's own GLIBC_TUNABLES stays for their steps.
import assert from "node:assert/strict";
import { test } from "node:test";
import { dropServerTunables, GLIBC_TUNABLES_ENV, TUNABLES_ADDED_ENV } from "../dist/runner/environment.js";

test("the tunables the server marked as its own are removed with their mark", () => {
  const env = { PATH: "/usr/bin", [GLIBC_TUNABLES_ENV]: "glibc.malloc.hugetlb=1", [TUNABLES_ADDED_ENV]: "1" };
  dropServerTunables(env);
  assert.deepEqual(env, { PATH: "/usr/bin" });
});

test("a user's own tunables stay when the server added none", () => {
  const env = { PATH: "/usr/bin", [GLIBC_TUNABLES_ENV]: "glibc.malloc.check=0" };
  dropServerTunables(env);
  assert.deepEqual(env, { PATH: "/usr/bin", [GLIBC_TUNABLES_ENV]: "glibc.malloc.check=0" });
});
