// CNI protocol constants: the versions meshcni speaks and the error codes it answers with.
// Kept free of imports so the VERSION fast path in cmd/plugin.ts loads nothing else.

/** Spec versions meshcni accepts and answers in, oldest first. */
export const SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] as const;
export type CniVersion = (typeof SUPPORTED_VERSIONS)[number];
export const LATEST_VERSION: CniVersion = "1.1.0";

export const COMMANDS = ["ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC"] as const;
export type CniCommand = (typeof COMMANDS)[number];

/**
 * Error codes. 0-99 are the spec's; 100 and up are meshcni's own (listed in docs/error-codes.md).
 */
export const Code = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironment: 4,
  IoFailure: 5,
  DecodeFailure: 6,
  InvalidConfig: 7,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  PluginNotAvailableLimitedConnectivity: 51,
  /** An unexpected failure inside meshcni: a bug. */
  Internal: 100,
  /** `nsenter` or an iptables binary is missing on the host. */
  MissingBinary: 101,
  /** iptables-restore (or ip) inside the pod netns failed. */
  ApplyFailed: 102,
  /** CHECK found the pod's rules missing or different. */
  RulesMissing: 103,
  /** The API server rejected the plugin's credentials (401). */
  Unauthorized: 104,
  /** The API server refused access to the pod or namespace (403). */
  Forbidden: 105,
  /** The pod (or its namespace) does not exist in the API (404). */
  PodNotFound: 106,
  /** The kubeconfig named in the config cannot be read or understood. */
  BadKubeconfig: 107,
} as const;
export type CodeValue = (typeof Code)[keyof typeof Code];

export function isSupportedVersion(v: unknown): v is CniVersion {
  return typeof v === "string" && (SUPPORTED_VERSIONS as readonly string[]).includes(v);
}

/** Compares two dotted versions numerically: negative, zero or positive. */
export function compareVersions(a: string, b: string): number {
  // Number() per part, not map(Number): the plugin compares on its hot path, where a callback
  // builtin costs its first-use compile.
  const pa = a.split(".");
  const pb = b.split(".");
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] === undefined ? 0 : Number(pa[i])) - (pb[i] === undefined ? 0 : Number(pb[i]));
    if (d !== 0) return d;
  }
  return 0;
}

/**
 * The VERSION answer. Like every plugin built on libcni's skel, meshcni answers in the latest
 * version it speaks without reading stdin (runtimes read only supportedVersions), which keeps
 * VERSION at Bun's start-up floor.
 */
export function renderVersionInfo(): string {
  return JSON.stringify({ cniVersion: LATEST_VERSION, supportedVersions: SUPPORTED_VERSIONS });
}
