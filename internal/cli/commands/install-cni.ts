// `meshcnictl install-cni`: the Kubernetes objects that install meshcni, for kubectl apply.
import { buildManifests } from "../manifests/objects.ts";
import { type OutputFormat, renderObjects } from "../manifests/render.ts";
import type { CliContext } from "../context.ts";
import { CliError } from "../errors.ts";
import { buildValuesFromFlags, CONFIG_OPTIONS, DEPLOY_OPTIONS, type ValuesFile } from "../install-flags.ts";
import { type CommandSpec, type Flags, type OptionSpec, str } from "../spec.ts";

export const OUTPUT_OPTION: OptionSpec = {
  type: "string",
  short: "o",
  arg: "FORMAT",
  default: "yaml",
  choices: ["yaml", "json"],
  help: "output format",
};

export function outputFormat(flags: Flags): OutputFormat {
  const o = str(flags, "output") ?? "yaml";
  if (o !== "yaml" && o !== "json") throw new CliError(`--output ${JSON.stringify(o)}: must be yaml or json`);
  return o;
}

export const spec: CommandSpec = {
  name: "install-cni",
  summary: "print the Kubernetes objects that install meshcni (pipe to kubectl apply -f -)",
  usage: "[flags]",
  description: [
    "Renders a Namespace, ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding,",
    "ConfigMap (the plugin's conflist entry) and the meshcni-node DaemonSet. Every object carries the label",
    "meshcni.io/cni-resource=true, so an upgrade is:",
    "  meshcnictl install-cni [flags] | kubectl apply --prune -l meshcni.io/cni-resource=true -f -",
    "--values and --set take the Helm chart's values (manifests/values.yaml), as helm template does;",
    "they go over the flags, --set over --values.",
  ].join("\n"),
  options: { ...CONFIG_OPTIONS, ...DEPLOY_OPTIONS, output: OUTPUT_OPTION },
  examples: [
    "meshcnictl install-cni | kubectl apply -f -",
    "meshcnictl install-cni --platform gke --cni-log-level debug | kubectl apply -f -",
    "meshcnictl install-cni --mesh istio -o json > meshcni.json",
    "meshcnictl install-cni --values site.yaml --set-string " +
      "'nodeSelector.mesh\\.example\\.com/enabled=true' | kubectl apply -f -",
  ],
};

export async function run(ctx: CliContext, flags: Flags, args: string[]): Promise<number> {
  if (args.length) throw new CliError(`install-cni takes no arguments (got ${JSON.stringify(args[0])})`);
  const format = outputFormat(flags);
  const paths =
    flags.values === undefined || typeof flags.values === "boolean"
      ? []
      : Array.isArray(flags.values)
        ? flags.values
        : [flags.values];
  const files: ValuesFile[] = [];
  for (const path of paths) {
    try {
      files.push({ path, text: await ctx.readFile(path) });
    } catch (e) {
      throw new CliError(`--values ${path}: ${(e as Error).message}`);
    }
  }
  const values = buildValuesFromFlags(flags, { deploy: true, files });
  ctx.out(renderObjects(buildManifests(values), format));
  return 0;
}
