import { expect, test } from "bun:test";
import { everyString, seededRandom } from "../../test/support/regexp-agreement.ts";
import { DNS_LABEL, DNS_SUBDOMAIN, isDnsLabel, isDnsSubdomain } from "./names.ts";

test("DNS-1123 labels and subdomains", () => {
  for (const ok of ["a", "meshcni", "kube-system", "a1", "x".repeat(63)]) expect(isDnsLabel(ok)).toBe(true);
  for (const bad of ["", "-a", "a-", "A", "a.b", "a_b", "x".repeat(64), "a\n"]) expect(isDnsLabel(bad)).toBe(false);
  for (const ok of ["web-1", "a.b.c", "x".repeat(253)]) expect(isDnsSubdomain(ok)).toBe(true);
  for (const bad of ["", "a..b", ".a", "Web", "x".repeat(254)]) expect(isDnsSubdomain(bad)).toBe(false);
});

test(
  "the character loops agree with the DNS-1123 RegExps on every " +
    "short string over a small alphabet, and on random ones",
  () => {
    const alphabet = ["a", "z", "0", "9", "-", ".", "A", "_", " ", "\n", "é"];
    const agree = (s: string) => {
      expect([s, isDnsLabel(s)]).toEqual([s, s.length <= 63 && DNS_LABEL.test(s)]);
      expect([s, isDnsSubdomain(s)]).toEqual([s, s.length <= 253 && DNS_SUBDOMAIN.test(s)]);
    };
    // Every string of up to 4 characters over the alphabet (15,000 strings).
    everyString(alphabet, 4, agree);
    // Longer ones, seeded, around the length bounds too.
    const rnd = seededRandom(9);
    for (let i = 0; i < 5000; i++) {
      const len = [rnd(20), 62 + rnd(3), 252 + rnd(3)][rnd(3)]!;
      let s = "";
      for (let j = 0; j < len; j++) s += rnd(10) === 0 ? alphabet[rnd(alphabet.length)] : "abc0-."[rnd(6)];
      agree(s);
    }
  },
);
