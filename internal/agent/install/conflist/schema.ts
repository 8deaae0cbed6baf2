// The shapes of the CNI network configs a runtime reads from its config folder. Loose objects:
// every key another plugin put there is kept as it is. Pure.
import * as v from "valibot";

/** The `type` of meshcni's own entry in a conflist. */
export const PLUGIN_TYPE = "meshcni";

/** What the CNI spec allows as a network name. */
export const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/** One plugin: an object naming the binary to run. */
export const PluginSchema = v.looseObject({
  type: v.pipe(v.string('"type" must be a string'), v.nonEmpty('"type" must not be empty')),
});
export type Plugin = v.InferOutput<typeof PluginSchema>;

/** A `.conf` or `.json` file: a single plugin, which runtimes treat as a one-plugin list. */
export const ConfSchema = PluginSchema;
export type Conf = Plugin;

/** A `.conflist` file: a named list of plugins run in order. */
export const ConflistSchema = v.looseObject({
  name: v.pipe(v.string('"name" must be a string'), v.nonEmpty('"name" must not be empty')),
  cniVersion: v.optional(v.string('"cniVersion" must be a string')),
  plugins: v.pipe(
    v.array(PluginSchema, '"plugins" must be a list of plugin objects'),
    v.nonEmpty('"plugins" must not be empty'),
  ),
});
export type Conflist = v.InferOutput<typeof ConflistSchema>;

/** The first problem valibot found, as `path: message` ("x" is missing for an absent key). */
export function describeFirstIssue(issues: readonly v.BaseIssue<unknown>[]): string {
  const issue = issues[0]!;
  const path = issue.path?.map((p) => String(p.key)).join(".");
  if (issue.kind === "schema" && issue.received === "undefined" && path) return `"${path}" is missing`;
  return path && !issue.message.startsWith(`"${path}"`) ? `${path}: ${issue.message}` : issue.message;
}
