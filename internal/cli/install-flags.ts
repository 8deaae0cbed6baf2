// The configuration flags `install-cni` and `explain` share, and their mapping onto the chart
// values (internal/cli/manifests/values.ts). Every refusal names the flag. Pure.
import { entryFromOptions, MESHES, type Mesh, NAMES } from "../config/entry.ts";
import { parsePluginConf } from "../config/plugin-config.ts";
import { IPTABLES_MODES } from "../firewall/registry.ts";
import { parse as parseYaml } from "yaml";
import { applySet, coalesce, isTree, mergeTrees, OverrideError, type Tree } from "./manifests/overrides.ts";
import { RELEASE_IMAGE_DIGEST } from "./manifests/release-image.ts";
import {
  DEFAULT_DIRS,
  LINKERD_ONLY,
  LOG_LEVELS,
  parseValues,
  PLATFORM_NAMES,
  PLATFORMS,
  PULL_POLICIES,
  REPAIR_VALUES,
  resolveImage,
  TAINT_KEY,
  type Values,
  ValuesError,
  type ValuesInput,
  entryOptions,
} from "./manifests/values.ts";
import { CliError } from "./errors.ts";
import { type Flags, list, type OptionSpec, str } from "./spec.ts";
import { isDnsLabel } from "../kube/names.ts";

const platformDirs = (key: "cniBinDir" | "cniConfDir") =>
  PLATFORM_NAMES.map((p) => `${PLATFORMS[p][key]} with --platform ${p}`).join(", ");

/** Flags that shape the plugin's configuration (install-cni and explain). */
export const CONFIG_OPTIONS: Record<string, OptionSpec> = {
  mesh: {
    type: "string",
    arg: "MESH",
    default: "linkerd",
    choices: MESHES,
    help: "the mesh whose sidecar proxy takes the traffic",
  },
  platform: {
    type: "string",
    arg: "NAME",
    choices: PLATFORM_NAMES,
    default: "none",
    help: `preset CNI folders for a hosted or packaged Kubernetes: ${PLATFORM_NAMES.join(", ")}`,
  },
  "dest-cni-net-dir": {
    type: "string",
    arg: "DIR",
    dir: true,
    default: DEFAULT_DIRS.cniConfDir,
    help: `the host's CNI config folder (${platformDirs("cniConfDir")})`,
  },
  "dest-cni-bin-dir": {
    type: "string",
    arg: "DIR",
    dir: true,
    default: DEFAULT_DIRS.cniBinDir,
    help: `the host's CNI plugin folder (${platformDirs("cniBinDir")})`,
  },
  "conf-name": {
    type: "string",
    arg: "FILE",
    default: "the first file, as the runtime picks it",
    help: "the conflist in the config folder to chain meshcni into",
  },
  "cni-log-level": {
    type: "string",
    arg: "LEVEL",
    default: "info",
    choices: LOG_LEVELS,
    help: "the plugin's log level",
  },
  "exclude-namespaces": {
    type: "string",
    arg: "NS,...",
    multiple: true,
    default: "none for linkerd; istio-system,kube-system for istio",
    help: "namespaces whose pods are never redirected",
  },
  "inbound-port": {
    type: "string",
    arg: "PORT",
    default: "4143 for linkerd, 15006 for istio",
    help: "the proxy port inbound TCP is redirected to",
  },
  "outbound-port": {
    type: "string",
    arg: "PORT",
    default: "4140 for linkerd, 15001 for istio",
    help: "the proxy port outbound TCP is redirected to",
  },
  "proxy-uid": {
    type: "string",
    arg: "UID",
    default: "2102 for linkerd, 1337 for istio",
    help: "the proxy's user id; its own traffic is not redirected",
  },
  "proxy-gid": {
    type: "string",
    arg: "GID",
    default: "none for linkerd, 1337 for istio",
    help: "the proxy's group id; its own traffic is not redirected",
  },
  "skip-inbound-ports": {
    type: "string",
    arg: "PORTS",
    multiple: true,
    default: "none (4191,4190 always)",
    help: "linkerd: inbound ports or LOW-HIGH ranges that bypass the proxy",
  },
  "skip-outbound-ports": {
    type: "string",
    arg: "PORTS",
    multiple: true,
    default: "none",
    help: "linkerd: outbound ports or ranges that bypass the proxy",
  },
  "redirect-ports": {
    type: "string",
    arg: "PORTS",
    multiple: true,
    default: "all",
    help: "linkerd: redirect only these inbound ports",
  },
  "iptables-mode": {
    type: "string",
    arg: "MODE",
    default: "auto",
    choices: IPTABLES_MODES,
    help: "how the plugin programs pods: auto, legacy, nft, plain (iptables binaries) or nftables (native nft)",
  },
  ipv6: { type: "boolean", default: "off", help: "linkerd: also redirect IPv6 (ip6tables)" },
  "use-wait-flag": { type: "boolean", default: "off", help: "pass -w to iptables (wait for the xtables lock)" },
  namespace: { type: "string", short: "n", arg: "NS", default: "meshcni", help: "the namespace meshcni runs in" },
};

/**
 * Whether meshcnictl renders (install-cni) or names for deletion (uninstall-cni) the Namespace
 * object: for meshcni's own namespace, or when the flag says meshcni creates it. Any other
 * namespace belongs to someone else: meshcni never labels it (privileged Pod Security, no
 * injection) and never deletes it.
 */
export function ownsNamespace(namespace: string, flag: boolean): boolean {
  return flag || namespace === NAMES.namespace;
}

/** Flags of install-cni alone: how the DaemonSet runs. */
export const DEPLOY_OPTIONS: Record<string, OptionSpec> = {
  image: {
    type: "string",
    arg: "REF",
    default: resolveImage(parseValues({ digest: RELEASE_IMAGE_DIGEST })),
    help: "the meshcni image (installer and plugin)",
  },
  "image-pull-policy": {
    type: "string",
    arg: "POLICY",
    default: "IfNotPresent",
    choices: PULL_POLICIES,
    help: "the image's pull policy",
  },
  "priority-class-name": {
    type: "string",
    arg: "NAME",
    default: "system-node-critical",
    help: "the DaemonSet pods' priority class (empty for none)",
  },
  "health-port": { type: "string", arg: "PORT", default: "9813", help: "the agent's /healthz and /readyz port" },
  "pod-annotation": {
    type: "string",
    arg: "KEY=VALUE",
    multiple: true,
    repeatOnly: true,
    default: "none",
    help: "an extra annotation on the DaemonSet's pods",
  },
  repair: {
    type: "string",
    arg: "MODE",
    default: "in-place",
    choices: REPAIR_VALUES,
    help:
      "pods with evidence of bypassing the mesh (their mesh validator's latest run found no redirect, or their " +
      "rules are missing in their namespace): the agent writes their rules back in place and evicts those whose " +
      "namespace it cannot reach (in-place; RBAC: create events and pods/eviction), evicts them " +
      "(PodDisruptionBudgets respected; RBAC: create pods/eviction and events) or deletes them (RBAC: delete " +
      "pods, create events), each with an Event, or only reports them (off); pods with no record of an ADD are " +
      "only reported",
  },
  "agent-applies": {
    type: "string",
    arg: "true|false",
    default: "true",
    choices: ["true", "false"],
    help: "the agent applies meshed pods' rules in their network namespaces with its image's userland, so the host needs no iptables, nft or nsenter (its container gets NET_ADMIN and SYS_ADMIN, never privileged); false: the capability-free DaemonSet, and the plugin applies the rules with the host's userland",
  },
  "startup-taint": {
    type: "string",
    arg: "KEY",
    default: "none",
    help:
      "the agent removes this taint from its node once meshcni is chained and it knows the node's pods (RBAC: " +
      "get and patch nodes); register nodes with it (kubelet --register-with-taints, Karpenter startupTaints)",
  },
  values: {
    type: "string",
    short: "f",
    arg: "FILE",
    multiple: true,
    repeatOnly: true,
    file: true,
    default: "none",
    help: "a YAML file of chart values (manifests/values.yaml names them); repeatable, the later wins; over the flags",
  },
  set: {
    type: "string",
    arg: "KEY=VALUE",
    multiple: true,
    repeatOnly: true,
    default: "none",
    help: "a chart value, as helm --set writes it (a.b=1, list[0]=x, list={x,y}); over --values and the flags",
  },
  "set-string": {
    type: "string",
    arg: "KEY=VALUE",
    multiple: true,
    repeatOnly: true,
    default: "none",
    help: "like --set, the value always a string; after --set",
  },
  "create-namespace": {
    type: "boolean",
    default: "on for meshcni, off for any other --namespace",
    help: "render the Namespace (labelled privileged, no injection); without it another namespace is left as it is",
  },
};

/** A values file given with --values: its name (for messages) and its text. */
export interface ValuesFile {
  path: string;
  text: string;
}

/** The chart's value names: what --set and --values take (namespace is --namespace's). */
const CHART_DEFAULTS: Tree = (() => {
  const { namespace: _, ...rest } = parseValues({});
  return rest as Tree;
})();

function closest(name: string, names: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  return (
    names.find((n) => n.toLowerCase() === lower) ?? names.find((n) => n.toLowerCase().startsWith(lower.slice(0, 4)))
  );
}

/** The values --values and --set give, layered as Helm layers them, over `base` (the flags'). */
function userValues(flags: Flags, files: readonly ValuesFile[], base: Tree): Tree {
  let user = base;
  for (const f of files) {
    let tree: unknown;
    try {
      tree = parseYaml(f.text);
    } catch (e) {
      throw new CliError(`--values ${f.path}: not YAML: ${(e as Error).message.split("\n")[0]}`);
    }
    if (tree === null || tree === undefined) continue;
    if (!isTree(tree)) throw new CliError(`--values ${f.path}: must be a map of chart values`);
    checkNames(tree, `--values ${f.path}`);
    user = mergeTrees(user, tree);
  }
  const sets = (name: string) => {
    const v = flags[name];
    return v === undefined || typeof v === "boolean" ? [] : Array.isArray(v) ? v : [v];
  };
  for (const [flag, asString] of [
    ["set", false],
    ["set-string", true],
  ] as const) {
    for (const expr of sets(flag)) {
      const one: Tree = {};
      try {
        applySet(one, expr, { asString });
        applySet(user, expr, { asString });
      } catch (e) {
        if (e instanceof OverrideError) throw new CliError(e.message.replace(/^--set /, `--${flag} `));
        throw e;
      }
      checkNames(one, `--${flag} ${JSON.stringify(expr)}`);
    }
  }
  return user;
}

function checkNames(tree: Tree, where: string): void {
  const names = Object.keys(CHART_DEFAULTS);
  for (const k of Object.keys(tree)) {
    if (names.includes(k)) continue;
    if (k === "namespace")
      throw new CliError(`${where}: namespace is not a chart value; use --namespace (helm: --namespace too)`);
    const near = closest(k, names);
    throw new CliError(
      `${where}: unknown value ${JSON.stringify(k)}${near ? ` (did you mean ${near}?)` : ""}; ` +
        `the values are manifests/values.yaml's: ${names.join(", ")}`,
    );
  }
}

function bad(flag: string, value: string, why: string): CliError {
  return new CliError(`--${flag} ${JSON.stringify(value)}: ${why}`);
}

function choice<T extends string>(flags: Flags, flag: string, choices: readonly T[]): T | undefined {
  const v = str(flags, flag);
  if (v === undefined) return undefined;
  if (!(choices as readonly string[]).includes(v)) throw bad(flag, v, `must be one of ${choices.join(", ")}`);
  return v as T;
}

function port(flags: Flags, flag: string): number | undefined {
  const v = str(flags, flag);
  if (v === undefined) return undefined;
  if (!/^\d{1,5}$/.test(v.trim()) || Number(v) < 1 || Number(v) > 65535)
    throw bad(flag, v, "is not a TCP port (1-65535)");
  return Number(v);
}

function id(flags: Flags, flag: string, min: number): number | undefined {
  const v = str(flags, flag);
  if (v === undefined) return undefined;
  const s = v.trim();
  if (!/^-?\d{1,10}$/.test(s) || Number(s) < min || Number(s) > 4294967294) {
    throw bad(
      flag,
      v,
      min < 0 ? "must be -1 (none) or a user/group id (0-4294967294)" : `must be a user/group id (${min}-4294967294)`,
    );
  }
  return Number(s);
}

function dir(flags: Flags, flag: string): string | undefined {
  const v = str(flags, flag);
  if (v === undefined) return undefined;
  if (!v.startsWith("/")) throw bad(flag, v, "must be an absolute path (the folder as the host sees it)");
  if (/\s/.test(v) || v.split("/").includes(".."))
    throw bad(flag, v, "must be a plain absolute path (no spaces, no ..)");
  return v;
}

function portsOrRanges(flags: Flags, flag: string): string[] | undefined {
  const items = list(flags, flag);
  for (const item of items ?? []) {
    const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(item);
    const ok =
      m && Number(m[1]) <= 65535 && (m[2] === undefined || (Number(m[2]) <= 65535 && Number(m[2]) >= Number(m[1])));
    if (!ok) throw bad(flag, item, "is not a port (0-65535) or a range LOW-HIGH");
  }
  return items;
}

function ports(flags: Flags, flag: string): number[] | undefined {
  const items = list(flags, flag);
  return items?.map((item) => {
    if (!/^\d{1,5}$/.test(item) || Number(item) < 1 || Number(item) > 65535)
      throw bad(flag, item, "is not a TCP port (1-65535)");
    return Number(item);
  });
}

function names(flags: Flags, flag: string): string[] | undefined {
  const items = list(flags, flag);
  for (const item of items ?? []) {
    if (!isDnsLabel(item)) throw bad(flag, item, "is not a namespace name");
  }
  return items;
}

function annotations(flags: Flags, flag: string): Record<string, string> | undefined {
  const v = flags[flag];
  if (v === undefined || typeof v === "boolean") return undefined;
  const out: Record<string, string> = {};
  for (const item of Array.isArray(v) ? v : [v]) {
    const eq = item.indexOf("=");
    const key = eq > 0 ? item.slice(0, eq) : "";
    if (!/^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(key)) {
      throw bad(flag, item, "must be KEY=VALUE with a valid annotation key");
    }
    out[key] = item.slice(eq + 1);
  }
  return out;
}

/**
 * The chart values that these flags choose, validated; then the plugin's own parser checks the
 * conflist entry they produce, so install-cni never renders a configuration the plugin refuses.
 */
export function buildValuesFromFlags(flags: Flags, opts: { deploy: boolean; files?: readonly ValuesFile[] }): Values {
  const mesh: Mesh = choice(flags, "mesh", MESHES) ?? "linkerd";
  if (mesh === "istio") {
    for (const { flag, istio } of Object.values(LINKERD_ONLY)) {
      if (flags[flag] !== undefined)
        throw new CliError(`--${flag} applies to --mesh linkerd only; with Istio it comes from ${istio}`);
    }
  }
  const minId = mesh === "istio" ? 1 : -1;
  const input: ValuesInput = { mesh };
  const set = <K extends keyof ValuesInput>(key: K, value: ValuesInput[K] | undefined) => {
    if (value !== undefined) input[key] = value;
  };
  set("namespace", names(flags, "namespace")?.[0]);
  if (str(flags, "namespace") === "") throw bad("namespace", "", "is not a namespace name");
  if (ownsNamespace(input.namespace ?? NAMES.namespace, flags["create-namespace"] === true))
    input.createNamespace = true;
  set("platform", choice(flags, "platform", PLATFORM_NAMES));
  set("cniConfDir", dir(flags, "dest-cni-net-dir"));
  set("cniBinDir", dir(flags, "dest-cni-bin-dir"));
  const confName = str(flags, "conf-name");
  if (confName !== undefined && (confName === "" || confName.includes("/") || confName === "." || confName === "..")) {
    throw bad("conf-name", confName, "must be a file name inside --dest-cni-net-dir, without a folder");
  }
  set("cniConfFileName", confName);
  set("logLevel", choice(flags, "cni-log-level", LOG_LEVELS));
  set("excludeNamespaces", names(flags, "exclude-namespaces"));
  set("inboundPort", port(flags, "inbound-port"));
  set("outboundPort", port(flags, "outbound-port"));
  set("proxyUID", id(flags, "proxy-uid", minId));
  set("proxyGID", id(flags, "proxy-gid", minId));
  set("skipInboundPorts", portsOrRanges(flags, "skip-inbound-ports"));
  set("skipOutboundPorts", portsOrRanges(flags, "skip-outbound-ports"));
  set("redirectPorts", ports(flags, "redirect-ports"));
  set("iptablesMode", choice(flags, "iptables-mode", IPTABLES_MODES));
  if (flags.ipv6 === true) input.ipv6 = true;
  if (flags["use-wait-flag"] === true) input.useWaitFlag = true;
  if (opts.deploy) {
    const image = str(flags, "image");
    if (image !== undefined && !/^[a-z0-9][\w.\-/:@]*$/i.test(image))
      throw bad("image", image, "is not an image reference such as registry/name:tag");
    set("image", image);
    set("pullPolicy", choice(flags, "image-pull-policy", PULL_POLICIES));
    const pc = str(flags, "priority-class-name");
    if (pc !== undefined && pc !== "" && !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(pc))
      throw bad("priority-class-name", pc, "is not a priority class name");
    set("priorityClassName", pc);
    set("healthPort", port(flags, "health-port"));
    set("podAnnotations", annotations(flags, "pod-annotation"));
    set("repair", choice(flags, "repair", REPAIR_VALUES));
    const applies = choice(flags, "agent-applies", ["true", "false"] as const);
    if (applies !== undefined) input.agentApplies = applies === "true";
    const taint = str(flags, "startup-taint");
    if (taint !== undefined && !TAINT_KEY.test(taint))
      throw bad("startup-taint", taint, "is not a taint key ([prefix/]name)");
    set("startupTaint", taint);
  }
  let values: Values;
  try {
    values = parseValues(opts.deploy ? chartValues(flags, opts.files ?? [], input) : input);
  } catch (e) {
    if (e instanceof ValuesError) {
      // --set types 1 and true as Helm does; a label or selector wants the string.
      const hint = /Expected string but received (true|false|-?\d+)\b/i.test(e.message)
        ? " (--set reads numbers and true/false as such: use --set-string, or quote the value in a values file)"
        : "";
      throw new CliError(`invalid settings: ${e.message}${hint}`);
    }
    if (e instanceof OverrideError) throw new CliError(e.message);
    throw e;
  }
  checkPluginAccepts(values);
  return values;
}

/**
 * The flags' values, then --values files and --set over them (as Linkerd's install-cni layers
 * its chart values over its flags), then the chart's defaults under everything, as Helm does.
 * A release build pins the default image by its digest unless the image is chosen here.
 */
function chartValues(flags: Flags, files: readonly ValuesFile[], input: ValuesInput): ValuesInput {
  const { namespace, ...fromFlags } = input;
  const user = userValues(flags, files, fromFlags as Tree);
  if (RELEASE_IMAGE_DIGEST && !["image", "hub", "tag", "digest"].some((k) => k in user))
    user.digest = RELEASE_IMAGE_DIGEST;
  return { ...(coalesce(user, CHART_DEFAULTS) as ValuesInput), ...(namespace !== undefined ? { namespace } : {}) };
}

/** The entry the plugin would get, parsed by the plugin's own parser (as a runtime hands it over). */
export function buildPluginConfText(values: Values): string {
  const entry = entryFromOptions(entryOptions(values));
  return JSON.stringify({
    cniVersion: "1.1.0",
    ...entry,
    kubernetes: { ...(entry.kubernetes as object), pod_namespace: values.namespace },
  });
}

function checkPluginAccepts(values: Values): void {
  try {
    parsePluginConf(buildPluginConfText(values));
  } catch (e) {
    throw new CliError(`the plugin would refuse this configuration: ${(e as Error).message}`);
  }
}
