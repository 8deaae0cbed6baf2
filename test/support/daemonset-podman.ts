// A rendered DaemonSet's pod, as `podman run` arguments: its container's command, environment
// and security context, and each of its volumes with its mount, translated field by field from
// the rendered object as kubelet and a CRI runtime would set them up. A field this translation
// does not know is an error, so a test built on it follows the manifest: a new mount, capability
// or security setting reaches the container, or the test fails saying which field it cannot
// express. What podman cannot do as the cluster would is said in `notes`.
//
// Where a volume's bytes come from: a hostPath mounted read-only is this machine's own path (the
// node's, as the test wants to probe it); a hostPath mounted read-write is a fresh folder under
// `scratch` (the test never writes this machine's own CNI or agent folders); a configMap is
// written into a folder from the rendered ConfigMap; an emptyDir is a fresh folder; the service
// account's token is the projected folder kubelet adds unless the pod opts out.
import { existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";

type Obj = Record<string, any>;

export interface TranslatedMount {
  volume: string;
  kind: "hostPath" | "configMap" | "emptyDir" | "serviceAccountToken";
  /** The path inside the container. */
  path: string;
  /** The folder or file on this machine that is mounted there. */
  source: string;
  readOnly: boolean;
  /** The hostPath as the manifest names it (hostPath volumes only). */
  hostPath?: string;
}

export interface TranslatedPod {
  /** `podman run` options, before the rootfs and the command. */
  options: string[];
  /** The container's command and args. */
  command: string[];
  mounts: TranslatedMount[];
  notes: string[];
}

export interface TranslateOptions {
  /** Fresh folders (read-write hostPaths, configMaps, emptyDirs, the token) go under it. */
  scratch: string;
  namespace: string;
  nodeName: string;
  /** The rendered ConfigMaps, by name. */
  configMaps: Record<string, Obj>;
  /** Files of the service account folder kubelet projects (token, ca.crt, namespace). */
  serviceAccount: Record<string, string>;
  /** Environment kubelet adds (KUBERNETES_SERVICE_HOST/PORT). */
  extraEnv?: Record<string, string>;
}

const SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

function known(what: string, obj: Obj, keys: string[]): void {
  const stray = Object.keys(obj).filter((k) => !keys.includes(k));
  if (stray.length) throw new Error(`${what}: cannot translate ${stray.join(", ")} to podman`);
}

/**
 * kubelet's hostPath type check. DirectoryOrCreate makes a missing folder as kubelet would (an
 * empty folder, 0755); a missing file is this machine's to have, never made by a test.
 */
function checkHostPathType(path: string, type: string | undefined): void {
  const st = statSync(path, { throwIfNoEntry: false });
  switch (type ?? "") {
    case "":
      return;
    case "Directory":
    case "DirectoryOrCreate":
      if (!st && type === "DirectoryOrCreate") {
        mkdirSync(path, { recursive: true, mode: 0o755 });
        return;
      }
      if (!st?.isDirectory()) throw new Error(`hostPath ${path} (${type}): not a folder on this machine`);
      return;
    case "File":
    case "FileOrCreate":
      // This machine's own files are never created by a test; a missing one is the machine's.
      if (!st?.isFile()) throw new Error(`hostPath ${path} (${type}): not a file on this machine`);
      return;
    case "Socket":
      if (!st?.isSocket()) throw new Error(`hostPath ${path} (Socket): not a socket on this machine`);
      return;
    default:
      throw new Error(`hostPath ${path}: type ${type} is not translated`);
  }
}

export function translatePod(ds: Obj, opts: TranslateOptions): TranslatedPod {
  const pod = ds.spec.template.spec as Obj;
  known("pod spec", pod, [
    "serviceAccountName",
    "automountServiceAccountToken",
    "imagePullSecrets",
    "priorityClassName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "terminationGracePeriodSeconds",
    "securityContext",
    "containers",
    "volumes",
    "hostNetwork",
    "hostPID",
    "hostIPC",
  ]);
  if (pod.containers.length !== 1)
    throw new Error(`the pod has ${pod.containers.length} containers; this translation runs one`);
  const c = pod.containers[0] as Obj;
  known("container", c, [
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "ports",
    "livenessProbe",
    "readinessProbe",
    "resources",
    "securityContext",
    "volumeMounts",
  ]);
  const options: string[] = [];
  const notes: string[] = [];

  // Namespaces: the pod's own network, pid and ipc namespaces unless it asks for the host's.
  // The pod network is not what the tests built on this probe: `none` keeps loopback only.
  options.push("--network", pod.hostNetwork ? "host" : "none");
  if (pod.hostPID) options.push("--pid", "host");
  if (pod.hostIPC) options.push("--ipc", "host");
  if (!pod.hostNetwork)
    notes.push("pod network: a private network namespace with loopback only (podman --network none)");

  // The security context: the pod's, then the container's over it.
  const psc = (pod.securityContext ?? {}) as Obj;
  known("pod securityContext", psc, ["seccompProfile", "runAsUser", "runAsGroup", "runAsNonRoot"]);
  const sc = { ...psc, ...(c.securityContext ?? {}) } as Obj;
  known("container securityContext", sc, [
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "privileged",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "capabilities",
    "seccompProfile",
  ]);
  if (sc.runAsUser !== undefined) options.push("--user", `${sc.runAsUser}:${sc.runAsGroup ?? 0}`);
  else if (sc.runAsGroup !== undefined)
    throw new Error("runAsGroup without runAsUser: the image's user is not known here");
  if (sc.runAsNonRoot === true && sc.runAsUser === 0)
    throw new Error("runAsNonRoot with runAsUser 0: kubelet refuses to start it");
  if (sc.privileged === true) options.push("--privileged");
  if (sc.allowPrivilegeEscalation === false) options.push("--security-opt", "no-new-privileges");
  // A read-only root and nothing else: podman's --read-only adds tmpfs folders kubelet does not.
  if (sc.readOnlyRootFilesystem === true) options.push("--read-only", "--read-only-tmpfs=false");
  const caps = (sc.capabilities ?? {}) as Obj;
  known("capabilities", caps, ["drop", "add"]);
  for (const d of caps.drop ?? []) options.push(`--cap-drop=${String(d).toLowerCase()}`);
  for (const a of caps.add ?? []) options.push(`--cap-add=${String(a).toLowerCase()}`);
  if (!(caps.drop ?? []).includes("ALL"))
    throw new Error("capabilities not dropped with ALL: podman's default set is not the CRI runtime's");
  const seccomp = sc.seccompProfile?.type as string | undefined;
  // RuntimeDefault: podman's own default profile (containers' seccomp.json), which it applies
  // unless told otherwise; Unconfined: none.
  if (seccomp === "Unconfined" || seccomp === undefined) options.push("--security-opt", "seccomp=unconfined");
  else if (seccomp !== "RuntimeDefault") throw new Error(`seccompProfile ${seccomp} is not translated`);

  // Environment: literal values and the downward API's two fields the DaemonSet uses.
  for (const e of (c.env ?? []) as Obj[]) {
    known(`env ${e.name}`, e, ["name", "value", "valueFrom"]);
    let value: string;
    if (e.valueFrom) {
      const field = e.valueFrom.fieldRef?.fieldPath;
      if (field === "metadata.namespace") value = opts.namespace;
      else if (field === "spec.nodeName") value = opts.nodeName;
      else throw new Error(`env ${e.name}: valueFrom ${JSON.stringify(e.valueFrom)} is not translated`);
    } else value = String(e.value ?? "");
    options.push("--env", `${e.name}=${value}`);
  }
  for (const [k, v] of Object.entries(opts.extraEnv ?? {})) options.push("--env", `${k}=${v}`);

  // Volumes and their mounts.
  const volumes = new Map<string, Obj>(((pod.volumes ?? []) as Obj[]).map((v) => [v.name, v]));
  const mounts: TranslatedMount[] = [];
  const fresh = (name: string) => {
    const dir = join(opts.scratch, "volumes", name);
    mkdirSync(dir, { recursive: true });
    return dir;
  };
  for (const m of (c.volumeMounts ?? []) as Obj[]) {
    known(`volumeMount ${m.name}`, m, ["name", "mountPath", "readOnly", "mountPropagation", "recursiveReadOnly"]);
    const v = volumes.get(m.name);
    if (!v) throw new Error(`volumeMount ${m.name}: no such volume`);
    let readOnly = m.readOnly === true;
    let kind: TranslatedMount["kind"];
    let source: string;
    let hostPath: string | undefined;
    if (v.hostPath) {
      known(`volume ${v.name}`, v, ["name", "hostPath"]);
      known(`volume ${v.name} hostPath`, v.hostPath, ["path", "type"]);
      kind = "hostPath";
      hostPath = v.hostPath.path as string;
      source = readOnly ? hostPath : fresh(v.name);
      checkHostPathType(source, v.hostPath.type);
    } else if (v.configMap) {
      known(`volume ${v.name}`, v, ["name", "configMap"]);
      known(`volume ${v.name} configMap`, v.configMap, ["name"]);
      const cm = opts.configMaps[v.configMap.name];
      if (!cm) throw new Error(`volume ${v.name}: no ConfigMap ${v.configMap.name} rendered`);
      kind = "configMap";
      source = fresh(v.name);
      for (const [k, text] of Object.entries((cm.data ?? {}) as Record<string, string>))
        writeFileSync(join(source, k), text);
      // kubelet mounts a configMap read-only whatever the mount says.
      readOnly = true;
    } else if (v.emptyDir) {
      known(`volume ${v.name}`, v, ["name", "emptyDir"]);
      if (v.emptyDir.medium === "Memory") throw new Error(`volume ${v.name}: emptyDir medium Memory is not translated`);
      kind = "emptyDir";
      source = fresh(v.name);
    } else {
      throw new Error(
        `volume ${v.name}: ${Object.keys(v)
          .filter((k) => k !== "name")
          .join(", ")} is not translated`,
      );
    }
    const mountOptions = [`type=bind`, `source=${source}`, `destination=${m.mountPath}`];
    if (readOnly) mountOptions.push("ro=true");
    const propagation = (m.mountPropagation ?? "None") as string;
    const rro = (m.recursiveReadOnly ?? "Disabled") as string;
    if (rro !== "Disabled") {
      if (!readOnly || propagation !== "None")
        throw new Error(
          `volumeMount ${m.name}: recursiveReadOnly needs readOnly ` +
            `and mountPropagation None (the API server refuses it)`,
        );
      // Neither this podman nor runc 1.1 mounts recursively read-only ("rro"): kubelet then
      // falls back, for IfPossible, to the plain read-only bind; Enabled would not start.
      if (rro === "Enabled")
        throw new Error(
          `volumeMount ${m.name}: recursiveReadOnly Enabled, which this podman cannot do (the pod would not start)`,
        );
      if (rro !== "IfPossible") throw new Error(`volumeMount ${m.name}: recursiveReadOnly ${rro} is not translated`);
      notes.push(`${m.mountPath}: recursiveReadOnly IfPossible, run as its fallback (a read-only bind, not recursive)`);
    }
    if (propagation === "HostToContainer") mountOptions.push("bind-propagation=rslave");
    else if (propagation === "Bidirectional") mountOptions.push("bind-propagation=rshared");
    else if (propagation === "None") mountOptions.push("bind-propagation=rprivate");
    else throw new Error(`volumeMount ${m.name}: mountPropagation ${propagation} is not translated`);
    options.push("--mount", mountOptions.join(","));
    mounts.push({ volume: v.name, kind, path: m.mountPath, source, readOnly, ...(hostPath ? { hostPath } : {}) });
  }
  // kubelet's projected service account folder, unless the pod opts out.
  if (pod.automountServiceAccountToken !== false) {
    const dir = fresh("kube-api-access");
    for (const [k, text] of Object.entries(opts.serviceAccount)) writeFileSync(join(dir, k), text);
    options.push("--mount", `type=bind,source=${dir},destination=${SA_DIR},ro=true`);
    mounts.push({ volume: "kube-api-access", kind: "serviceAccountToken", path: SA_DIR, source: dir, readOnly: true });
  }
  if (!existsSync(opts.scratch)) throw new Error(`no folder ${opts.scratch}`);
  return { options, command: [...(c.command ?? []), ...(c.args ?? [])], mounts, notes };
}

/** One line of /proc/<pid>/mountinfo. */
export interface MountInfo {
  dev: string;
  /** The path inside its file system that is mounted here. */
  root: string;
  mountPoint: string;
  options: string[];
  fsType: string;
  source: string;
  superOptions: string[];
}

/** Parses mountinfo (octal escapes such as \040 decoded). */
export function parseMountInfo(text: string): MountInfo[] {
  const decode = (s: string) => s.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8)));
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((line) => {
      const [left, right] = line.split(" - ");
      const f = left!.split(" ");
      const r = right!.split(" ");
      return {
        dev: f[2]!,
        root: decode(f[3]!),
        mountPoint: decode(f[4]!),
        options: f[5]!.split(","),
        fsType: r[0]!,
        source: decode(r[1]!),
        superOptions: (r[2] ?? "").split(","),
      };
    });
}

/** Writable as mounted: read-write both at the mount and in its file system. */
export const isWritable = (m: MountInfo) => m.options.includes("rw") && !m.superOptions.includes("ro");

/**
 * Where a container's mount comes from on this machine: "private" when the host mounts its file
 * system nowhere (one of the container's own: its /dev tmpfs, devpts, mqueue, proc); else the
 * path in the host's mount of that file system whose root holds it, or "unknown" when the host
 * mounts that file system only elsewhere in it.
 */
export function hostPathOf(m: MountInfo, host: MountInfo[]): string | "private" | "unknown" {
  const within = (root: string, path: string) => root === "/" || path === root || path.startsWith(`${root}/`);
  const same = host.filter((x) => x.dev === m.dev);
  if (same.length === 0) return "private";
  const h = same.filter((x) => within(x.root, m.root)).sort((a, b) => b.root.length - a.root.length)[0];
  if (!h) return "unknown";
  const rest = h.root === "/" ? m.root : m.root.slice(h.root.length);
  return `${h.mountPoint.replace(/\/$/, "")}${rest === "/" ? "" : rest}` || "/";
}
