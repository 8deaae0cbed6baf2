// `meshcnictl check [--pre]`: can this cluster take meshcni, or is meshcni installed and healthy.
import { checkApi, checkCanCreate, checkInstalled, checkNoOtherMeshCni, type CheckResult, renderCheckReport } from "../check.ts";
import type { CliContext } from "../context.ts";
import { CliError } from "../errors.ts";
import { CONFIG_OPTIONS } from "../install-flags.ts";
import { type KubeconfigFile, kubeconfigPaths, type ResolvedKubeconfig, resolveKubeconfig } from "../kubeconfig.ts";
import { type CommandSpec, type Flags, str } from "../spec.ts";
import { isDnsLabel } from "../../kube/names.ts";

export const spec: CommandSpec = {
  name: "check",
  summary: "check that the cluster can take meshcni (--pre), or that meshcni is installed and healthy",
  usage: "[--pre] [--kubeconfig FILE] [--context NAME] [-n NS]",
  description: [
    "Talks to the cluster through your kubeconfig (KUBECONFIG, or --kubeconfig; --context picks",
    "a context) and prints a ✓/× list. Exits 0 only when every check passes.",
    "  --pre: the API answers; you may create every object install-cni renders; no other mesh",
    "         CNI plugin (linkerd-cni, istio-cni) runs.",
    "  else:  every object exists; the ConfigMap holds a valid configuration; the DaemonSet is",
    "         ready on every node it is scheduled to; every meshcni-node pod is ready.",
  ].join("\n"),
  options: {
    pre: { type: "boolean", help: "check before installing" },
    kubeconfig: { type: "string", arg: "FILE", file: true, default: "$KUBECONFIG or ~/.kube/config", help: "the kubeconfig file" },
    context: { type: "string", arg: "NAME", default: "the current context", help: "the kubeconfig context" },
    namespace: CONFIG_OPTIONS.namespace!,
    timeout: { type: "string", arg: "SECONDS", default: "10", help: "how long to wait for each API answer" },
  },
  examples: ["meshcnictl check --pre", "meshcnictl check --context prod -n meshcni"],
};

export async function run(ctx: CliContext, flags: Flags, args: string[]): Promise<number> {
  if (args.length) throw new CliError(`check takes no arguments (got ${JSON.stringify(args[0])})`);
  const namespace = str(flags, "namespace") ?? "meshcni";
  if (!isDnsLabel(namespace)) throw new CliError(`--namespace ${JSON.stringify(namespace)}: is not a namespace name`);
  const rawTimeout = str(flags, "timeout") ?? "10";
  const timeout = Number(rawTimeout);
  if (!/^\d+(\.\d+)?$/.test(rawTimeout) || timeout <= 0 || timeout > 600) throw new CliError(`--timeout ${JSON.stringify(rawTimeout)}: must be seconds, more than 0 and at most 600`);

  const results: CheckResult[] = [];
  const kc: CheckResult = { category: "kubernetes-api", name: "can read the kubeconfig", ok: false };
  results.push(kc);
  let target: ResolvedKubeconfig | undefined;
  const paths = kubeconfigPaths(str(flags, "kubeconfig"), ctx.env);
  try {
    const files: KubeconfigFile[] = [];
    for (const path of paths) {
      try {
        files.push({ path, text: await ctx.readFile(path) });
      } catch (e) {
        // kubectl skips missing files of a KUBECONFIG list; a named --kubeconfig must exist.
        if (str(flags, "kubeconfig") || paths.length === 1) throw new CliError(`cannot read ${path}: ${(e as Error).message}`, 1);
      }
    }
    target = resolveKubeconfig(files, str(flags, "context"));
    kc.ok = true;
    kc.detail = `context ${target.context}`;
  } catch (e) {
    if (!(e instanceof CliError)) throw e;
    kc.detail = e.message;
    kc.hint = "point --kubeconfig or KUBECONFIG at a kubeconfig, and --context at one of its contexts";
  }
  if (target) {
    let api;
    try {
      api = await ctx.openApi(target, timeout * 1000);
    } catch (e) {
      results.push({ category: "kubernetes-api", name: "can reach the Kubernetes API", ok: false, detail: (e as Error).message, hint: "the kubeconfig names credential files that cannot be read" });
    }
    if (api) {
      const reach = await checkApi(api);
      results.push(reach);
      if (reach.ok) {
        if (flags.pre) results.push(...(await checkCanCreate(api, namespace)), await checkNoOtherMeshCni(api));
        else results.push(...(await checkInstalled(api, namespace)));
      }
    }
  }
  ctx.out(renderCheckReport(results));
  return results.every((r) => r.ok) ? 0 : 1;
}
