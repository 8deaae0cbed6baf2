// The quick variant of the agent chaos run (the full one, 1,000+ operations, is in
// `bun run fuzz`): a simulated primary CNI rewriting, replacing, deleting and corrupting its
// configs while dist/meshcni-installer runs, is stopped with SIGTERM and killed with kill -9 at
// random moments and restarted; an observer process checks every instant. CHAOS_SEED=N replays.
import { expect, test } from "bun:test";
import { renderChaosSummary, runChaos } from "./chaos/run-chaos.ts";

const SEED = Number(Bun.env.CHAOS_SEED ?? 20261121);
const OPS = Number(Bun.env.CHAOS_OPS ?? 200);

test(`${OPS} chaos operations (seed ${SEED}): no instant with a torn or lossy config, exact undo`, async () => {
  const report = await runChaos({ seed: SEED, ops: OPS });
  console.log(renderChaosSummary(report));
  expect(report.violations).toEqual([]);
  // The run did what it says: every kind of operation, checks, and an observer that sampled.
  for (const k of [
    "rewrite the runtime's config",
    "write another file",
    "delete a file",
    "burst of rewrites",
    "SIGTERM",
    "kill -9",
  ]) {
    expect(report.counts[k] ?? 0).toBeGreaterThan(0);
  }
  expect(report.settleChecks).toBeGreaterThan(10);
  expect(report.undoChecks).toBeGreaterThan(5);
  expect(report.observed.samples).toBeGreaterThan(1000);
}, 300_000);
