// The backends the real-traffic tests run on, and how a test reads or damages each one's rules
// inside a pod's namespace; and a meshcni that runs where the node has no iptables binaries.
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DIST } from "./pod-lab.ts";
import type { Netns } from "./netns.ts";

/** iptables-mode values: two iptables variants and native nftables. */
export const BACKENDS = ["nft", "legacy", "nftables"] as const;
export type TestBackend = (typeof BACKENDS)[number];

export const isNative = (b: TestBackend | "auto") => b === "nftables" || b === "auto";

/** meshcni's rules in a namespace as the backend's own listing shows them; "" when none. */
export function listRules(netns: Netns, backend: TestBackend, family: 4 | 6 = 4): string {
  if (backend === "nftables") {
    const r = netns.exec(["nft", "list", "table", family === 6 ? "ip6" : "ip", "meshcni"]);
    return r.code === 0 ? r.stdout : "";
  }
  return netns.save(backend, family);
}

/** Everything in the namespace's iptables (both variants) and nftables, for "nothing left" checks. */
export function anythingOfOurs(netns: Netns): string[] {
  const out: string[] = [];
  for (const v of ["nft", "legacy"] as const) {
    for (const f of [4, 6] as const)
      out.push(
        ...netns
          .save(v, f)
          .split("\n")
          .filter((l) => /PROXY_INIT|ISTIO/.test(l)),
      );
  }
  out.push(
    ...netns
      .exec(["nft", "list", "tables"])
      .stdout.split("\n")
      .filter((l) => l.includes("meshcni")),
  );
  return out;
}

/** Empties one chain of meshcni's (a chain the profile owns, e.g. nat PROXY_INIT_OUTPUT). */
export function flushChain(netns: Netns, backend: TestBackend, stage: string, chain: string, family: 4 | 6 = 4): void {
  const argv =
    backend === "nftables"
      ? ["nft", "flush", "chain", family === 6 ? "ip6" : "ip", "meshcni", `${stage}_${chain}`]
      : [`${family === 6 ? "ip6tables" : "iptables"}-${backend}`, "-t", stage, "-F", chain];
  const r = netns.exec(argv);
  if (r.code !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr}`);
}

/** Which of the host's iptables binaries exist, as /usr/sbin is seen by `prefix`'s processes. */
export const IPTABLES_GLOB = /^(ip6?tables|xtables|arptables|ebtables)/;

/**
 * A plugin folder whose `meshcni` runs dist/meshcni in a private mount namespace where /usr/sbin
 * (and so /sbin, its link on Debian) holds everything but the iptables binaries: a node with
 * nft and no iptables (with hideNft, not even the nft binary: only libnftables, in process).
 * `probe` in the same folder runs a command the same way (for the test to
 * prove the binaries are gone).
 */
export function hiddenIptablesDir(dir: string, opts: { hideNft?: boolean } = {}): string {
  mkdirSync(dir, { recursive: true });
  const real = join(dir, "real-sbin");
  const fake = join(dir, "fake-sbin");
  mkdirSync(real, { recursive: true });
  mkdirSync(fake, { recursive: true });
  const enter = [
    "#!/bin/sh",
    "set -e",
    "# a private mount namespace: what is mounted here is seen by this process tree only",
    `[ -n "$MESHCNI_HIDDEN" ] || MESHCNI_HIDDEN=1 exec unshare -m --propagation private "$0" "$@"`,
    `mount --bind /usr/sbin ${real}`,
    `for f in ${real}/*; do n=$(basename "$f"); case "$n" in ` +
      `iptables*|ip6tables*|xtables*|arptables*|ebtables*${opts.hideNft ? "|nft" : ""}) ;; ` +
      `*) ln -sf "${real}/$n" "${fake}/$n" ;; esac; done`,
    `mount --bind ${fake} /usr/sbin`,
    "unset MESHCNI_HIDDEN",
  ];
  writeFileSync(join(dir, "meshcni"), [...enter, `exec ${join(DIST, "meshcni")}`, ""].join("\n"));
  writeFileSync(join(dir, "probe"), [...enter, `exec "$@"`, ""].join("\n"));
  chmodSync(join(dir, "meshcni"), 0o755);
  chmodSync(join(dir, "probe"), 0o755);
  return dir;
}
