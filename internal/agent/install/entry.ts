// The entry meshcni-installer appends to the host's conflist: the --plugin-config JSON (or the
// contract's default) with the kubeconfig path, the DaemonSet's namespace and the agent's socket
// and state folder filled in. Pure.
import * as v from "valibot";
import { describeFirstIssue, PLUGIN_TYPE } from "./conflist/schema.ts";
import { defaultPluginEntry, kubeconfigPath } from "../../config/entry.ts";
import { PluginConfSchema } from "../../config/plugin-config.ts";
import type { JsonObject } from "./conflist/chain.ts";

export class EntryError extends Error {}

/** Where the plugin finds the agent and keeps its records, as the host sees them. */
export interface AgentPaths {
  socket: string;
  stateDir: string;
}

/**
 * `configText` is the content of --plugin-config, or undefined for the default entry. The
 * runtime injects `cniVersion` (and `name`) from the list, so `cniVersion` is dropped.
 */
export function entryFromConfigText(
  configText: string | undefined,
  destNetDir: string,
  podNamespace?: string,
  agent?: AgentPaths,
): JsonObject {
  let entry: JsonObject;
  if (configText === undefined) {
    entry = defaultPluginEntry("linkerd", destNetDir);
  } else {
    let raw: unknown;
    try {
      raw = JSON.parse(configText);
    } catch (e) {
      throw new EntryError(`not JSON: ${(e as Error).message}`);
    }
    if (typeof raw !== "object" || raw === null || Array.isArray(raw))
      throw new EntryError("must be a JSON object (meshcni's conflist entry)");
    entry = raw as JsonObject;
  }
  if (entry.type !== PLUGIN_TYPE) {
    throw new EntryError(`"type" is ${JSON.stringify(entry.type)}; meshcni's entry must have "type": "${PLUGIN_TYPE}"`);
  }
  const { cniVersion: _dropped, ...rest } = entry;
  const k8s = rest.kubernetes ?? {};
  if (typeof k8s !== "object" || k8s === null || Array.isArray(k8s))
    throw new EntryError('"kubernetes" must be an object');
  const kubernetes: JsonObject = { ...k8s, kubeconfig: kubeconfigPath(destNetDir) };
  if (podNamespace) kubernetes.pod_namespace = podNamespace;
  const out: JsonObject = { ...rest, kubernetes };
  if (agent) {
    out.agent_socket = agent.socket;
    out.state_dir = agent.stateDir;
  }
  // Judge it as the plugin will when the runtime hands it over.
  const check = v.safeParse(PluginConfSchema, { cniVersion: "1.0.0", name: "check", ...out });
  if (!check.success) {
    throw new EntryError(`the plugin would reject it: ${describeFirstIssue(check.issues)}`);
  }
  return out;
}
