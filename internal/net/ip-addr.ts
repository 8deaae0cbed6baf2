// The addresses in `ip -j addr show` output (iproute2's JSON), in the order the kernel lists
// them. Pure; a document that is not that JSON gives undefined.

export function parseIpAddrJson(text: string): string[] | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!Array.isArray(doc)) return undefined;
  const out: string[] = [];
  for (const link of doc) {
    const infos = (link as { addr_info?: unknown })?.addr_info;
    if (!Array.isArray(infos)) continue;
    for (const a of infos) {
      const { family, local } = (a ?? {}) as { family?: unknown; local?: unknown };
      if ((family === "inet" || family === "inet6") && typeof local === "string") out.push(local);
    }
  }
  return out;
}
