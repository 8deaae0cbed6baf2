// The plugin against the stand-in API server: credentials (token, token file, client
// certificate, plain http), and every kind of failure. A meshed pod whose lookup fails gets no
// rules and an error with the documented code, within the plugin's time bound; pods that need
// no lookup never wait on the API.
import { Code } from "../../internal/cni/spec.ts";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ApiServer, type Fault, startApiServer } from "../support/apiserver.ts";
import { makePki } from "../support/certs.ts";
import { repoPath } from "../support/golden.ts";
import { Netns, uniq } from "../support/netns.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";

const POD = "web-5b8b6f7c9d-x2x7q";
const ARGS = `IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=${POD}`;
const pod = JSON.parse(require("node:fs").readFileSync(repoPath("testdata/pods/linkerd-meshed.json"), "utf8"));
const ns = JSON.parse(require("node:fs").readFileSync(repoPath("testdata/pods/namespace-emojivoto.json"), "utf8"));

let dir: string;
let netns: Netns;

function entry(kubeconfig: string, extra: Record<string, unknown> = {}) {
  return JSON.stringify({
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    log_level: "debug",
    kubernetes: { kubeconfig, exclude_namespaces: ["kube-system"], pod_namespace: "meshcni" },
    linkerd: { "iptables-mode": "nft" },
    ...extra,
  });
}

async function add(kubeconfig: string, args = ARGS, extra: Record<string, unknown> = {}) {
  return runPlugin(cniEnv("ADD", { CNI_ARGS: args, CNI_NETNS: netns.path }), entry(kubeconfig, extra));
}

function untouched(): boolean {
  return !netns.save("nft").includes("PROXY_INIT") && !netns.save("legacy").includes("PROXY_INIT");
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "meshcni-api-"));
  netns = Netns.create(`mca-${uniq()}`);
});
afterAll(() => {
  netns?.delete();
  rmSync(dir, { recursive: true, force: true });
});

describe("credentials", () => {
  let api: ApiServer;
  beforeAll(async () => {
    api = await startApiServer({ token: "t0ken", acceptClientCert: true });
    api.addPod(pod);
    api.addNamespace(ns);
  });
  afterAll(() => api.close());

  const cleanup = () => netns.exec(["sh", "-c", "iptables-nft -t nat -F; iptables-nft -t nat -X; true"]);

  test("bearer token and CA data", async () => {
    const kc = join(dir, "token.kubeconfig");
    writeFileSync(kc, api.kubeconfig());
    const r = await add(kc);
    expect(r.code).toBe(0);
    expect(api.requests.at(-1)?.authorization).toBe("Bearer t0ken");
    expect(netns.save("nft")).toContain("PROXY_INIT_OUTPUT");
    cleanup();
  });

  test("tokenFile and a CA file, as kubelet-style kubeconfigs write them", async () => {
    const pki = makePki();
    writeFileSync(join(dir, "token"), "t0ken\n");
    const kc = join(dir, "tokenfile.kubeconfig");
    writeFileSync(kc, api.kubeconfig({ caFile: pki.paths.ca }).replace("token: t0ken", "tokenFile: token"));
    const r = await add(kc);
    expect(r.stderr).toContain("applied");
    expect(r.code).toBe(0);
    cleanup();
  });

  test("a client certificate instead of a token", async () => {
    const kc = join(dir, "cert.kubeconfig");
    const text = api.kubeconfig({ clientCert: true }).replace(/\n {4}token: t0ken/, "");
    writeFileSync(kc, text);
    const r = await add(kc);
    expect(r.code).toBe(0);
    expect(api.requests.at(-1)?.authorization).toBeUndefined();
    expect(api.requests.at(-1)?.clientCertCN).toBeDefined();
    cleanup();
  });

  test("a wrong token is a 401: code 104, nothing applied", async () => {
    const kc = join(dir, "wrong.kubeconfig");
    writeFileSync(kc, api.kubeconfig({ token: "stale" }));
    const r = await add(kc);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout).code).toBe(104);
    expect(JSON.parse(r.stdout).details).toContain("the meshcni-node agent on this node renews it");
    expect(untouched()).toBe(true);
  });

  test("a CA that did not sign the server's certificate: code 11, nothing applied", async () => {
    const other = await startApiServer({ tls: true });
    const kc = join(dir, "badca.kubeconfig");
    // the right server, but trusting no CA at all except the system's
    writeFileSync(
      kc,
      api
        .kubeconfig()
        .replace(/certificate-authority-data: .*/, "certificate-authority: /etc/ssl/certs/ca-certificates.crt"),
    );
    const r = await add(kc);
    await other.close();
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout).code).toBe(11);
    expect(untouched()).toBe(true);
  });

  test("plain http: refused (the token would travel in clear) unless the entry allows it", async () => {
    const plain = await startApiServer({ tls: false });
    plain.addPod(pod);
    plain.addNamespace(ns);
    const kc = join(dir, "http.kubeconfig");
    writeFileSync(kc, plain.kubeconfig());
    const refused = await add(kc);
    expect(refused.code).toBe(1);
    const err = JSON.parse(refused.stdout);
    expect(err.code).toBe(Code.BadKubeconfig);
    expect(err.details).toContain("allow_insecure_http");
    expect(plain.requests.length).toBe(0);
    expect(untouched()).toBe(true);
    const k = {
      kubeconfig: kc,
      exclude_namespaces: ["kube-system"],
      pod_namespace: "meshcni",
      allow_insecure_http: true,
    };
    const r = await add(kc, ARGS, { kubernetes: k });
    await plain.close();
    expect(r.code).toBe(0);
    expect(plain.requests.length).toBeGreaterThan(0);
    cleanup();
  });
});

describe("faults of the API server for a meshed pod", () => {
  let api: ApiServer;
  let kc: string;
  beforeAll(async () => {
    api = await startApiServer({ token: "t0ken" });
    api.addPod(pod);
    api.addNamespace(ns);
    kc = join(dir, "faults.kubeconfig");
    writeFileSync(kc, api.kubeconfig());
  });
  afterAll(() => api.close());

  const cases: [string, Fault, number][] = [
    ["403", { kind: "status", code: 403 }, 105],
    ["404", { kind: "status", code: 404 }, 106],
    ["429", { kind: "status", code: 429 }, 11],
    ["500", { kind: "status", code: 500 }, 11],
    ["503", { kind: "status", code: 503 }, 11],
    ["a dropped connection", { kind: "drop" }, 11],
    ["a truncated body", { kind: "truncate" }, 11],
    ["a body that is not JSON", { kind: "garbage" }, 11],
  ];
  for (const [name, fault, code] of cases) {
    test(`${name}: code ${code}, nothing applied`, async () => {
      api.setGlobalFault(fault);
      try {
        const r = await add(kc);
        expect(r.code).toBe(1);
        const err = JSON.parse(r.stdout);
        expect(err.code).toBe(code);
        expect(err.details.length).toBeGreaterThan(20);
        expect(r.payload).toBeUndefined();
        expect(untouched()).toBe(true);
      } finally {
        api.setGlobalFault(undefined);
      }
    });
  }

  test("a namespace lookup that fails fails the ADD too (fail closed)", async () => {
    api.faults.set("/api/v1/namespaces/emojivoto", { kind: "status", code: 500 });
    try {
      const r = await add(kc);
      expect(JSON.parse(r.stdout).code).toBe(11);
      expect(untouched()).toBe(true);
    } finally {
      api.faults.clear();
    }
  });

  test("an answer slower than the bound: code 11 within the bound", async () => {
    api.setGlobalFault({ kind: "slow", ms: 4000 });
    try {
      const r = await add(kc, ARGS, { timeout_seconds: 1 });
      // How soon within the bound: bench/bounds.ts.
      expect(JSON.parse(r.stdout).code).toBe(11);
      expect(untouched()).toBe(true);
    } finally {
      api.setGlobalFault(undefined);
    }
  });

  test("the default bound (5 s) cuts off an answer that takes 8 s", async () => {
    api.setGlobalFault({ kind: "slow", ms: 8000 });
    try {
      const r = await add(kc);
      // The bound itself (about 5 s): bench/bounds.ts.
      expect(JSON.parse(r.stdout).code).toBe(11);
    } finally {
      api.setGlobalFault(undefined);
    }
  });

  test("a refused connection: code 11", async () => {
    const closed = await startApiServer({ token: "t0ken" });
    const kcClosed = join(dir, "closed.kubeconfig");
    writeFileSync(kcClosed, closed.kubeconfig());
    await closed.close();
    const r = await add(kcClosed);
    expect(JSON.parse(r.stdout).code).toBe(11);
    expect(untouched()).toBe(true);
  });

  test("with the API down, excluded namespaces, meshcni's own pods and non-Kubernetes containers still pass", async () => {
    api.setGlobalFault({ kind: "drop" });
    const before = api.requests.length;
    try {
      for (const args of [
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-abcde",
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=meshcni;K8S_POD_NAME=meshcni-node-x7k2p",
        "",
      ]) {
        const r = await add(kc, args);
        expect(r.code).toBe(0);
      }
      // a stale kubeconfig does not matter for them either
      const r = await add(
        "/nonexistent/ZZZ-meshcni-kubeconfig",
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=meshcni;K8S_POD_NAME=meshcni-node-x7k2p",
      );
      expect(r.code).toBe(0);
      expect(api.requests.length).toBe(before);
    } finally {
      api.setGlobalFault(undefined);
    }
  });
});
