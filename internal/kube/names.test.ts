import { expect, test } from "bun:test";
import { isDnsLabel, isDnsSubdomain } from "./names.ts";

test("DNS-1123 labels and subdomains", () => {
  for (const ok of ["a", "meshcni", "kube-system", "a1", "x".repeat(63)]) expect(isDnsLabel(ok)).toBe(true);
  for (const bad of ["", "-a", "a-", "A", "a.b", "a_b", "x".repeat(64), "a\n"]) expect(isDnsLabel(bad)).toBe(false);
  for (const ok of ["web-1", "a.b.c", "x".repeat(253)]) expect(isDnsSubdomain(ok)).toBe(true);
  for (const bad of ["", "a..b", ".a", "Web", "x".repeat(254)]) expect(isDnsSubdomain(bad)).toBe(false);
});
