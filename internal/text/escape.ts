// Text that a pod (or anything outside meshcni) controls, made safe for a log line: the one
// escaping function the plugin's logger, its error messages and the agent's stdout all use.
// Pure, and small enough for the plugin's start-up path.

/**
 * Characters that could end a line, move the cursor, recolour or clear a terminal, hide text or
 * reorder it: C0 and C1 controls, DEL, line and paragraph separators, zero-width and
 * bidirectional formatting characters, the BOM, interlinear annotations, and lone surrogates.
 */
const UNSAFE =
  /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function escapeChar(c: string): string {
  if (c === "\n") return "\\n";
  if (c === "\r") return "\\r";
  if (c === "\t") return "\\t";
  const code = c.charCodeAt(0);
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** Whether `s` is printable ASCII only (the usual line): nothing to escape, no RegExp to run. */
function printableAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

/** Free text on one line: unsafe characters become visible escapes (\n, \x1b, \u202e, ...). */
export function escapeText(s: string): string {
  return printableAscii(s) ? s : s.replace(UNSAFE, escapeChar);
}

/** A value inside a message, always double-quoted: `"`, `\` and unsafe characters escaped. */
export function quote(s: string): string {
  return `"${escapeText(s.replace(/[\\"]/g, "\\$&"))}"`;
}

/** A value that is plainly safe bare in a key=value field: letters, digits and `._:/@+-`. */
export const PLAIN_VALUE = /^[A-Za-z0-9._:/@+-]+$/;

/**
 * What PLAIN_VALUE matches, checked with a loop: no RegExp to compile in the plugin's fresh process
 * (escape.test.ts holds the two together).
 */
export function isPlainValue(s: string): boolean {
  if (s.length === 0) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    // letters, digits, `:`, `-./`
    if ((c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 58) || (c >= 45 && c <= 47)) continue;
    if (c !== 95 && c !== 64 && c !== 43) return false; // `_@+`
  }
  return true;
}

/** A value of a key=value field: bare when plainly safe, else as quote() writes it. */
export function quoteValue(s: string): string {
  if (isPlainValue(s)) return s;
  return quote(s);
}
