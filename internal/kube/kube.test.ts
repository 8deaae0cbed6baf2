import { describe, expect, test } from "bun:test";
import { parseKubeconfig } from "./kubeconfig.ts";
import { parseYamlSubset } from "./mini-yaml.ts";

describe("kubeconfig subset reader", () => {
  test("kubectl's layout: sequences at the parent's indentation, quoted values, comments", () => {
    const doc = parseYamlSubset(`
# written by meshcni-installer
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: QUJD
    server: "https://[fd00::1]:6443"  # IPv6
  name: local
users:
- name: meshcni
  user:
    token: 'it''s a token'
contexts:
- context:
    cluster: local
    user: meshcni
  name: ctx
current-context: ctx
`);
    expect(doc).toEqual({
      apiVersion: "v1", kind: "Config",
      clusters: [{ cluster: { "certificate-authority-data": "QUJD", server: "https://[fd00::1]:6443" }, name: "local" }],
      users: [{ name: "meshcni", user: { token: "it's a token" } }],
      contexts: [{ context: { cluster: "local", user: "meshcni" }, name: "ctx" }],
      "current-context": "ctx",
    });
  });
  test("JSON kubeconfigs and flow-empty values", () => {
    expect(parseYamlSubset('{"a": "1"}')).toEqual({ a: "1" });
    expect(parseYamlSubset("a: {}\nb:\n  []\n")).toEqual({ a: {}, b: [] });
  });
  test("unsupported YAML is refused with a line number", () => {
    expect(() => parseYamlSubset("a: &anchor x")).toThrow(/line 1/);
    expect(() => parseYamlSubset("a:\n\t- b")).toThrow(/tabs/);
    expect(() => parseYamlSubset("a: b\n   c: d")).toThrow(/line 2/);
  });
  test("current context, credentials and relative file names", () => {
    const t = parseKubeconfig(`apiVersion: v1
clusters:
- name: a
  cluster: {server: "https://x:1"}
- name: b
  cluster:
    server: https://10.96.0.1:443
    certificate-authority: ca.crt
users:
- name: u
  user:
    tokenFile: /var/run/token
    client-certificate: /c.pem
    client-key-data: S0VZ
contexts:
- name: c
  context:
    cluster: b
    user: u
current-context: c
`.replace('cluster: {server: "https://x:1"}', "cluster:\n    server: https://x:1"), "/etc/cni/net.d");
    expect(t).toEqual({
      server: "https://10.96.0.1:443", insecure: false, ca: { file: "/etc/cni/net.d/ca.crt" },
      token: { file: "/var/run/token" }, clientCert: { file: "/c.pem" }, clientKey: { data: "KEY" },
    });
  });
  test("a server that is not http(s)://HOST[:PORT] is refused", () => {
    const kc = (server: string) => `clusters:\n- name: a\n  cluster:\n    server: ${server}\ncontexts:\n- name: c\n  context:\n    cluster: a\ncurrent-context: c\n`;
    expect(() => parseKubeconfig(kc("https://x/path"), "/")).toThrow();
    expect(() => parseKubeconfig(kc("file:///etc/passwd"), "/")).toThrow();
    expect(parseKubeconfig(kc("http://[::1]:8080"), "/").server).toBe("http://[::1]:8080");
  });
});
