// `meshcnictl check [--pre | --pods]`: can this cluster take meshcni, is meshcni installed and
// healthy node by node, and does every pod the mesh profile redirects run with its rules.
import {
  checkApi,
  checkCanCreate,
  checkInstalled,
  checkMeshedPods,
  checkNoOtherMeshCni,
  passed,
  renderCheckJson,
  renderCheckReport,
} from "../check/check.ts";
import type { CheckResult } from "../check/result.ts";
import type { CliContext } from "../context.ts";
import { CliError } from "../errors.ts";
import { CONFIG_OPTIONS } from "../install-flags.ts";
import { type KubeconfigFile, kubeconfigPaths, type ResolvedKubeconfig, resolveKubeconfig } from "../kubeconfig.ts";
import { type CommandSpec, type Flags, str } from "../spec.ts";
import { isDnsLabel } from "../../kube/names.ts";

export const spec: CommandSpec = {
  name: "check",
  summary:
    "check that the cluster can take meshcni (--pre), that meshcni is " +
    "installed and healthy, or that meshed pods run with its rules (--pods)",
  usage: "[--pre | --pods [--pods-namespace NS]] [--kubeconfig FILE] [--context NAME] [-n NS] [-o text|json]",
  description: [
    "Talks to the cluster through your kubeconfig (KUBECONFIG, or --kubeconfig; --context picks",
    "a context) and prints a ✓/‼/× list (‼: a warning). Exits 0 unless a check fails (×).",
    "  --pre:  the API answers; you may create every object install-cni renders; no other mesh",
    "          CNI plugin (linkerd-cni, istio-cni) runs.",
    "  else:   every object exists; the ConfigMap holds a valid configuration; the DaemonSet is",
    "          ready on every node it is scheduled to; every meshcni-node pod is ready; then, node",
    "          by node, the agent's /status through the API server's pod proxy (chain, plugin",
    "          binary and version, watch cache, pods handled, pods bypassing the mesh, repairs,",
    "          unverified pods); and the mesh's side: its injector in CNI mode (Linkerd's",
    "          cniEnabled, Istio's istio_cni.enabled), no pod still carrying linkerd-init or",
    "          istio-init.",
    "  --pods: every started pod the mesh profile redirects (under the ConfigMap's configuration)",
    "          that runs without meshcni's rules: listed as bypassing by its node's agent, its",
    "          mesh validator's latest run failed, or skipped by the plugin; a warning when no",
    "          record of an ADD matches its sandbox (unverified) or when it still started with",
    "          the mesh's init container while CNI mode is on; with the reason. -n stays",
    "          meshcni's namespace; --pods-namespace limits the pods looked at.",
  ].join("\n"),
  options: {
    pre: { type: "boolean", help: "check before installing" },
    pods: { type: "boolean", help: "list the pods the mesh profile redirects that run without meshcni's rules" },
    "pods-namespace": {
      type: "string",
      arg: "NS",
      default: "every namespace",
      help: "with --pods: look only at this namespace's pods",
    },
    output: {
      type: "string",
      short: "o",
      arg: "FORMAT",
      default: "text",
      choices: ["text", "json"],
      help: "text, json: the ✓/‼/× list, or one JSON document",
    },
    kubeconfig: {
      type: "string",
      arg: "FILE",
      file: true,
      default: "$KUBECONFIG or ~/.kube/config",
      help: "the kubeconfig file",
    },
    context: { type: "string", arg: "NAME", default: "the current context", help: "the kubeconfig context" },
    namespace: CONFIG_OPTIONS.namespace!,
    timeout: { type: "string", arg: "SECONDS", default: "10", help: "how long to wait for each API answer" },
  },
  examples: [
    "meshcnictl check --pre",
    "meshcnictl check --context prod -n meshcni",
    "meshcnictl check --pods --pods-namespace emojivoto",
    "meshcnictl check -o json",
  ],
};

export async function run(ctx: CliContext, flags: Flags, args: string[]): Promise<number> {
  if (args.length) throw new CliError(`check takes no arguments (got ${JSON.stringify(args[0])})`);
  const namespace = str(flags, "namespace") ?? "meshcni";
  if (!isDnsLabel(namespace)) throw new CliError(`--namespace ${JSON.stringify(namespace)}: is not a namespace name`);
  const rawTimeout = str(flags, "timeout") ?? "10";
  const timeout = Number(rawTimeout);
  if (!/^\d+(\.\d+)?$/.test(rawTimeout) || timeout <= 0 || timeout > 600)
    throw new CliError(`--timeout ${JSON.stringify(rawTimeout)}: must be seconds, more than 0 and at most 600`);
  const output = str(flags, "output") ?? "text";
  if (output !== "text" && output !== "json")
    throw new CliError(`--output ${JSON.stringify(output)}: must be text or json`);
  if (flags.pre && flags.pods)
    throw new CliError("--pre and --pods exclude each other: --pre is for before installing, --pods for after");
  const podNamespace = str(flags, "pods-namespace");
  if (podNamespace !== undefined && !flags.pods) throw new CliError("--pods-namespace goes with --pods");
  if (podNamespace !== undefined && !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(podNamespace))
    throw new CliError(`--pods-namespace ${JSON.stringify(podNamespace)}: is not a namespace name`);

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
        if (str(flags, "kubeconfig") || paths.length === 1)
          throw new CliError(`cannot read ${path}: ${(e as Error).message}`, 1);
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
      results.push({
        category: "kubernetes-api",
        name: "can reach the Kubernetes API",
        ok: false,
        detail: (e as Error).message,
        hint: "the kubeconfig names credential files that cannot be read",
      });
    }
    if (api) {
      const reach = await checkApi(api);
      results.push(reach);
      if (reach.ok) {
        if (flags.pre) results.push(...(await checkCanCreate(api, namespace)), await checkNoOtherMeshCni(api));
        else if (flags.pods) results.push(...(await checkMeshedPods(api, namespace, podNamespace, ctx.version)));
        else results.push(...(await checkInstalled(api, namespace, ctx.version)));
      }
    }
  }
  ctx.out(output === "json" ? renderCheckJson(results) : renderCheckReport(results));
  return passed(results) ? 0 : 1;
}
