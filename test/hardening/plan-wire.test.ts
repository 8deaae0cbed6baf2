// A plan from the wire (the node agent plans an ADD, the plugin applies it) against hostile
// changes: every real plan of the Linkerd and Istio rules cases, sent through JSON and changed
// at random (text injected into names and comments, numbers out of range, words swapped, fields
// added, chains and jumps moved), then given to the plugin's check (internal/plan/check.ts).
// Whatever the check lets through, both backends must render as text the fuzzer's independent
// readers accept (payload-check.ts for iptables-restore, nft-read.ts for nft): no line break,
// quote or option smuggled in, no rule outside the plan's own chains. FUZZ_SEED=N replays
// another seed; FUZZ_CASES the count.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { iptablesBackend } from "../../internal/firewall/iptables/index.ts";
import { nftablesBackend } from "../../internal/firewall/nftables/index.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { parsePod } from "../../internal/kube/objects.ts";
import { istioProfile } from "../../internal/mesh/istio/profile.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd/profile.ts";
import { checkPlan } from "../../internal/plan/check.ts";
import type { Plan } from "../../internal/plan/model.ts";
import * as istio from "../istio/cases.ts";
import * as linkerd from "../linkerd/cases.ts";
import { repoPath } from "../support/golden.ts";
import { parsePayload } from "./fuzz/payload-check.ts";
import { parseNftPayload } from "./fuzz/nft-read.ts";
import { createRng, type Rng } from "./fuzz/prng.ts";

const SEED = Number(Bun.env.FUZZ_SEED ?? 20261126);
const CASES = Number(Bun.env.FUZZ_CASES ?? 6000);

/** The plans meshcni builds for the rules cases (both meshes, IPv4 and dual-stack). */
function realPlans(): Plan[] {
  const plans: Plan[] = [];
  for (const name of linkerd.listCases()) {
    const c = linkerd.readCase(name);
    const service =
      c.input.kubernetesService === undefined ? {} : { kubernetesService: c.input.kubernetesService as never };
    try {
      plans.push(
        linkerdProfile.plan({
          conf: c.conf,
          pod: c.pod,
          ...(c.namespace ? { namespace: c.namespace } : {}),
          podAddresses: c.input.podAddresses ?? [],
          ...service,
        }),
      );
    } catch {
      // a case whose annotations fail (code 7): no plan
    }
  }
  for (const name of istio.listCases()) {
    const c = istio.readCase(name);
    try {
      plans.push(istioProfile.plan({ conf: c.conf, pod: c.pod, podAddresses: c.input.podAddresses }));
    } catch {
      // a case whose annotations fail (code 7): no plan
    }
  }
  const dual = parsePluginConf(JSON.stringify({ ...istio.istioEntry({ istio: {} }), cniVersion: "1.0.0" }));
  const pod = parsePod(JSON.parse(readFileSync(repoPath(istio.PODS_DIR, "sidecar.json"), "utf8")))!;
  plans.push(istioProfile.plan({ conf: dual, pod, podAddresses: ["10.244.1.12", "fd00:10:244:1::c"] }));
  return plans;
}

const HOSTILE_TEXT = [
  "X\n-A OUTPUT -j ACCEPT",
  'x" -j ACCEPT "',
  "-j",
  "--comment",
  "ACCEPT",
  "OUTPUT",
  "INPUT",
  "NFQUEUE",
  "PROXY INIT",
  "",
  "a".repeat(300),
  "eth0 -j DROP",
  "lo\u202e",
  "10.0.0.0/8 -j ACCEPT",
  "::/0; flush ruleset",
  "}",
  "{",
  "#",
  ";",
  "$(reboot)",
  "netns",
  "-batch",
  "/var/run/meshcni/x",
  "replace",
  "ISTIO_REDIRECT",
  "PROXY_INIT_OUTPUT",
  "PREROUTING",
  "mangle",
  "tcp",
  "udp",
];
const HOSTILE_NUMBERS = [-1, 0, 1, 65535, 65536, 4143, 1e10, 0.5, Number.MAX_SAFE_INTEGER, 0xffffffff, 0x100000000];

type Slot = { parent: Record<string, unknown> | unknown[]; key: string | number; value: unknown };

function slots(x: unknown, out: Slot[] = []): Slot[] {
  if (Array.isArray(x))
    x.forEach((v, i) => {
      out.push({ parent: x, key: i, value: v });
      slots(v, out);
    });
  else if (typeof x === "object" && x !== null)
    for (const [k, v] of Object.entries(x)) {
      out.push({ parent: x as Record<string, unknown>, key: k, value: v });
      slots(v, out);
    }
  return out;
}

function mutate(plan: unknown, rng: Rng): void {
  const all = slots(plan);
  const s = rng.pick(all);
  const set = (v: unknown) => ((s.parent as Record<string | number, unknown>)[s.key] = v);
  switch (rng.int(6)) {
    case 0: // text where text was, or where anything was
      set(rng.pick(HOSTILE_TEXT));
      break;
    case 1:
      set(typeof s.value === "number" ? rng.pick(HOSTILE_NUMBERS) : rng.pick([...HOSTILE_NUMBERS, true, null, {}, []]));
      break;
    case 2: {
      // another value of the same kind from elsewhere in the plan (a word, a chain, a port)
      const same = all.filter((o) => typeof o.value === typeof s.value && o !== s);
      if (same.length > 0) set(structuredClone(rng.pick(same).value));
      break;
    }
    case 3: // an extra field
      if (typeof s.value === "object" && s.value !== null && !Array.isArray(s.value))
        (s.value as Record<string, unknown>)[rng.pick(["raw", "args", "text", "not", "list"])] = rng.pick(HOSTILE_TEXT);
      break;
    case 4: // an element copied or removed
      if (Array.isArray(s.value) && s.value.length > 0) {
        if (rng.chance(0.5)) s.value.push(structuredClone(rng.pick(s.value)));
        else s.value.splice(rng.int(s.value.length), 1);
      }
      break;
    default: // a string with one character changed for a hostile one
      if (typeof s.value === "string" && s.value.length > 0) {
        const at = rng.int(s.value.length);
        set(s.value.slice(0, at) + rng.pick(["\n", '"', " ", "\\", "\0", ";", "-", "\u2028"]) + s.value.slice(at + 1));
      } else set(rng.pick(HOSTILE_TEXT));
  }
}

describe("a plan from the wire", () => {
  const plans = realPlans();

  test("every real plan passes the check unchanged and renders as the readers expect", () => {
    expect(plans.length).toBeGreaterThan(50);
    for (const p of plans) {
      const wire = JSON.parse(JSON.stringify(p));
      expect(checkPlan(wire)).toEqual(wire);
      expect(parsePayload(iptablesBackend.render(wire))).not.toBeArray();
      expect(parseNftPayload(nftablesBackend.render(wire))).not.toBeArray();
    }
  });

  test(`${CASES} hostile changes (seed ${SEED}): refused, or rendered as text the independent readers accept`, () => {
    const rng = createRng(SEED);
    let refused = 0;
    let passed = 0;
    const findings: string[] = [];
    for (let i = 0; i < CASES && findings.length < 10; i++) {
      const wire = JSON.parse(JSON.stringify(rng.pick(plans)));
      for (let k = rng.range(1, 3); k > 0; k--) mutate(wire, rng);
      let checked: Plan;
      try {
        checked = checkPlan(wire);
      } catch {
        refused++;
        continue;
      }
      passed++;
      let ipt: string | undefined;
      let nft: string | undefined;
      try {
        ipt = iptablesBackend.render(checked);
        nft = nftablesBackend.render(checked);
      } catch (e) {
        // A renderer may refuse too (the iptables renderer refuses a line break outright).
        findings.push(`case ${i}: the check passed a plan a renderer refused: ${(e as Error).message}`);
        continue;
      }
      const a = parsePayload(ipt);
      if (Array.isArray(a))
        findings.push(
          `case ${i}: iptables payload: ${a.slice(0, 3).join("; ")}\n${JSON.stringify(wire).slice(0, 400)}`,
        );
      const b = parseNftPayload(nft);
      if (Array.isArray(b))
        findings.push(`case ${i}: nft script: ${b.slice(0, 3).join("; ")}\n${JSON.stringify(wire).slice(0, 400)}`);
    }
    console.log(`plan-wire: ${CASES} cases, ${refused} refused by the check, ${passed} passed and rendered`);
    expect(findings).toEqual([]);
    // The mix is not one-sided: the check refuses many and lets many harmless changes through.
    expect(refused).toBeGreaterThan(CASES * 0.2);
    expect(passed).toBeGreaterThan(CASES * 0.1);
  });
});
