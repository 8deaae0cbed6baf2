// `meshcnictl explain`, run as the compiled binary on realistic pods and workloads
// (testdata/pods, testdata/cli/explain): goldens of what it prints, and proof that it prints
// what the plugin itself does: the compiled plugin, asked for the same pod through the
// stand-in API server with MESHCNI_DRY_RUN_FILE, writes the same payloads.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { entryFromOptions } from "../../internal/config/entry.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { expectGolden, repoPath } from "../support/golden.ts";
import { ensureCli, runCli } from "./support.ts";

const DIR = "testdata/cli/explain";
const cwd = repoPath(DIR);
const cases = readdirSync(cwd)
  .filter((f) => f.endsWith(".args"))
  .map((f) => f.slice(0, -5))
  .sort();
const FAILING = new Set(["pod-bad-annotation"]);

const argsOf = (name: string) =>
  readFileSync(join(cwd, `${name}.args`), "utf8")
    .split("\n")
    .filter((l) => l !== "");

beforeAll(async () => {
  await ensureCli();
});

describe("explain goldens", () => {
  for (const name of cases) {
    test(name, () => {
      const r = runCli(["explain", ...argsOf(name)], { cwd });
      expectGolden(`${DIR}/${name}.golden`, r.stdout);
      if (FAILING.has(name)) {
        expect(r.code).toBe(1);
        expect(r.stderr).toContain("the plugin would fail ADD");
      } else {
        expect(r.stderr).toBe("");
        expect(r.code).toBe(0);
      }
    });
  }
});

describe("explain input", () => {
  test("reads standard input with -f -", () => {
    const text = readFileSync(join(cwd, "deployment-linkerd-injected.yaml"), "utf8");
    const fromStdin = runCli(["explain", "-f", "-", "--inbound-port", "5143", "--use-wait-flag"], { stdin: text, cwd });
    expect(fromStdin.code).toBe(0);
    expect(fromStdin.stdout).toBe(readFileSync(join(cwd, "deployment-injected.golden"), "utf8"));
  });

  test("a List of pods is explained item by item", () => {
    const pods = ["linkerd-meshed", "not-injected"].map((p) =>
      JSON.parse(readFileSync(repoPath(`testdata/pods/${p}.json`), "utf8")),
    );
    const r = runCli(["explain", "-f", "-"], {
      stdin: JSON.stringify({ apiVersion: "v1", kind: "List", items: pods }),
    });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("# Pod emojivoto/web-5b8b6f7c9d-x2x7q (mesh linkerd)\n# redirect:");
    expect(r.stdout).toContain("# no rules: the pod has no linkerd-proxy container");
  });

  const bad: [string[], string | undefined, string, number][] = [
    [[], undefined, "explain needs --filename FILE", 2],
    [["-f", "/nonexistent/pod.yaml"], undefined, "--filename /nonexistent/pod.yaml: cannot read it", 1],
    [["-f", "-"], "kind: Pod\nmetadata: [unclosed", "--filename -: not valid YAML or JSON", 2],
    [
      ["-f", "-"],
      "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n",
      "no Pod or workload with a pod template",
      2,
    ],
    [["-f", "-"], "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n", "not a valid pod", 2],
    [["-f", "-", "--namespace-file", "-"], "", "--namespace-file -", 2],
    [["-f", "-", "--inbound-port", "70000"], "{}", '--inbound-port "70000": is not a TCP port', 2],
  ];
  for (const [args, stdin, message, code] of bad) {
    test(`refuses ${args.join(" ") || "no file"} ${stdin === undefined ? "" : JSON.stringify(stdin.slice(0, 20))}`, () => {
      const r = runCli(["explain", ...args], stdin === undefined ? {} : { stdin });
      expect(r.stdout).toBe("");
      expect(r.stderr).toContain(message);
      expect(r.code).toBe(code);
    });
  }
});

describe("explain prints what the plugin applies", () => {
  let api: ApiServer;
  let tmp: string;
  const plugin = repoPath("dist/meshcni");

  beforeAll(async () => {
    if (!existsSync(plugin)) {
      const b = Bun.spawnSync([process.execPath, repoPath("scripts/build.ts"), "meshcni"], {
        cwd: repoPath(),
        stdout: "pipe",
        stderr: "pipe",
      });
      if (b.exitCode !== 0) throw new Error(`building meshcni failed: ${b.stderr}`);
    }
    api = await startApiServer({ token: "explain-test" });
    tmp = mkdtempSync(join(tmpdir(), "meshcnictl-explain-"));
    writeFileSync(join(tmp, "kubeconfig"), api.kubeconfig());
  });
  afterAll(async () => {
    await api?.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  const pairs: { pod: string; ns?: string; flags: string[]; entry: Parameters<typeof entryFromOptions>[0] }[] = [
    { pod: "pods/linkerd-meshed", ns: "pods/namespace-emojivoto-annotated", flags: [], entry: {} },
    {
      pod: "pods/linkerd-annotated",
      ns: "pods/namespace-emojivoto",
      flags: ["--ipv6", "--skip-outbound-ports", "25"],
      entry: { ipv6: true, skipOutboundPorts: ["25"] },
    },
    // No --namespace-file: the API's namespace has no annotations either.
    {
      pod: "pods/linkerd-control-plane",
      flags: ["--proxy-gid", "2102", "--redirect-ports", "8086"],
      entry: { proxyGid: 2102, redirectPorts: [8086] },
    },
    {
      pod: "istio/pods/sidecar",
      ns: "istio/pods/namespace-bookinfo",
      flags: ["--mesh", "istio"],
      entry: { mesh: "istio" },
    },
    {
      pod: "istio/pods/native-sidecar",
      flags: ["--mesh", "istio", "--outbound-port", "15011"],
      entry: { mesh: "istio", outboundPort: 15011 },
    },
  ];
  for (const p of pairs) {
    test(`${p.pod} ${p.flags.join(" ")}`, async () => {
      const pod = JSON.parse(readFileSync(repoPath(`testdata/${p.pod}.json`), "utf8"));
      const ns = p.ns
        ? JSON.parse(readFileSync(repoPath(`testdata/${p.ns}.json`), "utf8"))
        : { apiVersion: "v1", kind: "Namespace", metadata: { name: pod.metadata.namespace } };
      api.addPod(pod);
      api.addNamespace(ns);
      const dry = join(tmp, `${p.pod.replaceAll("/", "-")}.dry-run`);
      const entry = entryFromOptions(p.entry);
      const conf = {
        cniVersion: "1.0.0",
        ...entry,
        dry_run: true,
        kubernetes: { ...(entry.kubernetes as object), kubeconfig: join(tmp, "kubeconfig") },
      };
      // Asynchronously: the stand-in API server answers from this process.
      const add = Bun.spawn([plugin], {
        env: {
          PATH: process.env.PATH,
          CNI_COMMAND: "ADD",
          CNI_CONTAINERID: "0123456789abcdef",
          CNI_NETNS: "/var/run/netns/explain-test",
          CNI_IFNAME: "eth0",
          CNI_PATH: "/opt/cni/bin",
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.metadata.namespace};K8S_POD_NAME=${pod.metadata.name}`,
          MESHCNI_DRY_RUN_FILE: dry,
        },
        stdin: new TextEncoder().encode(JSON.stringify(conf)),
        stdout: "pipe",
        stderr: "pipe",
      });
      const [code, stderr] = await Promise.all([add.exited, new Response(add.stderr).text()]);
      expect(stderr).toContain("dry run");
      expect(code).toBe(0);
      const applied = readFileSync(dry, "utf8");
      expect(applied).toContain("*nat");
      const nsFlag = p.ns ? ["--namespace-file", repoPath(`testdata/${p.ns}.json`)] : [];
      const explained = runCli(["explain", "-f", repoPath(`testdata/${p.pod}.json`), ...nsFlag, ...p.flags]);
      expect(explained.code).toBe(0);
      const payloads = explained.stdout.slice(explained.stdout.indexOf("# iptables-restore"));
      expect(payloads).toBe(applied);
    });
  }
});
