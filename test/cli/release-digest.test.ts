// A release that knows its image's digest (`bun run release --image-digest=sha256:...`):
// meshcnictl carries it and install-cni pins the default image by it (unless the image is chosen
// with --image, hub, tag or digest), and the packaged chart's values.yaml carries it, so
// `helm template` of the package renders what that meshcnictl renders.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import pkg from "../../package.json" with { type: "json" };
import { imageDigestOf } from "../../scripts/build.ts";
import { release, stampDigest } from "../../scripts/release.ts";
import { repoPath } from "../support/golden.ts";
import { ensureHelm } from "./support.ts";

const DIGEST = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
let dir: string;
let helm: string;

beforeAll(async () => {
  helm = ensureHelm();
  dir = mkdtempSync(join(tmpdir(), "meshcni-release-digest-"));
  await release(dir, ["linux-amd64"], () => {}, [], { imageDigest: DIGEST });
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const run = (cmd: string[], cwd = dir) => {
  const r = Bun.spawnSync(cmd, {
    cwd,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      HELM_CACHE_HOME: join(dir, ".helm/cache"),
      HELM_CONFIG_HOME: join(dir, ".helm/config"),
      HELM_DATA_HOME: join(dir, ".helm/data"),
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
};
const docs = (text: string) =>
  parseAllDocuments(text)
    .map((d) => d.toJS())
    .filter((d) => d !== null);
const imageOf = (text: string) => docs(text).find((o) => o.kind === "DaemonSet").spec.template.spec.containers[0].image;
const ctl = () => join(dir, "meshcnictl-linux-amd64");

describe.skipIf(process.arch !== "x64")("release with --image-digest", () => {
  test("SHA256SUMS covers meshcnictl and the chart package", () => {
    const chart = `meshcni-${pkg.version}.tgz`;
    expect(
      readdirSync(dir)
        .filter((f) => !f.startsWith("."))
        .sort(),
    ).toEqual(["SHA256SUMS", chart, "meshcnictl-linux-amd64"].sort());
    const r = run(["sha256sum", "-c", "SHA256SUMS"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
  });

  test("install-cni pins the default image by the digest, and --help says so", () => {
    const r = run([ctl(), "install-cni"]);
    expect(r.stderr).toBe("");
    expect(imageOf(r.stdout)).toBe(`ghcr.io/meshcni/meshcni@${DIGEST}`);
    expect(run([ctl(), "install-cni", "--help"]).stdout).toContain(`ghcr.io/meshcni/meshcni@${DIGEST}`);
  });

  test("an image chosen by the user is not pinned by the release's digest", () => {
    expect(imageOf(run([ctl(), "install-cni", "--image", "example.com/meshcni:v2"]).stdout)).toBe(
      "example.com/meshcni:v2",
    );
    expect(imageOf(run([ctl(), "install-cni", "--set", "tag=v2"]).stdout)).toBe("ghcr.io/meshcni/meshcni:v2");
    expect(imageOf(run([ctl(), "install-cni", "--set", "hub=mirror.example.com/m"]).stdout)).toBe(
      `mirror.example.com/m/meshcni:${pkg.version}`,
    );
    expect(imageOf(run([ctl(), "install-cni", "--set", "digest="]).stdout)).toBe(
      `ghcr.io/meshcni/meshcni:${pkg.version}`,
    );
  });

  test("helm template of the packaged chart equals that meshcnictl's install-cni", () => {
    const h = run([
      helm,
      "template",
      "meshcni",
      join(dir, `meshcni-${pkg.version}.tgz`),
      "--namespace",
      "meshcni",
      "--set",
      "createNamespace=true",
    ]);
    expect(h.stderr).toBe("");
    expect(h.code).toBe(0);
    expect(imageOf(h.stdout)).toBe(`ghcr.io/meshcni/meshcni@${DIGEST}`);
    expect(docs(h.stdout)).toEqual(docs(run([ctl(), "install-cni"]).stdout));
  });
});

describe("the digest's checks", () => {
  test("stampDigest sets values.yaml's digest line and nothing else", () => {
    const values = readFileSync(repoPath("manifests/values.yaml"), "utf8");
    const stamped = stampDigest(values, DIGEST);
    expect(stamped.replace(`digest: "${DIGEST}"`, 'digest: ""')).toBe(values);
    expect(stamped).toContain(`\ndigest: "${DIGEST}"\n`);
    expect(() => stampDigest(values, "sha256:abc")).toThrow(/64 hex/);
    expect(() => stampDigest("hub: x\n", DIGEST)).toThrow(/digest/);
  });

  test("imageDigestOf: the argument, then the environment, checked", () => {
    expect(imageDigestOf([`--image-digest=${DIGEST}`], {})).toBe(DIGEST);
    expect(imageDigestOf([], { MESHCNI_IMAGE_DIGEST: DIGEST })).toBe(DIGEST);
    expect(imageDigestOf([], {})).toBeUndefined();
    expect(() => imageDigestOf(["--image-digest=latest"], {})).toThrow(/64 hex/);
  });
});
