// The pod's addresses read inside its network namespace (`ip -j addr show` through nsenter), for
// a runtime whose previous result names none.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import { parseIpAddrJson } from "../../net/ip-addr.ts";
import { run } from "../../firewall/io/exec.ts";
import { missing } from "../../firewall/io/open.ts";
import { which } from "../../firewall/io/which.ts";

export async function readPodAddresses(
  netns: string,
  envPath: string | undefined,
  signal: AbortSignal,
): Promise<string[]> {
  const nsenter = which("nsenter", envPath);
  if (!nsenter) throw missing("nsenter");
  const ip = which("ip", envPath);
  if (!ip) throw missing("ip");
  const r = await run([nsenter, `--net=${netns}`, "--", ip, "-j", "addr", "show"], { signal });
  const addresses = r.code === 0 ? parseIpAddrJson(r.stdout) : undefined;
  if (!addresses) {
    const why =
      r.code === 0
        ? "its output is not the JSON list of links"
        : r.stderr.trim().split("\n").slice(-2).join(" | ") || `exit code ${r.code}`;
    throw new CniError(
      Code.ApplyFailed,
      "could not read the pod's addresses in its network namespace",
      `the previous result names no address, and ip -j addr show failed: ${why}`,
    );
  }
  return addresses;
}
