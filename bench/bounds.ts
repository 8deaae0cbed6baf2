// How long the plugin takes to give up, against the bound it promises: the wall-clock side of
// test/hardening/findings.test.ts, test/plugin/api.test.ts and test/hardening/api-faults.test.ts.
// The tests keep what must be true (the code, nothing applied); the times are measured here,
// each as a ratio to its bound, since a shared machine's load would make them flaky as assertions.
//
//   node_modules/.bin/bun bench/bounds.ts
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startApiServer } from "../test/support/apiserver.ts";
import { repoPath } from "../test/support/golden.ts";
import { cniEnv, runPlugin } from "../test/support/plugin-run.ts";
import { ms, ratio } from "./lib.ts";

interface Row {
  what: string;
  boundMs: number;
  ms: number;
  code: number;
}

const ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-5b8b6f7c9d-x2x7q";

export async function benchBounds(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-bounds-"));
  const api = await startApiServer({ token: "bench" });
  const rows: Row[] = [];
  try {
    api.addPod(JSON.parse(await Bun.file(repoPath("testdata/pods/linkerd-meshed.json")).text()));
    api.addNamespace(JSON.parse(await Bun.file(repoPath("testdata/pods/namespace-emojivoto.json")).text()));
    const kubeconfig = join(dir, "kubeconfig");
    writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
    const base = { cniVersion: "1.0.0", name: "k8s-pod-network", type: "meshcni", kubernetes: { kubeconfig } };
    const code = (stdout: string) => {
      try {
        return Number(JSON.parse(stdout).code ?? 0);
      } catch {
        return -1;
      }
    };

    // Deeply nested stdin is refused before it is parsed (code 6): the bound is a plugin start.
    for (const depth of [1001, 200_000]) {
      const deep = `${"[".repeat(depth)}${"]".repeat(depth)}`;
      const stdin = JSON.stringify({ ...base, prevResult: { cniVersion: "1.0.0", ips: [] } }).replace(
        '"ips":[]',
        `"ips":[],"x":${deep}`,
      );
      const r = await runPlugin(cniEnv("ADD", { CNI_ARGS: "" }), stdin, { dryRun: true });
      rows.push({ what: `stdin nested ${depth} deep (code 6)`, boundMs: 1000, ms: r.ms, code: code(r.stdout) });
    }
    // An API server slower than timeout_seconds: code 11 within the bound.
    for (const [timeout, slow] of [
      [1, 4000],
      [5, 8000],
    ] as const) {
      api.setGlobalFault({ kind: "slow", ms: slow });
      const conf = timeout === 5 ? base : { ...base, timeout_seconds: timeout };
      const r = await runPlugin(cniEnv("ADD", { CNI_ARGS: ARGS }), JSON.stringify(conf), { dryRun: true });
      api.setGlobalFault(undefined);
      rows.push({
        what:
          `API answers after ${slow / 1000} s, timeout_seconds ` +
          `${timeout}${timeout === 5 ? " (default)" : ""} (code 11)`,
        boundMs: timeout * 1000,
        ms: r.ms,
        code: code(r.stdout),
      });
    }
  } finally {
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const lines = [
    "## Time bounds (bench/bounds.ts)",
    "",
    "How long the compiled plugin takes to answer with an error, against the bound it promises.",
    "",
    "| case | code | took | bound | took / bound |",
    "|---|---|---|---|---|",
    ...rows.map((r) => `| ${r.what} | ${r.code} | ${ms(r.ms)} | ${ms(r.boundMs)} | ${ratio(r.ms, r.boundMs)} |`),
    "",
  ];
  return lines.join("\n");
}

if (import.meta.main) console.log(await benchBounds());
