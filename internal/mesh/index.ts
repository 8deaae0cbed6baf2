import type { PluginConf } from "../config/plugin-config.ts";
import { linkerdProfile } from "./linkerd.ts";
import type { MeshProfile } from "./profile.ts";

const PROFILES: Partial<Record<PluginConf["mesh"], MeshProfile>> = {
  linkerd: linkerdProfile,
};

export function profileFor(conf: PluginConf): MeshProfile | undefined {
  return PROFILES[conf.mesh];
}
