// Image size: the DaemonSet image for each architecture as `bun run image` builds it (podman's
// uncompressed size, and the gzip-compressed layer a registry stores and a node pulls), what is
// in it (the node binary, the loader and libraries), against the 120 MB budget; and the -musl
// variant (a second Bun runtime) for comparison. Run alone: node_modules/.bin/bun bench/image.ts
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
    const row = (name: string, i: BuiltImage, budget: boolean) => {
      const bin = i.staged.files.filter((f) => f.path.startsWith("/opt/meshcni/")).reduce((s, f) => s + f.bytes, 0);
      const libs = i.staged.files.filter((f) => !f.path.startsWith("/opt/meshcni/")).reduce((s, f) => s + f.bytes, 0);
      const verdict = !budget
        ? "(reported; over budget by design)"
        : i.bytes <= IMAGE_BUDGET_BYTES
          ? "≤ 120 MB ✓"
          : "> 120 MB ✗";
      rows.push(
        `| ${name} | ${mb(i.bytes)} | ${mb(gzippedLayer(i.staged.dir))} | ${mb(bin)} ` +
          `| ${mb(libs)} (${i.staged.libraries.length} files) | ${verdict} |`,
      );
    };
    for (const i of await buildImages({ archs: ["amd64", "arm64"], tag, outdir: join(scratch, "ctx"), podman, log }))
      row(`meshcni linux/${i.arch}`, i, true);
    for (const i of await buildImages({
      archs: ["amd64"],
      tag,
      outdir: join(scratch, "ctx-musl"),
      podman,
      log,
      musl: true,
    }))
      row(`meshcni-musl linux/${i.arch} (glibc + musl builds)`, i, false);
    const version = JSON.parse(readFileSync(join(import.meta.dir, "../package.json"), "utf8")).version;
    return [
      "## Image size",
      "",
      `The DaemonSet image as \`bun run image\` builds it (meshcni ${version}): FROM scratch, ` +
        `the node binary (the plugin and the agent in one Bun executable, the agent a link) and exactly ` +
        `the loader and libraries it loads, from Debian's libc6 for each architecture. Uncompressed is ` +
        `podman's image size; compressed is the gzip (level 6) of the image's one layer, what a node pulls.`,
      "",
      "| image | uncompressed | compressed layer | node binary | loader + libraries | target |",
      "|---|---|---|---|---|---|",
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
