// `meshcnictl uninstall-cni`: the objects `kubectl delete -f -` removes.
import { buildUninstallObjects, renderObjects } from "../manifests/render.ts";
import type { CliContext } from "../context.ts";
import { CliError } from "../errors.ts";
import { CONFIG_OPTIONS, ownsNamespace } from "../install-flags.ts";
import { type CommandSpec, type Flags, str } from "../spec.ts";
import { OUTPUT_OPTION, outputFormat } from "./install-cni.ts";
import { isDnsLabel } from "../../kube/names.ts";

export const spec: CommandSpec = {
  name: "uninstall-cni",
  summary: "print the objects to remove meshcni (pipe to kubectl delete -f -)",
  usage: "[flags]",
  description: [
    "The DaemonSet goes first: each meshcni-node pod takes meshcni out of its node's CNI chain",
    "before it stops. The Namespace goes last, and only when meshcni created it: meshcni's own",
    "namespace, or another one with --delete-namespace (install-cni --create-namespace made it).",
  ].join("\n"),
  options: {
    namespace: CONFIG_OPTIONS.namespace!,
    "delete-namespace": {
      type: "boolean",
      default: "on for meshcni, off for any other --namespace",
      help: "also delete the Namespace (only if install-cni --create-namespace created it)",
    },
    output: OUTPUT_OPTION,
  },
  examples: ["meshcnictl uninstall-cni | kubectl delete -f -"],
};

export async function run(ctx: CliContext, flags: Flags, args: string[]): Promise<number> {
  if (args.length) throw new CliError(`uninstall-cni takes no arguments (got ${JSON.stringify(args[0])})`);
  const format = outputFormat(flags);
  const namespace = str(flags, "namespace") ?? "meshcni";
  if (!isDnsLabel(namespace)) {
    throw new CliError(`--namespace ${JSON.stringify(namespace)}: is not a namespace name`);
  }
  ctx.out(
    renderObjects(
      buildUninstallObjects(namespace, ownsNamespace(namespace, flags["delete-namespace"] === true)),
      format,
    ),
  );
  return 0;
}
