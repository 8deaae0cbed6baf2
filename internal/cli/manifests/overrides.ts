// Chart values given the way Helm takes them: `--set key=value` expressions and values files,
// layered over the chart's defaults as `helm template` layers them, so `meshcnictl install-cni
// --set/--values` and `helm template --set/--values` see the same values. Pure: files arrive as
// parsed objects.
//
// --set, as Helm reads it: `a.b=c` sets a nested key, `a[0]=x` and `a[0].b=x` list items (a
// shorter list grows, with null holes), `a={x,y}` a list, several assignments separated by
// commas; a backslash escapes the next character (`kubernetes\.io/os=linux`, `a=x\,y`). Values
// are typed as Helm types them: true and false (any case) are booleans, null is null, whole
// numbers without a leading zero are numbers, everything else is a string. --set-string keeps
// every value a string.
//
// Layering, as Helm's: each values file is merged over the previous one (maps deeply, anything
// else replaced), each --set is applied over that, and the result over the chart's defaults
// (maps deeply, anything else replaced). null removes a default.

export type Tree = Record<string, unknown>;

export class OverrideError extends Error {}

/** Helm's limit on a list index in --set. */
const MAX_INDEX = 65536;

export function isTree(v: unknown): v is Tree {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A --set value as Helm types it. */
export function typedValue(s: string, asString: boolean): unknown {
  if (asString) return s;
  const lower = s.toLowerCase();
  if (lower === "true") return true;
  if (lower === "false") return false;
  if (lower === "null") return null;
  // Helm: a value not starting with 0 that parses as a 64-bit integer (sign allowed); "0" too.
  if (s === "0") return 0;
  if (s[0] !== "0" && /^[-+]?[0-9]+$/.test(s)) {
    const big = BigInt(s);
    if (big <= 9223372036854775807n && big >= -9223372036854775808n) return Number(s);
  }
  return s;
}

class Scanner {
  private pos = 0;
  constructor(private readonly text: string) {}

  atEnd(): boolean {
    return this.pos >= this.text.length;
  }

  peek(): string | undefined {
    return this.text[this.pos];
  }

  next(): string | undefined {
    return this.text[this.pos++];
  }

  /** The characters up to the first of `stops` (consumed and returned as `stop`); \ escapes. */
  until(stops: string): { text: string; stop: string | undefined } {
    let text = "";
    while (this.pos < this.text.length) {
      const c = this.text[this.pos++]!;
      if (c === "\\") {
        if (this.pos < this.text.length) text += this.text[this.pos++];
        continue;
      }
      if (stops.includes(c)) return { text, stop: c };
      text += c;
    }
    return { text, stop: undefined };
  }
}

/** Applies one --set (or --set-string) argument to `into`, in place. */
export function applySet(into: Tree, expr: string, opts: { asString?: boolean } = {}): void {
  const sc = new Scanner(expr);
  const asString = opts.asString ?? false;
  const fail = (why: string) => new OverrideError(`--set ${JSON.stringify(expr)}: ${why}`);

  // The value after `=`: a {list} or a plain value; consumes the comma that ends it.
  const value = (): unknown => {
    if (sc.peek() === "{") {
      sc.next();
      const items: unknown[] = [];
      for (;;) {
        const { text, stop } = sc.until(",}");
        if (stop === undefined) throw fail("a list {a,b} is not closed");
        items.push(typedValue(text, asString));
        if (stop === "}") break;
      }
      if (!sc.atEnd()) {
        const c = sc.next();
        if (c !== ",") throw fail(`unexpected ${JSON.stringify(c)} after a list`);
      }
      return items;
    }
    return typedValue(sc.until(",").text, asString);
  };

  const index = (): number => {
    const { text, stop } = sc.until("]");
    if (stop !== "]") throw fail("a list index is not closed with ]");
    if (!/^[0-9]+$/.test(text)) throw fail(`list index ${JSON.stringify(text)} is not a whole number`);
    const i = Number(text);
    if (i > MAX_INDEX) throw fail(`list index ${i} is larger than ${MAX_INDEX}`);
    return i;
  };

  const setIndex = (list: unknown[], i: number, v: unknown): unknown[] => {
    while (list.length <= i) list.push(null);
    list[i] = v;
    return list;
  };

  // After `name[i]`: `=value`, `.key...` or `[j]...`.
  const listItem = (list: unknown[], i: number): unknown[] => {
    const c = sc.next();
    if (c === "=") return setIndex(list, i, value());
    if (c === ".") {
      const inner = isTree(list[i]) ? (list[i] as Tree) : {};
      key(inner);
      return setIndex(list, i, inner);
    }
    if (c === "[") {
      const j = index();
      const inner = Array.isArray(list[i]) ? (list[i] as unknown[]) : [];
      return setIndex(list, i, listItem(inner, j));
    }
    throw fail(c === undefined ? "a list item has no value" : `unexpected ${JSON.stringify(c)} after a list index`);
  };

  // One `key...=value` into `data`.
  const key = (data: Tree): void => {
    const { text: k, stop } = sc.until("=[.,");
    if (stop === undefined) throw fail(`key ${JSON.stringify(k)} has no value`);
    if (k === "") throw fail("a key is empty");
    if (stop === "=") {
      data[k] = value();
      return;
    }
    if (stop === ",") throw fail(`key ${JSON.stringify(k)} has no value (write KEY=VALUE)`);
    if (stop === ".") {
      const inner = isTree(data[k]) ? (data[k] as Tree) : {};
      key(inner);
      data[k] = inner;
      return;
    }
    const i = index();
    const list = Array.isArray(data[k]) ? (data[k] as unknown[]) : [];
    data[k] = listItem(list, i);
  };

  if (expr === "") throw fail("is empty (write KEY=VALUE)");
  while (!sc.atEnd()) key(into);
}

/** `b` over `a`, as Helm merges values files: maps deeply, anything else (null too) replaced. */
export function mergeTrees(a: Tree, b: Tree): Tree {
  const out: Tree = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    out[k] = isTree(v) && isTree(prev) ? mergeTrees(prev, v) : v;
  }
  return out;
}

function clone<T>(v: T): T {
  return structuredClone(v);
}

/**
 * The user's values over the chart's defaults, as Helm coalesces them: maps deeply; a null
 * removes the default. Helm then renders a removed value as absent; at the top level this
 * returns the empty value of the default's kind instead ({} or [], or null), which the
 * templates and objects.ts render the same way, and refuses null for a value that has no empty
 * form (a number, a boolean, a string) since the chart would render it as nonsense.
 */
export function coalesce(user: Tree, defaults: Tree): Tree {
  const out = clone(user);
  for (const [k, d] of Object.entries(defaults)) {
    if (!(k in out)) {
      out[k] = clone(d);
    } else if (out[k] === null) {
      if (d === null) continue;
      if (Array.isArray(d)) out[k] = [];
      else if (isTree(d)) out[k] = {};
      else
        throw new OverrideError(
          `${k}: null would leave it without a value; give one (the default is ${JSON.stringify(d)})`,
        );
    } else if (isTree(out[k]) && isTree(d)) {
      out[k] = coalesceInner(out[k] as Tree, d);
    }
  }
  return out;
}

function coalesceInner(user: Tree, defaults: Tree): Tree {
  for (const [k, d] of Object.entries(defaults)) {
    if (!(k in user)) user[k] = clone(d);
    else if (user[k] === null) delete user[k];
    else if (isTree(user[k]) && isTree(d)) user[k] = coalesceInner(user[k] as Tree, d);
  }
  return user;
}
