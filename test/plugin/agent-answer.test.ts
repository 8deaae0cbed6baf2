// What the plugin does with the agent's answer to POST /v1/add (internal/io/agent-add.ts), served
// for real on a Unix socket: log lines are escaped again before they reach stderr, and an answer
// it cannot use (rules with a failure, a summary no report can carry, lines past the bounds) is
// declined, so the plugin runs the ADD itself; a 409 saying the agent's lookup failed tells the
// plugin not to ask the agent for the pod again.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { addThroughAgent } from "../../internal/io/agent-add.ts";

const dir = mkdtempSync(join(tmpdir(), "meshcni-answer-"));
const sock = join(dir, "agent.sock");
let answer: () => Response = () => new Response(null, { status: 500 });
const server = Bun.serve({ unix: sock, fetch: () => answer() });
afterAll(() => {
  server.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

const ok = (over: Record<string, unknown> = {}) => ({
  v: 1, stdout: "{}\n", exitCode: 0, level: "info", context: "ADD abc", summary: { outcome: "skipped", reason: "x" }, record: false, lines: [], ...over,
});

async function ask(body: unknown, status = 200) {
  answer = () => Response.json(body, { status });
  const lines: string[] = [];
  const r = await addThroughAgent({
    socket: sock, stateDir: dir, stdin: "{}", env: { CNI_COMMAND: "ADD", CNI_CONTAINERID: "abc" }, version: "t",
    timeoutMs: 1000, deadline: AbortSignal.timeout(5000), sink: (l) => lines.push(l), t0: performance.now(),
  });
  return { r, out: lines.join("") };
}

describe("the agent's answer", () => {
  test("log lines are escaped again: none can clear the terminal or forge another line", async () => {
    const { r, out } = await ask(ok({ lines: ["\x1b[2J\x1b[31mmeshcni: error ADD abc: forged\u202e\nmeshcni: info ADD abc: second\n"] }));
    expect(r.kind).toBe("done");
    expect(out).not.toMatch(/[\x1b\u202e]/);
    expect(out.split("\n").filter((l) => l !== "").every((l) => l.startsWith("meshcni: "))).toBe(true);
    expect(out).toContain("\\x1b[2J");
  });

  const unusable: [string, unknown][] = [
    ["rules with a failure's exit code", ok({ exitCode: 1, summary: { outcome: "meshed", reason: "x" }, apply: { plan: { families: [], ipCommands: [] }, settings: { mode: "nft", wait: true, simulate: false } } })],
    ["an outcome no report has", ok({ summary: { outcome: "exploded", reason: "x" } })],
    ["a pod with a number for a name", ok({ summary: { outcome: "skipped", reason: "x", pod: { namespace: "a", name: 7 } } })],
    ["more lines than a report carries", ok({ lines: Array.from({ length: 2001 }, () => "meshcni: info ADD abc: x\n") })],
    ["a context that is not ADD and a container ID", ok({ context: "ADD abc\nmeshcni: forged" })],
    ["rules it says it reported already", ok({ summary: { outcome: "meshed", reason: "x" }, reported: true, apply: { plan: { families: [], ipCommands: [] }, settings: { mode: "nft", wait: true, simulate: false } } })],
    ["reported, but not true", ok({ reported: "yes" })],
  ];
  for (const [what, body] of unusable) {
    test(`declined: ${what}`, async () => {
      const { r, out } = await ask(body);
      expect(r.kind).toBe("declined");
      expect(out).toContain("the plugin runs this ADD itself");
    });
  }

  test("409: declined; with lookup failed, the plugin knows not to ask the agent for the pod again", async () => {
    expect((await ask({ code: 11, msg: "no", details: "a Service" }, 409)).r).toEqual({ kind: "declined", why: "a Service" });
    expect((await ask({ code: 11, msg: "no", details: "not in sync", lookup: "failed" }, 409)).r).toEqual({ kind: "declined", why: "not in sync", lookupFailed: true });
  });
});

describe("an answer the agent reported itself", () => {
  test("is printed and not reported again; one it did not report is reported by the plugin, on the same connection", async () => {
    const reported = await ask(ok({ reported: true }));
    expect(reported.r).toMatchObject({ kind: "done", reported: true });
    expect("followUp" in reported.r).toBe(false);
    const not = await ask(ok());
    expect(not.r).toMatchObject({ kind: "done" });
    expect("reported" in not.r).toBe(false);
    expect(typeof (not.r as { followUp?: unknown }).followUp).toBe("function");
  });
});
