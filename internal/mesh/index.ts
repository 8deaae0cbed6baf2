import type { PluginConf } from "../config/plugin-config.ts";
import { istioProfile } from "./istio/profile.ts";
import { linkerdProfile } from "./linkerd/profile.ts";
import type { MeshProfile } from "./profile.ts";

const PROFILES: Partial<Record<PluginConf["mesh"], MeshProfile>> = {
  linkerd: linkerdProfile,
  istio: istioProfile,
};

export function profileFor(conf: PluginConf): MeshProfile | undefined {
  return PROFILES[conf.mesh];
}
