import { describe, expect, test } from "bun:test";
import { buildPluginEntry } from "../../internal/installer/entry.ts";
import { envName, parseInstallerOptions, renderUsage } from "../../internal/installer/options.ts";

const DEFAULTS = { pluginBinary: "/opt/meshcni/meshcni" };

describe("parseInstallerOptions", () => {
  test("the contract's defaults", () => {
    expect(parseInstallerOptions([], {}, DEFAULTS)).toEqual({
      hostNetDir: "/host/etc/cni/net.d",
      hostBinDir: "/host/opt/cni/bin",
      destNetDir: "/etc/cni/net.d",
      pluginBinary: "/opt/meshcni/meshcni",
      hostRoot: "/host/root",
      serviceAccountDir: "/var/run/secrets/kubernetes.io/serviceaccount",
      mode: "run",
      logLevel: "info",
      stopPid: 1,
      help: false,
    });
  });

  test("flags win over MESHCNI_* variables, which win over defaults", () => {
    const env = {
      MESHCNI_HOST_NET_DIR: "/env/net", MESHCNI_HOST_BIN_DIR: "/env/bin", MESHCNI_CONF_NAME: "10-x.conflist",
      MESHCNI_HEALTH_PORT: "8000", MESHCNI_ONCE: "true", KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443",
      POD_NAMESPACE: "meshcni",
    };
    const o = parseInstallerOptions(["--host-net-dir", "/flag/net/", "--plugin-config=/p.json"], env, DEFAULTS);
    expect(o.hostNetDir).toBe("/flag/net");
    expect(o.hostBinDir).toBe("/env/bin");
    expect(o.confName).toBe("10-x.conflist");
    expect(o.healthPort).toBe(8000);
    expect(o.mode).toBe("once");
    expect(o.pluginConfig).toBe("/p.json");
    expect([o.serviceHost, o.servicePort, o.podNamespace]).toEqual(["10.96.0.1", "443", "meshcni"]);
    expect(parseInstallerOptions(["--uninstall"], {}, DEFAULTS).mode).toBe("uninstall");
    expect(parseInstallerOptions([], { MESHCNI_UNINSTALL: "1" }, DEFAULTS).mode).toBe("uninstall");
    expect(parseInstallerOptions([], { MESHCNI_ONCE: "false" }, DEFAULTS).mode).toBe("run");
  });

  test("every flag has its variable", () => {
    expect(envName("service-account-dir")).toBe("MESHCNI_SERVICE_ACCOUNT_DIR");
    for (const flag of ["host-net-dir", "host-bin-dir", "dest-net-dir", "plugin-binary", "plugin-config", "service-account-dir", "conf-name", "health-port", "once", "uninstall"]) {
      expect(renderUsage()).toContain(`--${flag}`);
      expect(renderUsage()).toContain(envName(flag));
    }
  });

  test("bad usage gets a clear answer", () => {
    const bad: [string[], Record<string, string>, RegExp][] = [
      [["--bogus"], {}, /Unknown option '--bogus'/],
      [["--once", "--uninstall"], {}, /exclude each other/],
      [["--health-port", "http"], {}, /--health-port "http": must be a number/],
      [[], { MESHCNI_HEALTH_PORT: "0" }, /must be 1-65535/],
      [["--host-net-dir", "relative/dir"], {}, /must be an absolute path/],
      [["--conf-name", "../x.conflist"], {}, /without a folder/],
      [["--log-level", "loud"], {}, /expected one of debug, info, warn, error/],
      [[], { MESHCNI_ONCE: "maybe" }, /MESHCNI_ONCE="maybe": expected true or false/],
      [["stray"], {}, /positional/],
    ];
    for (const [argv, env, message] of bad) expect(() => parseInstallerOptions(argv, env, DEFAULTS)).toThrow(message);
  });
});

describe("buildPluginEntry", () => {
  test("the default entry points at the kubeconfig in the dest dir and names the DaemonSet's namespace", () => {
    const e = buildPluginEntry(undefined, "/var/lib/rancher/k3s/agent/etc/cni/net.d/", "mesh-system");
    expect(e.type).toBe("meshcni");
    expect(e.kubernetes).toEqual({ kubeconfig: "/var/lib/rancher/k3s/agent/etc/cni/net.d/ZZZ-meshcni-kubeconfig", exclude_namespaces: [], pod_namespace: "mesh-system" });
    expect("cniVersion" in e).toBe(false);
  });

  test("a --plugin-config entry keeps its keys; cniVersion goes, the kubeconfig path is set", () => {
    const e = buildPluginEntry(JSON.stringify({ cniVersion: "0.3.1", type: "meshcni", mesh: "istio", kubernetes: { kubeconfig: "/elsewhere", exclude_namespaces: ["kube-system"] } }), "/etc/cni/net.d");
    expect(e).toEqual({ type: "meshcni", mesh: "istio", kubernetes: { kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig", exclude_namespaces: ["kube-system"] } });
  });

  test("an entry the plugin would reject is refused now, with the reason", () => {
    expect(() => buildPluginEntry("{", "/d")).toThrow(/not JSON/);
    expect(() => buildPluginEntry("[]", "/d")).toThrow(/must be a JSON object/);
    expect(() => buildPluginEntry('{"type":"linkerd-cni"}', "/d")).toThrow(/"type" is "linkerd-cni"/);
    expect(() => buildPluginEntry('{"type":"meshcni","mesh":"consul"}', "/d")).toThrow(/the plugin would reject it: mesh/);
    expect(() => buildPluginEntry('{"type":"meshcni","linkerd":{"proxy-uid":"x"}}', "/d")).toThrow(/linkerd.proxy-uid/);
    expect(() => buildPluginEntry('{"type":"meshcni","kubernetes":[]}', "/d")).toThrow(/"kubernetes" must be an object/);
  });
});
