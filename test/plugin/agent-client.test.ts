// The plugin's side of the agent's wire, against small HTTP servers on Unix sockets: answers
// with a Content-Length, chunked and closed-delimited bodies, the status codes the plugin tells
// apart, no socket at all, a silent server; and the conflist keys that name the socket and the
// state folder.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { agentRequest, askAgent, sendReport, statusOf } from "../../internal/plugin/agent/client.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import type { CniError } from "../../internal/cni/errors.ts";

let dir: string;
const servers: { stop(): void }[] = [];

/** A raw server: answers every connection with `reply` (after reading the request head). */
function raw(name: string, reply: string | undefined): string {
  const path = join(dir, name);
  const srv: Server = createServer((c) => {
    c.once("data", () => {
      if (reply !== undefined) c.end(reply);
    });
  });
  srv.listen(path);
  servers.push({ stop: () => srv.close() });
  return path;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "meshcni-agent-client-"));
});
afterAll(() => {
  for (const s of servers) s.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("agentRequest", () => {
  test("Content-Length, chunked and close-delimited bodies", async () => {
    const a = raw("cl.sock", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
    expect(await agentRequest(a, "GET", "/x", undefined, 2000)).toEqual({ status: 200, body: "hello" });
    const b = raw(
      "chunked.sock",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n",
    );
    expect(await agentRequest(b, "GET", "/x", undefined, 2000)).toEqual({ status: 200, body: "hello" });
    const c = raw("close.sock", 'HTTP/1.1 503 Service Unavailable\r\n\r\n{"code":11,"msg":"m"}');
    expect(await agentRequest(c, "GET", "/x", undefined, 2000)).toEqual({ status: 503, body: '{"code":11,"msg":"m"}' });
  });

  test("a request larger than the socket takes at once arrives whole, its Content-Length in UTF-8 bytes", async () => {
    // 3 MB of two-byte characters: the first write takes part of it, the rest goes on drain.
    const body = JSON.stringify({ stdin: "é→".repeat(600_000) });
    const got: Promise<{ head: string; body: Buffer }> = new Promise((done) => {
      const path = join(dir, "big.sock");
      const srv: Server = createServer((c) => {
        const chunks: Buffer[] = [];
        c.on("data", (d: Buffer) => {
          chunks.push(d);
          const all = Buffer.concat(chunks);
          const at = all.indexOf("\r\n\r\n");
          if (at < 0) return;
          const head = all.subarray(0, at).toString();
          const length = Number(/Content-Length: (\d+)/.exec(head)?.[1]);
          if (all.length - at - 4 < length) return;
          c.end("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n");
          done({ head, body: all.subarray(at + 4) });
        });
      });
      srv.listen(path);
      servers.push({ stop: () => srv.close() });
    });
    const res = await agentRequest(join(dir, "big.sock"), "POST", "/v1/add", body, 5000);
    expect(res.status).toBe(204);
    const { head, body: sent } = await got;
    expect(head).toContain(`Content-Length: ${Buffer.byteLength(body)}`);
    expect(sent.toString()).toBe(body);
  });

  test("a truncated answer, no socket and a silent server are errors", async () => {
    const t = raw("trunc.sock", "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nhel");
    await expect(agentRequest(t, "GET", "/x", undefined, 2000)).rejects.toThrow();
    await expect(agentRequest(join(dir, "none.sock"), "GET", "/x", undefined, 2000)).rejects.toThrow();
    const silent = raw("silent.sock", undefined);
    await expect(agentRequest(silent, "GET", "/x", undefined, 100)).rejects.toThrow("did not answer within 100 ms");
  });
});

describe("askAgent", () => {
  test("200 with a pod; 404 is final with code 106; 503, garbage and no socket mean the fallback", async () => {
    const answer = JSON.stringify({ pod: { metadata: { name: "p" } }, namespace: null, source: "api" });
    const ok = raw("ok.sock", `HTTP/1.1 200 OK\r\nContent-Length: ${answer.length}\r\n\r\n${answer}`);
    expect(await askAgent(ok, "ns", "p", undefined)).toEqual({
      kind: "pod",
      pod: { metadata: { name: "p" } },
      namespace: null,
      source: "agent-api",
    });
    const body = JSON.stringify({ code: 106, msg: "pod not found", details: "no pod ns/p with UID u" });
    const gone = raw("gone.sock", `HTTP/1.1 404 Not Found\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    expect(await askAgent(gone, "ns", "p", "u")).toEqual({
      kind: "gone",
      error: { code: 106, msg: "pod not found", details: "no pod ns/p with UID u" },
    });
    const busy = raw("busy.sock", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}");
    expect((await askAgent(busy, "ns", "p", undefined)).kind).toBe("unavailable");
    const junk = raw("junk.sock", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk");
    expect(await askAgent(junk, "ns", "p", undefined)).toEqual({
      kind: "unavailable",
      why: "the agent's answer holds no pod",
    });
    const none = await askAgent(join(dir, "absent.sock"), "ns", "p", undefined);
    expect(none.kind).toBe("unavailable");
  });

  test("a report to no agent is not delivered", async () => {
    const r = {
      v: 1 as const,
      command: "DEL" as const,
      outcome: "untouched" as const,
      reason: "r",
      durationMs: 1,
      lines: [],
      time: "t",
      version: "v",
    };
    expect(await sendReport(join(dir, "absent.sock"), r)).toBe(false);
  });
});

describe("conflist keys", () => {
  test("agent_socket and state_dir default to the agent's paths and must be absolute", () => {
    const conf = parsePluginConf(JSON.stringify({ cniVersion: "1.0.0", name: "n" }));
    expect([conf.agent_socket, conf.state_dir]).toEqual(["/var/run/meshcni/agent.sock", "/var/run/meshcni"]);
    const given = parsePluginConf(
      JSON.stringify({ cniVersion: "1.0.0", name: "n", agent_socket: "/run/a.sock", state_dir: "/run/m" }),
    );
    expect([given.agent_socket, given.state_dir]).toEqual(["/run/a.sock", "/run/m"]);
    for (const bad of [{ agent_socket: "agent.sock" }, { state_dir: 7 }, { state_dir: "" }]) {
      const err = (() => {
        try {
          parsePluginConf(JSON.stringify({ cniVersion: "1.0.0", name: "n", ...bad }));
        } catch (e) {
          return e as CniError;
        }
      })();
      expect(err?.code).toBe(7);
    }
  });
});

test("statusOf reads the status of an HTTP/1.0 or 1.1 status line and nothing else", () => {
  expect(statusOf("HTTP/1.1 200 OK")).toBe(200);
  expect(statusOf("HTTP/1.0 409 Conflict")).toBe(409);
  expect(statusOf("HTTP/1.1 503")).toBe(503);
  for (const bad of [
    "",
    "HTTP/2 200 OK",
    "HTTP/1.2 200 OK",
    "HTTP/1.1  200",
    "HTTP/1.1 20",
    "HTTP/1.1 2x0 OK",
    "http/1.1 200 OK",
    "XHTTP/1.1 200",
  ]) {
    expect([bad, statusOf(bad)]).toEqual([bad, undefined]);
  }
});
