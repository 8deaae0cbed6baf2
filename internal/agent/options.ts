// meshcni-installer's switches: each flag, or the environment variable MESHCNI_<FLAG>, or the
// contract's default. Pure: argv and the environment are passed in.
import { parseArgs } from "node:util";
import * as v from "valibot";
import { DEFAULT_AGENT_SOCKET, DEFAULT_STATE_DIR } from "../wire/protocol.ts";
import { DEFAULT_MAX_RECORDS, DEFAULT_NETNS_DIR } from "../wire/state.ts";
import {
  DEFAULT_GRACE_SECONDS,
  DEFAULT_RATE_PER_MINUTE,
  DEFAULT_RETRY_SECONDS,
  REPAIR_MODES,
  type RepairMode,
} from "./repair/plan.ts";
import { DEFAULT_VERIFY_SECONDS } from "./verify/plan.ts";
import { NAMES } from "../config/entry.ts";
import { isDnsSubdomain } from "../kube/names.ts";
import { DEFAULT_TOKEN_SECONDS, MIN_TOKEN_SECONDS } from "./install/token.ts";
import { LOG_LEVELS, type LogLevel } from "../log/levels.ts";

export { LOG_LEVELS, type LogLevel };
export type Mode = "run" | "once" | "uninstall";

export interface AgentOptions {
  hostNetDir: string;
  hostBinDir: string;
  destNetDir: string;
  /** The host's CNI plugin folder as the host sees it: the installed plugin names its loader there. */
  destBinDir: string;
  /** Candidates, comma-separated: the first that exists is installed. */
  pluginBinary: string;
  pluginConfig?: string;
  /** The host's root file system, mounted read-only, to check that the host can run the plugin. */
  hostRoot: string;
  serviceAccountDir: string;
  /** The plugin's own service account (in POD_NAMESPACE), whose tokens go into its kubeconfig. */
  pluginServiceAccount: string;
  /** The lifetime asked for the plugin's token (the API server may grant less). */
  pluginTokenSeconds: number;
  confName?: string;
  healthPort?: number;
  mode: Mode;
  logLevel: LogLevel;
  /** KUBERNETES_SERVICE_HOST / _PORT, as the pod's environment has them. */
  serviceHost?: string;
  servicePort?: string;
  /** POD_NAMESPACE (downward API): the plugin lets this namespace's meshcni-node-* pods through. */
  podNamespace?: string;
  /** --node-name, else NODE_NAME (downward API: spec.nodeName). */
  nodeName?: string;
  /** The Unix socket the plugin asks (host path; the host folder is mounted at the same path). */
  agentSocket: string;
  /** The plugin's records and fallback log (host path, mounted at the same path). */
  stateDir: string;
  /** The host's network namespace folder, mounted read-only at the same path. */
  netnsDir: string;
  /** The most records in the state folder; past it the agent plans no ADD. */
  maxRecords: number;
  /** The agent applies meshed pods' rules itself when it can enter their namespaces (false: never). */
  agentApplies: boolean;
  /** The DaemonSet this agent belongs to (in POD_NAMESPACE): SIGTERM undoes only when it is gone or being deleted. */
  daemonSetName: string;
  /** Chain, binary and kubeconfig are checked this often besides inotify. */
  resyncSeconds: number;
  /**
   * Pods of the node with evidence of bypassing the mesh: their rules written back in place,
   * evicted or deleted (with an Event), or only reported. "auto" (no --repair): in-place when the
   * agent applies rules itself, else evict (resolveRepairMode).
   */
  repair: RepairMode | "auto";
  /** How often the agent checks every meshed pod's rules in its namespace (0: only after each ADD it applied). */
  verifySeconds: number;
  /** The chain must have been in place this long before repair acts. */
  repairGraceSeconds: number;
  /** At most this many evictions or deletions a minute. */
  repairRate: number;
  /** A refused eviction is tried again after this long (doubled at each refusal in a row). */
  repairRetrySeconds: number;
  /** A NoSchedule taint the agent removes from its node once chain, binary and cache are ready. */
  startupTaint?: string;
  help: boolean;
}

export class OptionsError extends Error {}

/** --repair as the agent runs it: without the flag, in-place when it applies rules itself, else evict. */
export const resolveRepairMode = (repair: RepairMode | "auto", applies: boolean): RepairMode =>
  repair !== "auto" ? repair : applies ? "in-place" : "evict";

const FLAGS = {
  "host-net-dir": {
    type: "string",
    arg: "DIR",
    default: "/host/etc/cni/net.d",
    help: "the host's CNI config folder, as mounted here",
  },
  "host-bin-dir": {
    type: "string",
    arg: "DIR",
    default: "/host/opt/cni/bin",
    help: "the host's CNI plugin folder, as mounted here",
  },
  "dest-net-dir": {
    type: "string",
    arg: "DIR",
    default: "/etc/cni/net.d",
    help: "the host's CNI config folder, as the host sees it",
  },
  "dest-bin-dir": {
    type: "string",
    arg: "DIR",
    default: "/opt/cni/bin",
    help:
      "the host's CNI plugin folder, as the host sees it: the installed plugin loads its own loader and C library " +
      "from meshcni.d/ there",
  },
  "plugin-binary": {
    type: "string",
    arg: "FILE[,FILE...]",
    default: undefined,
    help:
      "the meshcni binary to install; of several, the first that exists " +
      "(default: the meshcni next to this program)",
  },
  "host-root": {
    type: "string",
    arg: "DIR",
    default: "/host/root",
    help:
      "the host's /usr, /lib, /lib64 and /etc/ld.so.cache mounted read-only under it, to say " +
      "what C library the host has (the plugin brings its own); without it, the host is not looked at",
  },
  "plugin-config": {
    type: "string",
    arg: "FILE",
    default: undefined,
    help: "a JSON file with meshcni's conflist entry (default: the built-in entry)",
  },
  "service-account-dir": {
    type: "string",
    arg: "DIR",
    default: "/var/run/secrets/kubernetes.io/serviceaccount",
    help: "the agent's own credentials (token) and the cluster CA (ca.crt, also written into the plugin's kubeconfig)",
  },
  "plugin-service-account": {
    type: "string",
    arg: "NAME",
    default: NAMES.pluginServiceAccount,
    help:
      "the plugin's own service account, in the namespace of env POD_NAMESPACE: the agent requests its tokens " +
      "(TokenRequest API) for the plugin's kubeconfig",
  },
  "plugin-token-seconds": {
    type: "string",
    arg: "N",
    default: String(DEFAULT_TOKEN_SECONDS),
    help:
      `the lifetime asked for the plugin's token, ${MIN_TOKEN_SECONDS} or more (the API server may grant less); ` +
      "renewed at 80 % of what it grants",
  },
  "conf-name": {
    type: "string",
    arg: "NAME",
    default: undefined,
    help: "chain into this file instead of the one the runtime picks",
  },
  "health-port": {
    type: "string",
    arg: "N",
    default: undefined,
    help: "serve /healthz and /readyz over HTTP on this port",
  },
  "log-level": { type: "string", arg: "LEVEL", default: "info", help: "debug, info, warn or error" },
  "node-name": {
    type: "string",
    arg: "NAME",
    default: undefined,
    help: "this node's name (default: env NODE_NAME, which the DaemonSet sets from spec.nodeName)",
  },
  "agent-socket": {
    type: "string",
    arg: "PATH",
    default: DEFAULT_AGENT_SOCKET,
    help:
      "the Unix socket the plugin asks for pods and reports to " +
      "(a host path, mounted at the same path; its folder is made 0700)",
  },
  "state-dir": {
    type: "string",
    arg: "DIR",
    default: DEFAULT_STATE_DIR,
    help: "the plugin's records and fallback log (a host path, mounted at the same path)",
  },
  "netns-dir": {
    type: "string",
    arg: "DIR",
    default: DEFAULT_NETNS_DIR,
    help:
      "the host's network namespace folder (a host path, mounted read-only at the same path): " +
      "the agent plans an ADD only for a namespace it finds there",
  },
  "agent-applies": {
    type: "string",
    arg: "true|false",
    default: "true",
    help:
      "apply meshed pods' rules in their network namespaces with the agent's own userland, when it can " +
      "(CAP_NET_ADMIN, CAP_SYS_ADMIN and setns, found at start; the plugin applies otherwise); false: never",
  },
  "max-records": {
    type: "string",
    arg: "N",
    default: String(DEFAULT_MAX_RECORDS),
    help:
      "the most records the state folder holds for the agent to plan an ADD; " +
      "past it the plugin runs each ADD itself",
  },
  "daemonset-name": {
    type: "string",
    arg: "NAME",
    default: NAMES.daemonSet,
    help:
      "this agent's DaemonSet in the namespace of env POD_NAMESPACE: " +
      "SIGTERM undoes only when it is gone or being deleted",
  },
  "resync-seconds": {
    type: "string",
    arg: "N",
    default: "60",
    help: "check chain, binary and kubeconfig this often besides watching for changes",
  },
  repair: {
    type: "string",
    arg: "in-place|evict|delete|off",
    default: undefined,
    help:
      "meshed pods of this node with evidence of bypassing the mesh (their mesh validator's latest run " +
      "found no redirect, or their rules are missing in their namespace): write their rules back in " +
      "place (evicting those whose namespace the agent cannot reach), evict them (PodDisruptionBudgets " +
      "respected) or delete them, each with an Event, or only report them; pods with no record of an " +
      "ADD are only reported (unverified). Default: in-place when the agent applies rules, else evict",
  },
  "verify-seconds": {
    type: "string",
    arg: "N",
    default: String(DEFAULT_VERIFY_SECONDS),
    help:
      "when the agent applies rules: check every meshed pod's rules in its namespace once in N s " +
      "(spread over the period) and after each ADD it applied; 0: only after each ADD",
  },
  "repair-grace-seconds": {
    type: "string",
    arg: "N",
    default: String(DEFAULT_GRACE_SECONDS),
    help: "repair acts only once the chain has been in place this long",
  },
  "repair-rate": {
    type: "string",
    arg: "N",
    default: String(DEFAULT_RATE_PER_MINUTE),
    help: "repair evicts or deletes at most this many pods a minute",
  },
  "repair-retry-seconds": {
    type: "string",
    arg: "N",
    default: String(DEFAULT_RETRY_SECONDS),
    help:
      "an eviction a PodDisruptionBudget refused is tried again " +
      "after this long (doubled at each refusal in a row, up to 10 minutes)",
  },
  "startup-taint": {
    type: "string",
    arg: "KEY",
    default: undefined,
    help:
      "remove this NoSchedule taint from this node once the chain, " +
      "the binary and the agent's view of the node's pods are ready",
  },
  once: { type: "boolean", arg: "", default: undefined, help: "install, then exit" },
  uninstall: {
    type: "boolean",
    arg: "",
    default: undefined,
    help:
      "undo an installation (chain, binary, kubeconfig, " +
      "the plugin's records and fallback log, the socket), then exit",
  },
  help: { type: "boolean", arg: "", default: undefined, help: "show this help" },
} as const;
type Flag = keyof typeof FLAGS;

export const envName = (flag: string) => `MESHCNI_${flag.toUpperCase().replace(/-/g, "_")}`;

export function renderUsage(): string {
  const rows = Object.entries(FLAGS).map(([name, f]) => {
    const arg = f.arg ? ` ${f.arg}` : "";
    const def = f.default !== undefined ? ` (default ${f.default})` : "";
    return `  --${name}${arg}\n      ${f.help}${def}; env ${envName(name)}`;
  });
  return [
    "meshcni-installer: installs the meshcni CNI plugin on this node and keeps it chained.",
    "",
    "Usage: meshcni-installer [flags]",
    "  With no mode flag it installs, keeps meshcni chained while the host's CNI rewrites its",
    "  files, and serves the plugin on --agent-socket. On SIGTERM or SIGINT it leaves everything in",
    "  place, unless its DaemonSet is gone or being deleted: then it undoes everything.",
    "",
    ...rows,
    "",
  ].join("\n");
}

const Port = v.pipe(
  v.string(),
  v.regex(/^\d+$/, "must be a number"),
  v.transform(Number),
  v.minValue(1, "must be 1-65535"),
  v.maxValue(65535, "must be 1-65535"),
);

function truthy(name: string, raw: string): boolean {
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off|)$/i.test(raw)) return false;
  throw new OptionsError(`${name}=${JSON.stringify(raw)}: expected true or false`);
}

/** Flags win over MESHCNI_* variables, which win over the defaults. */
export function parseAgentOptions(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
  defaults: { pluginBinary: string },
): AgentOptions {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: Object.fromEntries(Object.entries(FLAGS).map(([k, f]) => [k, { type: f.type }])),
    }));
  } catch (e) {
    throw new OptionsError(`${(e as Error).message.split("\n")[0]} (see --help)`);
  }
  const str = (flag: Flag): string | undefined => {
    const given = values[flag] ?? env[envName(flag)];
    const value = typeof given === "string" && given !== "" ? given : (FLAGS[flag].default ?? undefined);
    return value === undefined ? undefined : String(value);
  };
  const bool = (flag: Flag): boolean => {
    if (values[flag] !== undefined) return values[flag] === true;
    const raw = env[envName(flag)];
    return raw === undefined ? false : truthy(envName(flag), raw);
  };
  const once = bool("once");
  const uninstall = bool("uninstall");
  if (once && uninstall) throw new OptionsError("--once and --uninstall exclude each other");
  const logLevel = str("log-level")!;
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw new OptionsError(`--log-level ${JSON.stringify(logLevel)}: expected one of ${LOG_LEVELS.join(", ")}`);
  }
  let healthPort: number | undefined;
  const rawPort = str("health-port");
  if (rawPort !== undefined) {
    const r = v.safeParse(Port, rawPort);
    if (!r.success) throw new OptionsError(`--health-port ${JSON.stringify(rawPort)}: ${r.issues[0]!.message}`);
    healthPort = r.output;
  }
  const dir = (flag: Flag): string => {
    const d = str(flag)!;
    if (!d.startsWith("/")) throw new OptionsError(`--${flag} ${JSON.stringify(d)}: must be an absolute path`);
    return d.length > 1 ? d.replace(/\/+$/, "") : d;
  };
  const resync = str("resync-seconds")!;
  if (!/^[1-9][0-9]{0,5}$/.test(resync))
    throw new OptionsError(`--resync-seconds ${JSON.stringify(resync)}: expected a whole number of seconds, 1 or more`);
  const agentSocket = str("agent-socket")!;
  if (!agentSocket.startsWith("/") || agentSocket.endsWith("/"))
    throw new OptionsError(`--agent-socket ${JSON.stringify(agentSocket)}: must be an absolute path to a file`);
  // sun_path holds 108 bytes, the terminating NUL included.
  if (Buffer.byteLength(agentSocket) > 107)
    throw new OptionsError(
      `--agent-socket ${JSON.stringify(agentSocket)}: longer than a Unix socket path may be (107 bytes)`,
    );
  // Both reach API paths, so both must be names the API could hold.
  const daemonSetName = str("daemonset-name")!;
  if (!isDnsSubdomain(daemonSetName))
    throw new OptionsError(`--daemonset-name ${JSON.stringify(daemonSetName)}: not a Kubernetes object name`);
  const nodeName = str("node-name") ?? (env.NODE_NAME || undefined);
  if (nodeName !== undefined && !isDnsSubdomain(nodeName))
    throw new OptionsError(`--node-name ${JSON.stringify(nodeName)}: not a Kubernetes node name`);
  const repair = str("repair");
  if (repair !== undefined && !(REPAIR_MODES as readonly string[]).includes(repair))
    throw new OptionsError(
      `--repair ${JSON.stringify(repair)}: expected ${REPAIR_MODES.slice(0, -1).join(", ")} or ${REPAIR_MODES.at(-1)}`,
    );
  const whole = (flag: Flag, min: number): number => {
    const raw = str(flag)!;
    if (!/^[0-9]{1,6}$/.test(raw) || Number(raw) < min)
      throw new OptionsError(`--${flag} ${JSON.stringify(raw)}: expected a whole number, ${min} or more`);
    return Number(raw);
  };
  const startupTaint = str("startup-taint");
  // A label key: [prefix/]name, the form a taint key takes.
  if (
    startupTaint !== undefined &&
    !/^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(startupTaint)
  ) {
    throw new OptionsError(`--startup-taint ${JSON.stringify(startupTaint)}: not a taint key`);
  }
  const pluginServiceAccount = str("plugin-service-account")!;
  if (!isDnsSubdomain(pluginServiceAccount)) {
    const given = JSON.stringify(pluginServiceAccount);
    throw new OptionsError(`--plugin-service-account ${given}: not a Kubernetes object name`);
  }
  const tokenSeconds = str("plugin-token-seconds")!;
  const seconds = Number(tokenSeconds);
  if (!/^[0-9]{1,10}$/.test(tokenSeconds) || seconds < MIN_TOKEN_SECONDS || seconds > 2 ** 32) {
    throw new OptionsError(
      `--plugin-token-seconds ${JSON.stringify(tokenSeconds)}: expected a whole number of ` +
        `seconds, ${MIN_TOKEN_SECONDS} (the API server's least) to ${2 ** 32}`,
    );
  }
  const confName = str("conf-name");
  if (confName !== undefined && (confName.includes("/") || confName === "." || confName === "..")) {
    throw new OptionsError(
      `--conf-name ${JSON.stringify(confName)}: a file name inside --host-net-dir, without a folder`,
    );
  }
  const opts: AgentOptions = {
    hostNetDir: dir("host-net-dir"),
    hostBinDir: dir("host-bin-dir"),
    destNetDir: dir("dest-net-dir"),
    destBinDir: dir("dest-bin-dir"),
    pluginBinary: str("plugin-binary") ?? defaults.pluginBinary,
    hostRoot: dir("host-root"),
    serviceAccountDir: dir("service-account-dir"),
    pluginServiceAccount,
    pluginTokenSeconds: Number(tokenSeconds),
    mode: once ? "once" : uninstall ? "uninstall" : "run",
    logLevel: logLevel as LogLevel,
    agentSocket: agentSocket.replace(/\/{2,}/g, "/"),
    stateDir: dir("state-dir"),
    netnsDir: dir("netns-dir"),
    maxRecords: whole("max-records", 1),
    agentApplies: truthy("--agent-applies", str("agent-applies")!),
    daemonSetName,
    resyncSeconds: Number(resync),
    repair: (repair ?? "auto") as RepairMode | "auto",
    verifySeconds: whole("verify-seconds", 0),
    repairGraceSeconds: whole("repair-grace-seconds", 0),
    repairRate: whole("repair-rate", 1),
    repairRetrySeconds: whole("repair-retry-seconds", 1),
    help: bool("help"),
  };
  const optional = {
    pluginConfig: str("plugin-config"),
    confName,
    healthPort,
    serviceHost: env.KUBERNETES_SERVICE_HOST || undefined,
    servicePort: env.KUBERNETES_SERVICE_PORT || undefined,
    podNamespace: env.POD_NAMESPACE || undefined,
    nodeName,
    startupTaint,
  };
  for (const [k, val] of Object.entries(optional))
    if (val !== undefined) (opts as unknown as Record<string, unknown>)[k] = val;
  return opts;
}
