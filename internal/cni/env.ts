import { CniError } from "./errors.ts";
import { Code, COMMANDS, type CniCommand } from "./spec.ts";
import { quote } from "../text/escape.ts";

/** The CNI_* environment of one invocation, validated. Empty variables count as absent. */
export interface CmdArgs {
  command: CniCommand;
  containerId?: string;
  netns?: string;
  ifname?: string;
  args?: string;
  path?: string[];
}

export type Getenv = (key: string) => string | undefined;

const CONTAINER_ID = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/** Which variables each command needs (spec section 2, as libcni's skel applies it). */
const REQUIRED: Record<CniCommand, readonly string[]> = {
  ADD: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"],
  CHECK: ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"],
  DEL: ["CNI_CONTAINERID", "CNI_IFNAME"],
  GC: [],
  STATUS: [],
  VERSION: [],
};

function value(getenv: Getenv, key: string): string | undefined {
  const v = getenv(key);
  return v === undefined || v === "" ? undefined : v;
}

/** Checks an interface name the way Linux and libcni do. Returns a reason, or undefined. */
export function checkIfname(name: string): string | undefined {
  if (name.length > 15) return "longer than 15 characters";
  if (name === "." || name === "..") return "'.' and '..' are not interface names";
  if (/[/:\s]/.test(name)) return "contains '/', ':' or whitespace";
  return undefined;
}

export function parseCmdArgs(getenv: Getenv): CmdArgs {
  const command = value(getenv, "CNI_COMMAND");
  if (command === undefined) {
    throw new CniError(
      Code.InvalidEnvironment,
      "required env variables [CNI_COMMAND] missing",
      "meshcni is a CNI plugin: the container runtime runs it with CNI_COMMAND set",
    );
  }
  if (!(COMMANDS as readonly string[]).includes(command)) {
    throw new CniError(
      Code.InvalidEnvironment,
      `unknown CNI_COMMAND: ${command}`,
      `expected one of ${COMMANDS.join(", ")}`,
    );
  }
  const cmd = command as CniCommand;
  const missing = REQUIRED[cmd].filter((k) => value(getenv, k) === undefined);
  if (missing.length > 0) {
    throw new CniError(
      Code.InvalidEnvironment,
      `required env variables [${missing.join(",")}] missing`,
      `CNI_COMMAND=${cmd} needs ${REQUIRED[cmd].join(", ")}`,
    );
  }
  const out: CmdArgs = { command: cmd };
  const containerId = value(getenv, "CNI_CONTAINERID");
  if (containerId !== undefined && REQUIRED[cmd].includes("CNI_CONTAINERID")) {
    if (!CONTAINER_ID.test(containerId)) {
      throw new CniError(
        Code.InvalidEnvironment,
        "invalid CNI_CONTAINERID",
        `${quote(containerId)} must match ${CONTAINER_ID.source}`,
      );
    }
    out.containerId = containerId;
  }
  const netns = value(getenv, "CNI_NETNS");
  if (netns !== undefined && cmd !== "GC" && cmd !== "STATUS" && cmd !== "VERSION") {
    if (!netns.startsWith("/") || netns.includes("\0")) {
      throw new CniError(
        Code.InvalidEnvironment,
        "invalid CNI_NETNS",
        `${quote(netns)} must be an absolute path such as /var/run/netns/NAME or /proc/PID/ns/net`,
      );
    }
    out.netns = netns;
  }
  const ifname = value(getenv, "CNI_IFNAME");
  if (ifname !== undefined && REQUIRED[cmd].includes("CNI_IFNAME")) {
    const why = checkIfname(ifname);
    if (why) throw new CniError(Code.InvalidEnvironment, "invalid CNI_IFNAME", `${quote(ifname)}: ${why}`);
    out.ifname = ifname;
  }
  const args = value(getenv, "CNI_ARGS");
  if (args !== undefined) out.args = args;
  const path = value(getenv, "CNI_PATH");
  if (path !== undefined) out.path = path.split(":").filter((p) => p !== "");
  return out;
}
