// The quick variants of `bun run fuzz`'s agent-side runs: hostile requests to the node agent's
// socket (the compiled agent over a real Unix socket, and its handler directly), and sequences of
// ADD/CHECK/DEL/GC through dist/meshcni with and without the agent, the records read back after
// each command. FUZZ_SEED=N runs another seed.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { type RecordsFuzz, renderRecordsFailure, renderRecordsSummary, startRecordsFuzz } from "./fuzz/records-fuzz.ts";
import { renderSocketFailure, renderSocketSummary, type SocketFuzz, startSocketFuzz } from "./fuzz/socket-fuzz.ts";

const SEED = Number(Bun.env.FUZZ_SEED ?? 20261121);
const REQUESTS = Number(Bun.env.FUZZ_REQUESTS ?? 400);
const SEQUENCES = Number(Bun.env.FUZZ_SEQUENCES ?? 8);

let socket: SocketFuzz | undefined;
let records: RecordsFuzz | undefined;
beforeAll(async () => {
  [socket, records] = await Promise.all([startSocketFuzz(), startRecordsFuzz()]);
}, 60_000);
afterAll(async () => {
  await socket?.close();
  await records?.close();
});

const SOCKET = `${REQUESTS} hostile requests to the agent's socket (seed ${SEED})`;
test(`${SOCKET}: an answer each, as documented, no crash, no stray record`, async () => {
  const r = await socket!.run({ seed: SEED, requests: REQUESTS, handlerEvery: 2, maxFailures: 100 });
  console.log(renderSocketSummary(r));
  for (const f of r.failures.slice(0, 10)) console.log(renderSocketFailure(f));
  expect(r.failures.map((f) => `${f.where} ${f.index}: ${f.problems.find((p) => !p.endsWith(":"))}`)).toEqual([]);
  expect(r.handlerRequests).toBeGreaterThan(REQUESTS * 0.3);
  // Every kind of answer was reached, through the socket and through the handler.
  for (const k of [
    "socket 200",
    "socket 204",
    "socket 400",
    "socket 404",
    "socket 405",
    "socket 413",
    "socket closed",
    "handler 200",
    "handler 400",
    "handler 404",
  ]) {
    expect({ k, reached: (r.outcomes.get(k) ?? 0) > 0 }).toEqual({ k, reached: true });
  }
  expect(socket!.agent.proc.exitCode).toBeNull();
}, 240_000);

const SEQS = `${SEQUENCES} sequences of ADD/CHECK/DEL/GC with and without the agent (seed ${SEED})`;
test(`${SEQS}: the records follow the containers`, async () => {
  const r = await records!.run({ seed: SEED, sequences: SEQUENCES, length: 16, maxFailures: 100 });
  console.log(renderRecordsSummary(r));
  for (const f of r.failures.slice(0, 10)) console.log(renderRecordsFailure(f));
  expect(r.failures.map((f) => `${f.index}/${f.step} ${f.way}: ${f.problems.find((p) => !p.endsWith(":"))}`)).toEqual(
    [],
  );
  for (const way of ["agent", "alone"]) {
    for (const k of ["ADD 0", "ADD 106", "ADD 7", "CHECK 0", "DEL 0", "GC 0"]) {
      expect({ k: `${way} ${k}`, reached: (r.outcomes.get(`${way} ${k}`) ?? 0) > 0 }).toEqual({
        k: `${way} ${k}`,
        reached: true,
      });
    }
  }
}, 240_000);
