// Which CNI_NETNS the agent plans an ADD for (internal/agent/socket/netns.ts): only a network
// namespace it sees in the host's netns folder (--netns-dir), named as /var/run/netns/NAME or
// /run/netns/NAME. A real namespace (made with `ip netns add`, bind-mounted into a scratch folder
// as the runtime pins one) passes; a missing name, a plain file, a link to a real namespace, a
// folder, /proc/PID/ns/net and paths that climb out of the folder are declined with a reason.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { netnsName, readNetnsProblem } from "../../internal/agent/socket/netns.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";

let dir: string;
let ns: Netns | undefined;
let bound: string | undefined;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "meshcni-netns-"));
  if (!isRoot()) return;
  ns = Netns.create(`mcnn-${uniq()}`);
  // Pinned the way runtimes pin a pod's namespace: an nsfs bind mount on an empty file.
  bound = join(dir, "cni-real");
  writeFileSync(bound, "");
  const r = Bun.spawnSync(["mount", "--bind", ns.path, bound]);
  if (r.exitCode !== 0) throw new Error(`mount --bind: ${r.stderr.toString()}`);
  writeFileSync(join(dir, "plain"), "");
  symlinkSync(bound, join(dir, "link"));
  mkdirSync(join(dir, "folder"));
});

afterAll(() => {
  if (bound) Bun.spawnSync(["umount", bound]);
  ns?.delete();
  rmSync(dir, { recursive: true, force: true });
});

describe("CNI_NETNS names", () => {
  test("only a single name under /var/run/netns or /run/netns", () => {
    expect(netnsName("/var/run/netns/cni-7d1c3a2e")).toBe("cni-7d1c3a2e");
    expect(netnsName("/run/netns/netns-0b7f")).toBe("netns-0b7f");
    for (const p of [
      "/proc/1234/ns/net",
      "/var/run/netns/",
      "/var/run/netns/..",
      "/var/run/netns/.",
      "/var/run/netns/a/b",
      "/var/run/netns/../../etc/shadow",
      "var/run/netns/x",
      "/var/run//netns/x",
      "/tmp/netns/x",
      undefined,
    ]) {
      expect(netnsName(p)).toBeUndefined();
    }
  });
});

describe.if(isRoot())("what the agent finds there", () => {
  test("a pinned network namespace passes, by either name of the folder", () => {
    expect(readNetnsProblem(dir, "/var/run/netns/cni-real")).toBeUndefined();
    expect(readNetnsProblem(dir, "/run/netns/cni-real")).toBeUndefined();
  });

  test("anything else is declined, saying why", () => {
    expect(readNetnsProblem(dir, undefined)).toBe("no CNI_NETNS");
    const why = (name: string) => readNetnsProblem(dir, `/var/run/netns/${name}`);
    expect(why("missing")).toBe(`CNI_NETNS /var/run/netns/missing does not exist (the agent looked in ${dir})`);
    expect(why("plain")).toBe("CNI_NETNS /var/run/netns/plain is not a network namespace (a plain file)");
    expect(why("link")).toBe("CNI_NETNS /var/run/netns/link is not a network namespace (a symbolic link)");
    expect(why("folder")).toBe("CNI_NETNS /var/run/netns/folder is not a network namespace (not a file)");
    expect(readNetnsProblem(dir, `/proc/${process.pid}/ns/net`)).toContain("is not in /var/run/netns or /run/netns");
    expect(why("../netns/cni-real")).toContain("is not in /var/run/netns or /run/netns");
  });
});
