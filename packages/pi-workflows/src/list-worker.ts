// A worker thread of the workflow listing (workflow-list.ts): loads one workflow file per
// message and answers its title or why it does not load. Loading runs workflow code, so it
// runs here, apart from the resolver's own event loop: the lister can stop a file whose
// top-level code never finishes, and the modules it imported go away with the worker.
import { parentPort } from "node:worker_threads";
import { WorkflowError } from "./errors.js";
import { loadWorkflowFile } from "./loader.js";

// Workflow code's console output is not an answer: it goes to the resolver's stderr.
for (const method of ["log", "info", "debug"] as const) console[method] = console.error;

const port = parentPort;
if (!port) throw new Error("list-worker.js runs only as a worker thread of the workflow listing");

port.on("message", async (job: { path: string; name: string }) => {
  try {
    const loaded = await loadWorkflowFile(job.path, job.name);
    const title = loaded.definition.title;
    port.postMessage({ loaded: true, ...(typeof title === "string" ? { title } : {}) });
  } catch (error) {
    const code = error instanceof WorkflowError ? error.code : "loadFailed";
    port.postMessage({ loaded: false, error: { code, message: String((error as Error)?.message ?? error) } });
  }
});
