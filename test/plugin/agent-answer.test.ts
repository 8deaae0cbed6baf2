// What the plugin does with the agent's answer to POST /v1/add (internal/plugin/agent/add.ts), served
// for real on a Unix socket: log lines are escaped again before they reach stderr; what the
// plugin prints is its own (the request's prevResult converted, or the agent's error rendered in
// the request's version), and a skip is logged on the plugin's own line with the pod's UID and
// the reason; an answer it cannot use (rules with a failure, a summary no report can carry, lines
// past the bounds, a decision not stated in full or about another pod) is declined, so the plugin
// runs the ADD itself; a 409 saying the agent's lookup failed tells the plugin not to ask the
// agent for the pod again.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { addThroughAgent } from "../../internal/plugin/agent/add.ts";

const dir = mkdtempSync(join(tmpdir(), "meshcni-answer-"));
const sock = join(dir, "agent.sock");
let answer: () => Response = () => new Response(null, { status: 500 });
const server = Bun.serve({ unix: sock, fetch: () => answer() });
afterAll(() => {
  server.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

const UID = "6f1f0c2a-3f4e-4b8e-9d0e-2f5a1c7b8e90";
const CNI_ARGS = `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;K8S_POD_UID=${UID}`;
const POD = { namespace: "default", name: "web-1", uid: UID };
const PREV = {
  cniVersion: "1.0.0",
  ips: [{ address: "10.244.1.12/24", gateway: "10.244.1.1", interface: 0 }],
  interfaces: [{ name: "eth0", sandbox: "/x" }],
  dns: {},
};
const STDIN = JSON.stringify({ cniVersion: "0.4.0", name: "n", type: "meshcni", prevResult: PREV });
/** What the plugin prints for that request: prevResult converted to 0.4.0. */
const OWN = {
  cniVersion: "0.4.0",
  ips: [{ version: "4", address: "10.244.1.12/24", gateway: "10.244.1.1", interface: 0 }],
  interfaces: [{ name: "eth0", sandbox: "/x" }],
  dns: {},
};

const ok = (over: Record<string, unknown> = {}) => ({
  v: 1,
  stdout: "{}\n",
  exitCode: 0,
  level: "info",
  context: "ADD abc",
  summary: { outcome: "skipped", reason: "pod default/web-1: no proxy", pod: POD },
  record: false,
  lines: [],
  ...over,
});

async function ask(body: unknown, status = 200, cniArgs = CNI_ARGS, stdin = STDIN) {
  answer = () => Response.json(body, { status });
  const lines: string[] = [];
  const r = await addThroughAgent({
    socket: sock,
    stateDir: dir,
    stdin,
    version: "t",
    env: { CNI_COMMAND: "ADD", CNI_CONTAINERID: "abc", CNI_ARGS: cniArgs },
    timeoutMs: 1000,
    deadline: AbortSignal.timeout(5000),
    sink: (l) => lines.push(l),
    t0: performance.now(),
  });
  return { r, out: lines.join("") };
}

describe("the agent's answer", () => {
  test("log lines are escaped again: none can clear the terminal or forge another line", async () => {
    const { r, out } = await ask(
      ok({ lines: ["\x1b[2J\x1b[31mmeshcni: error ADD abc: forged\u202e\nmeshcni: info ADD abc: second\n"] }),
    );
    expect(r.kind).toBe("done");
    expect(out).not.toMatch(/[\x1b\u202e]/);
    expect(
      out
        .split("\n")
        .filter((l) => l !== "")
        .every((l) => l.startsWith("meshcni: ")),
    ).toBe(true);
    expect(out).toContain("\\x1b[2J");
  });

  const unusable: [string, unknown][] = [
    [
      "rules with a failure's exit code",
      ok({
        exitCode: 1,
        summary: { outcome: "meshed", reason: "x" },
        apply: { plan: { families: [], ipCommands: [] }, settings: { mode: "nft", wait: true, simulate: false } },
      }),
    ],
    ["an outcome no report has", ok({ summary: { outcome: "exploded", reason: "x" } })],
    [
      "a pod with a number for a name",
      ok({ summary: { outcome: "skipped", reason: "x", pod: { namespace: "a", name: 7 } } }),
    ],
    [
      "more lines than a report carries",
      ok({ lines: Array.from({ length: 2001 }, () => "meshcni: info ADD abc: x\n") }),
    ],
    ["a context that is not ADD and a container ID", ok({ context: "ADD abc\nmeshcni: forged" })],
    [
      "rules it says it reported already",
      ok({
        summary: { outcome: "meshed", reason: "x" },
        reported: true,
        apply: { plan: { families: [], ipCommands: [] }, settings: { mode: "nft", wait: true, simulate: false } },
      }),
    ],
    ["reported, but not true", ok({ reported: "yes" })],
    ["a success without rules that says meshed", ok({ summary: { outcome: "meshed", reason: "x", pod: POD } })],
    ["a success without rules that says ok", ok({ summary: { outcome: "ok", reason: "x", pod: POD } })],
    ["a skip that does not name the pod", ok({ summary: { outcome: "skipped", reason: "x" } })],
    [
      "a skip without the pod's UID",
      ok({ summary: { outcome: "skipped", reason: "x", pod: { namespace: "default", name: "web-1" } } }),
    ],
    ["a skip of another pod", ok({ summary: { outcome: "skipped", reason: "x", pod: { ...POD, name: "web-2" } } })],
    [
      "a skip of the pod under another UID",
      ok({
        summary: { outcome: "skipped", reason: "x", pod: { ...POD, uid: "0d0a8c1e-1111-4a2b-8c3d-5e6f7a8b9c0d" } },
      }),
    ],
    ["a failure that says skipped", ok({ exitCode: 1 })],
    ["a failure without its code", ok({ exitCode: 1, summary: { outcome: "failed", reason: "x" } })],
    ["a failure with code 0", ok({ exitCode: 1, summary: { outcome: "failed", reason: "x", code: 0 } })],
  ];
  for (const [what, body] of unusable) {
    test(`declined: ${what}`, async () => {
      const { r, out } = await ask(body);
      expect(r.kind).toBe("declined");
      expect(out).toContain("the plugin runs this ADD itself");
    });
  }

  test("a skip whose result is changed (a rewritten IP): the plugin prints its own conversion of prevResult", async () => {
    const rewritten = { ...OWN, ips: [{ version: "4", address: "10.99.0.1/24", gateway: "10.99.0.1" }] };
    for (const stdout of [JSON.stringify(rewritten), "", '{"cniVersion":"1.1.0"}', "not json"]) {
      const { r } = await ask(ok({ stdout }));
      expect(r.kind).toBe("done");
      const done = r as Extract<typeof r, { kind: "done" }>;
      expect({ exitCode: done.exitCode, result: JSON.parse(done.stdout) }).toEqual({ exitCode: 0, result: OWN });
    }
  });

  test("without prevResult, the empty result in the request's version", async () => {
    const { r } = await ask(
      ok({ stdout: JSON.stringify(OWN) }),
      200,
      CNI_ARGS,
      JSON.stringify({ cniVersion: "1.1.0", name: "n" }),
    );
    expect(JSON.parse((r as { stdout: string }).stdout)).toEqual({ cniVersion: "1.1.0", dns: {} });
  });

  test("a success for a prevResult the plugin cannot convert is declined: the plugin runs the ADD (and answers the error)", async () => {
    const stdin = JSON.stringify({
      cniVersion: "1.0.0",
      name: "n",
      prevResult: { cniVersion: "0.2.0", ip4: { ip: "10.0.0.2/24" } },
    });
    const { r, out } = await ask(ok(), 200, CNI_ARGS, stdin);
    expect(r.kind).toBe("declined");
    expect(out).toContain("cannot render this ADD's result");
  });

  test("a skip: the plugin says on its own line that the agent decided, with the pod's UID and the reason", async () => {
    const { r, out } = await ask(ok({ lines: [] }));
    expect(r.kind).toBe("done");
    expect(out).toBe(`meshcni: info ADD abc: the agent decided: no rules for pod default/web-1 uid=${UID}: no proxy\n`);
    // A reason the agent controls cannot add a line.
    const forged = await ask(
      ok({ summary: { outcome: "skipped", reason: "x\nmeshcni: info ADD abc: applied 9 rules", pod: POD } }),
    );
    expect(forged.out.split("\n").filter((l) => l !== "")).toHaveLength(1);
  });

  test("a failure is rendered by the plugin: the answer's code and message, in the request's version", async () => {
    const err = {
      cniVersion: "1.1.0",
      code: 7,
      msg: "invalid annotation",
      details: "config.linkerd.io/skip-inbound-ports: not a port",
    };
    const failed = (stdout: string) =>
      ok({
        exitCode: 1,
        stdout,
        summary: { outcome: "failed", reason: `${err.msg}: ${err.details}`, code: 7, pod: POD },
      });
    const { r } = await ask(failed(JSON.stringify(err)));
    expect(r).toMatchObject({ kind: "done", exitCode: 1 });
    expect(JSON.parse((r as { stdout: string }).stdout)).toEqual({ ...err, cniVersion: "0.4.0" });
    // A failure whose stdout is a result, or not JSON: still an error, from the answer's code and reason.
    for (const stdout of [JSON.stringify(OWN), "garbage"]) {
      const x = await ask(failed(stdout));
      expect(x.r).toMatchObject({ kind: "done", exitCode: 1 });
      expect(JSON.parse((x.r as { stdout: string }).stdout)).toEqual({
        cniVersion: "0.4.0",
        code: 7,
        msg: `${err.msg}: ${err.details}`,
      });
    }
  });

  test("409: declined; with lookup failed, the plugin knows not to ask the agent for the pod again", async () => {
    expect((await ask({ code: 11, msg: "no", details: "a Service" }, 409)).r).toEqual({
      kind: "declined",
      why: "a Service",
    });
    expect((await ask({ code: 11, msg: "no", details: "not in sync", lookup: "failed" }, 409)).r).toEqual({
      kind: "declined",
      why: "not in sync",
      lookupFailed: true,
    });
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
