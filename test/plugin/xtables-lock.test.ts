// openFirewall (internal/firewall/io/open.ts) asks the host's iptables-restore its version and sets
// the lock up for it: XTABLES_LOCKFILE at the pod's namespace file from 1.8.6, a bounded --wait
// below. Real processes, with stand-in nsenter and iptables-legacy-* first on PATH that record
// what they were given.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openFirewall } from "../../internal/firewall/io/open.ts";
import { restore } from "../../internal/firewall/iptables/apply.ts";
import { XTABLES_WAIT_SECONDS } from "../../internal/firewall/iptables/xtables-lock.ts";

describe("xtables lock set-up by iptables version", () => {
  let dir: string;
  const script = (name: string, body: string) => {
    writeFileSync(join(dir, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(dir, name), 0o755);
  };
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "meshcni-xtables-"));
    script("nsenter", 'shift; shift; exec "$@"');
    script(
      "iptables-legacy-restore",
      [
        `if [ "$1" = --version ]; then cat ${dir}/version; exit 0; fi`,
        `echo "args=$* lockfile=\${XTABLES_LOCKFILE-unset}" > ${dir}/restore.log`,
        "cat > /dev/null",
      ].join("\n"),
    );
    script("iptables-legacy-save", "exit 0");
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const restored = async (version: string, wait: boolean) => {
    writeFileSync(join(dir, "version"), version);
    const netns = join(dir, "netns");
    const fw = await openFirewall(netns, { mode: "legacy", wait, simulate: false }, [4], dir);
    const r = await restore(fw, 4, "*nat\nCOMMIT\n", AbortSignal.timeout(5000));
    expect(r.code).toBe(0);
    return readFileSync(join(dir, "restore.log"), "utf8").trim().replace(netns, "NETNS");
  };

  test("1.8.9: the pod's namespace file is the lock", async () => {
    expect(await restored("iptables-restore v1.8.9 (legacy)", false)).toBe("args=--noflush lockfile=NETNS");
    expect(await restored("iptables-restore v1.8.9 (legacy)", true)).toBe("args=--noflush --wait lockfile=NETNS");
  });

  test("1.8.4: no lock file, a bounded wait for the host's lock", async () => {
    expect(await restored("iptables-restore v1.8.4 (legacy)", false)).toBe(
      `args=--noflush --wait=${XTABLES_WAIT_SECONDS} lockfile=unset`,
    );
  });
});
