// The version compiled into every binary (scripts/build.ts defines MESHCNI_VERSION); when
// running from source it is the package version.
import pkg from "../package.json" with { type: "json" };

declare const MESHCNI_VERSION: string | undefined;

export const VERSION: string = typeof MESHCNI_VERSION === "string" ? MESHCNI_VERSION : `${pkg.version}-dev`;
