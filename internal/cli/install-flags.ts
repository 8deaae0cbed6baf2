// The configuration flags `install-cni` and `explain` share, and their mapping onto the chart
// values (internal/manifests/values.ts). Every refusal names the flag. Pure.
import { buildPluginEntry, MESHES, type Mesh } from "../config/entry.ts";
import { IPTABLES_MODES, parsePluginConf } from "../config/plugin-config.ts";
import {
  DEFAULT_DIRS, LOG_LEVELS, parseValues, PLATFORM_NAMES, PLATFORMS, PULL_POLICIES, resolveImage, type Values, ValuesError,
  type ValuesInput, entryOptions,
} from "../manifests/values.ts";
import { CliError } from "./errors.ts";
import { type Flags, list, type OptionSpec, str } from "./spec.ts";

const platformDirs = (key: "cniBinDir" | "cniConfDir") =>
  PLATFORM_NAMES.map((p) => `${PLATFORMS[p][key]} with --platform ${p}`).join(", ");

/** Flags that shape the plugin's configuration (install-cni and explain). */
export const CONFIG_OPTIONS: Record<string, OptionSpec> = {
  mesh: { type: "string", arg: "MESH", default: "linkerd", choices: MESHES, help: "the mesh whose sidecar proxy takes the traffic" },
  platform: {
    type: "string", arg: "NAME", choices: PLATFORM_NAMES, default: "none",
    help: `preset CNI folders for a hosted or packaged Kubernetes: ${PLATFORM_NAMES.join(", ")}`,
  },
  "dest-cni-net-dir": {
    type: "string", arg: "DIR", dir: true, default: DEFAULT_DIRS.cniConfDir,
    help: `the host's CNI config folder (${platformDirs("cniConfDir")})`,
  },
  "dest-cni-bin-dir": {
    type: "string", arg: "DIR", dir: true, default: DEFAULT_DIRS.cniBinDir,
    help: `the host's CNI plugin folder (${platformDirs("cniBinDir")})`,
  },
  "conf-name": { type: "string", arg: "FILE", default: "the first file, as the runtime picks it", help: "the conflist in the config folder to chain meshcni into" },
  "cni-log-level": { type: "string", arg: "LEVEL", default: "info", choices: LOG_LEVELS, help: "the plugin's log level" },
  "exclude-namespaces": {
    type: "string", arg: "NS,...", multiple: true,
    default: "none for linkerd; istio-system,kube-system for istio",
    help: "namespaces whose pods are never redirected",
  },
  "inbound-port": { type: "string", arg: "PORT", default: "4143 for linkerd, 15006 for istio", help: "the proxy port inbound TCP is redirected to" },
  "outbound-port": { type: "string", arg: "PORT", default: "4140 for linkerd, 15001 for istio", help: "the proxy port outbound TCP is redirected to" },
  "proxy-uid": { type: "string", arg: "UID", default: "2102 for linkerd, 1337 for istio", help: "the proxy's user id; its own traffic is not redirected" },
  "proxy-gid": { type: "string", arg: "GID", default: "none for linkerd, 1337 for istio", help: "the proxy's group id; its own traffic is not redirected" },
  "skip-inbound-ports": {
    type: "string", arg: "PORTS", multiple: true, default: "none (4191,4190 always)",
    help: "linkerd: inbound ports or LOW-HIGH ranges that bypass the proxy",
  },
  "skip-outbound-ports": { type: "string", arg: "PORTS", multiple: true, default: "none", help: "linkerd: outbound ports or ranges that bypass the proxy" },
  "redirect-ports": { type: "string", arg: "PORTS", multiple: true, default: "all", help: "linkerd: redirect only these inbound ports" },
  "iptables-mode": { type: "string", arg: "MODE", default: "auto", choices: IPTABLES_MODES, help: "how the plugin programs pods: auto, legacy, nft, plain (iptables binaries) or nftables (native nft)" },
  ipv6: { type: "boolean", default: "off", help: "linkerd: also redirect IPv6 (ip6tables)" },
  "use-wait-flag": { type: "boolean", default: "off", help: "pass -w to iptables (wait for the xtables lock)" },
  namespace: { type: "string", short: "n", arg: "NS", default: "meshcni", help: "the namespace meshcni runs in" },
};

/** Flags of install-cni alone: how the DaemonSet runs. */
export const DEPLOY_OPTIONS: Record<string, OptionSpec> = {
  image: { type: "string", arg: "REF", default: resolveImage(parseValues({})), help: "the meshcni image (installer and plugin)" },
  "image-pull-policy": { type: "string", arg: "POLICY", default: "IfNotPresent", choices: PULL_POLICIES, help: "the image's pull policy" },
  "priority-class-name": { type: "string", arg: "NAME", default: "system-node-critical", help: "the DaemonSet pods' priority class (empty for none)" },
  "health-port": { type: "string", arg: "PORT", default: "9813", help: "the installer's /healthz and /readyz port" },
  "pod-annotation": { type: "string", arg: "KEY=VALUE", multiple: true, repeatOnly: true, default: "none", help: "an extra annotation on the DaemonSet's pods" },
};

/** Flags without meaning for Istio, whose pods' annotations and environment decide them. */
const LINKERD_ONLY: Record<string, string> = {
  "skip-inbound-ports": "the pod annotation traffic.sidecar.istio.io/excludeInboundPorts",
  "skip-outbound-ports": "the pod annotation traffic.sidecar.istio.io/excludeOutboundPorts",
  "redirect-ports": "the pod annotation traffic.sidecar.istio.io/includeInboundPorts",
  ipv6: "the pod's addresses and ISTIO_DUAL_STACK",
};

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
  if (!/^\d{1,5}$/.test(v.trim()) || Number(v) < 1 || Number(v) > 65535) throw bad(flag, v, "is not a TCP port (1-65535)");
  return Number(v);
}

function id(flags: Flags, flag: string, min: number): number | undefined {
  const v = str(flags, flag);
  if (v === undefined) return undefined;
  const s = v.trim();
  if (!/^-?\d{1,10}$/.test(s) || Number(s) < min || Number(s) > 4294967294) {
    throw bad(flag, v, min < 0 ? "must be -1 (none) or a user/group id (0-4294967294)" : `must be a user/group id (${min}-4294967294)`);
  }
  return Number(s);
}

function dir(flags: Flags, flag: string): string | undefined {
  const v = str(flags, flag);
  if (v === undefined) return undefined;
  if (!v.startsWith("/")) throw bad(flag, v, "must be an absolute path (the folder as the host sees it)");
  if (/\s/.test(v) || v.split("/").includes("..")) throw bad(flag, v, "must be a plain absolute path (no spaces, no ..)");
  return v;
}

function portsOrRanges(flags: Flags, flag: string): string[] | undefined {
  const items = list(flags, flag);
  for (const item of items ?? []) {
    const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(item);
    const ok = m && Number(m[1]) <= 65535 && (m[2] === undefined || (Number(m[2]) <= 65535 && Number(m[2]) >= Number(m[1])));
    if (!ok) throw bad(flag, item, "is not a port (0-65535) or a range LOW-HIGH");
  }
  return items;
}

function ports(flags: Flags, flag: string): number[] | undefined {
  const items = list(flags, flag);
  return items?.map((item) => {
    if (!/^\d{1,5}$/.test(item) || Number(item) < 1 || Number(item) > 65535) throw bad(flag, item, "is not a TCP port (1-65535)");
    return Number(item);
  });
}

function names(flags: Flags, flag: string): string[] | undefined {
  const items = list(flags, flag);
  for (const item of items ?? []) {
    if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(item) || item.length > 63) throw bad(flag, item, "is not a namespace name");
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
export function buildValuesFromFlags(flags: Flags, opts: { deploy: boolean }): Values {
  const mesh: Mesh = choice(flags, "mesh", MESHES) ?? "linkerd";
  if (mesh === "istio") {
    for (const [flag, instead] of Object.entries(LINKERD_ONLY)) {
      if (flags[flag] !== undefined) throw new CliError(`--${flag} applies to --mesh linkerd only; with Istio it comes from ${instead}`);
    }
  }
  const minId = mesh === "istio" ? 1 : -1;
  const input: ValuesInput = { mesh, createNamespace: true };
  const set = <K extends keyof ValuesInput>(key: K, value: ValuesInput[K] | undefined) => {
    if (value !== undefined) input[key] = value;
  };
  set("namespace", names(flags, "namespace")?.[0]);
  if (str(flags, "namespace") === "") throw bad("namespace", "", "is not a namespace name");
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
    if (image !== undefined && !/^[a-z0-9][\w.\-/:@]*$/i.test(image)) throw bad("image", image, "is not an image reference such as registry/name:tag");
    set("image", image);
    set("pullPolicy", choice(flags, "image-pull-policy", PULL_POLICIES));
    const pc = str(flags, "priority-class-name");
    if (pc !== undefined && pc !== "" && !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(pc)) throw bad("priority-class-name", pc, "is not a priority class name");
    set("priorityClassName", pc);
    set("healthPort", port(flags, "health-port"));
    set("podAnnotations", annotations(flags, "pod-annotation"));
  }
  let values: Values;
  try {
    values = parseValues(input);
  } catch (e) {
    if (e instanceof ValuesError) throw new CliError(`invalid settings: ${e.message}`);
    throw e;
  }
  checkPluginAccepts(values);
  return values;
}

/** The entry the plugin would get, parsed by the plugin's own parser (as a runtime hands it over). */
export function buildPluginConfText(values: Values): string {
  const entry = buildPluginEntry(entryOptions(values));
  return JSON.stringify({ cniVersion: "1.1.0", ...entry, kubernetes: { ...(entry.kubernetes as object), pod_namespace: values.namespace } });
}

function checkPluginAccepts(values: Values): void {
  try {
    parsePluginConf(buildPluginConfText(values));
  } catch (e) {
    throw new CliError(`the plugin would refuse this configuration: ${(e as Error).message}`);
  }
}

