// The image digest a release build of meshcnictl carries: scripts/build.ts defines
// MESHCNI_IMAGE_DIGEST (from --image-digest or the environment) when the release knows the
// digest of the image it publishes; install-cni then pins the default image by it. Empty
// otherwise (and running from source).
declare const MESHCNI_IMAGE_DIGEST: string | undefined;

export const RELEASE_IMAGE_DIGEST: string = typeof MESHCNI_IMAGE_DIGEST === "string" ? MESHCNI_IMAGE_DIGEST : "";
