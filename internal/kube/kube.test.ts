import { describe, expect, test } from "bun:test";
import { parseKubeconfig, readCluster, readUser } from "./kubeconfig.ts";
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
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        { cluster: { "certificate-authority-data": "QUJD", server: "https://[fd00::1]:6443" }, name: "local" },
      ],
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
    const t = parseKubeconfig(
      `apiVersion: v1
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
`.replace('cluster: {server: "https://x:1"}', "cluster:\n    server: https://x:1"),
      "/etc/cni/net.d",
    );
    expect(t).toEqual({
      server: "https://10.96.0.1:443",
      insecure: false,
      ca: { file: "/etc/cni/net.d/ca.crt" },
      token: { file: "/var/run/token" },
      clientCert: { file: "/c.pem" },
      clientKey: { data: "KEY" },
    });
  });
  test("a server that is not http(s)://HOST[:PORT][/PATH] is refused (the one check, meshcnictl's too)", () => {
    const kc = (server: string) =>
      `clusters:\n- name: a\n  cluster:\n    server: ${server}\ncontexts:\n` +
      `- name: c\n  context:\n    cluster: a\ncurrent-context: c\n`;
    // A proxy's path prefix is kept, as kubectl keeps it; trailing slashes go.
    expect(parseKubeconfig(kc("https://x/k8s/clusters/c-1/"), "/").server).toBe("https://x/k8s/clusters/c-1");
    expect(() => parseKubeconfig(kc("https://x/path?debug=1"), "/")).toThrow(/must be http\(s\):\/\/HOST\[:PORT\]/);
    expect(() => parseKubeconfig(kc("https://x#frag"), "/")).toThrow();
    expect(() => parseKubeconfig(kc("file:///etc/passwd"), "/")).toThrow();
    expect(parseKubeconfig(kc("http://[::1]:8080"), "/").server).toBe("http://[::1]:8080");
  });
});

describe("one kubeconfig reader: the cluster and user entries, for the plugin and meshcnictl alike", () => {
  test("readCluster and readUser", () => {
    expect(
      readCluster(
        { server: "https://10.0.0.1:6443/", "certificate-authority": "ca.crt", "insecure-skip-tls-verify": false },
        "/home/u/.kube",
      ),
    ).toEqual({ server: "https://10.0.0.1:6443", insecure: false, ca: { file: "/home/u/.kube/ca.crt" } });
    expect(() => readCluster({}, "/")).toThrow("the cluster has no server");
    expect(readUser({ tokenFile: "tok", username: "a", password: "b" }, "/d")).toEqual({
      token: { file: "/d/tok" },
      basic: { username: "a", password: "b" },
    });
    expect(
      readUser({ "client-certificate-data": Buffer.from("CERT").toString("base64"), "client-key": "/k.pem" }, "/d"),
    ).toEqual({ clientCert: { data: "CERT" }, clientKey: { file: "/k.pem" } });
    expect(() => readUser({ "client-certificate": "c.pem" }, "/d")).toThrow(
      "needs both client-certificate and client-key",
    );
    expect(() => readUser({ "client-certificate-data": "!!!!", "client-key-data": "!!!!" }, "/d")).toThrow(
      "client-certificate-data is not base64",
    );
  });
});
