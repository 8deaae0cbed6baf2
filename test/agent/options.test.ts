import { describe, expect, test } from "bun:test";
import { entryFromConfigText } from "../../internal/agent/install/entry.ts";
import { envName, parseAgentOptions, renderUsage, resolveRepairMode } from "../../internal/agent/options.ts";
import { REPAIR_MODES } from "../../internal/agent/repair/plan.ts";
import { REPAIR_VALUES } from "../../internal/cli/manifests/values.ts";

const DEFAULTS = { pluginBinary: "/opt/meshcni/meshcni" };

describe("parseAgentOptions", () => {
  test("the contract's defaults", () => {
    expect(parseAgentOptions([], {}, DEFAULTS)).toEqual({
      hostNetDir: "/host/etc/cni/net.d",
      hostBinDir: "/host/opt/cni/bin",
      destNetDir: "/etc/cni/net.d",
      destBinDir: "/opt/cni/bin",
      pluginBinary: "/opt/meshcni/meshcni",
      hostRoot: "/host/root",
      serviceAccountDir: "/var/run/secrets/kubernetes.io/serviceaccount",
      pluginServiceAccount: "meshcni-plugin",
      pluginTokenSeconds: 86400,
      mode: "run",
      logLevel: "info",
      agentSocket: "/var/run/meshcni/agent.sock",
      stateDir: "/var/run/meshcni",
      netnsDir: "/var/run/netns",
      maxRecords: 4096,
      agentApplies: true,
      daemonSetName: "meshcni-node",
      resyncSeconds: 60,
      repair: "auto",
      verifySeconds: 60,
      repairGraceSeconds: 30,
      repairRate: 10,
      repairRetrySeconds: 60,
      help: false,
    });
  });

  test("repair and the startup taint: --repair evict|delete|off, grace and rate, --startup-taint KEY (each also MESHCNI_*)", () => {
    const o = parseAgentOptions(
      ["--repair", "off", "--startup-taint", "meshcni.io/not-ready"],
      { MESHCNI_REPAIR_GRACE_SECONDS: "5", MESHCNI_REPAIR_RATE: "2" },
      DEFAULTS,
    );
    expect([o.repair, o.repairGraceSeconds, o.repairRate, o.startupTaint]).toEqual([
      "off",
      5,
      2,
      "meshcni.io/not-ready",
    ]);
    expect(parseAgentOptions([], { MESHCNI_STARTUP_TAINT: "node.example.com/cni" }, DEFAULTS).startupTaint).toBe(
      "node.example.com/cni",
    );
    expect(parseAgentOptions(["--repair", "delete"], {}, DEFAULTS).repair).toBe("delete");
    expect(parseAgentOptions([], { MESHCNI_REPAIR: "evict" }, DEFAULTS).repair).toBe("evict");
    expect(() => parseAgentOptions(["--repair", "yes"], {}, DEFAULTS)).toThrow(
      '--repair "yes": expected evict, delete, off or in-place',
    );
    expect(parseAgentOptions(["--repair", "in-place"], {}, DEFAULTS).repair).toBe("in-place");
    // Without the flag: in-place when the agent applies rules itself, else evict (the contract).
    expect(resolveRepairMode("auto", true)).toBe("in-place");
    expect(resolveRepairMode("auto", false)).toBe("evict");
    expect(resolveRepairMode("delete", true)).toBe("delete");
    expect(parseAgentOptions(["--verify-seconds", "0"], {}, DEFAULTS).verifySeconds).toBe(0);
    expect(parseAgentOptions([], { MESHCNI_VERIFY_SECONDS: "2" }, DEFAULTS).verifySeconds).toBe(2);
    expect(() => parseAgentOptions(["--verify-seconds=-1"], {}, DEFAULTS)).toThrow("expected a whole number");
    // The manifests render exactly the modes the agent takes.
    expect([...REPAIR_VALUES]).toEqual([...REPAIR_MODES]);
    expect(() => parseAgentOptions(["--repair-rate", "0"], {}, DEFAULTS)).toThrow("expected a whole number, 1 or more");
    expect(() => parseAgentOptions(["--startup-taint", "bad key"], {}, DEFAULTS)).toThrow("not a taint key");
  });

  test("the plugin's identity: --plugin-service-account NAME and --plugin-token-seconds N (each also MESHCNI_*)", () => {
    const o = parseAgentOptions(
      ["--plugin-service-account", "cni-reader"],
      { MESHCNI_PLUGIN_TOKEN_SECONDS: "3600" },
      DEFAULTS,
    );
    expect([o.pluginServiceAccount, o.pluginTokenSeconds]).toEqual(["cni-reader", 3600]);
    expect(
      parseAgentOptions(["--plugin-token-seconds", "600"], { MESHCNI_PLUGIN_TOKEN_SECONDS: "3600" }, DEFAULTS)
        .pluginTokenSeconds,
    ).toBe(600);
    // The API server refuses a TokenRequest under 10 minutes.
    expect(() => parseAgentOptions(["--plugin-token-seconds", "599"], {}, DEFAULTS)).toThrow(
      '--plugin-token-seconds "599": expected a whole number of seconds, 600',
    );
    expect(() => parseAgentOptions(["--plugin-token-seconds", "1d"], {}, DEFAULTS)).toThrow("--plugin-token-seconds");
    expect(() => parseAgentOptions([], { MESHCNI_PLUGIN_SERVICE_ACCOUNT: "Not_A_Name" }, DEFAULTS)).toThrow(
      '--plugin-service-account "Not_A_Name": not a Kubernetes object name',
    );
  });

  test("the agent's flags: node name from NODE_NAME unless given, each flag also MESHCNI_<FLAG>", () => {
    expect(parseAgentOptions([], { NODE_NAME: "node-a" }, DEFAULTS).nodeName).toBe("node-a");
    expect(parseAgentOptions([], { NODE_NAME: "node-a", MESHCNI_NODE_NAME: "node-b" }, DEFAULTS).nodeName).toBe(
      "node-b",
    );
    expect(
      parseAgentOptions(["--node-name", "node-c"], { NODE_NAME: "node-a", MESHCNI_NODE_NAME: "node-b" }, DEFAULTS)
        .nodeName,
    ).toBe("node-c");
    const o = parseAgentOptions(
      ["--agent-socket", "/run/m/a.sock", "--state-dir", "/run/m/"],
      {
        MESHCNI_DAEMONSET_NAME: "mesh-node",
        MESHCNI_RESYNC_SECONDS: "5",
      },
      DEFAULTS,
    );
    expect([o.agentSocket, o.stateDir, o.daemonSetName, o.resyncSeconds]).toEqual([
      "/run/m/a.sock",
      "/run/m",
      "mesh-node",
      5,
    ]);
  });

  test("flags win over MESHCNI_* variables, which win over defaults", () => {
    const env = {
      MESHCNI_HOST_NET_DIR: "/env/net",
      MESHCNI_HOST_BIN_DIR: "/env/bin",
      MESHCNI_CONF_NAME: "10-x.conflist",
      MESHCNI_HEALTH_PORT: "8000",
      MESHCNI_ONCE: "true",
      KUBERNETES_SERVICE_HOST: "10.96.0.1",
      KUBERNETES_SERVICE_PORT: "443",
      POD_NAMESPACE: "meshcni",
    };
    const o = parseAgentOptions(["--host-net-dir", "/flag/net/", "--plugin-config=/p.json"], env, DEFAULTS);
    expect(o.hostNetDir).toBe("/flag/net");
    expect(o.hostBinDir).toBe("/env/bin");
    expect(o.confName).toBe("10-x.conflist");
    expect(o.healthPort).toBe(8000);
    expect(o.mode).toBe("once");
    expect(o.pluginConfig).toBe("/p.json");
    expect([o.serviceHost, o.servicePort, o.podNamespace]).toEqual(["10.96.0.1", "443", "meshcni"]);
    expect(parseAgentOptions(["--uninstall"], {}, DEFAULTS).mode).toBe("uninstall");
    expect(parseAgentOptions([], { MESHCNI_UNINSTALL: "1" }, DEFAULTS).mode).toBe("uninstall");
    expect(parseAgentOptions([], { MESHCNI_ONCE: "false" }, DEFAULTS).mode).toBe("run");
  });

  test("every flag has its variable", () => {
    expect(envName("service-account-dir")).toBe("MESHCNI_SERVICE_ACCOUNT_DIR");
    for (const flag of [
      "host-net-dir",
      "host-bin-dir",
      "dest-net-dir",
      "dest-bin-dir",
      "plugin-binary",
      "plugin-config",
      "service-account-dir",
      "conf-name",
      "health-port",
      "node-name",
      "agent-socket",
      "state-dir",
      "daemonset-name",
      "resync-seconds",
      "plugin-service-account",
      "plugin-token-seconds",
      "once",
      "uninstall",
    ]) {
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
      [["--stop"], {}, /Unknown option '--stop'/],
      [["--agent-socket", "run/agent.sock"], {}, /--agent-socket "run\/agent.sock": must be an absolute path/],
      [["--agent-socket", `/${"x".repeat(120)}.sock`], {}, /longer than a Unix socket path may be/],
      [["--state-dir", "state"], {}, /--state-dir "state": must be an absolute path/],
      [["--daemonset-name", "Mesh_Node"], {}, /not a Kubernetes object name/],
      [[], { NODE_NAME: "node a" }, /--node-name "node a": not a Kubernetes node name/],
      [["--resync-seconds", "0"], {}, /--resync-seconds "0": expected a whole number of seconds/],
    ];
    for (const [argv, env, message] of bad) expect(() => parseAgentOptions(argv, env, DEFAULTS)).toThrow(message);
  });
});

describe("entryFromConfigText", () => {
  test("the agent's socket and state folder, as the host sees them, go into the entry", () => {
    const e = entryFromConfigText(undefined, "/etc/cni/net.d", "meshcni", {
      socket: "/var/run/meshcni/agent.sock",
      stateDir: "/var/run/meshcni",
    });
    expect([e.agent_socket, e.state_dir]).toEqual(["/var/run/meshcni/agent.sock", "/var/run/meshcni"]);
    // A --plugin-config's own values are replaced: the agent serves the socket it names.
    const given = entryFromConfigText(
      '{"type":"meshcni","agent_socket":"/elsewhere.sock"}',
      "/etc/cni/net.d",
      undefined,
      { socket: "/run/a.sock", stateDir: "/run" },
    );
    expect(given.agent_socket).toBe("/run/a.sock");
  });

  test("the default entry points at the kubeconfig in the dest dir and names the DaemonSet's namespace", () => {
    const e = entryFromConfigText(undefined, "/var/lib/rancher/k3s/agent/etc/cni/net.d/", "mesh-system");
    expect(e.type).toBe("meshcni");
    expect(e.kubernetes).toEqual({
      kubeconfig: "/var/lib/rancher/k3s/agent/etc/cni/net.d/ZZZ-meshcni-kubeconfig",
      exclude_namespaces: [],
      pod_namespace: "mesh-system",
    });
    expect("cniVersion" in e).toBe(false);
  });

  test("a --plugin-config entry keeps its keys; cniVersion goes, the kubeconfig path is set", () => {
    const e = entryFromConfigText(
      JSON.stringify({
        cniVersion: "0.3.1",
        type: "meshcni",
        mesh: "istio",
        kubernetes: { kubeconfig: "/elsewhere", exclude_namespaces: ["kube-system"] },
      }),
      "/etc/cni/net.d",
    );
    expect(e).toEqual({
      type: "meshcni",
      mesh: "istio",
      kubernetes: { kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig", exclude_namespaces: ["kube-system"] },
    });
  });

  test("an entry the plugin would reject is refused now, with the reason", () => {
    expect(() => entryFromConfigText("{", "/d")).toThrow(/not JSON/);
    expect(() => entryFromConfigText("[]", "/d")).toThrow(/must be a JSON object/);
    expect(() => entryFromConfigText('{"type":"linkerd-cni"}', "/d")).toThrow(/"type" is "linkerd-cni"/);
    expect(() => entryFromConfigText('{"type":"meshcni","mesh":"consul"}', "/d")).toThrow(
      /the plugin would reject it: mesh/,
    );
    expect(() => entryFromConfigText('{"type":"meshcni","linkerd":{"proxy-uid":"x"}}', "/d")).toThrow(
      /linkerd.proxy-uid/,
    );
    expect(() => entryFromConfigText('{"type":"meshcni","kubernetes":[]}', "/d")).toThrow(
      /"kubernetes" must be an object/,
    );
  });
});

describe("--agent-applies", () => {
  test("true by default; false (or MESHCNI_AGENT_APPLIES=false) turns applying off; anything else is refused", () => {
    expect(parseAgentOptions([], {}, DEFAULTS).agentApplies).toBe(true);
    expect(parseAgentOptions(["--agent-applies=false"], {}, DEFAULTS).agentApplies).toBe(false);
    expect(parseAgentOptions([], { MESHCNI_AGENT_APPLIES: "false" }, DEFAULTS).agentApplies).toBe(false);
    expect(() => parseAgentOptions(["--agent-applies", "maybe"], {}, DEFAULTS)).toThrow(/expected true or false/);
  });
});
