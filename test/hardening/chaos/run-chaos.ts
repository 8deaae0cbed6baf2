// Installer chaos: a simulated primary CNI rewrites, replaces, deletes and corrupts its config
// files in random order (seeded), while dist/meshcni-installer runs and is stopped with SIGTERM or
// killed with kill -9 at random moments and started again. A separate observer process reads the
// folder on every inotify event and in a tight loop, so that "at every instant" is checked:
// - every config file ever seen is valid JSON or exactly (or, for the CNI's own in-place writes, a
//   prefix of) what the simulated CNI wrote;
// - every list the agent wrote holds exactly one meshcni entry, at its end, and otherwise
//   exactly the plugins the CNI wrote (no plugin of the primary CNI is ever lost);
// - whenever the agent has settled, the runtime's config is chained and no other file is;
// - after every SIGTERM, and at the end, each file equals what the CNI last wrote, byte for byte.
// The stand-in API server holds no DaemonSet for the agent, so each SIGTERM undoes, as when
// meshcni is removed from the cluster.
import {
  closeSync,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { ensureBuilt, type InstallerProcess, startCluster, startInstaller } from "../../agent/harness.ts";
import { repoPath } from "../../support/golden.ts";
import { jsonEqual } from "../fuzz/expect.ts";
import { createRng, type Rng } from "../fuzz/prng.ts";

export interface ChaosOptions {
  seed: number;
  ops: number;
  onProgress?: (done: number) => void;
}

export interface ChaosReport {
  seed: number;
  ops: number;
  counts: Record<string, number>;
  settleChecks: number;
  undoChecks: number;
  observed: { files: number; contents: number; samples: number; tornWhileWriting: number };
  violations: string[];
  ms: number;
}

type Json = Record<string, any>;
const BUN = repoPath("node_modules/.bin/bun");
const CONFIG = /\.(conf|conflist|json)$/;
/** The simulated CNI's file names (byte order: 05-cilium < 10-calico < 10-flannel < 20-extra). */
const NAMES = ["05-cilium.conflist", "10-calico.conflist", "10-flannel.conf", "20-extra.conflist"];
const MESHCNI = "meshcni";
/** The agent backs off after 40 re-chains of one file in 5 s; the CNI stays below that. */
const MAX_REWRITES_PER_5S = 30;

function parse(text: string): Json | undefined {
  try {
    const v = JSON.parse(text);
    return v && typeof v === "object" && !Array.isArray(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Whether a runtime would use the file (a list with a name and typed plugins, or one typed plugin). */
function usable(name: string, text: string): boolean {
  const doc = parse(text);
  if (!doc) return false;
  const typed = (p: unknown) =>
    !!p &&
    typeof p === "object" &&
    !Array.isArray(p) &&
    typeof (p as Json).type === "string" &&
    (p as Json).type !== "";
  if (name.endsWith(".conflist")) {
    return (
      typeof doc.name === "string" &&
      doc.name !== "" &&
      Array.isArray(doc.plugins) &&
      doc.plugins.length > 0 &&
      doc.plugins.every(typed)
    );
  }
  return typed(doc);
}

const meshcniCount = (doc: Json) =>
  Array.isArray(doc.plugins)
    ? doc.plugins.filter((p: Json) => p?.type === MESHCNI).length
    : doc.type === MESHCNI
      ? 1
      : 0;
const withoutMeshcni = (doc: Json) => ({ ...doc, plugins: doc.plugins.filter((p: Json) => p?.type !== MESHCNI) });
const listNameOf = (conf: string) => conf.replace(/\.(conf|json)$/, ".conflist");

/** The primary CNI: writes its files and remembers everything it wrote. */
class SimulatedCni {
  /** Last content written per file; null after the CNI deleted it. */
  readonly files = new Map<string, string | null>();
  readonly written = new Map<string, Set<string>>();
  readonly inPlace = new Set<string>();
  /** When the CNI was writing each file in place (epoch ms): readers may see anything then. */
  readonly inPlaceWindows = new Map<string, [number, number][]>();
  /** What happened, newest last (for reports). */
  readonly history: string[] = [];
  private rewrites: number[] = [];
  constructor(
    private readonly dir: string,
    private readonly rng: Rng,
  ) {}

  write(name: string, content: string, inPlace: boolean): void {
    if (!this.written.has(name)) this.written.set(name, new Set());
    this.written.get(name)!.add(content);
    if (inPlace) {
      // As `cp` or a shell redirection writes: truncate, then write (readers may see it empty).
      this.inPlace.add(name);
      const t0 = performance.timeOrigin + performance.now();
      const fd = openSync(join(this.dir, name), "w");
      try {
        writeSync(fd, content);
      } finally {
        closeSync(fd);
      }
      const windows = this.inPlaceWindows.get(name) ?? [];
      windows.push([t0, performance.timeOrigin + performance.now()]);
      this.inPlaceWindows.set(name, windows);
    } else {
      const tmp = join(this.dir, `.${name}.${this.rng.int(1e9)}.cni-tmp`);
      writeFileSync(tmp, content);
      renameSync(tmp, join(this.dir, name));
    }
    this.files.set(name, content);
    this.rewrites.push(performance.now());
    this.history.push(
      `CNI wrote ${name} (${usable(name, content) ? "usable" : "unusable"}${inPlace ? ", in place" : ""})`,
    );
  }

  /** Deletes the file if it is there (a CNI deletes what it sees). */
  remove(name: string): void {
    const path = join(this.dir, name);
    if (!existsSync(path)) return;
    unlinkSync(path);
    this.files.set(name, null);
    this.history.push(`CNI deleted ${name}`);
  }

  /** How long to wait so that the re-chain budget is not exceeded. */
  pause(): number {
    const now = performance.now();
    this.rewrites = this.rewrites.filter((t) => now - t < 5000);
    return this.rewrites.length < MAX_REWRITES_PER_5S ? 0 : 5000 - (now - this.rewrites[0]!) + 10;
  }

  /** The file the runtime uses: the first usable one in byte order of names. */
  choice(): string | undefined {
    const names = [...this.files]
      .filter(([, c]) => c !== null)
      .map(([n]) => n)
      .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    return names.find((n) => usable(n, this.files.get(n)!));
  }
}

/** A new version of one of the CNI's files. */
function content(rng: Rng, name: string): { text: string; valid: boolean } {
  const indent = rng.pick([2, 4, "\t", undefined]);
  const r = rng.next();
  if (r < 0.12) {
    const bad = rng.pick([
      "",
      "{",
      '{"name": "k8s-pod-network", "plugins": [',
      "not json",
      "[]",
      "null",
      name.endsWith(".conflist") ? '{"cniVersion":"1.0.0","name":"x","plugins":[]}' : '{"name":"x"}',
      name.endsWith(".conflist") ? '{"cniVersion":"1.0.0","plugins":[{"type":"calico"}]}' : '{"type":""}',
    ]);
    return { text: bad, valid: false };
  }
  let doc: Json;
  switch (name) {
    case "05-cilium.conflist":
      doc = {
        cniVersion: "0.3.1",
        name: "cilium",
        plugins: [
          { type: "cilium-cni", "enable-debug": rng.chance(0.5), "log-file": "/var/run/cilium/cilium-cni.log" },
        ],
      };
      break;
    case "10-calico.conflist":
      doc = {
        name: "k8s-pod-network",
        cniVersion: rng.pick(["0.3.1", "1.0.0"]),
        plugins: [
          {
            type: "calico",
            log_level: "info",
            datastore_type: "kubernetes",
            nodename: "node-1",
            mtu: rng.pick([0, 1440, 1450, 8981]),
            ipam: { type: "calico-ipam" },
            policy: { type: "k8s" },
          },
          { type: "portmap", snat: true, capabilities: { portMappings: true } },
        ],
      };
      if (rng.chance(0.3)) doc.plugins.push({ type: "bandwidth", capabilities: { bandwidth: true } });
      break;
    case "10-flannel.conf":
      doc = { name: "cbr0", type: "flannel", delegate: { hairpinMode: rng.chance(0.5), isDefaultGateway: true } };
      break;
    default:
      doc = {
        cniVersion: "1.0.0",
        name: "extra",
        plugins: [
          { type: "bridge", bridge: `cni${rng.int(10)}`, ipam: { type: "host-local", subnet: "10.88.0.0/16" } },
        ],
      };
  }
  const text = JSON.stringify(doc, null, indent) + (rng.chance(0.5) ? "\n" : "");
  return { text, valid: true };
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  ensureBuilt();
  const started = performance.now();
  const rng = createRng(opts.seed);
  const cluster = await startCluster();
  const dirs = cluster.dirs();
  const cni = new SimulatedCni(dirs.net, rng);
  const counts: Record<string, number> = {};
  const violations: string[] = [];
  const count = (k: string) => (counts[k] = (counts[k] ?? 0) + 1);
  const recent = () => `\n    recent: ${cni.history.slice(-12).join(" | ")}`;
  let settleChecks = 0;
  let undoChecks = 0;
  // A small stand-in for the plugin binary, so that restarts do not copy 100 MB each time.
  const plugin = join(dirs.root, "meshcni-build");
  writeFileSync(plugin, "#!/bin/sh\nexit 0\n", { mode: 0o755 });

  const observedFile = join(dirs.root, "observed.json");
  const observer = Bun.spawn([BUN, join(import.meta.dir, "observer.ts"), dirs.net, observedFile], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = observer.stdout.getReader();
  await reader.read(); // "ready"

  let installer: InstallerProcess | undefined;
  const start = () => {
    installer = startInstaller(dirs, ["--plugin-binary", plugin], cluster.env);
    count("start");
  };

  /** What must hold once the agent has caught up. */
  const settledProblems = (): string[] => {
    const p: string[] = [];
    const choice = cni.choice();
    const target = choice && !choice.endsWith(".conflist") ? listNameOf(choice) : choice;
    const onDisk = readdirSync(dirs.net).filter((n) => CONFIG.test(n));
    for (const n of onDisk) {
      const text = dirs.file(n);
      if (text === undefined) continue;
      const doc = parse(text);
      if (n === target) {
        if (!doc || !Array.isArray(doc.plugins)) {
          p.push(`${n}: the runtime's config is not a list`);
          continue;
        }
        if (meshcniCount(doc) !== 1 || doc.plugins.at(-1)?.type !== MESHCNI)
          p.push(`${n}: ${meshcniCount(doc)} meshcni entries, last is ${doc.plugins.at(-1)?.type}`);
        const theirs = parse(cni.files.get(choice!)!)!;
        const ok =
          choice === target
            ? jsonEqual(withoutMeshcni(doc), theirs)
            : doc.plugins.length === 2 && jsonEqual(doc.plugins[0], (({ cniVersion: _v, ...rest }) => rest)(theirs));
        if (!ok) p.push(`${n}: the CNI's plugins are not exactly there`);
        continue;
      }
      if (doc && meshcniCount(doc) > 0)
        p.push(`${n}: holds a meshcni entry but the runtime uses ${target ?? "nothing"}`);
      if (!cni.files.has(n)) p.push(`${n}: a config file the CNI never wrote`);
      else if (n === choice && target !== choice) p.push(`${n}: not yet turned into ${target}`);
      else if (cni.files.get(n) !== text) p.push(`${n}: not what the CNI last wrote`);
    }
    for (const [n, c] of cni.files) {
      // The runtime's single-plugin file is replaced by its list while meshcni is chained.
      if (c !== null && !(n === choice && target !== choice) && !onDisk.includes(n))
        p.push(`${n}: missing though the CNI wrote it`);
    }
    if (target && !onDisk.includes(target)) p.push(`${target}: the runtime's config is missing`);
    return p;
  };

  const waitSettled = async (why: string) => {
    settleChecks++;
    const deadline = performance.now() + 8000;
    let p: string[] = [];
    while (performance.now() < deadline) {
      p = settledProblems();
      if (p.length === 0) return;
      await Bun.sleep(5);
    }
    violations.push(
      `not settled 8 s after ${why}: ${p.join("; ")}${recent()}\n${installer?.log().split("\n").slice(-8).join("\n")}`,
    );
  };

  /** After a clean stop: each file is what the CNI last wrote, and nothing of meshcni is left. */
  const checkUndone = (why: string) => {
    undoChecks++;
    for (const [n, c] of cni.files) {
      const text = dirs.file(n);
      if (c === null ? text !== undefined : text !== c)
        violations.push(
          `after ${why}: ${n} is ${text === undefined ? "missing" : "not what the CNI last wrote"}${recent()}`,
        );
    }
    for (const n of readdirSync(dirs.net)) {
      if (!cni.files.has(n)) violations.push(`after ${why}: ${n} is left in the config folder`);
    }
    if (readdirSync(dirs.bin).length > 0)
      violations.push(`after ${why}: the bin folder holds ${readdirSync(dirs.bin).join(", ")}`);
  };

  const rewrite = (name: string) => {
    const { text } = content(rng, name);
    cni.write(name, text, rng.chance(0.3));
  };

  try {
    let first = content(rng, "10-calico.conflist");
    while (!first.valid) first = content(rng, "10-calico.conflist");
    cni.write("10-calico.conflist", first.text, false);
    start();
    await waitSettled("the first start");
    for (let i = 0; i < opts.ops; i++) {
      const wait = cni.pause();
      if (wait > 0) {
        count("pause for the re-chain budget");
        await Bun.sleep(wait);
      }
      const r = rng.next();
      const primary = cni.choice() ?? rng.pick(NAMES);
      if (r < 0.4) {
        count("rewrite the runtime's config");
        rewrite(primary);
      } else if (r < 0.52) {
        count("write another file");
        rewrite(rng.pick(NAMES));
      } else if (r < 0.6) {
        // Lists only: a single-plugin file that meshcni turned into a list is already gone, so
        // deleting it cannot withdraw the list (state alone cannot tell that delete from none).
        count("delete a file");
        cni.remove(rng.pick(NAMES.filter((n) => n.endsWith(".conflist"))));
      } else if (r < 0.68) {
        count("burst of rewrites");
        for (let k = rng.range(3, 10); k > 0; k--) rewrite(rng.chance(0.7) ? primary : rng.pick(NAMES));
      } else if (r < 0.8) {
        count("settle and check");
        await waitSettled(`op ${i}`);
      } else if (r < 0.9) {
        count("SIGTERM");
        await Bun.sleep(rng.int(30));
        // Only once the agent is up: a signal before its handlers exist is the runtime's default.
        await installer!.waitForLog(/meshcni-installer .*:/, 5000).catch(() => undefined);
        const code = await installer!.stop("SIGTERM");
        if (code !== 0) violations.push(`SIGTERM at op ${i}: exit code ${code}\n${installer!.log().slice(-2000)}`);
        checkUndone(`SIGTERM at op ${i}`);
        cni.history.push("SIGTERM, restart");
        start();
      } else {
        count("kill -9");
        await Bun.sleep(rng.int(40));
        await installer!.stop("SIGKILL");
        cni.history.push("kill -9, restart");
        start();
      }
      if (rng.chance(0.6)) await Bun.sleep(rng.int(20));
      opts.onProgress?.(i + 1);
    }
    await waitSettled("the last operation");
    await installer!.waitForLog(/meshcni-installer .*:/, 5000).catch(() => undefined);
    const code = await installer!.stop("SIGTERM");
    if (code !== 0) violations.push(`final SIGTERM: exit code ${code}`);
    checkUndone("the final SIGTERM");
  } finally {
    await installer?.stop("SIGKILL");
    observer.stdin.end();
    await observer.exited;
    await cluster.close();
  }

  // Everything the observer saw.
  const observed = JSON.parse(readFileSync(observedFile, "utf8")) as {
    samples: number;
    seen: Record<string, Record<string, [number, number][]>>;
  };
  let contents = 0;
  let tornWhileWriting = 0;
  /** Seen only while the CNI itself was rewriting the file in place (a torn read of its own write). */
  const duringOwnWrite = (name: string, episodes: [number, number][]) =>
    episodes.every(([first, last]) =>
      (cni.inPlaceWindows.get(name) ?? []).some(([a, b]) => first >= a - 2 && last <= b + 2),
    );
  for (const [name, texts] of Object.entries(observed.seen)) {
    for (const [text, when] of Object.entries(texts)) {
      contents++;
      const mine = cni.written.get(name);
      if (mine?.has(text)) continue;
      if (duringOwnWrite(name, when)) {
        tornWhileWriting++;
        continue;
      }
      const doc = parse(text);
      if (!doc) {
        const closest = Math.max(
          0,
          ...[...(mine ?? [])].map((w) => {
            let k = 0;
            while (k < w.length && w[k] === text[k]) k++;
            return k;
          }),
        );
        violations.push(
          `${name} was seen torn or invalid, and the CNI never wrote that (${text.length} chars, ` +
            `${closest} in common with a CNI write${cni.inPlace.has(name) ? "" : "; never written in place"}): ` +
            `${JSON.stringify(text.slice(0, 200))}…${JSON.stringify(text.slice(-80))}`,
        );
        continue;
      }
      if (!Array.isArray(doc.plugins)) {
        violations.push(`${name} was seen as something the CNI never wrote: ${JSON.stringify(text.slice(0, 200))}`);
        continue;
      }
      const n = meshcniCount(doc);
      if (n > 1) violations.push(`${name} was seen with ${n} meshcni entries`);
      if (n === 1 && doc.plugins.at(-1)?.type !== MESHCNI)
        violations.push(`${name} was seen with meshcni not at the end`);
      const rest = withoutMeshcni(doc);
      const versions = [...(mine ?? [])].map(parse).filter((d): d is Json => !!d);
      const conf = NAMES.find((c) => !c.endsWith(".conflist") && listNameOf(c) === name);
      const confVersions = conf ? [...(cni.written.get(conf) ?? [])].map(parse).filter((d): d is Json => !!d) : [];
      const kept =
        versions.some((v) => jsonEqual(rest, v)) ||
        confVersions.some(
          (v) => rest.plugins.length === 1 && jsonEqual(rest.plugins[0], (({ cniVersion: _c, ...p }) => p)(v)),
        );
      if (!kept)
        violations.push(`${name} was seen without plugins the CNI wrote: ${JSON.stringify(text.slice(0, 300))}`);
    }
  }
  dirs.cleanup();
  return {
    seed: opts.seed,
    ops: opts.ops,
    counts,
    settleChecks,
    undoChecks,
    observed: { files: Object.keys(observed.seen).length, contents, samples: observed.samples, tornWhileWriting },
    violations,
    ms: performance.now() - started,
  };
}

export function renderChaosSummary(r: ChaosReport): string {
  return [
    `seed ${r.seed}: ${r.ops} operations in ${(r.ms / 1000).toFixed(1)} s`,
    `operations: ${Object.entries(r.counts)
      .map(([k, n]) => `${k} ${n}`)
      .join(", ")}`,
    `checks: ${r.settleChecks} settled states, ${r.undoChecks} undos; ` +
      `the observer took ${r.observed.samples} samples and saw ${r.observed.contents} ` +
      `distinct contents of ${r.observed.files} files (${r.observed.tornWhileWriting} ` +
      `torn reads while the CNI itself rewrote a file in place)`,
    `violations: ${r.violations.length}`,
    ...r.violations.slice(0, 20).map((v) => `  - ${v}`),
  ].join("\n");
}
