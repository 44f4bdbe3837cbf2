// Runs every test under test/ with `node --test` (Node 20 has no glob support there):
// *.test.mjs / *.test.js as they are, *.test.ts after compiling them with tsconfig.test.json.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const packageDir = fileURLToPath(new URL("../", import.meta.url));

function findTests(dir) {
  const found = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== "fixtures" && entry.name !== "node_modules") found.push(...findTests(full));
    } else if (/\.test\.(mjs|js|ts)$/.test(entry.name)) {
      found.push(full);
    }
  }
  return found;
}

const tests = findTests(path.join(packageDir, "test")).sort();
const typescript = tests.filter((file) => file.endsWith(".ts"));
if (typescript.length > 0) {
  const tsc = spawnSync(process.execPath, [path.join(packageDir, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.test.json"], { cwd: packageDir, stdio: "inherit" });
  if (tsc.status !== 0) process.exit(tsc.status ?? 1);
}
const runnable = tests.map((file) =>
  file.endsWith(".ts") ? path.join(packageDir, "dist-test", path.relative(packageDir, file)).replace(/\.ts$/, ".js") : file,
);
const result = spawnSync(process.execPath, ["--test", ...process.argv.slice(2), ...runnable], { cwd: packageDir, stdio: "inherit" });
process.exit(result.status ?? 1);
