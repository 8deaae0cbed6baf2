// The plugin's way to a mesh profile: only the configured mesh's code is imported (a Linkerd
// node never loads Istio's rules, nor the other way round). index.ts's profileFor, which holds
// both, is for the agent and the CLI.
import type { PluginConf } from "../config/plugin-config.ts";
import type { MeshProfile } from "./profile.ts";

const loaded = new Map<string, MeshProfile>();

export async function loadProfile(mesh: PluginConf["mesh"]): Promise<MeshProfile | undefined> {
  // Kept once loaded: the agent plans every ADD of its node with the same profile.
  const had = loaded.get(mesh);
  if (had) return had;
  let p: MeshProfile | undefined;
  switch (mesh) {
    case "linkerd":
      p = (await import("./linkerd/profile.ts")).linkerdProfile;
      break;
    case "istio":
      p = (await import("./istio/profile.ts")).istioProfile;
      break;
    default:
      return undefined;
  }
  loaded.set(mesh, p);
  return p;
}
