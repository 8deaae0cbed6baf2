// `meshcnictl check`, the mesh's side: meshcni replaces the mesh's own init container only when
// the mesh injects pods for CNI mode. Linkerd says so in the `values` YAML of ConfigMap
// linkerd/linkerd-config (`cniEnabled`); Istio in the `values` JSON of ConfigMap
// istio-system/istio-sidecar-injector (`istio_cni.enabled`). Judging is pure.
import { parse as parseYaml } from "yaml";
import type { PluginConf } from "../../config/plugin-config.ts";
import { MESH_INIT } from "./pods.ts";
import type { CheckResult } from "./result.ts";
import type { HttpAnswer } from "../context.ts";

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

export interface MeshConfigSource {
  namespace: string;
  configMap: string;
  key: string;
}

export const MESH_CONFIG: Record<PluginConf["mesh"], MeshConfigSource> = {
  linkerd: { namespace: "linkerd", configMap: "linkerd-config", key: "values" },
  istio: { namespace: "istio-system", configMap: "istio-sidecar-injector", key: "values" },
};

export function meshConfigPath(mesh: PluginConf["mesh"]): string {
  const s = MESH_CONFIG[mesh];
  return `/api/v1/namespaces/${s.namespace}/configmaps/${s.configMap}`;
}

const HINTS: Record<PluginConf["mesh"], { on: string; setting: string; name: string }> = {
  linkerd: {
    name: "Linkerd",
    setting: "cniEnabled",
    on:
      "install (or upgrade) Linkerd's control plane with --linkerd-cni-enabled (Helm: " +
      "--set cniEnabled=true), then restart the meshed workloads",
  },
  istio: {
    name: "Istio",
    setting: "istio_cni.enabled",
    on:
      "install (or upgrade) Istio with its CNI mode on (istioctl install " +
      "--set components.cni.enabled=true), then restart the meshed workloads",
  },
};

/**
 * Whether the mesh injects pods for CNI mode, from its ConfigMap as the API server answered.
 * `cniMode` is undefined when the answer does not say.
 */
export function judgeMeshConfig(
  mesh: PluginConf["mesh"],
  a: HttpAnswer,
): { result: CheckResult; cniMode: boolean | undefined } {
  const src = MESH_CONFIG[mesh];
  const h = HINTS[mesh];
  const init = MESH_INIT[mesh];
  const where = `ConfigMap ${src.namespace}/${src.configMap}`;
  const base = { category: "mesh", name: `${h.name} injects pods for CNI mode` };
  if (a.status === 404) {
    return {
      result: {
        ...base,
        ok: false,
        warning: true,
        detail: `no ${where}: ${h.name}'s control plane is not installed here (or not in namespace ${src.namespace})`,
        hint: h.on.replace(/, then restart the meshed workloads$/, ""),
      },
      cniMode: undefined,
    };
  }
  if (a.status !== 200) {
    return {
      result: {
        ...base,
        ok: false,
        warning: true,
        detail: `cannot read ${where}: ${a.status ? `${a.status} ${a.body.slice(0, 200)}` : a.body}`,
      },
      cniMode: undefined,
    };
  }
  let values: unknown;
  try {
    const cm = JSON.parse(a.body) as Json;
    const text = isObj(cm.data) ? cm.data[src.key] : undefined;
    if (typeof text !== "string") throw new Error(`it has no ${src.key} key`);
    values = mesh === "linkerd" ? parseYaml(text) : JSON.parse(text);
  } catch (e) {
    return {
      result: { ...base, ok: false, warning: true, detail: `cannot read ${where}: ${(e as Error).message}` },
      cniMode: undefined,
    };
  }
  const flag =
    mesh === "linkerd"
      ? isObj(values)
        ? values.cniEnabled
        : undefined
      : isObj(values) && isObj(values.istio_cni)
        ? values.istio_cni.enabled
        : undefined;
  if (flag === true) return { result: { ...base, ok: true, detail: `${h.setting}: true in ${where}` }, cniMode: true };
  return {
    result: {
      ...base,
      ok: false,
      detail:
        `${h.setting} is ${flag === undefined ? "not set" : JSON.stringify(flag)} ` +
        `in ${where}: ${h.name} still injects ${init} into every meshed pod, ` +
        `which sets the pod's rules itself (with NET_ADMIN), and meshcni passes such pods over`,
      hint: h.on,
    },
    cniMode: false,
  };
}

/** One warning per running pod that still carries the mesh's init container. */
export function judgeInitContainers(mesh: PluginConf["mesh"], list: unknown): CheckResult[] {
  const init = MESH_INIT[mesh];
  const items = isObj(list) && Array.isArray(list.items) ? list.items.filter(isObj) : [];
  const out: CheckResult[] = [];
  for (const p of items) {
    const meta = isObj(p.metadata) ? p.metadata : {};
    const spec = isObj(p.spec) ? p.spec : {};
    const st = isObj(p.status) ? p.status : {};
    if (st.phase === "Succeeded" || st.phase === "Failed") continue;
    const containers = [spec.initContainers, spec.containers].flatMap((l) => (Array.isArray(l) ? l.filter(isObj) : []));
    if (!containers.some((c) => c.name === init)) continue;
    const ns = String(meta.namespace ?? "default");
    const name = String(meta.name ?? "?");
    out.push({
      category: "mesh",
      name: `pod ${ns}/${name} still carries ${init}`,
      ok: false,
      warning: true,
      pod: { namespace: ns, name, ...(typeof spec.nodeName === "string" ? { node: spec.nodeName } : {}) },
      detail: `${init} sets its rules with NET_ADMIN; meshcni passes the pod over`,
      hint:
        `once ${HINTS[mesh].name} injects for CNI mode, ` +
        `restart its workload (kubectl -n ${ns} rollout restart ...)`,
    });
  }
  if (out.length === 0)
    out.push({
      category: "mesh",
      name: `no pod carries ${init}`,
      ok: true,
      detail: `${items.length} ${items.length === 1 ? "pod" : "pods"}`,
    });
  return out;
}
