// The real PluginDeps: files, processes and the API server of the host the plugin runs on.
import type { PluginDeps } from "../plugin/deps.ts";
import { openFirewall, resolveFirewallBinaries } from "./firewall.ts";
import type { EarlyLookup } from "./early-lookup.ts";
import { kubeClient } from "./kube.ts";
import { readKubeconfig } from "./kube-http.ts";
import { readPodAddresses } from "./pod-addresses.ts";
import { pathExists } from "./which.ts";

export function createPluginDeps(
  env: Record<string, string | undefined>, logSink: (line: string) => void, early?: EarlyLookup,
): PluginDeps {
  const envPath = env.PATH;
  const deps: PluginDeps = {
    async openKube(conf) {
      if (early && conf.kubernetes.kubeconfig === early.kubeconfig) {
        const { namespace, name, pod } = early;
        return kubeClient(await early.connection, { namespace, name, body: pod });
      }
      return kubeClient(await readKubeconfig(conf.kubernetes.kubeconfig));
    },
    openFirewall: (netns, settings, families) => openFirewall(netns, settings, families, envPath),
    async hostProblems(conf, settings, families) {
      const problems: string[] = [];
      const { nsenter, chosen, inProcess } = await resolveFirewallBinaries(settings, families, envPath);
      if (!nsenter && !inProcess) problems.push("nsenter not found on the host");
      if ("missing" in chosen) problems.push(`${chosen.missing} not found on the host`);
      try {
        await readKubeconfig(conf.kubernetes.kubeconfig);
      } catch (e) {
        problems.push((e as Error).message);
      }
      return problems;
    },
    netnsExists: pathExists,
    podAddresses: (netns, signal) => readPodAddresses(netns, envPath, signal),
    writeFile: async (path, text) => {
      await Bun.write(path, text);
    },
    logSink,
  };
  const dry = env.MESHCNI_DRY_RUN_FILE;
  if (dry) deps.dryRunFile = dry;
  return deps;
}
