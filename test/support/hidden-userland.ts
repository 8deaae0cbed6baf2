// A node without the userland the plugin would apply rules with: a plugin folder whose `meshcni`
// runs dist/meshcni in a private mount namespace where every iptables binary, `nft`, `nsenter`
// and libnftables are empty, unexecutable files (each bind-mounted over with one; the binaries'
// links all resolve to them). Only the agent can apply rules there. Optionally the plugin runs
// under strace -f (each run's trace in its own file), and folders are bind-mounted over host
// paths (the state folder a containerised agent serves, at /var/run/meshcni). `probe` runs any
// command the same way, for a test to show what is gone.
import { chmodSync, existsSync, mkdirSync, readdirSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DIST } from "./pod-lab.ts";

/** What the plugin would use: the iptables variants' binaries, nft, nsenter, libnftables. */
export function hostUserland(): string[] {
  const out = new Set<string>();
  for (const n of readdirSync("/usr/sbin")) {
    if (/^(ip6?tables|xtables|arptables|ebtables)/.test(n) || n === "nft") {
      try {
        out.add(realpathSync(join("/usr/sbin", n)));
      } catch {
        // a dangling link
      }
    }
  }
  for (const p of ["/usr/bin/nsenter", "/usr/sbin/nsenter", "/usr/lib/x86_64-linux-gnu/libnftables.so.1"]) {
    if (existsSync(p)) out.add(realpathSync(p));
  }
  return [...out].sort();
}

export interface HiddenUserland {
  dir: string;
  /** The plugin folder holding the wrapped `meshcni`. */
  pluginDir: string;
  /** The files hidden. */
  hidden: string[];
  /** The strace files written so far (with `strace`). */
  traces(): string[];
}

export function hiddenUserland(
  dir: string,
  opts: { strace?: boolean; binds?: { source: string; target: string }[]; hide?: boolean } = {},
): HiddenUserland {
  const pluginDir = join(dir, "plugins");
  const traceDir = join(dir, "traces");
  mkdirSync(pluginDir, { recursive: true });
  mkdirSync(traceDir, { recursive: true });
  const empty = join(dir, "empty");
  writeFileSync(empty, "", { mode: 0o644 });
  // hide: false keeps the host's userland (the binds alone).
  const hidden = opts.hide === false ? [] : hostUserland();
  const enter = [
    "#!/bin/sh",
    "set -e",
    "# a private mount namespace: what is mounted here is seen by this process tree only",
    `[ -n "$MESHCNI_HIDDEN" ] || MESHCNI_HIDDEN=1 exec unshare -m --propagation private "$0" "$@"`,
    ...hidden.map((p) => `mount --bind ${empty} ${p}`),
    ...(opts.binds ?? []).map((b) => `mount --bind ${b.source} ${b.target}`),
    "unset MESHCNI_HIDDEN",
  ];
  const run = opts.strace
    ? `exec strace -f -qq -e trace=execve,fork,vfork,clone,clone3 -o ${traceDir}/trace.$$ ${join(DIST, "meshcni")}`
    : `exec ${join(DIST, "meshcni")}`;
  writeFileSync(join(pluginDir, "meshcni"), [...enter, run, ""].join("\n"));
  writeFileSync(join(dir, "probe"), [...enter, `exec "$@"`, ""].join("\n"));
  chmodSync(join(pluginDir, "meshcni"), 0o755);
  chmodSync(join(dir, "probe"), 0o755);
  return {
    dir,
    pluginDir,
    hidden,
    traces: () =>
      readdirSync(traceDir)
        .sort()
        .map((f) => join(traceDir, f)),
  };
}

/**
 * What a plugin run under strace started: the programs it executed (itself first) and the
 * processes it forked (clone without CLONE_THREAD, fork, vfork). Threads are not processes.
 */
export function startedProcesses(trace: string): { execs: string[]; forks: string[] } {
  const execs: string[] = [];
  const forks: string[] = [];
  for (const l of trace.split("\n")) {
    const exec = /execve\("([^"]+)"/.exec(l);
    if (exec) execs.push(`${exec[1]}${/ = -1 /.test(l) ? " (failed)" : ""}`);
    else if (/\b(v?fork)\(/.test(l) || (/\bclone3?\(/.test(l) && !l.includes("CLONE_THREAD"))) forks.push(l.trim());
  }
  return { execs, forks };
}
