import { expect, test } from "bun:test";
import { RechainBackoff } from "../../internal/agent/install/backoff.ts";

const opts = { budget: 3, windowMs: 1000, baseMs: 100, maxMs: 800, quietMs: 5000 };

test("re-chains within the budget wait for nothing", () => {
  const b = new RechainBackoff(opts);
  for (let t = 0; t < 3000; t += 400) expect(b.note("a", t)).toEqual({ delayMs: 0, startedBackoff: false });
});

test("past the budget the wait doubles up to the cap, once warned", () => {
  const b = new RechainBackoff(opts);
  const verdicts = [0, 10, 20, 30, 40, 50, 60, 70, 80].map((t) => b.note("a", t));
  expect(verdicts.map((v) => v.delayMs)).toEqual([0, 0, 0, 100, 200, 400, 800, 800, 800]);
  expect(verdicts.filter((v) => v.startedBackoff)).toHaveLength(1);
  expect(b.waitFor("a", 80)).toBe(800);
  expect(b.waitFor("a", 500)).toBe(380);
  expect(b.waitFor("b", 80)).toBe(0);
  // Still fighting after the window: the wait does not reset.
  expect(b.note("a", 2000).delayMs).toBe(800);
  // Left alone long enough: a fresh start.
  expect(b.waitFor("a", 7000)).toBe(0);
  expect(b.note("a", 7001)).toEqual({ delayMs: 0, startedBackoff: false });
});
