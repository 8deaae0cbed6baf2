// qemu-user's binfmt_misc handler for aarch64, so that arm64 programs run as if native, inside a
// chroot too: the F flag makes the kernel open qemu-aarch64-static when the handler is
// registered, so the chroot need not hold it. binfmt_misc is not mounted on this machine by
// default. Registers only what is missing and undoes only what it registered.
import { existsSync, readFileSync, writeFileSync } from "node:fs";

const DIR = "/proc/sys/fs/binfmt_misc";
const NAME = "qemu-aarch64";
// qemu's own magic and mask for aarch64 ELF executables (ET_EXEC and ET_DYN), as its binfmt.sh has them.
const MAGIC = "\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00";
const MASK = "\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff";

export interface Binfmt {
  /** Why arm64 programs cannot run here (no qemu, not root, no binfmt_misc); undefined when they can. */
  missing?: string;
  /** Removes the handler if this registered it. */
  undo(): void;
}

export function registerQemuAarch64(): Binfmt {
  const none = (missing: string): Binfmt => ({ missing, undo() {} });
  if (process.arch === "arm64") return { undo() {} };
  const qemu = Bun.which("qemu-aarch64-static");
  if (!qemu) return none("qemu-aarch64-static is not installed (Debian: qemu-user-static)");
  if (process.getuid?.() !== 0) return none("registering a binfmt handler needs root");
  if (!existsSync(`${DIR}/register`)) {
    const r = Bun.spawnSync(["mount", "-t", "binfmt_misc", "binfmt_misc", DIR], { stderr: "pipe" });
    if (r.exitCode !== 0) return none(`mounting binfmt_misc: ${r.stderr.toString().trim()}`);
  }
  const entry = `${DIR}/${NAME}`;
  if (existsSync(entry)) {
    const text = readFileSync(entry, "utf8");
    if (!/^enabled/m.test(text) || !/^flags: \S*F/m.test(text))
      return none(`${entry} is there but not enabled with the F flag: ${text.replace(/\n/g, "; ")}`);
    return { undo() {} };
  }
  try {
    writeFileSync(`${DIR}/register`, `:${NAME}:M::${MAGIC}:${MASK}:${qemu}:F`);
  } catch (e) {
    return none(`registering ${NAME}: ${(e as Error).message}`);
  }
  return {
    undo() {
      if (existsSync(entry)) writeFileSync(entry, "-1");
    },
  };
}
