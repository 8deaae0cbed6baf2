// The addresses each namespace of the host's netns folder holds, read from inside it: the JS
// thread enters the namespace (internal/firewall/io/setns.ts) and reads its own
// /proc/thread-self/net/fib_trie and if_inet6, no process started. Only nsfs files are read.
import { readdirSync, statfsSync } from "node:fs";
import { readInNetns } from "../../../firewall/io/setns.ts";
import { NSFS_MAGIC } from "../../socket/netns.ts";
import { parseLocalAddresses } from "../plan.ts";

/** address -> the names (in `dir`) of the namespaces holding it; a namespace that cannot be read is left out. */
export function readNamespaceAddresses(dir: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of names) {
    const path = `${dir}/${name}`;
    try {
      if (statfsSync(path).type !== NSFS_MAGIC) continue;
      const [fib, v6] = readInNetns(path, ["/proc/thread-self/net/fib_trie", "/proc/thread-self/net/if_inet6"]);
      for (const ip of parseLocalAddresses(fib ?? "", v6 ?? "")) {
        const list = out.get(ip);
        if (list) list.push(name);
        else out.set(ip, [name]);
      }
    } catch {
      // gone meanwhile, or not a namespace the agent may enter: it holds no pod it can verify
    }
  }
  return out;
}
