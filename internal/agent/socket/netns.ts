// Whether a POST /v1/add names a network namespace that exists on this node: the agent writes a
// record for every ADD it plans, so an ADD for a namespace that is not there (a forged request)
// is declined, and the plugin runs it itself (it checks the namespace too, and fails with code 4).
//
// The agent sees the host's namespace folder (the DaemonSet mounts /var/run/netns read-only, at
// the same path, with HostToContainer propagation: each pod's namespace is a bind mount made
// after the agent started). It takes CNI_NETNS only under /var/run/netns or /run/netns (one is a
// link to the other on every distribution that has both), and only a namespace file there: an
// nsfs bind mount, not a link, not a plain file. Any other path (a runtime that passes
// /proc/PID/ns/net) is one it cannot judge, and it declines.
import { lstatSync, statfsSync } from "node:fs";

/** statfs(2)'s f_type of the kernel's namespace filesystem (linux/magic.h). */
export const NSFS_MAGIC = 0x6e736673;

/** The host folders runtimes pin pod namespaces in, as CNI_NETNS names them. */
const UNDER = /^\/(?:var\/)?run\/netns\/([^/\0]{1,255})$/;

/** The namespace's name in the host's netns folder, or undefined when CNI_NETNS is not there. */
export function netnsName(path: string | undefined): string | undefined {
  const name = path === undefined ? undefined : UNDER.exec(path)?.[1];
  return name === undefined || name === "." || name === ".." ? undefined : name;
}

/**
 * Looks at CNI_NETNS in `dir` (the agent's view of the host's /var/run/netns): undefined when it
 * is a network namespace there, else why the agent does not plan the ADD.
 */
export function readNetnsProblem(dir: string, path: string | undefined): string | undefined {
  if (!path) return "no CNI_NETNS";
  const name = netnsName(path);
  if (name === undefined) {
    const shown = JSON.stringify(path.slice(0, 300));
    return `CNI_NETNS ${shown} is not in /var/run/netns or /run/netns, where the agent looks`;
  }
  const seen = `${dir}/${name}`;
  try {
    const st = lstatSync(seen);
    if (!st.isFile()) {
      return `CNI_NETNS ${path} is not a network namespace (${st.isSymbolicLink() ? "a symbolic link" : "not a file"})`;
    }
    if (statfsSync(seen).type !== NSFS_MAGIC) return `CNI_NETNS ${path} is not a network namespace (a plain file)`;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return `CNI_NETNS ${path} does not exist (the agent looked in ${dir})`;
    return `the agent cannot look at CNI_NETNS ${path} in ${dir}: ${code ?? (e as Error).message}`;
  }
  return undefined;
}
