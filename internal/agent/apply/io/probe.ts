// What the agent finds at start about applying rules itself (ability.ts judges it): its effective
// capabilities, a real setns(2) into a pod's namespace from its netns folder (or into its own
// namespace while there is none), and a listing of its own namespace's nf_tables tables through
// its image's libnftables (which needs CAP_NET_ADMIN and nf_tables in the kernel).
import { lstatSync, readdirSync, readFileSync, statfsSync } from "node:fs";
import { nftInProcess, nftLibraryAvailable } from "../../../firewall/io/nft-inprocess.ts";
import { NSFS_MAGIC } from "../../socket/netns.ts";
import { type Ability, type AbilityReadings, judgeAbility, parseCapEff } from "../ability.ts";
import { loadNetnsCalls, trySetns } from "../../../firewall/io/setns.ts";

/** A pod's namespace in `dir` (an nsfs file), or undefined when there is none. */
function someNamespace(dir: string): string | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined;
  }
  for (const n of names) {
    const p = `${dir}/${n}`;
    try {
      if (lstatSync(p).isFile() && statfsSync(p).type === NSFS_MAGIC) return p;
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

export async function readAbility(o: { enabled: boolean; netnsDir: string; nftInProcess: boolean }): Promise<Ability> {
  let capEff: bigint | undefined;
  try {
    capEff = parseCapEff(readFileSync("/proc/self/status", "utf8"));
  } catch {
    capEff = undefined;
  }
  const readings: AbilityReadings = {
    enabled: o.enabled,
    capEff,
    setns: undefined,
    nftLibrary: { ok: false, error: "not tried" },
  };
  if (!o.enabled) return judgeAbility(readings);
  await loadNetnsCalls();
  const target = someNamespace(o.netnsDir) ?? "/proc/self/ns/net";
  const r = trySetns(target);
  readings.setns = r.ok ? { target, ok: true } : { target, ok: false, error: r.error };
  if (!o.nftInProcess) readings.nftLibrary = { ok: false, error: "MESHCNI_NFT_INPROCESS=0" };
  else if (!(await nftLibraryAvailable())) readings.nftLibrary = { ok: false, error: "libnftables.so.1 does not load" };
  else {
    const listed = await nftInProcess("/proc/self/ns/net", "list tables");
    readings.nftLibrary =
      listed?.code === 0
        ? { ok: true }
        : { ok: false, error: `listing tables failed: ${(listed?.stderr ?? "").trim().split("\n")[0] ?? ""}` };
  }
  return judgeAbility(readings);
}
