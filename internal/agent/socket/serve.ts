// The agent's Unix socket: HTTP/1.1 (Bun.serve) on --agent-socket, in a folder of meshcni's own
// (0700), the socket itself mode 0000, owner root. connect(2) on a Unix socket needs write
// permission on it, which mode 0000 gives nobody but a caller with CAP_DAC_OVERRIDE: the plugin,
// which the container runtime runs as root with every capability. A uid-0 process without it (a
// pod given a hostPath of the folder, capabilities dropped) is refused (EACCES), though
// SO_PEERCRED could not tell it from the plugin (both uid 0). The agent itself has no
// capability and never connects. A socket left by an earlier agent (a crash, kill -9) is
// replaced atomically; anything else at that path is not touched.
import { randomBytes } from "node:crypto";
import { chmodSync, lstatSync, mkdirSync, readdirSync, renameSync, unlinkSync } from "node:fs";
import { basename, dirname } from "node:path";
import { MAX_REPORT_BYTES } from "../observe/report.ts";

export interface AgentSocket {
  path: string;
  stop(): void;
}

const S_ISVTX = 0o1000;

/** Makes the socket's folder (0700), refusing a shared one such as /tmp. */
export function prepareSocketDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new Error(`--agent-socket: ${dir} is not a folder`);
  if (dir === "/" || (st.mode & S_ISVTX) !== 0) {
    throw new Error(
      `--agent-socket: ${dir} is a shared folder; give the socket a folder of meshcni's own (it is made 0700)`,
    );
  }
  if ((st.mode & 0o777) !== 0o700) chmodSync(dir, 0o700);
}

/** Which file is at `path`: inode and change time (an inode number alone is soon reused). */
function identify(path: string): { id: string; socket: boolean } | undefined {
  try {
    const st = lstatSync(path, { bigint: true });
    return { id: `${st.ino}:${st.ctimeNs}`, socket: st.isSocket() };
  } catch {
    return undefined;
  }
}

/** Sockets an agent bound aside and never renamed (it died in between), a minute old or more. */
export function removeLeftovers(path: string): void {
  const dir = dirname(path);
  const prefix = `.${basename(path)}.`;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const n of names) {
    if (!n.startsWith(prefix)) continue;
    try {
      const st = lstatSync(`${dir}/${n}`);
      if (st.isSocket() && Date.now() - st.mtimeMs > 60_000) unlinkSync(`${dir}/${n}`);
    } catch {
      // gone meanwhile
    }
  }
}

export function serveAgentSocket(
  path: string,
  fetch: (req: Request) => Promise<Response>,
  onError: (e: Error) => void,
): AgentSocket {
  prepareSocketDir(dirname(path));
  const before = identify(path);
  if (before && !before.socket) throw new Error(`--agent-socket: ${path} exists and is not a socket; not replacing it`);
  // Bound under a name of its own, then renamed over the path: a plugin connecting meanwhile
  // finds the earlier agent's socket or this one, never nothing; and Bun's stop, which unlinks
  // the path it bound, cannot remove a newer agent's socket.
  // Not the process id: every agent is PID 1 in its container, and two can overlap on a node.
  const bound = `${dirname(path)}/.${basename(path)}.${randomBytes(6).toString("hex")}`;
  removeLeftovers(path);
  // Created 0000 from the start (the umask applies to bind), then made sure of.
  const umask = process.umask(0o777);
  let server: ReturnType<typeof Bun.serve>;
  try {
    server = Bun.serve({
      unix: bound,
      maxRequestBodySize: MAX_REPORT_BYTES,
      fetch,
      error(e) {
        onError(e);
        return new Response(JSON.stringify({ code: 100, msg: "the meshcni agent failed", details: e.message }), {
          status: 500,
          headers: { "Content-Type": "application/json" },
        });
      },
    });
  } finally {
    process.umask(umask);
  }
  const made = lstatSync(bound);
  if (!made.isSocket()) throw new Error(`--agent-socket: ${bound} is not the socket just bound`);
  if ((made.mode & 0o7777) !== 0) chmodSync(bound, 0);
  renameSync(bound, path);
  const ours = identify(path)?.id;
  return {
    path,
    stop() {
      server.stop(true);
      // Only our own socket: a newer agent may already serve at this path.
      const now = identify(path);
      if (now?.socket && now.id === ours) {
        try {
          unlinkSync(path);
        } catch {
          // gone already
        }
      }
    },
  };
}
