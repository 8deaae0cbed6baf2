import { expect, test } from "bun:test";
import { CONFIG_OPTIONS } from "../install-flags.ts";
import { LINKERD_ONLY, parseValues, ValuesError } from "./values.ts";

test("the Linkerd-only values: one list for the chart values and install-cni's flags", () => {
  for (const [key, { flag }] of Object.entries(LINKERD_ONLY)) {
    expect(CONFIG_OPTIONS[flag]).toBeDefined();
    const set = key === "ipv6" ? true : key === "redirectPorts" ? [80] : ["80"];
    expect(() => parseValues({ mesh: "istio", [key]: set })).toThrow(ValuesError);
    expect(() => parseValues({ mesh: "istio", [key]: set })).toThrow(`${key}: apply to mesh linkerd only`);
    expect(parseValues({ mesh: "linkerd", [key]: set })[key as keyof typeof LINKERD_ONLY]).toEqual(set);
  }
  expect(() => parseValues({ mesh: "istio", ipv6: false, skipInboundPorts: [] })).not.toThrow();
});
