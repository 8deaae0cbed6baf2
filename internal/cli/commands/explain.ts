// `meshcnictl explain -f POD.yaml`: what the plugin would do for a pod, offline.
import { BACKEND_NAMES } from "../../firewall/registry.ts";
import type { CliContext } from "../context.ts";
import { CliError } from "../errors.ts";
import { explainPods, extractPods, parseDocuments, parseNamespaceDoc } from "../explain.ts";
import { buildPluginConfText, buildValuesFromFlags, CONFIG_OPTIONS } from "../install-flags.ts";
import { type CommandSpec, type Flags, str } from "../spec.ts";

export const spec: CommandSpec = {
  name: "explain",
  summary:
    "show what the plugin would do for a pod: the skip and why, or the exact iptables-restore payloads or nft script",
  usage: `-f FILE [--namespace-file NS.yaml] [--backend ${BACKEND_NAMES.join("|")}] [config flags]`,
  description: [
    "Reads a Pod, or a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob (its pod",
    "template), as YAML or JSON, and runs the plugin's own decision and rule builder on it with",
    "the configuration the config flags give (the same flags as install-cni). Nothing is applied.",
    "--backend chooses what to print: iptables-restore payloads (iptables, the default unless",
    "--iptables-mode is nftables) or the one nft transaction (nftables).",
    "Exits 1 when the plugin would fail the pod (an invalid annotation).",
  ].join("\n"),
  options: {
    filename: {
      type: "string",
      short: "f",
      arg: "FILE",
      file: true,
      help: "the pod or workload, - for standard input",
    },
    "namespace-file": {
      type: "string",
      arg: "FILE",
      file: true,
      help: "the pod's Namespace, for annotations set there",
    },
    backend: {
      type: "string",
      arg: "NAME",
      choices: BACKEND_NAMES,
      help: "render with this backend (default: from --iptables-mode)",
    },
    ...CONFIG_OPTIONS,
  },
  examples: [
    "kubectl get pod web-5b8b6f7c9d-x2x7q -o yaml | meshcnictl explain -f -",
    "meshcnictl explain -f deployment.yaml --namespace-file ns.yaml --skip-outbound-ports 3306",
    "meshcnictl explain -f pod.yaml --backend nftables",
  ],
};

export async function run(ctx: CliContext, flags: Flags, args: string[]): Promise<number> {
  const file = str(flags, "filename") ?? args[0];
  if (args.length > (str(flags, "filename") ? 0 : 1))
    throw new CliError(`explain takes one file (got ${JSON.stringify(args.at(-1))})`);
  if (!file) throw new CliError("explain needs --filename FILE (or -f -, for standard input)");
  const values = buildValuesFromFlags(flags, { deploy: false });
  const nsFile = str(flags, "namespace-file");
  const read = async (path: string, flag: string) => {
    try {
      return await ctx.readFile(path);
    } catch (e) {
      throw new CliError(`--${flag} ${path}: cannot read it (${(e as Error).message})`, 1);
    }
  };
  const namespace = nsFile
    ? parseNamespaceDoc(await read(nsFile, "namespace-file"), `--namespace-file ${nsFile}`)
    : undefined;
  const what = `--filename ${file}`;
  const { cases, ignored } = extractPods(
    parseDocuments(await read(file, "filename"), what),
    what,
    namespace?.metadata.name,
  );
  const result = await explainPods(buildPluginConfText(values), cases, namespace, ignored, str(flags, "backend"));
  ctx.out(result.text);
  if (result.failed)
    ctx.log.error(
      "the plugin would fail ADD for at least one pod (see above); fix the annotation and recreate the pod",
    );
  return result.failed ? 1 : 0;
}
