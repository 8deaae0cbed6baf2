// The seccomp filter an agent that applies rules puts on itself (internal/agent/apply/
// seccomp-filter.ts, io/seccomp.ts): CAP_SYS_ADMIN left for setns into network namespaces only.
// A probe run in a private mount namespace (nothing it mounts is seen outside) tries, before and
// after the filter, to mount, unshare, and setns into other kinds of namespace, from the main
// thread, from a Worker started before the filter, and from a process started after it. Needs root.
import { describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { buildSeccompFilter, DENIED } from "../../internal/agent/apply/seccomp-filter.ts";
import { isRoot } from "../support/netns.ts";
import { BUN } from "../support/netns.ts";

function probe(when: "before" | "after") {
  const r = Bun.spawnSync(
    ["unshare", "-m", "--propagation", "private", BUN, `${import.meta.dir}/seccomp/probe.ts`, when],
    { stdout: "pipe", stderr: "pipe", env: { ...Bun.env, BUN_RUNTIME_TRANSPILER_CACHE_PATH: "0" } },
  );
  if (r.exitCode !== 0) throw new Error(`probe ${when}: ${r.stderr.toString()}`);
  const out = JSON.parse(r.stdout.toString());
  // Its mount went with its mount namespace; the folder is left.
  rmSync(out.dir, { recursive: true, force: true });
  return out;
}

describe("the agent's own seccomp filter", () => {
  test("the program: both architectures build, every jump lands inside it", () => {
    for (const arch of ["x86_64", "aarch64"] as const) {
      const p = buildSeccompFilter(arch);
      expect(p.length % 8).toBe(0);
      expect(p.length / 8).toBeLessThan(100);
    }
    expect(DENIED).toContain("mount");
    expect(DENIED).toContain("mount_setattr");
    expect(DENIED).toContain("unshare");
  });

  test.skipIf(!isRoot())("before it, root here may mount, unshare and setns into anything (the probe can tell)", () => {
    const p = probe("before");
    expect(p).toMatchObject({ mount: "ok", unshare: "ok", setnsNet: "ok", setnsAny: "ok", childUnshare: "ok" });
    expect(p.workerMount).toBe("ok");
  });

  test.skipIf(!isRoot())(
    "after it: setns into a network namespace and everything else the agent does work; mounts, new namespaces and other setns do not, in any thread or child",
    () => {
      const p = probe("after");
      expect(p).toMatchObject({
        installed: "installed",
        mount: "errno 1",
        unshare: "errno 1",
        setnsNet: "ok",
        setnsAny: "errno 1",
        setnsMnt: "errno 1",
        childUnshare: "exit 1",
        workerMount: "errno 1",
        spawn: 0,
        fetched: "fine",
      });
      // Every thread took it (TSYNC), those started before it too.
      expect(p.threads).toBeGreaterThan(1);
      expect(p.minFilters).toBeGreaterThanOrEqual(1);
    },
  );
});
