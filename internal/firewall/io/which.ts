// Finding host binaries. The runtime's PATH may lack the sbin folders (some set a minimal
// one), so the usual system folders are searched after it. Only Bun's own file APIs are used:
// node:fs alone would add most of a millisecond and several MB to every plugin run.

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

/** The file a path ends up at (symlinks followed), as "device:inode"; undefined if absent. */
export async function fileIdentity(path: string | undefined): Promise<string | undefined> {
  if (!path) return undefined;
  try {
    const st = await Bun.file(path).stat();
    return `${st.dev}:${st.ino}`;
  } catch {
    return undefined;
  }
}

export async function pathExists(path: string): Promise<boolean> {
  try {
    await Bun.file(path).stat();
    return true;
  } catch {
    return false;
  }
}
