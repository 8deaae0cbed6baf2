// The real PluginDeps: files, processes, the node agent and the API server of the host the plugin
// runs on. The kubeconfig client (kube.ts, kube-http.ts: fetch and TLS) is imported only when the
// agent could not answer, or for a namespace the agent did not send. The firewall code (backends,
// binaries, the xtables lock, libnftables) is imported only when a command touches rules, so an
// ADD of a pod that is not meshed never loads it.
import { APPLIES_PATH, DEFAULT_AGENT_SOCKET, type LookupSource } from "../../wire/protocol.ts";
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import { type Namespace, parseNamespace, parsePod, type Pod } from "../../kube/objects.ts";
import type { KubeClient, PluginDeps } from "../deps.ts";
import type { EarlyLookup } from "./early-lookup.ts";
import { pruneRecords, readRecord, removeRecord, writeRecord } from "./state.ts";
import { pathExists } from "../../firewall/io/which.ts";
import { retryableWhereAgentApplies } from "../missing-userland.ts";

async function kubeconfigClient(path: string | undefined, allowHttp: boolean): Promise<KubeClient> {
  const [{ kubeClient }, { readKubeconfig }] = await Promise.all([import("./kube.ts"), import("./kube-http.ts")]);
  return kubeClient(readKubeconfig(path, allowHttp));
}

/**
 * Serves the pod the early lookup found (from the agent or the fallback GET), anything else
 * through the kubeconfig.
 */
function earlyClient(early: EarlyLookup): KubeClient {
  let found: { source: LookupSource; fallback?: string } | undefined;
  let namespaceObject: unknown;
  let fallback: Promise<KubeClient> | undefined;
  const viaKubeconfig = () => {
    fallback ??= Promise.all([import("./kube.ts"), early.connection()]).then(([{ kubeClient }, c]) => kubeClient(c));
    return fallback;
  };
  return {
    async getPod(namespace, name, signal): Promise<Pod> {
      if (found || namespace !== early.namespace || name !== early.name)
        return (await viaKubeconfig()).getPod(namespace, name, signal);
      const f = await early.pod;
      found = f.fallback === undefined ? { source: f.source } : { source: f.source, fallback: f.fallback };
      namespaceObject = f.namespace;
      const pod = parsePod(f.body);
      if (!pod) {
        throw new CniError(
          Code.TryAgainLater,
          "try again later",
          `${f.source === "kubeconfig" ? "the API server" : "the meshcni agent"} ` +
            `sent something that is not a Pod for ${namespace}/${name}`,
        );
      }
      return pod;
    },
    async getNamespace(name, signal): Promise<Namespace> {
      if (namespaceObject !== undefined && name === early.namespace) {
        const ns = parseNamespace(namespaceObject);
        if (ns) return ns;
      }
      return (await viaKubeconfig()).getNamespace(name, signal);
    },
    async getService(namespace, name, signal) {
      return (await viaKubeconfig()).getService(namespace, name, signal);
    },
    lookup: () => found,
  };
}

/** Whether the agent at `socket` says it applies rules (GET /v1/applies), within a short bound. */
async function agentApplies(socket: string | undefined): Promise<boolean> {
  const { agentRequest } = await import("../agent/client.ts");
  try {
    const r = await agentRequest(socket ?? DEFAULT_AGENT_SOCKET, "GET", APPLIES_PATH, undefined, 500);
    return r.status === 200 && (JSON.parse(r.body) as { applies?: unknown }).applies === true;
  } catch {
    return false;
  }
}

export function createPluginDeps(
  env: Record<string, string | undefined>,
  logSink: (line: string) => void,
  early?: EarlyLookup,
): PluginDeps {
  const envPath = env.PATH;
  const deps: PluginDeps = {
    async openKube(conf) {
      if (early) return earlyClient(early);
      return kubeconfigClient(conf.kubernetes.kubeconfig, conf.kubernetes.allow_insecure_http);
    },
    openFirewall: async (netns, settings, families) => {
      try {
        return await (await import("../../firewall/io/open.ts")).openFirewall(netns, settings, families, envPath);
      } catch (e) {
        throw retryableWhereAgentApplies(e);
      }
    },
    async hostProblems(conf, settings, families) {
      const problems: string[] = [];
      const { resolveFirewallBinaries } = await import("../../firewall/io/open.ts");
      const { nsenter, chosen, inProcess } = await resolveFirewallBinaries(settings, families, envPath);
      const userland: string[] = [];
      if (!nsenter && !inProcess) userland.push("nsenter not found on the host");
      if ("missing" in chosen) userland.push(`${chosen.missing} not found on the host`);
      // A host without the userland is served when the agent applies the rules.
      if (userland.length > 0 && !(await agentApplies(conf.agent_socket))) problems.push(...userland);
      try {
        const { readKubeconfig } = await import("./kube-http.ts");
        readKubeconfig(conf.kubernetes.kubeconfig, conf.kubernetes.allow_insecure_http);
      } catch (e) {
        problems.push((e as Error).message);
      }
      return problems;
    },
    netnsExists: pathExists,
    podAddresses: async (netns, signal) =>
      (await import("./pod-addresses.ts")).readPodAddresses(netns, envPath, signal),
    writeFile: async (path, text) => {
      await Bun.write(path, text);
    },
    records: { read: readRecord, write: writeRecord, remove: removeRecord, prune: pruneRecords },
    logSink,
  };
  const dry = env.MESHCNI_DRY_RUN_FILE;
  if (dry) deps.dryRunFile = dry;
  return deps;
}
