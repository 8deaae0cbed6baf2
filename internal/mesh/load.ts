// The plugin's way to a mesh profile: only the configured mesh's code is imported (a Linkerd
// node never loads Istio's rules, nor the other way round). index.ts's profileFor, which holds
// both, is for the agent and the CLI.
import type { PluginConf } from "../config/plugin-config.ts";
import type { MeshProfile } from "./profile.ts";

export async function loadProfile(mesh: PluginConf["mesh"]): Promise<MeshProfile | undefined> {
  switch (mesh) {
    case "linkerd":
      return (await import("./linkerd.ts")).linkerdProfile;
    case "istio":
      return (await import("./istio.ts")).istioProfile;
    default:
      return undefined;
  }
}
