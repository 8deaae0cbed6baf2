// Faults of the API server for meshed pods, for both meshes, through the compiled plugin into a
// real network namespace. test/plugin/api.test.ts covers the stand-in's status codes, drops,
// truncation and slowness for Linkerd; here the same for Istio, and the transport faults it does
// not have: TLS failures (plain HTTP behind an https URL, a certificate for another name, a
// handshake that never completes, a connection closed right after the handshake, something that
// is not HTTP) and an answer whose body stalls half way. Each fails ADD with its documented code
// (a hang would run into the test's own timeout; how soon within the bound is bench/bounds.ts'),
// with the namespace untouched and nothing else on stdout.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import net, { type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import { type ApiServer, type Fault, startApiServer } from "../support/apiserver.ts";
import { makePki } from "../support/certs.ts";
import { repoPath } from "../support/golden.ts";
import { Netns, uniq } from "../support/netns.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";

const BOUND_S = 1;

const read = (p: string) => JSON.parse(readFileSync(repoPath(p), "utf8"));
const MESHES = {
  linkerd: {
    pod: read("testdata/pods/linkerd-meshed.json"),
    namespace: read("testdata/pods/namespace-emojivoto.json"),
    section: { linkerd: { "iptables-mode": "nft", ipv6: true } },
  },
  istio: {
    pod: read("testdata/istio/pods/sidecar.json"),
    namespace: read("testdata/istio/pods/namespace-bookinfo.json"),
    section: { mesh: "istio", istio: { "iptables-mode": "nft" } },
  },
} as const;

let dir: string;
let netns: Netns;
const servers: { close(): unknown }[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "meshcni-faults-"));
  netns = Netns.create(`mcf-${uniq()}`);
});
afterAll(async () => {
  for (const s of servers) {
    const t0 = performance.now();
    await Promise.race([s.close(), Bun.sleep(3000)]);
    if (performance.now() - t0 > 2900) console.log("a fault server did not close");
  }
  netns?.delete();
  rmSync(dir, { recursive: true, force: true });
});

/** Nothing of meshcni's in the namespace, in either backend or family. */
function untouched(): string[] {
  const found: string[] = [];
  for (const backend of ["nft", "legacy"] as const) {
    for (const family of [4, 6] as const) {
      if (/PROXY_INIT|ISTIO_/.test(netns.save(backend, family))) found.push(`${backend} IPv${family}`);
    }
  }
  return found;
}

/** A kubeconfig for `url` that trusts the test CA and carries the stand-in's token. */
function kubeconfigFor(api: ApiServer, url: string, name: string): string {
  const path = join(dir, `${name}.kubeconfig`);
  writeFileSync(path, api.kubeconfig().replace(/server: .*/, `server: ${url}`));
  return path;
}

function listen(server: net.Server, host = "127.0.0.1"): Promise<string> {
  const open = new Set<net.Socket>();
  server.on("connection", (sock: net.Socket) => {
    open.add(sock);
    sock.on("close", () => open.delete(sock));
  });
  servers.push({
    close: () =>
      new Promise((r) => {
        for (const sock of open) sock.destroy();
        server.close(() => r(undefined));
      }),
  });
  return new Promise((resolve) =>
    server.listen(0, host, () => resolve(`https://${host}:${(server.address() as AddressInfo).port}`)),
  );
}

/** The transport faults, as servers of their own; each returns the https URL to point at. */
const TRANSPORT: [string, () => Promise<string>][] = [
  [
    "plain HTTP behind an https URL",
    async () => {
      const plain = await startApiServer({ tls: false, token: "t0ken" });
      servers.push(plain);
      return plain.url.replace("http://", "https://");
    },
  ],
  [
    "a certificate for another name",
    async () => {
      // The test certificate names 127.0.0.1, ::1 and localhost; 127.0.0.2 is loopback too.
      const other = await startApiServer({ host: "127.0.0.2", token: "t0ken" });
      servers.push(other);
      return other.url;
    },
  ],
  [
    "a TLS handshake that never completes",
    () => {
      const sockets: net.Socket[] = [];
      const s = net.createServer((sock) => void sockets.push(sock));
      servers.push({
        close: () => {
          for (const x of sockets) x.destroy();
        },
      });
      return listen(s);
    },
  ],
  [
    "a connection closed right after the handshake",
    () => {
      const pki = makePki();
      return listen(tls.createServer({ cert: pki.serverCert, key: pki.serverKey }, (sock) => sock.end()));
    },
  ],
  [
    "an answer that is not HTTP",
    () => {
      const pki = makePki();
      return listen(
        tls.createServer({ cert: pki.serverCert, key: pki.serverKey }, (sock) => sock.end("SSH-2.0-OpenSSH_9.2\r\n")),
      );
    },
  ],
  [
    "a body that stalls half way",
    () => {
      const pki = makePki();
      const held: { destroy(): void }[] = [];
      const s = https.createServer({ cert: pki.serverCert, key: pki.serverKey }, (_req, res) => {
        res.writeHead(200, { "Content-Type": "application/json", "Content-Length": 4000 });
        res.write('{"kind":"Pod","metadata":{"name":"web"');
        held.push(res);
      });
      servers.push({
        close: () => {
          for (const r of held) r.destroy();
        },
      });
      return listen(s);
    },
  ],
];

/** The stand-in's own faults (as in test/plugin/api.test.ts, here for both meshes). */
const STANDIN: [string, Fault | "refused", number][] = [
  ["refused connection", "refused", 11],
  ["401", { kind: "status", code: 401 }, 104],
  ["403", { kind: "status", code: 403 }, 105],
  ["404", { kind: "status", code: 404 }, 106],
  ["500", { kind: "status", code: 500 }, 11],
  ["an answer slower than the bound", { kind: "slow", ms: 4000 }, 11],
  ["a truncated body", { kind: "truncate" }, 11],
];

for (const [mesh, m] of Object.entries(MESHES)) {
  describe(`API faults for a meshed ${mesh} pod`, () => {
    let api: ApiServer;
    let kubeconfig: string;
    const ns = m.pod.metadata.namespace as string;
    const args = `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${m.pod.metadata.name}`;

    beforeAll(async () => {
      api = await startApiServer({ token: "t0ken" });
      servers.push(api);
      api.addPod(m.pod);
      api.addNamespace(m.namespace);
      kubeconfig = join(dir, `${mesh}.kubeconfig`);
      writeFileSync(kubeconfig, api.kubeconfig());
    });

    async function add(kc: string) {
      const conf = {
        cniVersion: "1.0.0",
        name: "k8s-pod-network",
        type: "meshcni",
        timeout_seconds: BOUND_S,
        kubernetes: { kubeconfig: kc },
        ...m.section,
        prevResult: { cniVersion: "1.0.0", ips: [{ address: "10.244.1.12/24" }, { address: "fd00::12/64" }] },
      };
      return runPlugin(cniEnv("ADD", { CNI_ARGS: args, CNI_NETNS: netns.path }), JSON.stringify(conf));
    }

    function expectFailure(r: Awaited<ReturnType<typeof add>>, code: number) {
      expect(r.code).toBe(1);
      const err = JSON.parse(r.stdout);
      expect(Object.keys(err).sort()).toEqual(["cniVersion", "code", "details", "msg"]);
      expect({ code: err.code, msg: err.msg }).toEqual({ code, msg: err.msg });
      expect(err.details).not.toMatch(/\n\s+at /);
      expect(untouched()).toEqual([]);
    }

    test("healthy: the rules are applied (so the faults below are what stops them)", async () => {
      const r = await add(kubeconfig);
      expect(r.code).toBe(0);
      expect(untouched().length).toBeGreaterThan(0);
      netns.exec([
        "sh",
        "-c",
        "for t in nat mangle raw; do iptables-nft -t $t -F; iptables-nft -t $t -X; ip6tables-nft " +
          "-t $t -F; ip6tables-nft -t $t -X; done; ip -6 addr del ::6/128 dev lo 2>/dev/null; true",
      ]);
      expect(untouched()).toEqual([]);
    });

    for (const [name, fault, code] of STANDIN) {
      test(`${name}: code ${code} within the bound, nothing applied`, async () => {
        if (fault === "refused") {
          const gone = await startApiServer({ token: "t0ken" });
          const kc = kubeconfigFor(api, gone.url, "refused");
          await gone.close();
          return expectFailure(await add(kc), code);
        }
        api.setGlobalFault(fault);
        try {
          expectFailure(await add(kubeconfig), code);
        } finally {
          api.setGlobalFault(undefined);
        }
      });
    }

    for (const [name, start] of TRANSPORT) {
      test(`${name}: code 11 within the bound, nothing applied`, async () => {
        const url = await start();
        const r = await add(kubeconfigFor(api, url, name.replace(/\W+/g, "-")));
        expectFailure(r, 11);
        expect(JSON.parse(r.stdout).details).toContain(url.replace("https://", ""));
      });
    }
  });
}
