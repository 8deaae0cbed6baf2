// The state folder the plugin and the node agent share (STATE_DIR, `state_dir` in the plugin's
// conflist entry, default /var/run/meshcni): the records of the containers the plugin handled,
// the fallback log, and what the agent keeps beside them. Pure and light: the plugin imports it
// on its hot path.

// Records: one small JSON file per container the plugin handled for a Kubernetes pod, written
// atomically (temp file + rename) before ADD returns success, removed by DEL. They outlive agent
// restarts, upgrades and reinstalls (only `--uninstall` and a reboot remove them); the agent
// reads them to know which pods of its node went through the plugin.

/** STATE_DIR/containers/CONTAINER_ID.json */
export const RECORDS_SUBDIR = "containers";

/**
 * The longest container ID that names its record as it is: any earlier meshcni wrote records of
 * IDs up to this long under CONTAINER_ID.json (its temp names were about 20 characters longer), so
 * an upgrade finds every one of them.
 */
export const RECORD_ID_MAX = 235;

/**
 * The file name of a container's record in the records folder; every writer and reader names
 * records with it. An ID of up to RECORD_ID_MAX characters names it as it is; a longer one (the
 * CNI spec sets no bound, and NAME_MAX is 255 bytes) by its SHA-256: "_" and 64 hex digits, a
 * name no ID makes (an ID starts with a letter or digit). The record inside holds the whole ID.
 */
export function recordName(containerId: string): string {
  if (containerId.length <= RECORD_ID_MAX) return `${containerId}.json`;
  // The one-shot Bun.SHA256.hash: lighter for the plugin's fresh process than a CryptoHasher.
  return `_${Bun.SHA256.hash(containerId, "hex") as string}.json`;
}
export const recordPath = (stateDir: string, containerId: string) =>
  `${stateDir}/${RECORDS_SUBDIR}/${recordName(containerId)}`;

export interface PodRecord {
  v: 1;
  containerId: string;
  namespace: string;
  name: string;
  /** From K8S_POD_UID, else from the pod object; absent when neither was known. */
  uid?: string;
  /** "meshed": rules applied (DEL must remove them); "skipped": no rules (DEL runs nothing). */
  decision: "meshed" | "skipped";
  reason: string;
  backend?: string;
  /**
   * CNI_NETNS of the ADD (/var/run/netns/NAME as the runtime named it): where the agent verifies
   * the pod's rules. Absent in records of an older meshcni.
   */
  netns?: string;
  /** Address families ruled, for DEL. */
  families?: number[];
  /** ISO time of the ADD. */
  time: string;
}

/**
 * The most records the agent lets the state folder hold before it stops planning ADDs (each
 * planned ADD writes one; past the bound the plugin runs its ADDs itself and writes its own). A
 * record lives as long as its sandbox (DEL and GC remove it), so a node holds about as many as it
 * runs pods: kubelet's default is 110, large nodes are set to 250 (AKS, GKE) and up to 737 (EKS
 * with prefix delegation). 4096 is five times the largest of those, and keeps what a forged
 * request can make the agent write to about 16 MB of tmpfs (a page per file).
 */
export const DEFAULT_MAX_RECORDS = 4096;

/** Where the host's runtimes pin pod network namespaces (CNI_NETNS); the DaemonSet mounts it read-only. */
export const DEFAULT_NETNS_DIR = "/var/run/netns";

/**
 * Notes an agent of an older version kept in STATE_DIR (when the records became complete, when
 * the chain was put in place), for a repair that judged pods by a missing record. Nothing reads
 * or writes them; `--uninstall` removes them.
 */
export const LEGACY_STATE_NOTES = ["records-since", "chained-since"] as const;

/**
 * When the agent is down the plugin appends its lines here instead (bounded: at
 * FALLBACK_LOG_MAX_BYTES the file moves to `.1`, replacing the older one). The agent prints and
 * empties both when it starts.
 */
export const FALLBACK_LOG = "plugin.log";
export const FALLBACK_LOG_MAX_BYTES = 1 << 20;

/**
 * A container ID that is safe in a file name: the CNI spec's form (parseCmdArgs checks it too),
 * at most 256 characters. What CONTAINER_ID matches, checked with a loop (no RegExp to compile on
 * the plugin's hot path); state.test.ts holds the two together.
 */
export const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,255}$/;

export function safeContainerId(id: string | undefined): id is string {
  if (id === undefined || id.length === 0 || id.length > 256) return false;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    const alnum = (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57);
    if (!alnum && (i === 0 || (c !== 95 && c !== 46 && c !== 45))) return false;
  }
  return true;
}

export interface RecordsRead {
  records: PodRecord[];
  /** Files in the records folder that are not records (named, not read). */
  unreadable: string[];
}

const isStr = (x: unknown): x is string => typeof x === "string";

/** A record as the plugin writes it, or undefined for anything else. */
export function parseRecord(text: string): PodRecord | undefined {
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof r !== "object" || r === null || Array.isArray(r)) return undefined;
  if (r.v !== 1 || !isStr(r.containerId) || !isStr(r.namespace) || !isStr(r.name) || !isStr(r.reason) || !isStr(r.time))
    return undefined;
  if (r.decision !== "meshed" && r.decision !== "skipped") return undefined;
  if (r.uid !== undefined && !isStr(r.uid)) return undefined;
  if (r.netns !== undefined && !isStr(r.netns)) return undefined;
  return r as unknown as PodRecord;
}
