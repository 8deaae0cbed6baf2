// The chaos run's observer, a process of its own so that it samples on its own core: it reads
// every CNI config file (.conf, .conflist, .json) of a folder on each inotify event and in a
// tight loop in between, and records every distinct content it ever saw per file name. Prints
// "ready" once it has read the folder; when its stdin closes it writes what it saw to OUTFILE as
// JSON { name: { content: [[from, to], ...] } }: when each content was there, as episodes of
// consecutive sightings (epoch milliseconds, fractional; at most 1000 per content), plus the
// number of samples, and exits.
// Usage: bun observer.ts DIR OUTFILE
import { readdirSync, readFileSync, watch, writeFileSync } from "node:fs";

const [dir, outfile] = Bun.argv.slice(2);
if (!dir || !outfile) throw new Error("usage: observer.ts DIR OUTFILE");

const seen = new Map<string, Map<string, [number, number][]>>();
const last = new Map<string, string>();
const now = () => performance.timeOrigin + performance.now();
let samples = 0;
let stopping = false;
const isConfig = (n: string) => n.endsWith(".conf") || n.endsWith(".conflist") || n.endsWith(".json");

function read(name: string): void {
  let text: string;
  try {
    text = readFileSync(`${dir}/${name}`, "utf8");
  } catch {
    return; // gone between listing and reading
  }
  let contents = seen.get(name);
  if (!contents) seen.set(name, (contents = new Map()));
  const t = now();
  let episodes = contents.get(text);
  if (!episodes) contents.set(text, (episodes = []));
  if (last.get(name) === text && episodes.length > 0) episodes[episodes.length - 1]![1] = t;
  else if (episodes.length < 1000) episodes.push([t, t]);
  else episodes[episodes.length - 1]![1] = Number.POSITIVE_INFINITY; // too many to tell apart
  last.set(name, text);
}

function scan(): void {
  samples++;
  let names: string[];
  try {
    names = readdirSync(dir!);
  } catch {
    return;
  }
  for (const n of names) if (isConfig(n)) read(n);
}

const w = watch(dir, (_event, name) => {
  if (typeof name === "string" && isConfig(name)) read(name);
});
scan();
console.log("ready");

(async () => {
  for await (const _ of Bun.stdin.stream()) {
    // keep going until the driver closes our stdin
  }
  stopping = true;
})();

while (!stopping) {
  scan();
  // Let inotify callbacks and the stdin reader run between scans.
  await new Promise((r) => setImmediate(r));
}
w.close();
scan();
writeFileSync(
  outfile,
  JSON.stringify({ samples, seen: Object.fromEntries([...seen].map(([k, v]) => [k, Object.fromEntries(v)])) }),
);
process.exit(0);
