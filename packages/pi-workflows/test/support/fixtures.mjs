// Copies of the fixture directories in a private temp dir (tests may edit them).
import { cpSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const FIXTURES = fileURLToPath(new URL("../fixtures/", import.meta.url));
export const PACKAGE_DIR = fileURLToPath(new URL("../../", import.meta.url));

export function fixtureCopy(t) {
  const dir = realpathSync(mkdtempSync(path.join(tmpdir(), "piw-test-")));
  cpSync(FIXTURES, dir, { recursive: true });
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return { root: dir, project: path.join(dir, "project"), agentDir: path.join(dir, "global") };
}

/** Remove the tests' temp dirs, best effort: a dir left behind never fails the tests. */
export function removeTempDirs(dirs) {
  for (const dir of dirs) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // left behind
    }
  }
}
