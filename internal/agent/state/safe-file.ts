// The agent's file writes and reads in its state folder, which never follow a symbolic link: a
// write goes to a temp file of a random name created with O_CREAT|O_EXCL|O_NOFOLLOW (never an
// existing file, never through a link), then rename(2) over the final name (which replaces a
// link there instead of writing through it); a read opens with O_NOFOLLOW|O_NONBLOCK and takes
// only a regular file (a FIFO planted under a record's name cannot hang the agent), bounded.
import { randomBytes } from "node:crypto";
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readSync,
  renameSync,
  unlinkSync,
  writeSync,
} from "node:fs";

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_RDONLY, O_WRONLY } = constants;

/** A temp name in the folder: a dot (no reader lists it), a bounded part of the name, random bytes. */
export const tempName = (name: string) => `.${name.slice(0, 64)}.${randomBytes(8).toString("hex")}.tmp`;

/**
 * Writes `text` to `dir/name` atomically without following a link: `dir` itself must be a folder
 * (not a link to one), the temp file is new (O_EXCL) and not a link (O_NOFOLLOW), and the rename
 * replaces whatever is at `name`. `temp` picks the temp name (tests give a predictable one).
 */
export function writeFileNoFollow(
  dir: string,
  name: string,
  text: string,
  o: { mode?: number; temp?: (name: string) => string } = {},
): void {
  const st = lstatSync(dir);
  if (!st.isDirectory()) {
    const what = st.isSymbolicLink() ? " (a symbolic link)" : "";
    throw new Error(`${dir} is not a folder${what}; not writing ${name} there`);
  }
  const pick = o.temp ?? tempName;
  let tmp = "";
  let fd = -1;
  for (let tries = 0; fd < 0; tries++) {
    tmp = `${dir}/${pick(name)}`;
    try {
      fd = openSync(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, o.mode ?? 0o600);
    } catch (e) {
      // Something is already at that name (a link planted there): another name, a few times.
      if ((e as NodeJS.ErrnoException).code !== "EEXIST" || tries >= 3) throw e;
    }
  }
  try {
    const bytes = Buffer.from(text);
    for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off);
  } catch (e) {
    closeSync(fd);
    unlinkQuietly(tmp);
    throw e;
  }
  closeSync(fd);
  try {
    renameSync(tmp, `${dir}/${name}`);
  } catch (e) {
    unlinkQuietly(tmp);
    throw e;
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // gone
  }
}

/**
 * The text of the regular file at `path`, at most `maxBytes` of it (`truncated` says when there
 * was more); undefined when nothing is there. A link, a FIFO, a folder or a device throws.
 */
export function readFileNoFollow(path: string, maxBytes: number): { text: string; truncated: boolean } | undefined {
  let fd: number;
  try {
    fd = openSync(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "ELOOP") throw new Error(`${path} is a symbolic link; not reading it`, { cause: e });
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`${path} is not a regular file; not reading it`);
    const buf = Buffer.alloc(Math.min(st.size, maxBytes) + 1);
    let n = 0;
    while (n < buf.length) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
    const truncated = n > maxBytes;
    return { text: buf.subarray(0, Math.min(n, maxBytes)).toString("utf8"), truncated };
  } finally {
    closeSync(fd);
  }
}
