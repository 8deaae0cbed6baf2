// The plugin uses a pod object only when it is the runtime's pod (K8S_POD_UID), whichever client
// read it: the early lookup and the agent's planner check the UID, and so does run.ts itself, so
// a client that does not (the plugin's kubeconfig client when no early lookup was started) never
// hands it a pod that was deleted and created again under the same name.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import type { PodRecord } from "../../internal/wire/state.ts";
import { parseNamespace, parsePod } from "../../internal/kube/objects.ts";
import type { KubeClient, PluginDeps } from "../../internal/plugin/deps.ts";
import { runPlugin } from "../../internal/plugin/run.ts";
import { repoPath } from "../support/golden.ts";

const pod = JSON.parse(readFileSync(repoPath("testdata/pods/linkerd-meshed.json"), "utf8"));
const RUNTIME_UID = pod.metadata.uid as string;

function run(command: "ADD" | "CHECK", served: unknown) {
  const records: PodRecord[] = [];
  const firewalls: string[] = [];
  const kube: KubeClient = {
    getPod: async () => parsePod(served)!,
    getNamespace: async (name) => parseNamespace({ metadata: { name } })!,
    getService: async () => {
      throw new Error("no service");
    },
  };
  const deps: PluginDeps = {
    openKube: async () => kube,
    openFirewall: async (netns) => {
      firewalls.push(netns);
      throw new Error("no firewall in this test");
    },
    hostProblems: async () => [],
    netnsExists: async () => true,
    podAddresses: async () => [],
    writeFile: async () => {},
    records: {
      read: async () => undefined,
      write: async (_d, r) => void records.push(r),
      remove: async () => {},
      prune: async () => [],
    },
    logSink: () => {},
  };
  const env: Record<string, string> = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: "c0ffee",
    CNI_NETNS: "/var/run/netns/pod-uid-test",
    CNI_IFNAME: "eth0",
    CNI_PATH: "/opt/cni/bin",
    CNI_ARGS: `K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=${pod.metadata.name};K8S_POD_UID=${RUNTIME_UID}`,
  };
  const stdin = JSON.stringify({
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    kubernetes: { kubeconfig: "/nonexistent" },
    prevResult: { cniVersion: "1.0.0", ips: [{ address: "10.244.1.12/24" }] },
  });
  return runPlugin({ getenv: (k) => env[k], readStdin: async () => stdin, deps }).then((out) => ({
    out,
    records,
    firewalls,
  }));
}

describe("a pod with another UID than K8S_POD_UID, from a client that does not check it", () => {
  const recreated = { ...pod, metadata: { ...pod.metadata, uid: "0d6c1c8e-0000-4000-8000-000000000001" } };

  for (const command of ["ADD", "CHECK"] as const) {
    test(`${command}: code 106, no rules, no record`, async () => {
      const { out, records, firewalls } = await run(command, recreated);
      expect({ exitCode: out.exitCode, code: JSON.parse(out.stdout).code }).toEqual({ exitCode: 1, code: 106 });
      expect(JSON.parse(out.stdout).details).toContain(RUNTIME_UID);
      expect([records, firewalls]).toEqual([[], []]);
    });
  }

  test("the runtime's own pod, and one whose object carries no UID, are used", async () => {
    const { uid: _uid, ...noUid } = pod.metadata;
    for (const served of [pod, { ...pod, metadata: noUid }]) {
      const { out, firewalls } = await run("ADD", served);
      // Past the lookup: the plugin went on to open the pod's firewall.
      expect([out.exitCode, firewalls]).toEqual([1, ["/var/run/netns/pod-uid-test"]]);
    }
  });
});
