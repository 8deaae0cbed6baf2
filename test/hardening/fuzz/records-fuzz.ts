// Records under ADD, CHECK, DEL and GC: seeded sequences of commands for generated containers
// (hostile container IDs: up to the plugin's 256 characters, every allowed character, IDs that
// collide after case folding, separator folding or truncation, several sandboxes of one pod) run
// by the compiled plugin (dist/meshcni) both ways: with the node agent planning its ADDs (a
// stand-in agent: the real socket server, handler and planner, test/support/agent.ts) and alone
// (no agent at its socket). Rules are really applied, each container in a network namespace of
// its own; the records are read back from real state folders after every command.
//
// Invariants: after a successful ADD exactly one record names the container, and it names the
// pod; a failed ADD leaves none; DEL removes it and a second DEL succeeds with none; GC with
// cni.dev/valid-attachments keeps exactly the listed containers' records; nothing is written
// outside the state folder (no temp file left in it either); both ways end every command with the
// same exit code and the same records.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RECORDS_SUBDIR } from "../../../internal/wire/state.ts";
import { type ApiServer, startApiServer } from "../../support/apiserver.ts";
import { type StandInAgent, startStandInAgent } from "../../support/agent.ts";
import { Netns, uniq } from "../../support/netns.ts";
import { PLUGIN } from "../../support/plugin-run.ts";
import { caseSeed, createRng, type Rng } from "./prng.ts";

const NS = "emojivoto";
const ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const ALLOWED = `${ALNUM}_.-`;

export interface Container {
  id: string;
  pod: string;
  /** What an ADD of this container ends in: rules, no rules, or an error code. */
  kind: "meshed" | "plain" | "missing" | "invalid";
}

/**
 * A command as a runtime would send it: ADD of a container not set up (`ok`: it should succeed),
 * CHECK of one set up, DEL (again: with no CNI_NETNS), GC listing some of the containers set up
 * (the others are gone to the runtime and never come back).
 */
export type Op =
  | { op: "ADD"; c: number; ok: boolean }
  | { op: "CHECK"; c: number; live: boolean }
  | { op: "DEL"; c: number; again: boolean }
  | { op: "GC"; keep: number[] };

export interface Sequence {
  seed: number;
  index: number;
  containers: Container[];
  ops: Op[];
  tags: string[];
}

function randomId(rng: Rng, length: number): string {
  let s = rng.pick([...ALNUM]);
  for (let i = 1; i < length; i++) s += rng.pick([...ALLOWED]);
  return s;
}

/** Container IDs that are valid for the plugin, chosen to collide wherever a name could be folded. */
function hostileIds(rng: Rng, tags: string[]): string[] {
  const r = rng.int(7);
  tags.push(`ids-${["hex", "long", "every-char", "case", "separators", "prefix-12", "truncation"][r]}`);
  const hex = () => Array.from({ length: 64 }, () => "0123456789abcdef"[rng.int(16)]).join("");
  if (r === 0) return [hex(), hex(), hex()];
  if (r === 1) return [randomId(rng, rng.pick([236, 250, 251, 255, 256])), randomId(rng, 256), hex()];
  if (r === 2) return [`${ALNUM}_.-`.slice(0, 256), `Z${ALLOWED.split("").reverse().join("")}`, "a", "0"];
  if (r === 3) {
    const base = randomId(rng, rng.range(4, 40)).toLowerCase();
    return [base, base.toUpperCase(), base[0]!.toUpperCase() + base.slice(1)];
  }
  if (r === 4) {
    const a = randomId(rng, 8).replace(/[_.-]/g, "x");
    return [`${a}.b`, `${a}_b`, `${a}-b`, `${a}b`];
  }
  if (r === 5) {
    const p = hex().slice(0, 12);
    return [`${p}0`, `${p}1`, p];
  }
  const p = randomId(rng, 250);
  return [`${p}aaaaaa`, `${p}aaaaab`, `${p}bbbbbb`, p];
}

export function buildSequence(seed: number, index: number, length: number): Sequence {
  const rng = createRng(caseSeed(seed ^ 0x7ec0d5, index));
  const tags: string[] = [];
  // One sandbox per ID (a folding that leaves an ID as it is gives the same ID twice).
  const ids = [...new Set(hostileIds(rng, tags))];
  const pods = ["web-1", "web-2", "plain-1", "missing-1", "bad-1"];
  // Several sandboxes of one pod: containers share pods.
  const containers: Container[] = ids.map((id) => {
    const pod = rng.chance(0.5) ? "web-1" : rng.pick(pods);
    const kind = pod.startsWith("web")
      ? "meshed"
      : pod === "plain-1"
        ? "plain"
        : pod === "missing-1"
          ? "missing"
          : "invalid";
    return { id, pod, kind };
  });
  if (new Set(containers.map((c) => c.pod)).size < containers.length) tags.push("shared-pod");
  const ops: Op[] = [];
  const state = containers.map(() => "new" as "new" | "live" | "deleted" | "gone");
  for (let i = 0; i < length; i++) {
    const r = rng.next();
    const c = rng.int(containers.length);
    const k = containers[c]!.kind;
    if (r < 0.45 && (state[c] === "new" || state[c] === "deleted")) {
      const ok = k === "meshed" || k === "plain";
      ops.push({ op: "ADD", c, ok });
      if (ok) state[c] = "live";
    } else if (r < 0.6 && state[c] !== "gone") ops.push({ op: "CHECK", c, live: state[c] === "live" });
    else if (r < 0.88 || state[c] === "gone") {
      ops.push({ op: "DEL", c, again: state[c] === "deleted" || state[c] === "gone" });
      if (state[c] !== "gone") state[c] = "deleted";
    } else {
      const keep = containers.map((_, j) => j).filter((j) => state[j] === "live" && rng.chance(0.6));
      for (let j = 0; j < containers.length; j++) if (state[j] === "live" && !keep.includes(j)) state[j] = "gone";
      ops.push({ op: "GC", keep });
    }
  }
  return { seed, index, containers, ops, tags };
}

function pod(name: string): Record<string, unknown> {
  const meshed = name.startsWith("web");
  const annotations: Record<string, string> = meshed ? { "linkerd.io/inject": "enabled" } : {};
  if (name === "bad-1")
    Object.assign(annotations, { "linkerd.io/inject": "enabled", "config.linkerd.io/skip-outbound-ports": "99999" });
  const containers = [{ name: "app", image: "app:1" }];
  if (meshed || name === "bad-1") containers.push({ name: "linkerd-proxy", image: "proxy:1" });
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, uid: `uid-${name}`, annotations },
    spec: { nodeName: "node-a", containers },
  };
}

export interface RecordsFailure {
  seed: number;
  index: number;
  step: number;
  way: "agent" | "alone" | "both";
  tags: string[];
  problems: string[];
}

export interface RecordsReport {
  seed: number;
  sequences: number;
  commands: number;
  /** "agent ADD 0", "alone DEL 0", "agent ADD 106", ... */
  outcomes: Map<string, number>;
  failures: RecordsFailure[];
  ms: number;
}

interface Way {
  name: "agent" | "alone";
  state: string;
  socket: string;
  cwd: string;
}

interface RunOut {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RecordsFuzz {
  run(opts: {
    seed: number;
    sequences: number;
    length: number;
    first?: number;
    onSequence?(s: Sequence, failures: number): void;
    maxFailures?: number;
  }): Promise<RecordsReport>;
  close(): Promise<void>;
}

export async function startRecordsFuzz(): Promise<RecordsFuzz> {
  const root = mkdtempSync(join(tmpdir(), "meshcni-records-fuzz-"));
  const api: ApiServer = await startApiServer({ token: "fuzz-token" });
  const kubeconfig = join(root, "kubeconfig");
  await Bun.write(kubeconfig, api.kubeconfig());
  api.objects.set(`/api/v1/namespaces/${NS}`, { apiVersion: "v1", kind: "Namespace", metadata: { name: NS } });
  for (const name of ["web-1", "web-2", "plain-1", "bad-1"])
    api.objects.set(`/api/v1/namespaces/${NS}/pods/${name}`, pod(name));
  const agentState = join(root, "agent-state");
  const agent: StandInAgent = startStandInAgent(api, { dir: agentState });
  const ways: Way[] = [
    { name: "agent", state: agentState, socket: agent.socket, cwd: mkdtempSync(join(root, "cwd-agent-")) },
    {
      name: "alone",
      state: join(root, "alone-state"),
      socket: join(root, "no-agent.sock"),
      cwd: mkdtempSync(join(root, "cwd-alone-")),
    },
  ];
  const nets: Netns[] = [];

  const stdin = (w: Way, extra: Record<string, unknown> = {}) =>
    JSON.stringify({
      cniVersion: "1.1.0",
      name: "k8s-pod-network",
      type: "meshcni",
      state_dir: w.state,
      agent_socket: w.socket,
      kubernetes: { kubeconfig },
      linkerd: { "iptables-mode": "nft" },
      prevResult: { cniVersion: "1.1.0", ips: [{ address: "10.244.1.12/24" }] },
      ...extra,
    });

  async function plugin(w: Way, env: Record<string, string>, input: string): Promise<RunOut> {
    const proc = Bun.spawn([PLUGIN], {
      stdin: new Blob([input]),
      stdout: "pipe",
      stderr: "pipe",
      cwd: w.cwd,
      env: { PATH: Bun.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin", ...env },
    });
    const timer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    clearTimeout(timer);
    return { code, stdout, stderr };
  }

  /** containerId -> the pods its records name, and anything else in the records folder. */
  function recordsOf(w: Way): { byId: Map<string, string[]>; stray: string[] } {
    const dir = join(w.state, RECORDS_SUBDIR);
    const byId = new Map<string, string[]>();
    const stray: string[] = [];
    let names: string[] = [];
    try {
      names = readdirSync(dir);
    } catch {
      return { byId, stray };
    }
    for (const n of names) {
      if (!n.endsWith(".json") || n.startsWith(".")) {
        stray.push(n);
        continue;
      }
      try {
        const r = JSON.parse(readFileSync(join(dir, n), "utf8"));
        byId.set(r.containerId, [...(byId.get(r.containerId) ?? []), `${r.namespace}/${r.name}`]);
      } catch {
        stray.push(`${n} (unreadable)`);
      }
    }
    return { byId, stray };
  }

  return {
    async run(opts) {
      const t0 = performance.now();
      const report: RecordsReport = {
        seed: opts.seed,
        sequences: 0,
        commands: 0,
        outcomes: new Map(),
        failures: [],
        ms: 0,
      };
      for (let si = opts.first ?? 0; si < (opts.first ?? 0) + opts.sequences; si++) {
        if (opts.maxFailures !== undefined && report.failures.length >= opts.maxFailures) break;
        const seq = buildSequence(opts.seed, si, opts.length);
        report.sequences++;
        for (const w of ways) rmSync(join(w.state, RECORDS_SUBDIR), { recursive: true, force: true });
        // A network namespace per container and way, as a runtime makes one per sandbox.
        const netns = seq.containers.map(() =>
          ways.map(() => {
            const n = Netns.create(`mfr-${uniq()}`);
            nets.push(n);
            return n;
          }),
        );
        const fail = (step: number, way: RecordsFailure["way"], problems: string[]) =>
          report.failures.push({ seed: opts.seed, index: si, step, way, tags: seq.tags, problems });
        try {
          for (let step = 0; step < seq.ops.length; step++) {
            const op = seq.ops[step]!;
            const outs: RunOut[] = [];
            const after: ReturnType<typeof recordsOf>[] = [];
            for (let wi = 0; wi < ways.length; wi++) {
              const w = ways[wi]!;
              const before = recordsOf(w);
              const p: string[] = [];
              let out: RunOut;
              if (op.op === "GC") {
                const keep = op.keep.map((k) => ({ containerID: seq.containers[k]!.id, ifname: "eth0" }));
                out = await plugin(
                  w,
                  { CNI_COMMAND: "GC", CNI_PATH: "/opt/cni/bin" },
                  stdin(w, { "cni.dev/valid-attachments": keep }),
                );
              } else {
                const c = seq.containers[op.c]!;
                // A runtime DELs a sandbox whose namespace may already be gone: the second DEL names none.
                const gone = op.op === "DEL" && op.again;
                const env: Record<string, string> = {
                  CNI_COMMAND: op.op,
                  CNI_CONTAINERID: c.id,
                  CNI_NETNS: gone ? "" : netns[op.c]![wi]!.path,
                  CNI_IFNAME: "eth0",
                  CNI_PATH: "/opt/cni/bin",
                  CNI_ARGS: `K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${c.pod};K8S_POD_UID=uid-${c.pod}`,
                };
                out = await plugin(w, env, stdin(w));
              }
              report.commands++;
              const key = `${w.name} ${op.op} ${
                out.code === 0
                  ? 0
                  : (
                      () => {
                        try {
                          return JSON.parse(out.stdout).code;
                        } catch {
                          return `exit ${out.code}`;
                        }
                      }
                    )()
              }`;
              report.outcomes.set(key, (report.outcomes.get(key) ?? 0) + 1);
              if (out.code !== 0 && out.code !== 1) p.push(`exit ${out.code}: ${out.stderr.slice(-1500)}`);
              const now = recordsOf(w);
              if (now.stray.length > 0) p.push(`other files in the records folder: ${now.stray.join(", ")}`);
              const outside = readdirSync(w.cwd).concat(
                readdirSync(w.state).filter(
                  (n) =>
                    n !== RECORDS_SUBDIR &&
                    !n.startsWith("plugin.log") &&
                    !n.includes("agent.sock") &&
                    !n.startsWith(".agent.sock"),
                ),
              );
              if (outside.length > 0) p.push(`written outside the records: ${outside.join(", ")}`);
              if (op.op === "ADD") {
                const c = seq.containers[op.c]!;
                const names = now.byId.get(c.id) ?? [];
                const want = `${NS}/${c.pod}`;
                const id = c.id.length > 40 ? `${c.id.slice(0, 20)}… (${c.id.length} chars)` : c.id;
                if (out.code === 0 && (names.length !== 1 || names[0] !== want))
                  p.push(
                    `after ADD of ${id}: records ${JSON.stringify(names)}, expected exactly [${JSON.stringify(want)}]`,
                  );
                if (out.code !== 0 && names.length > 0)
                  p.push(`a failed ADD (${out.stdout.slice(0, 200)}) left a record`);
                if (op.ok !== (out.code === 0))
                  p.push(
                    `ADD of a ${c.kind} pod: exit ${out.code} ${out.stdout.slice(0, 300)} ${out.stderr.slice(-300)}`,
                  );
              } else if (op.op === "DEL") {
                const c = seq.containers[op.c]!;
                if (out.code !== 0) p.push(`DEL${op.again ? " again" : ""} failed: ${out.stdout.slice(0, 300)}`);
                if (now.byId.has(c.id)) p.push(`DEL left the record of ${c.id.slice(0, 40)}`);
              } else if (op.op === "CHECK") {
                if (op.live && out.code !== 0) p.push(`CHECK of a container set up: ${out.stdout.slice(0, 300)}`);
              } else {
                const keep = new Set(op.keep.map((k) => seq.containers[k]!.id));
                if (out.code !== 0) p.push(`GC failed: ${out.stdout.slice(0, 300)}`);
                for (const id of now.byId.keys())
                  if (!keep.has(id)) p.push(`GC kept the record of ${id.slice(0, 40)}, not in valid-attachments`);
                for (const id of before.byId.keys())
                  if (keep.has(id) && !now.byId.has(id))
                    p.push(`GC removed the record of ${id.slice(0, 40)}, listed in valid-attachments`);
              }
              if (p.length > 0) fail(step, w.name, [`${op.op}${"c" in op ? ` container ${op.c}` : ""}:`, ...p]);
              outs.push(out);
              after.push(now);
            }
            // Both ways: the same exit and the same records.
            const [a, b] = outs;
            const ids = (r: ReturnType<typeof recordsOf>) => [...r.byId.keys()].sort().join("\n");
            if (a!.code !== b!.code)
              fail(step, "both", [
                `${op.op}: exit ${a!.code} with the agent, ${b!.code} alone: ` +
                  `${a!.stdout.slice(0, 200)} / ${b!.stdout.slice(0, 200)}`,
              ]);
            else if (ids(after[0]!) !== ids(after[1]!))
              fail(step, "both", [
                `${op.op}: records differ: agent ${JSON.stringify(ids(after[0]!))}, ` +
                  `alone ${JSON.stringify(ids(after[1]!))}`,
              ]);
          }
        } finally {
          for (const row of netns) for (const n of row) n.delete();
          opts.onSequence?.(seq, report.failures.length);
        }
      }
      report.ms = performance.now() - t0;
      return report;
    },
    async close() {
      agent.close();
      for (const n of nets) n.delete();
      await api.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

export function renderRecordsFailure(f: RecordsFailure): string {
  return [
    `sequence ${f.index} (seed ${f.seed}) step ${f.step}, ${f.way}: [${f.tags.join(" ")}]`,
    ...f.problems.map((p) => `  - ${p.slice(0, 1500)}`),
    `  replay: bun run fuzz --only records --seed ${f.seed} --case ${f.index}`,
  ].join("\n");
}

export function renderRecordsSummary(r: RecordsReport): string {
  const outcomes = [...r.outcomes]
    .sort((a, b) => a[0].localeCompare(b[0]))
    .map(([k, n]) => `${k}: ${n}`)
    .join(", ");
  return [
    `records seed ${r.seed}: ${r.sequences} sequences, ${r.commands} commands of dist/meshcni ` +
      `in ${(r.ms / 1000).toFixed(1)} s`,
    `outcomes: ${outcomes}`,
    `failures: ${r.failures.length}`,
  ].join("\n");
}
