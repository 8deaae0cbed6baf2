// The plugin's kubeconfig: goldens of what the agent writes, and proof that the plugin's
// own reader (internal/kube/kubeconfig.ts) gets the server, token and CA back out of it; the
// token's account and expiry read back from it (a restarted agent's view); and the pure side of
// the plugin's token (internal/agent/install/token.ts): the TokenRequest, its answers, renewal.
import { describe, expect, test } from "bun:test";
import { parseKubeconfig } from "../../internal/kube/kubeconfig.ts";
import { readWrittenToken, renderKubeconfig } from "../../internal/agent/install/kubeconfig.ts";
import { KubeconfigInputError, renderServerUrl } from "../../internal/kube/server-url.ts";
import {
  buildTokenRequest,
  judgeTokenAnswer,
  renewalDelayMs,
  retryDelayMs,
  tokenRequestPath,
  validUntil,
} from "../../internal/agent/install/token.ts";
import { expectGolden } from "../support/golden.ts";

const CA = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIUTEST\n-----END CERTIFICATE-----\n";
const TOKEN =
  "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bWVzaGNuaTptZXNoY25pLXBsdWdpbiJ9.c2lnbmF0dXJl";
const ACCOUNT = { namespace: "meshcni", name: "meshcni-plugin" };
const EXPIRES = Date.parse("2026-01-02T10:00:00Z");
const WHO = { account: ACCOUNT, expiresAt: EXPIRES };

describe("renderKubeconfig", () => {
  for (const [name, host] of [
    ["ipv4", "10.96.0.1"],
    ["ipv6", "fd00:10:96::1"],
    ["dns", "kubernetes.default.svc"],
  ] as const) {
    test(`${name} service host`, () => {
      const text = renderKubeconfig({ host, port: "443", token: `${TOKEN}\n`, caPem: CA, ...WHO });
      expectGolden(`testdata/installer/kubeconfig-${name}.golden`, text);
      const target = parseKubeconfig(text, "/etc/cni/net.d");
      expect(target.server).toBe(renderServerUrl(host, "443"));
      expect(target.token).toEqual({ data: TOKEN });
      expect(target.ca).toEqual({ data: CA });
      expect(target.insecure).toBe(false);
    });
  }

  test("IPv6 hosts get brackets, others none, a bracketed one stays as it is", () => {
    expect(renderServerUrl("10.96.0.1", "443")).toBe("https://10.96.0.1:443");
    expect(renderServerUrl("fd00::1", "6443")).toBe("https://[fd00::1]:6443");
    expect(renderServerUrl("[fd00::1]", "6443")).toBe("https://[fd00::1]:6443");
    expect(renderServerUrl("::ffff:10.0.0.1", "443")).toBe("https://[::ffff:10.0.0.1]:443");
    expect(renderServerUrl("api.example.com", "443")).toBe("https://api.example.com:443");
  });

  test("a token with YAML-special characters survives", () => {
    const odd = 'a: b # "c" \\ d';
    const target = parseKubeconfig(
      renderKubeconfig({ host: "10.0.0.1", port: "443", token: odd, caPem: CA, ...WHO }),
      "/x",
    );
    expect(target.token).toEqual({ data: odd });
  });

  test("bad inputs are refused with the reason", () => {
    const ok = { host: "10.0.0.1", port: "443", token: TOKEN, caPem: CA, ...WHO };
    expect(() => renderKubeconfig({ ...ok, token: " \n" })).toThrow(KubeconfigInputError);
    expect(() => renderKubeconfig({ ...ok, caPem: "garbage" })).toThrow(/no PEM certificate/);
    expect(() => renderKubeconfig({ ...ok, port: "https" })).toThrow(/not a port number/);
    expect(() => renderKubeconfig({ ...ok, port: "70000" })).toThrow(/not a port number/);
    expect(() => renderKubeconfig({ ...ok, host: "" })).toThrow(/KUBERNETES_SERVICE_HOST is empty/);
    expect(() => renderKubeconfig({ ...ok, host: "a b" })).toThrow(/not a host name or IP address/);
    expect(() => renderKubeconfig({ ...ok, host: "fd00::zz" })).toThrow(/not a host name or IP address/);
    expect(() => renderKubeconfig({ ...ok, expiresAt: NaN })).toThrow(/no expiry/);
  });

  test("the token appears in no error message", () => {
    try {
      renderKubeconfig({ host: "a b", port: "443", token: TOKEN, caPem: CA, ...WHO });
    } catch (e) {
      expect((e as Error).message).not.toContain(TOKEN);
    }
  });
});

describe("the token's account and expiry, read back", () => {
  test("from what renderKubeconfig wrote", () => {
    const text = renderKubeconfig({ host: "10.96.0.1", port: "443", token: TOKEN, caPem: CA, ...WHO });
    expect(readWrittenToken(text)).toEqual({ token: TOKEN, account: ACCOUNT, expiresAt: EXPIRES });
  });

  test("a kubeconfig of the older scheme (the agent's token, no account line) reads as none, and so does garbage", () => {
    const old = [
      "# Kubeconfig for the meshcni CNI plugin, written by meshcni-installer. It is rewritten when",
      "# the service account token rotates and removed when meshcni is uninstalled.",
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      "- name: local",
      "  cluster:",
      "    server: https://10.96.0.1:443",
      "users:",
      "- name: meshcni",
      "  user:",
      `    token: "${TOKEN}"`,
      "contexts:",
      "- name: meshcni",
      "  context:",
      "    cluster: local",
      "    user: meshcni",
      "current-context: meshcni",
      "",
    ].join("\n");
    expect(readWrittenToken(old)).toBeUndefined();
    expect(readWrittenToken("# meshcni-plugin-token: account=meshcni/meshcni-plugin expires=never\n")).toBeUndefined();
    expect(
      readWrittenToken(
        "# meshcni-plugin-token: account=meshcni/meshcni-plugin expires=2026-01-02T10:00:00Z\n{ not yaml",
      ),
    ).toBeUndefined();
  });
});

describe("the plugin's TokenRequest", () => {
  const answer = (status: number, body: unknown) => ({ kind: "answer" as const, status, body: JSON.stringify(body) });
  const granted = (seconds: number, expirationTimestamp: string) =>
    answer(201, {
      kind: "TokenRequest",
      apiVersion: "authentication.k8s.io/v1",
      spec: { expirationSeconds: seconds },
      status: { token: "tok", expirationTimestamp },
    });
  const SENT = Date.parse("2026-01-01T10:00:00Z");

  test("is a TokenRequest for the account, bound to no object, asking for the lifetime given", () => {
    expect(tokenRequestPath(ACCOUNT)).toBe("/api/v1/namespaces/meshcni/serviceaccounts/meshcni-plugin/token");
    expect(buildTokenRequest(86400)).toEqual({
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: { expirationSeconds: 86400 },
    });
  });

  test("a day granted: renewed after 80 % of it", () => {
    const r = judgeTokenAnswer(granted(86400, "2026-01-02T10:00:00Z"), ACCOUNT, SENT, 86400);
    expect(r).toEqual({
      ok: true,
      token: {
        token: "tok",
        account: ACCOUNT,
        expiresAt: EXPIRES,
        issuedAt: SENT,
        lifetimeMs: 86_400_000,
        requestedSeconds: 86400,
        grantedSeconds: 86400,
      },
    });
    if (!r.ok) return;
    expect(renewalDelayMs(r.token)).toBe(69_120_000);
    expect(validUntil(r.token)).toBe(EXPIRES);
  });

  test("a server that shortens the lifetime: renewal follows what it granted", () => {
    const r = judgeTokenAnswer(granted(3600, "2026-01-01T11:00:00Z"), ACCOUNT, SENT, 86400);
    expect(r.ok && renewalDelayMs(r.token)).toBe(2_880_000);
    // Without spec.expirationSeconds, the expiry alone says it.
    const bare = judgeTokenAnswer(
      answer(201, { status: { token: "tok", expirationTimestamp: "2026-01-01T10:10:00Z" } }),
      ACCOUNT,
      SENT,
      86400,
    );
    expect(bare.ok && bare.token.lifetimeMs).toBe(600_000);
    // A node clock ahead of the server's makes the lifetime shorter, never longer: renewed early.
    const ahead = judgeTokenAnswer(granted(86400, "2026-01-02T10:00:00Z"), ACCOUNT, SENT + 60_000, 86400);
    expect(ahead.ok && ahead.token.lifetimeMs).toBe(86_340_000);
    const behind = judgeTokenAnswer(granted(86400, "2026-01-02T10:00:00Z"), ACCOUNT, SENT - 60_000, 86400);
    expect(behind.ok && behind.token.lifetimeMs).toBe(86_400_000);
    // A few seconds (a test server's cap): no busy loop.
    const short = judgeTokenAnswer(granted(1, "2026-01-01T10:00:01Z"), ACCOUNT, SENT, 86400);
    expect(short.ok && renewalDelayMs(short.token)).toBe(1000);
  });

  test("refusals say why and what to do, never with a token", () => {
    const why = (a: Parameters<typeof judgeTokenAnswer>[0]) => {
      const r = judgeTokenAnswer(a, ACCOUNT, SENT, 86400);
      return r.ok ? "ok" : r.why;
    };
    expect(why(answer(403, { kind: "Status", message: 'serviceaccounts "meshcni-plugin" is forbidden' }))).toBe(
      "the agent may not create tokens for meshcni/meshcni-plugin (403): " +
        'serviceaccounts "meshcni-plugin" is forbidden; its Role needs create ' +
        "on serviceaccounts/token for meshcni-plugin (meshcnictl install-cni renders it)",
    );
    expect(why(answer(404, { kind: "Status", message: "not found" }))).toBe(
      "there is no ServiceAccount meshcni/meshcni-plugin (404): not found; meshcnictl install-cni renders it",
    );
    expect(why(answer(401, {}))).toBe("the API server rejected the agent's own credentials (401)");
    expect(why(answer(500, "x"))).toBe("the API server answered 500");
    expect(why({ kind: "unreachable", reason: "connection refused" })).toBe(
      "the API server did not answer: connection refused",
    );
    expect(why(answer(201, { status: { token: "tok" } }))).toBe(
      "the API server's answer holds no token and expirationTimestamp (status 201)",
    );
    expect(why(granted(86400, "2025-01-01T00:00:00Z"))).toContain("has expired already");
  });

  test("retries back off from about a second to about a minute", () => {
    expect([1, 2, 3, 7, 20].map((n) => retryDelayMs(n, 1))).toEqual([1000, 2000, 4000, 60000, 60000]);
    expect(retryDelayMs(1, 0)).toBe(500);
  });
});
