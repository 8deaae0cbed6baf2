// An iptables-mode whose binaries the node lacks: the plugin falls back (nft, plain, legacy) with
// a warning, as linkerd-cni does, instead of failing every meshed pod. The node without
// iptables-nft (Bottlerocket) is made by covering xtables-nft-multi, which every nft name and
// Debian's plain `iptables` lead to, with a file that cannot be executed, in a private mount
// namespace for the plugin alone.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Netns, uniq } from "../support/netns.ts";
import { PodLab, readFixture, withAnnotations } from "../support/pod-lab.ts";
import { cniEnv, PLUGIN, withTestState } from "../support/plugin-run.ts";

let dir: string;

async function withoutNft(env: Record<string, string>, stdin: string) {
  const blank = join(dir, "not-executable");
  const script = `mount --bind ${blank} /usr/sbin/xtables-nft-multi && exec "$0"`;
  const proc = Bun.spawn(["unshare", "-m", "--propagation", "private", "sh", "-c", script, PLUGIN], {
    stdin: new Blob([withTestState(stdin)]),
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", ...env },
  });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { stdout, stderr, code };
}

describe("iptables-mode nft on a node without iptables-nft", () => {
  let lab: PodLab;
  let netns: Netns;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "meshcni-fallback-"));
    writeFileSync(join(dir, "not-executable"), "", { mode: 0o644 });
    lab = await PodLab.start();
    lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
    lab.api.addPod(withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-fallback", {}));
    netns = Netns.create(`mcf-${uniq()}`);
  });
  afterAll(async () => {
    netns?.delete();
    await lab?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const conf = (mode: string) =>
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "n",
      type: "meshcni",
      kubernetes: { kubeconfig: lab.kubeconfig },
      linkerd: { "iptables-mode": mode, "proxy-uid": 2102 },
    });
  const args = { CNI_ARGS: "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-fallback" };

  test("ADD succeeds with the legacy binaries and says so; CHECK passes the same way", async () => {
    const r = await withoutNft(cniEnv("ADD", { CNI_NETNS: netns.path, ...args }), conf("nft"));
    expect(r.stderr).toContain(
      "iptables-mode nft: iptables-nft-restore not found on the host; using the legacy binaries instead",
    );
    expect(r.code).toBe(0);
    expect(netns.save("legacy")).toContain(
      "-A PROXY_INIT_OUTPUT -p tcp -m comment --comment " +
        '"proxy-init/redirect-all-outgoing-to-proxy-port" -j REDIRECT --to-ports 4140',
    );
    expect(netns.save("nft")).not.toContain("PROXY_INIT");
    const check = await withoutNft(cniEnv("CHECK", { CNI_NETNS: netns.path, ...args }), conf("nft"));
    expect(check.code).toBe(0);
    expect(check.stderr).toContain("using the legacy binaries instead");
  });

  test("plain on the same node falls back to legacy too", async () => {
    const r = await withoutNft(cniEnv("ADD", { CNI_NETNS: netns.path, ...args }), conf("plain"));
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(
      "iptables-mode plain: iptables-restore not found on the host; using the legacy binaries instead",
    );
  });

  test("a mode the node has is used without a warning", async () => {
    const r = await withoutNft(cniEnv("ADD", { CNI_NETNS: netns.path, ...args }), conf("legacy"));
    expect(r.code).toBe(0);
    expect(r.stderr).not.toContain("not found on the host");
  });
});
