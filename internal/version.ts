// The version compiled into every binary: scripts/build.ts defines MESHCNI_VERSION (the
// package version and the commit). Running from source, it says so. No package.json import:
// the plugin's bundle carries nothing it does not use.
declare const MESHCNI_VERSION: string | undefined;

export const VERSION: string = typeof MESHCNI_VERSION === "string" ? MESHCNI_VERSION : "0.0.0-source";
