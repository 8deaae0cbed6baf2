// Image size: the DaemonSet image for each architecture as `bun run image` builds it (podman's
// uncompressed size, and the gzip-compressed layer a registry stores and a node pulls), what is
// in it (the node binary, the userland, the loader and libraries), against the 130 MB budget.
// Run alone: node_modules/.bin/bun bench/image.ts
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BuiltImage, buildImages, IMAGE_BUDGET_BYTES, type Podman } from "../scripts/image.ts";

const mb = (b: number) => `${(b / 1e6).toFixed(1)} MB`;

/** Bytes of the gzip (level 6, as registries' clients push) of the layer's tar. */
function gzippedLayer(dir: string): number {
  const r = Bun.spawnSync(["sh", "-c", 'tar -C "$1" --numeric-owner -cf - . | gzip -6 | wc -c', "sh", dir], {
    stdout: "pipe",
  });
  return Number(r.stdout.toString().trim());
}

export async function benchImage(): Promise<string> {
  const scratch = mkdtempSync(join(tmpdir(), "meshcni-bench-image-"));
  writeFileSync(
    join(scratch, "containers.conf"),
    '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n',
  );
  const podman: Podman = (args) => {
    const r = Bun.spawnSync(["podman", "--root", join(scratch, "root"), "--runroot", join(scratch, "run"), ...args], {
      env: { ...Bun.env, CONTAINERS_CONF: join(scratch, "containers.conf") },
      stdout: "pipe",
      stderr: "pipe",
    });
    return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
  };
  const log = (l: string) => console.error(l);
  try {
    const tag = `localhost/meshcni-bench:${process.pid}`;
    const rows: string[] = [];
    const sum = (files: { bytes: number }[]) => files.reduce((s, f) => s + f.bytes, 0);
    const row = (name: string, i: BuiltImage) => {
      const inImage = (paths: string[]) => i.staged.files.filter((f) => paths.includes(f.path));
      const bin = sum(i.staged.files.filter((f) => f.path.startsWith("/opt/meshcni/")));
      const userland = sum(inImage(i.staged.userland));
      const libs = sum(inImage(i.staged.libraries));
      const budget = IMAGE_BUDGET_BYTES / 1e6;
      const verdict = i.bytes <= IMAGE_BUDGET_BYTES ? `≤ ${budget} MB ✓` : `> ${budget} MB ✗`;
      rows.push(
        `| ${name} | ${mb(i.bytes)} | ${mb(gzippedLayer(i.staged.dir))} | ${mb(bin)} | ${mb(userland)} ` +
          `(${i.staged.userland.length} files) | ${mb(libs)} (${i.staged.libraries.length} files) | ${verdict} |`,
      );
    };
    for (const i of await buildImages({ archs: ["amd64", "arm64"], tag, outdir: join(scratch, "ctx"), podman, log }))
      row(`meshcni linux/${i.arch}`, i);
    const version = JSON.parse(readFileSync(join(import.meta.dir, "../package.json"), "utf8")).version;
    return [
      "## Image size",
      "",
      `The DaemonSet image as \`bun run image\` builds it (meshcni ${version}): FROM scratch, the ` +
        `node binary (the plugin and the agent in one Bun executable, the agent a link), the userland ` +
        `the agent applies rules with (iptables nft and legacy, nft and libnftables, nsenter, ip: ` +
        `Debian's pinned packages) and exactly the loader and libraries they load, for each ` +
        `architecture; one image for every host (the plugin takes the image's loader and C library ` +
        `with it). Uncompressed is podman's image size; compressed is the gzip (level 6) of the ` +
        `image's one layer, what a node pulls.`,
      "",
      "| image | uncompressed | compressed layer | node binary | userland | loader + libraries | target |",
      "|---|---|---|---|---|---|---|",
      ...rows,
      "",
      "For context, not measured here: this machine reaches no container registry, " +
        "so the published sizes of Linkerd's `cr.l5d.io/linkerd/cni-plugin` (Alpine-based, " +
        "with Go binaries) and Istio's `install-cni` image could not be verified. Both ship Go binaries, " +
        "so they are expected to be several times smaller than a Bun executable (an empty program " +
        "compiled with Bun is about 109 MB: the runtime); the meshcni image before the multi-call " +
        "binary carried two Bun executables (109.5 + 111.1 MB, plus 3.1 MB of libraries: about 224 MB).",
      "",
    ].join("\n");
  } finally {
    const mounts = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[1] ?? "")
      .filter((m) => m.startsWith(scratch))
      .sort((a, b) => b.length - a.length);
    for (const m of mounts) Bun.spawnSync(["umount", "-l", m]);
    rmSync(scratch, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(await benchImage());
