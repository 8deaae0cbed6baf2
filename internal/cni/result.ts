import { CniError } from "./errors.ts";
import { Code, compareVersions, type CniVersion, isSupportedVersion, SUPPORTED_VERSIONS } from "./spec.ts";

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Converts a previous plugin's result to the request's version. A chained plugin must hand the
 * result on; meshcni changes only what the versions disagree on: `cniVersion`, and `ips[].version`
 * (present up to 0.4.0, gone from 1.0.0). Every other key is kept as the previous plugin wrote it.
 */
export function convertResult(prev: Json, to: CniVersion): Json {
  const from = typeof prev.cniVersion === "string" ? prev.cniVersion : to;
  // A version meshcni speaks is 0.3.0 or later: compared only when it is another.
  if ((!isSupportedVersion(from) && compareVersions(from, "0.3.0") < 0) || "ip4" in prev || "ip6" in prev) {
    throw new CniError(
      Code.IncompatibleVersion,
      "cannot convert prevResult",
      `prevResult of version ${from} predates 0.3.0; chain meshcni after plugins that speak 0.3.0 or later`,
    );
  }
  const out: Json = { ...prev, cniVersion: to };
  if (prev.ips !== undefined) {
    if (!Array.isArray(prev.ips)) {
      throw new CniError(Code.InvalidConfig, "invalid prevResult", "ips must be a list");
    }
    // Every supported version before 1.0.0 is a 0.x.
    const legacy = to.startsWith("0.");
    // A loop, not map: the plugin converts on its hot path, where each callback builtin costs
    // its first-use compile.
    const ips: Json[] = [];
    for (let i = 0; i < prev.ips.length; i++) {
      const ip: unknown = prev.ips[i];
      if (!isObject(ip) || typeof ip.address !== "string") {
        throw new CniError(Code.InvalidConfig, "invalid prevResult", `ips[${i}].address must be a string`);
      }
      const { version: _drop, ...rest } = ip;
      ips.push(legacy ? { version: ip.address.includes(":") ? "6" : "4", ...rest } : rest);
    }
    out.ips = ips;
  }
  return out;
}

/** ADD's stdout: `prev` converted to the request's version, or the empty result without one. */
export function renderAddResult(prev: Json | undefined, to: CniVersion): string {
  return `${JSON.stringify(prev ? convertResult(prev, to) : emptyResult(to), null, 2)}\n`;
}

/**
 * ADD's stdout from the request's config as parsed JSON, without the schema: what the plugin
 * prints for an ADD the node agent decided (internal/plugin/agent/add.ts), whatever the agent's
 * answer says. Throws the CniError the plugin's own run would answer for a version or a
 * prevResult it cannot convert.
 */
export function renderAddResultOf(conf: Json): string {
  const version = conf.cniVersion ?? "0.1.0";
  if (!isSupportedVersion(version)) {
    throw new CniError(
      Code.IncompatibleVersion,
      "incompatible CNI versions",
      `config is ${JSON.stringify(version)}, meshcni supports ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }
  const prev = conf.prevResult;
  if (prev === undefined) return renderAddResult(undefined, version);
  if (!isObject(prev) || (prev.cniVersion !== undefined && typeof prev.cniVersion !== "string")) {
    throw new CniError(
      Code.InvalidConfig,
      "invalid meshcni configuration",
      "prevResult must be a JSON object whose cniVersion is a string",
    );
  }
  return renderAddResult(prev, version);
}

/** The result a plugin without a previous result answers with. */
export function emptyResult(version: CniVersion): Json {
  return { cniVersion: version, dns: {} };
}

/** The pod's addresses in prevResult (without prefix length), used to tell IPv6 pods. */
export function resultAddresses(prev: Json | undefined): string[] {
  if (!prev || !Array.isArray(prev.ips)) return [];
  return prev.ips.flatMap((ip) => (isObject(ip) && typeof ip.address === "string" ? [ip.address.split("/")[0]!] : []));
}
