// Finding host binaries. The runtime's PATH may lack the sbin folders (some set a minimal
// one), so the usual system folders are searched after it.
import { realpathSync } from "node:fs";

const SYSTEM_DIRS = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const cache = new Map<string, string | null>();

export function searchPath(envPath: string | undefined): string {
  return envPath ? `${envPath}:${SYSTEM_DIRS}` : SYSTEM_DIRS;
}

export function which(bin: string, envPath: string | undefined): string | undefined {
  const key = `${envPath}\0${bin}`;
  let hit = cache.get(key);
  if (hit === undefined) {
    hit = Bun.which(bin, { PATH: searchPath(envPath) });
    cache.set(key, hit);
  }
  return hit ?? undefined;
}

export function resolveLink(path: string | undefined): string | undefined {
  if (!path) return undefined;
  try {
    return realpathSync(path);
  } catch {
    return undefined;
  }
}
