// internal/cli/manifests/overrides.ts: --set read as Helm reads it, values files merged and
// coalesced over the chart's defaults as Helm does. test/cli/helm.test.ts holds the result to
// `helm template` with the same arguments; these pin the parser's corners.
import { describe, expect, test } from "bun:test";
import {
  applySet,
  coalesce,
  mergeTrees,
  OverrideError,
  type Tree,
  typedValue,
} from "../../internal/cli/manifests/overrides.ts";

const set = (...exprs: string[]): Tree => {
  const t: Tree = {};
  for (const e of exprs) applySet(t, e);
  return t;
};

describe("--set values are typed as Helm types them", () => {
  const cases: [string, unknown][] = [
    ["true", true],
    ["FALSE", false],
    ["True", true],
    ["null", null],
    ["Null", null],
    ["0", 0],
    ["42", 42],
    ["-5", -5],
    ["+7", 7],
    ["0123", "0123"],
    ["1.5", "1.5"],
    ["1e3", "1e3"],
    ["", ""],
    ["10m", "10m"],
    ["9223372036854775808", "9223372036854775808"],
    ["yes", "yes"],
  ];
  for (const [input, want] of cases) test(JSON.stringify(input), () => expect(typedValue(input, false)).toEqual(want));
  test("--set-string keeps strings", () => {
    expect(typedValue("true", true)).toBe("true");
    expect(typedValue("8080", true)).toBe("8080");
    const t: Tree = {};
    applySet(t, "a={1,true}", { asString: true });
    expect(t).toEqual({ a: ["1", "true"] });
  });
});

describe("--set paths", () => {
  test("nested keys, several assignments, escapes", () => {
    expect(set("a.b.c=1,d=x")).toEqual({ a: { b: { c: 1 } }, d: "x" });
    expect(set("nodeSelector.kubernetes\\.io/os=linux")).toEqual({ nodeSelector: { "kubernetes.io/os": "linux" } });
    expect(set("a=x\\,y,b=z")).toEqual({ a: "x,y", b: "z" });
    expect(set("a=k=v")).toEqual({ a: "k=v" });
  });

  test("list items grow the list with null holes; maps in items merge", () => {
    expect(set("t[0].key=a", "t[0].operator=Exists", "t[2]=c")).toEqual({
      t: [{ key: "a", operator: "Exists" }, null, "c"],
    });
    expect(set("m[1][0]=x")).toEqual({ m: [null, ["x"]] });
  });

  test("{a,b} is a list; later --set overrides earlier and merges maps", () => {
    expect(set("l={a,2,null}")).toEqual({ l: ["a", 2, null] });
    expect(set("l={a,b},x=1")).toEqual({ l: ["a", "b"], x: 1 });
    expect(set("a.b=1", "a.c=2", "a.b=3")).toEqual({ a: { b: 3, c: 2 } });
    expect(set("a.b=1", "a=x")).toEqual({ a: "x" });
  });

  for (const bad of ["", "a", "a.b", "a,b=1", "a[x]=1", "a[0", "a[65537]=1", "=1", "l={a,b", "a[0]"]) {
    test(`refuses ${JSON.stringify(bad)}`, () => expect(() => set(bad)).toThrow(OverrideError));
  }
});

describe("layering", () => {
  test("files merge maps deeply and replace lists, scalars and with null", () => {
    const a = { m: { x: 1, y: { z: 2 } }, l: [1, 2], s: "a", n: 1 };
    const b = { m: { y: { w: 3 } }, l: [3], n: null };
    expect(mergeTrees(a, b)).toEqual({ m: { x: 1, y: { z: 2, w: 3 } }, l: [3], s: "a", n: null });
    expect(a.m.y).toEqual({ z: 2 });
  });

  test("coalesce: defaults fill in, maps merge, null removes a default", () => {
    const defaults = {
      nodeSelector: { "kubernetes.io/os": "linux" },
      tolerations: [{ operator: "Exists" }],
      resources: { requests: { cpu: "10m" } },
      inboundPort: null,
      hub: "ghcr.io/meshcni",
      ipv6: false,
    };
    expect(coalesce({ nodeSelector: { pool: "a" }, resources: { limits: { cpu: 1 } } }, defaults)).toEqual({
      ...defaults,
      nodeSelector: { "kubernetes.io/os": "linux", pool: "a" },
      resources: { requests: { cpu: "10m" }, limits: { cpu: 1 } },
    });
    const removed = coalesce(
      { nodeSelector: { "kubernetes.io/os": null }, tolerations: null, resources: null, inboundPort: null },
      defaults,
    );
    expect(removed).toMatchObject({ nodeSelector: {}, tolerations: [], resources: {}, inboundPort: null });
    // A null the defaults have no key for stays, for the schema to refuse.
    expect(coalesce({ nodeSelector: { pool: null } }, defaults).nodeSelector).toEqual({
      "kubernetes.io/os": "linux",
      pool: null,
    });
    expect(() => coalesce({ hub: null }, defaults)).toThrow(/hub: null/);
    expect(() => coalesce({ ipv6: null }, defaults)).toThrow(/ipv6: null/);
    expect(defaults.nodeSelector).toEqual({ "kubernetes.io/os": "linux" });
  });
});
