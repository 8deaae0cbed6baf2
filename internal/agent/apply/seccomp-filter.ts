// The seccomp filter an agent that applies rules puts on itself at start (io/seccomp.ts), so
// that the CAP_SYS_ADMIN it holds serves setns(2) into network namespaces and nothing else.
// CAP_SYS_ADMIN is broad, and the runtime's default seccomp profile, given it, allows mount(2)
// too: without this filter the agent could remount the read-only host paths it mounts (/usr, the
// netns folder) read-write, or unshare into namespaces of its own. The filter denies (EPERM), in
// every thread and in every process the agent starts (iptables-restore inherits it):
// - every way to change mounts: mount, umount2, pivot_root, mount_setattr and the new mount API
//   (open_tree, move_mount, fsopen, fsconfig, fsmount, fspick);
// - new namespaces: unshare, clone with a CLONE_NEW* flag; setns with any type but CLONE_NEWNET;
// - the rest CAP_SYS_ADMIN opens that the agent never uses: bpf, perf_event_open, fanotify_init,
//   syslog, swapon/swapoff, quotactl, sethostname/setdomainname, name_to_handle_at,
//   lookup_dcookie, chroot, acct, and the FIFREEZE/FITHAW ioctls (freezing a file system);
// - any other architecture's calls (x86_64's x32 ABI, 32-bit compatibility).
// Pure: the program is built as bytes (struct sock_filter, linux/filter.h) for one architecture.

export type SeccompArch = "x86_64" | "aarch64";

const AUDIT_ARCH = { x86_64: 0xc000003e, aarch64: 0xc00000b7 } as const;

/** Syscall numbers: x86_64's table, and the generic one aarch64 uses. */
const NR = {
  x86_64: {
    mount: 165,
    umount2: 166,
    pivot_root: 155,
    mount_setattr: 442,
    open_tree: 428,
    move_mount: 429,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    unshare: 272,
    bpf: 321,
    perf_event_open: 298,
    fanotify_init: 300,
    syslog: 103,
    swapon: 167,
    swapoff: 168,
    quotactl: 179,
    quotactl_fd: 443,
    sethostname: 170,
    setdomainname: 171,
    name_to_handle_at: 303,
    lookup_dcookie: 212,
    chroot: 161,
    acct: 163,
    setns: 308,
    clone: 56,
    ioctl: 16,
  },
  aarch64: {
    mount: 40,
    umount2: 39,
    pivot_root: 41,
    mount_setattr: 442,
    open_tree: 428,
    move_mount: 429,
    fsopen: 430,
    fsconfig: 431,
    fsmount: 432,
    fspick: 433,
    unshare: 97,
    bpf: 280,
    perf_event_open: 241,
    fanotify_init: 262,
    syslog: 116,
    swapon: 224,
    swapoff: 225,
    quotactl: 60,
    quotactl_fd: 443,
    sethostname: 161,
    setdomainname: 162,
    name_to_handle_at: 264,
    lookup_dcookie: 18,
    chroot: 51,
    acct: 89,
    setns: 268,
    clone: 220,
    ioctl: 29,
  },
} as const;

/** The calls denied outright (every one but setns, clone and ioctl, which are judged by argument). */
export const DENIED = Object.keys(NR.x86_64).filter((n) => n !== "setns" && n !== "clone" && n !== "ioctl");

export const CLONE_NEWNET = 0x40000000;
/** CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (linux/sched.h). */
export const CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | CLONE_NEWNET;
export const FIFREEZE = 0xc0045877;
export const FITHAW = 0xc0045878;

// BPF opcodes (linux/bpf_common.h).
const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const RET_K = 0x06;
const ALLOW = 0x7fff0000;
const ERRNO_EPERM = 0x00050000 | 1;

// struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each).
const OFF_NR = 0;
const OFF_ARCH = 4;
/** The low 32 bits of args[i] (little-endian, as both architectures are here). */
const argLow = (i: number) => 16 + 8 * i;

interface Insn {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

/** The program for `arch`, as the bytes of its struct sock_filter array. */
export function buildSeccompFilter(arch: SeccompArch): Uint8Array {
  const nr = NR[arch];
  // Built front to back with symbolic jumps: "deny" and "allow" are the last two instructions.
  type Jump = number | "deny" | "allow";
  const prog: { code: number; jt: Jump; jf: Jump; k: number }[] = [];
  const ins = (code: number, k: number, jt: Jump = 0, jf: Jump = 0) => prog.push({ code, jt, jf, k });
  ins(LD_W_ABS, OFF_ARCH);
  ins(JEQ_K, AUDIT_ARCH[arch], 0, "deny");
  ins(LD_W_ABS, OFF_NR);
  // x86_64's x32 ABI numbers its calls from 0x40000000.
  if (arch === "x86_64") ins(JGE_K, 0x40000000, "deny", 0);
  for (const name of DENIED) ins(JEQ_K, nr[name as keyof typeof nr], "deny", 0);
  // setns: only into a network namespace, named as such.
  ins(JEQ_K, nr.setns, 0, 2);
  ins(LD_W_ABS, argLow(1));
  ins(JEQ_K, CLONE_NEWNET, "allow", "deny");
  // clone: no new namespace (its flags are args[0] on both architectures).
  ins(JEQ_K, nr.clone, 0, 2);
  ins(LD_W_ABS, argLow(0));
  ins(JSET_K, CLONE_NEW_ANY, "deny", "allow");
  // ioctl: not FIFREEZE or FITHAW.
  ins(JEQ_K, nr.ioctl, 0, "allow");
  ins(LD_W_ABS, argLow(1));
  ins(JEQ_K, FIFREEZE, "deny", 0);
  ins(JEQ_K, FITHAW, "deny", "allow");
  const allowAt = prog.length;
  const denyAt = prog.length + 1;
  const resolved: Insn[] = prog.map((p, i) => {
    const to = (j: Jump): number => {
      const target = j === "allow" ? allowAt : j === "deny" ? denyAt : i + 1 + j;
      const off = target - (i + 1);
      if (off < 0 || off > 255) throw new Error(`seccomp filter: jump of ${off} at ${i}`);
      return off;
    };
    return { code: p.code, jt: to(p.jt), jf: to(p.jf), k: p.k };
  });
  resolved.push({ code: RET_K, jt: 0, jf: 0, k: ALLOW }, { code: RET_K, jt: 0, jf: 0, k: ERRNO_EPERM });
  const out = new Uint8Array(resolved.length * 8);
  const view = new DataView(out.buffer);
  resolved.forEach((x, i) => {
    view.setUint16(i * 8, x.code, true);
    view.setUint8(i * 8 + 2, x.jt);
    view.setUint8(i * 8 + 3, x.jf);
    view.setUint32(i * 8 + 4, x.k >>> 0, true);
  });
  return out;
}

/** The architecture this process runs on, when the filter knows it. */
export function seccompArch(processArch: string): SeccompArch | undefined {
  return processArch === "x64" ? "x86_64" : processArch === "arm64" ? "aarch64" : undefined;
}
