// The served resolver's memory of workflows it already loaded: a repeated `run.start` of an
// unchanged workflow reuses the imported module and its compiled definition instead of
// importing a new copy of the same code (which costs a module compile and stays in memory).
//
// An entry is used only when every file of its source identity (the root and every mounted
// file, as loaded) still hashes to what was loaded, read from disk at lookup: a changed byte
// anywhere in the bundle's inputs is a miss. A new import needs a changed importing file, so
// it is a miss too. Name resolution (discovery) is not cached: it runs before the lookup.
import type { LoadedWorkflow } from "./loader.js";
import { verifySourceOnDisk } from "./source-identity.js";

/** Distinct workflow files kept loaded at once (each holds its module in memory). */
export const LOADED_WORKFLOWS_MAX = 16;

export class LoadedWorkflowCache {
  private readonly entries = new Map<string, LoadedWorkflow>();
  hits = 0;
  misses = 0;

  constructor(private readonly capacity: number = LOADED_WORKFLOWS_MAX) {
    if (!(capacity >= 1)) throw new Error("a loaded-workflow cache holds at least one entry");
  }

  /** The loaded workflow of `rootPath` if its sources on disk are exactly the loaded ones. */
  async lookup(rootPath: string): Promise<LoadedWorkflow | undefined> {
    const entry = this.entries.get(rootPath);
    if (!entry || (await verifySourceOnDisk(entry.source)) !== undefined) {
      this.entries.delete(rootPath);
      this.misses += 1;
      return undefined;
    }
    // Most recently used last, so the oldest goes first when the cache is full.
    this.entries.delete(rootPath);
    this.entries.set(rootPath, entry);
    this.hits += 1;
    return entry;
  }

  remember(loaded: LoadedWorkflow): void {
    const rootPath = loaded.source.root.path;
    this.entries.delete(rootPath);
    this.entries.set(rootPath, loaded);
    while (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  get size(): number {
    return this.entries.size;
  }
}
