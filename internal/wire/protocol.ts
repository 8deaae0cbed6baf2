// The wire between the plugin and the node agent (meshcni-installer); the files they share in
// the state folder are state.ts. Pure and light: the plugin imports this on its hot path, so no schema
// library here; each side checks what it reads.
//
// The agent serves HTTP/1.1 on a Unix socket (`agent_socket` in the plugin's conflist entry,
// default /var/run/meshcni/agent.sock, mode 0000 in a 0700 folder: only a caller with
// CAP_DAC_OVERRIDE connects, internal/agent/socket/serve.ts):
//
//   GET  /v1/pods/NAMESPACE/NAME[?uid=UID]
//     200 PodAnswer                the pod of THIS node (and its namespace), from the watch cache
//                                  or from one request by the agent (a list selecting the name and
//                                  the node); when `uid` is given, only a pod with that UID
//     404 AgentError (code 106)    the API server says the pod does not exist on this node (a pod
//                                  of another node too), or it exists with another UID (deleted
//                                  and recreated under the same name)
//     503 AgentError               the agent cannot answer (cache not in sync and its own request
//                                  failed, or no node name); the plugin falls back to its kubeconfig
//   POST /v1/check  AddRequest        CHECK (CNI_COMMAND=CHECK), answered by an agent that applies
//     200 CheckAnswer                 rules: it decides as for ADD and looks at the pod's rules in its
//                                     namespace with the backend's CHECK, as the plugin would
//     409 AgentError                  an agent that does not apply, or cannot look: the plugin runs
//                                     CHECK itself
//   GET  /v1/applies               whether the agent applies rules (AppliesAnswer): the plugin's
//     200 AppliesAnswer             STATUS on a host without its own userland asks
//   POST /v1/reports  Report  ->  204   one plugin command's outcome and log lines (a DEL's report
//                                       is printed only for a container the agent held a record of)
//   POST /v1/add  AddRequest          the agent plans an ADD (agent/socket/plan-add.ts): it checks the
//     200 AddAnswer                   environment and config, looks the pod up, decides, writes
//                                     the container's record and answers the plugin's stdout, log
//                                     lines and, for a meshed pod, either `applied` (an agent that
//                                     can enter namespaces applied the rules itself, with its own
//                                     image's userland, before it wrote the record) or the plan
//                                     the plugin applies (`apply`)
//     409 AgentError                  the agent does not plan this one (a pod that needs its
//                                     network namespace's addresses or a Service, a pod it cannot
//                                     look up, a CNI_NETNS that is not a namespace in the host's
//                                     /var/run/netns, the state folder at its bound of records):
//                                     the plugin runs the whole ADD itself
//
// Anything else (no socket, refused, no answer within AGENT_TIMEOUT_MS, another status) makes
// the plugin fall back to its own kubeconfig GET, exactly as without an agent.

/** Where the agent and the manifests put the socket and the records (host paths). */
export const DEFAULT_STATE_DIR = "/var/run/meshcni";
export const DEFAULT_AGENT_SOCKET = `${DEFAULT_STATE_DIR}/agent.sock`;

/**
 * How long the plugin waits for the agent's answer before it falls back to its own GET. The
 * agent answers a cached pod at once; a pod it does not hold yet costs it a short wait for the
 * watch and then one GET, both bounded below this (AGENT_WATCH_WAIT_MS + AGENT_GET_TIMEOUT_MS).
 */
export const AGENT_TIMEOUT_MS = 1500;
export const AGENT_WATCH_WAIT_MS = 300;
/**
 * How long the plugin waits for the agent's answer to an ADD or CHECK (at most half of its own
 * bound, like AGENT_TIMEOUT_MS): an agent that applies answers after the rules are in, and on a
 * busy node (110 pods at once on 2 cores) that can take longer than a lookup. The agent gives up
 * on the same bound, so it never applies for a plugin that went on without it.
 */
export const AGENT_APPLY_TIMEOUT_MS = 2500;
export const AGENT_GET_TIMEOUT_MS = 1000;

/** Names are Kubernetes names (checked by parseK8sArgs); the UID is percent-encoded. */
export function podLookupPath(namespace: string, name: string, uid?: string): string {
  const base = `/v1/pods/${namespace}/${name}`;
  return uid ? `${base}?uid=${encodeURIComponent(uid)}` : base;
}
export const REPORTS_PATH = "/v1/reports";
export const ADD_PATH = "/v1/add";
export const CHECK_PATH = "/v1/check";
export const APPLIES_PATH = "/v1/applies";

/** 200 answer to GET /v1/applies: whether this agent applies pods' rules itself, and why. */
export interface AppliesAnswer {
  applies: boolean;
  reason: string;
}

/** The CNI variables the plugin passes on in an AddRequest (PATH stays with the plugin: binaries are the host's). */
export const ADD_ENV_KEYS = [
  "CNI_COMMAND",
  "CNI_CONTAINERID",
  "CNI_NETNS",
  "CNI_IFNAME",
  "CNI_ARGS",
  "CNI_PATH",
] as const;

/** POST /v1/add: the plugin's command as the runtime gave it. */
export interface AddRequest {
  v: 1;
  /** The plugin's version, for the agent's logs. */
  version: string;
  env: Partial<Record<(typeof ADD_ENV_KEYS)[number], string>>;
  stdin: string;
  /**
   * When the command started, in milliseconds since the epoch (the plugin's performance.timeOrigin
   * plus its start: the node's wall clock, as the agent reads it, agent/socket/plan-add.ts's
   * epochNow). With it, an answer without rules is reported by the agent itself
   * (AddAnswer.reported), its duration counted to the answer. Without it (an older plugin), the
   * plugin reports as for any command.
   */
  startedMs?: number;
}

/** The most the plugin reads of one answer (a plan and its log lines are a few KB). */
export const MAX_ANSWER_BYTES = 4 << 20;

/** 200 answer to POST /v1/add. */
export interface AddAnswer {
  v: 1;
  /** What the plugin prints: the result, or a CNI error (exitCode 1). */
  stdout: string;
  exitCode: 0 | 1;
  /** The log lines of the agent's part, "meshcni: ..." each, newline-terminated; the plugin writes them to stderr. */
  lines: string[];
  /** The conflist entry's log level and the lines' context ("ADD 0123456789ab"), for the plugin's own lines. */
  level: "debug" | "info" | "warn" | "error";
  context: string;
  /** The request's cniVersion, for an error the plugin renders when its apply fails. */
  cniVersion?: unknown;
  /** What was decided, as far as the agent got (the plugin completes it for its report). */
  summary: {
    outcome: Outcome;
    reason: string;
    code?: number;
    rules?: number;
    lookup?: LookupSource;
    pod?: { namespace: string; name: string; uid?: string };
  };
  /**
   * For a meshed pod: the plan (internal/plan/model.ts) and the firewall settings; the plugin
   * checks and applies them.
   */
  apply?: { plan: unknown; settings: { mode: string; wait: boolean; simulate: boolean } };
  /**
   * For a meshed pod whose rules the agent applied itself in its namespace: the backend it used
   * and how many rules; the plugin prints its own result and starts no process. Never with `apply`.
   */
  applied?: { backend: string; rules: number };
  /**
   * The agent wrote the container's record (a meshed pod's, before this answer: the plugin removes
   * it when its apply fails; after the rules when the agent applied them), or writes it just after
   * this answer (a pod without rules).
   */
  record: boolean;
  /**
   * The agent has reported this ADD itself, as the plugin would have (an answer without a plan for
   * the plugin to apply, that the plugin's check takes, to a plugin that said when it started and
   * was still waiting): the plugin prints the answer and sends no report.
   */
  reported?: boolean;
}

/** 200 answer to POST /v1/check. */
export interface CheckAnswer {
  v: 1;
  /** "" when the rules are as ADD makes them (or the pod gets none); a CNI error (exitCode 1). */
  stdout: string;
  exitCode: 0 | 1;
  lines: string[];
  level: "debug" | "info" | "warn" | "error";
  /** "CHECK 0123456789ab". */
  context: string;
  /** meshed: the rules are in place; skipped: the pod gets none; failed: the error's code. */
  summary: AddAnswer["summary"];
  /** The backend the agent looked with, for a meshed pod. */
  backend?: string;
  /** The agent has reported this CHECK itself (as AddAnswer.reported). */
  reported?: boolean;
}

/**
 * 200 answer to a pod lookup: the objects as the API server sent them (the agent may trim fields
 * the profiles never read).
 */
export interface PodAnswer {
  pod: unknown;
  namespace: unknown;
  /** "cache": from the watch cache; "api": the agent's own GET. */
  source: "cache" | "api";
}

/** Non-200 answers carry a CNI error the plugin can return as is (404) or log before falling back (503). */
export interface AgentError {
  code: number;
  msg: string;
  details?: string;
}

export type Command = "ADD" | "DEL" | "CHECK" | "STATUS" | "GC";

/**
 * What the plugin decided for a command:
 * - meshed: rules applied (ADD) or verified (CHECK);
 * - skipped: the pod gets no rules (the reason says why);
 * - removed: DEL removed rules;
 * - untouched: DEL of a container meshcni never touched (no process ran);
 * - failed: the command answered a CNI error (`code`);
 * - ok: STATUS/GC/anything else that succeeded.
 */
export type Outcome = "meshed" | "skipped" | "removed" | "untouched" | "failed" | "ok";

/** Where the pod object came from for this command. */
export type LookupSource = "agent-cache" | "agent-api" | "kubeconfig" | "none";

// The values a Report may carry: agent/observe/report.ts's schema checks reports with them, and the
// plugin (which loads no schema library) checks the agent's answers with the same ones.
export const COMMANDS = ["ADD", "DEL", "CHECK", "STATUS", "GC"] as const satisfies readonly Command[];
export const OUTCOMES = [
  "meshed",
  "skipped",
  "removed",
  "untouched",
  "failed",
  "ok",
] as const satisfies readonly Outcome[];
export const LOOKUP_SOURCES = [
  "agent-cache",
  "agent-api",
  "kubeconfig",
  "none",
] as const satisfies readonly LookupSource[];
/** The longest text a report field may hold, and the largest numbers. */
export const REPORT_LIMITS = {
  reason: 16_384,
  line: 16_384,
  lines: 2000,
  name: 253,
  uid: 128,
  code: 999,
  rules: 1_000_000,
  backend: 64,
} as const;

export interface Report {
  v: 1;
  command: Command;
  containerId?: string;
  pod?: { namespace: string; name: string; uid?: string };
  outcome: Outcome;
  /** The decision's reason, or the error's msg and details. */
  reason: string;
  /** CNI error code when outcome is "failed". */
  code?: number;
  /** Rules applied (ADD) or expected (CHECK). */
  rules?: number;
  /** e.g. "iptables-nft", "nftables". */
  backend?: string;
  lookup?: LookupSource;
  durationMs: number;
  /** The plugin's log lines of this command, each starting with "meshcni:", without newline. */
  lines: string[];
  /** ISO time the command started. */
  time: string;
  /** The plugin's version. */
  version: string;
}
