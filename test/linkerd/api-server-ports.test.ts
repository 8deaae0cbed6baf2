// Linkerd's control-plane pods skip the API server's ports: the compiled plugin reads the
// `default/kubernetes` Service through the kubeconfig (only for those pods) and skips its port
// and targetPort, falling back to 443 and 6443 when the Service cannot be read.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";
import { linkerdEntry } from "./cases.ts";

const SERVICE_PATH = "/api/v1/namespaces/default/services/kubernetes";
const fixture = (f: string) => JSON.parse(readFileSync(repoPath("testdata/pods", f), "utf8"));
const args = (ns: string, name: string) => ({
  CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name}`,
});

describe("the kubernetes Service's ports for Linkerd's control plane (dist/meshcni)", () => {
  let api: ApiServer;
  let dir: string;
  let stdin: string;

  beforeAll(async () => {
    api = await startApiServer({ token: "cp-token" });
    api.addPod(fixture("linkerd-control-plane.json"));
    api.addPod(fixture("linkerd-meshed.json"));
    api.addNamespace({ metadata: { name: "linkerd", annotations: {} } });
    api.addNamespace(fixture("namespace-emojivoto.json"));
    dir = mkdtempSync(join(tmpdir(), "meshcni-cp-"));
    const kubeconfig = join(dir, "ZZZ-meshcni-kubeconfig");
    writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
    const entry = linkerdEntry();
    (entry.kubernetes as Record<string, unknown>).kubeconfig = kubeconfig;
    stdin = JSON.stringify(entry);
  });

  afterAll(async () => {
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const serviceReads = () => api.requests.filter((q) => q.path === SERVICE_PATH).length;

  test("minikube (443 -> 8443): both ports are skipped", async () => {
    api.objects.set(SERVICE_PATH, {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "kubernetes", namespace: "default" },
      spec: { clusterIP: "10.96.0.1", ports: [{ name: "https", port: 443, protocol: "TCP", targetPort: 8443 }] },
    });
    const before = serviceReads();
    const r = await runPlugin(cniEnv("ADD", args("linkerd", "linkerd-destination-7c8b9d5f6-qwert")), stdin, {
      dryRun: true,
    });
    expect(r.code).toBe(0);
    expect(r.payload).toContain("-A PROXY_INIT_OUTPUT -p tcp -m multiport --dports 443,8443 ");
    expect(r.payload).not.toContain("6443");
    expect(serviceReads()).toBe(before + 1);
  });

  test("a pod outside the control plane never asks for the Service", async () => {
    const before = serviceReads();
    const r = await runPlugin(cniEnv("ADD", args("emojivoto", "web-5b8b6f7c9d-x2x7q")), stdin, { dryRun: true });
    expect(r.code).toBe(0);
    expect(r.payload).toContain("PROXY_INIT_OUTPUT");
    expect(r.payload).not.toContain("8443");
    expect(serviceReads()).toBe(before);
  });

  test("the Service cannot be read: 443 and 6443, with a warning, and the pod still gets its rules", async () => {
    api.objects.delete(SERVICE_PATH);
    const r = await runPlugin(cniEnv("ADD", args("linkerd", "linkerd-destination-7c8b9d5f6-qwert")), stdin, {
      dryRun: true,
    });
    expect(r.code).toBe(0);
    expect(r.payload).toContain("-A PROXY_INIT_OUTPUT -p tcp -m multiport --dports 443,6443 ");
    expect(r.stderr).toContain("could not read service default/kubernetes");
  });
});
