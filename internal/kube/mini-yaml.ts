// A small reader for the block-style YAML subset kubeconfig files use (what `kubectl config
// view` and meshcni's agent write), plus JSON. It keeps the yaml library off the plugin's
// start-up path. Anything outside the subset is refused with a line number, never guessed.

export type YamlValue = string | boolean | null | YamlValue[] | { [k: string]: YamlValue };

interface Line {
  no: number;
  indent: number;
  text: string;
}

export class YamlSubsetError extends Error {}

function stripComment(s: string): string {
  let quote: string | undefined;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (quote) {
      if (c === "\\" && quote === '"') i++;
      else if (c === quote) quote = undefined;
    } else if (c === '"' || c === "'") {
      if (i === 0 || /[\s:\-[{,]/.test(s[i - 1]!)) quote = c;
    } else if (c === "#" && (i === 0 || /\s/.test(s[i - 1]!))) {
      return s.slice(0, i);
    }
  }
  return s;
}

function scalar(raw: string, no: number): YamlValue {
  const s = raw.trim();
  if (s === "" || s === "~" || s === "null") return null;
  if (s === "true") return true;
  if (s === "false") return false;
  if (s === "{}") return {};
  if (s === "[]") return [];
  if (s.startsWith('"')) {
    if (!s.endsWith('"') || s.length < 2) throw new YamlSubsetError(`line ${no}: unterminated string`);
    try {
      return JSON.parse(s) as string;
    } catch {
      throw new YamlSubsetError(`line ${no}: unsupported escape in string`);
    }
  }
  if (s.startsWith("'")) {
    if (!s.endsWith("'") || s.length < 2) throw new YamlSubsetError(`line ${no}: unterminated string`);
    return s.slice(1, -1).replace(/''/g, "'");
  }
  if (/^[[{|>&*!]/.test(s))
    throw new YamlSubsetError(`line ${no}: YAML feature not supported in kubeconfig: ${s.slice(0, 20)}`);
  return s;
}

/** Splits `key: value` (the key may be quoted); undefined when the line is not a mapping entry. */
function splitKey(text: string): [string, string] | undefined {
  const m = /^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s"'#][^:]*?)\s*:(?:\s+(.*))?$/.exec(text);
  if (!m) return undefined;
  const key = m[1]!;
  const k = key.startsWith('"')
    ? (JSON.parse(key) as string)
    : key.startsWith("'")
      ? key.slice(1, -1).replace(/''/g, "'")
      : key;
  return [k, m[2] ?? ""];
}

function isSeqItem(text: string): boolean {
  return text === "-" || text.startsWith("- ");
}

class Reader {
  i = 0;
  constructor(readonly lines: Line[]) {}

  node(indent: number): YamlValue {
    const line = this.lines[this.i];
    if (!line || line.indent < indent) return null;
    if (isSeqItem(line.text)) return this.seq(line.indent);
    if (!splitKey(line.text)) {
      // A value on a line of its own, e.g. "user:" followed by "  {}".
      this.i++;
      return scalar(line.text, line.no);
    }
    return this.map(line.indent);
  }

  map(indent: number): YamlValue {
    const out: Record<string, YamlValue> = {};
    while (this.i < this.lines.length) {
      const line = this.lines[this.i]!;
      if (line.indent < indent || (line.indent === indent && isSeqItem(line.text))) break;
      if (line.indent > indent) throw new YamlSubsetError(`line ${line.no}: unexpected indentation`);
      const kv = splitKey(line.text);
      if (!kv) throw new YamlSubsetError(`line ${line.no}: expected "key: value"`);
      this.i++;
      const [key, rest] = kv;
      if (rest.trim() !== "") {
        out[key] = scalar(rest, line.no);
        continue;
      }
      const next = this.lines[this.i];
      if (next && (next.indent > indent || (next.indent === indent && isSeqItem(next.text)))) {
        out[key] = this.node(next.indent);
      } else {
        out[key] = null;
      }
    }
    return out;
  }

  seq(indent: number): YamlValue {
    const out: YamlValue[] = [];
    while (this.i < this.lines.length) {
      const line = this.lines[this.i]!;
      if (line.indent !== indent || !isSeqItem(line.text)) break;
      const rest = line.text === "-" ? "" : line.text.slice(2);
      const offset = line.text.length - rest.trimStart().length;
      if (rest.trim() === "") {
        this.i++;
        const next = this.lines[this.i];
        out.push(next && next.indent > indent ? this.node(next.indent) : null);
      } else if (splitKey(rest.trim()) || isSeqItem(rest.trim())) {
        // "- key: value" opens a mapping whose keys line up with "key".
        this.lines[this.i] = { no: line.no, indent: indent + offset, text: rest.trim() };
        out.push(this.node(indent + offset));
      } else {
        this.i++;
        out.push(scalar(rest, line.no));
      }
    }
    return out;
  }
}

/** Parses a kubeconfig-style YAML document (or JSON). */
export function parseYamlSubset(text: string): YamlValue {
  const trimmed = text.trim();
  if (trimmed.startsWith("{")) return JSON.parse(trimmed) as YamlValue;
  const lines: Line[] = [];
  text.split(/\r?\n/).forEach((raw, idx) => {
    if (raw.includes("\t") && /^\s*\t/.test(raw))
      throw new YamlSubsetError(`line ${idx + 1}: tabs are not allowed for indentation`);
    const body = stripComment(raw).trimEnd();
    if (body.trim() === "" || body.trim() === "---") return;
    const indent = body.length - body.trimStart().length;
    lines.push({ no: idx + 1, indent, text: body.trimStart() });
  });
  if (lines.length === 0) return null;
  const r = new Reader(lines);
  const v = r.node(lines[0]!.indent);
  if (r.i < lines.length) throw new YamlSubsetError(`line ${lines[r.i]!.no}: unexpected content`);
  return v;
}
