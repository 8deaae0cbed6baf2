// The plugin's kubeconfig: goldens of what the installer writes, and proof that the plugin's
// own reader (internal/kube/kubeconfig.ts) gets the server, token and CA back out of it.
import { describe, expect, test } from "bun:test";
import { parseKubeconfig } from "../../internal/kube/kubeconfig.ts";
import { KubeconfigInputError, renderKubeconfig, renderServerUrl } from "../../internal/kubeconfig/render.ts";
import { expectGolden } from "../support/golden.ts";

const CA = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIUTEST\n-----END CERTIFICATE-----\n";
const TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bWVzaGNuaTptZXNoY25pIn0.c2lnbmF0dXJl";

describe("renderKubeconfig", () => {
  for (const [name, host] of [["ipv4", "10.96.0.1"], ["ipv6", "fd00:10:96::1"], ["dns", "kubernetes.default.svc"]] as const) {
    test(`${name} service host`, () => {
      const text = renderKubeconfig({ host, port: "443", token: `${TOKEN}\n`, caPem: CA });
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
    const target = parseKubeconfig(renderKubeconfig({ host: "10.0.0.1", port: "443", token: odd, caPem: CA }), "/x");
    expect(target.token).toEqual({ data: odd });
  });

  test("bad inputs are refused with the reason", () => {
    const ok = { host: "10.0.0.1", port: "443", token: TOKEN, caPem: CA };
    expect(() => renderKubeconfig({ ...ok, token: " \n" })).toThrow(KubeconfigInputError);
    expect(() => renderKubeconfig({ ...ok, caPem: "garbage" })).toThrow(/no PEM certificate/);
    expect(() => renderKubeconfig({ ...ok, port: "https" })).toThrow(/not a port number/);
    expect(() => renderKubeconfig({ ...ok, port: "70000" })).toThrow(/not a port number/);
    expect(() => renderKubeconfig({ ...ok, host: "" })).toThrow(/KUBERNETES_SERVICE_HOST is empty/);
    expect(() => renderKubeconfig({ ...ok, host: "a b" })).toThrow(/not a host name or IP address/);
    expect(() => renderKubeconfig({ ...ok, host: "fd00::zz" })).toThrow(/not a host name or IP address/);
  });

  test("the token appears in no error message", () => {
    try {
      renderKubeconfig({ host: "a b", port: "443", token: TOKEN, caPem: CA });
    } catch (e) {
      expect((e as Error).message).not.toContain(TOKEN);
    }
  });
});
