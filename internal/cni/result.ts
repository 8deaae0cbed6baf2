import { CniError } from "./errors.ts";
import { Code, compareVersions, type CniVersion } from "./spec.ts";

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The IP family of an address in CIDR or plain form: "4" or "6". */
function ipFamily(address: string): "4" | "6" {
  return address.includes(":") ? "6" : "4";
}

/**
 * Converts a previous plugin's result to the request's version. A chained plugin must hand the
 * result on; meshcni changes only what the versions disagree on: `cniVersion`, and `ips[].version`
 * (present up to 0.4.0, gone from 1.0.0). Every other key is kept as the previous plugin wrote it.
 */
export function convertResult(prev: Json, to: CniVersion): Json {
  const from = typeof prev.cniVersion === "string" ? prev.cniVersion : to;
  if (compareVersions(from, "0.3.0") < 0 || "ip4" in prev || "ip6" in prev) {
    throw new CniError(Code.IncompatibleVersion, "cannot convert prevResult",
      `prevResult of version ${from} predates 0.3.0; chain meshcni after plugins that speak 0.3.0 or later`);
  }
  const out: Json = { ...prev, cniVersion: to };
  if (prev.ips !== undefined) {
    if (!Array.isArray(prev.ips)) {
      throw new CniError(Code.InvalidConfig, "invalid prevResult", "ips must be a list");
    }
    const legacy = compareVersions(to, "1.0.0") < 0;
    out.ips = prev.ips.map((ip, i) => {
      if (!isObject(ip) || typeof ip.address !== "string") {
        throw new CniError(Code.InvalidConfig, "invalid prevResult", `ips[${i}].address must be a string`);
      }
      const { version: _drop, ...rest } = ip;
      return legacy ? { version: ipFamily(ip.address), ...rest } : rest;
    });
  }
  return out;
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
