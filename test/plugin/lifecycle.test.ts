// The spec's call sequence against a real pod network: ADD, CHECK, DEL (which leaves the rules to
// the namespace), DEL again, ADD into the kept namespace, DEL without a netns and after the netns
// is gone, STATUS and GC (1.1.0), and bad input that must leave the pod's namespace exactly as it
// was.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Netns, uniq } from "../support/netns.ts";
import { type Pod, PodLab, readFixture, withAnnotations } from "../support/pod-lab.ts";
import { cniEnv, PLUGIN, runPlugin, withTestState } from "../support/plugin-run.ts";

describe("lifecycle through the spec's call sequence (bridge + host-local + meshcni)", () => {
  let lab: PodLab;
  let pod: Pod;
  beforeAll(async () => {
    lab = await PodLab.start();
    lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
    pod = await lab.addPod(
      withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-life", {}),
      lab.entry({ linkerd: { ipv6: true } }),
    );
  });
  afterAll(() => lab?.close());

  test("ADD passed bridge's result on, in the list's version", () => {
    expect(pod.result.cniVersion).toBe("1.0.0");
    expect(pod.result.interfaces.some((i: { sandbox?: string }) => i.sandbox === pod.netns.path)).toBe(true);
    expect(pod.result.ips[0].version).toBeUndefined();
  });

  test("both families got their rules", () => {
    expect(pod.netns.save("nft", 4)).toContain("PROXY_INIT_REDIRECT");
    expect(pod.netns.save("nft", 6)).toContain("PROXY_INIT_REDIRECT");
  });

  test("CHECK in list order passes", async () => {
    await pod.runtime.check(pod.attachment);
  });

  test("DEL leaves the rules to the namespace (the runtime destroys it), and DEL again succeeds", async () => {
    const before = [pod.netns.save("nft", 4), pod.netns.save("nft", 6)];
    await pod.runtime.exec("DEL", pod.runtime.conflist.plugins[1]!, pod.attachment, pod.result);
    expect([pod.netns.save("nft", 4), pod.netns.save("nft", 6)]).toEqual(before);
    await pod.runtime.exec("DEL", pod.runtime.conflist.plugins[1]!, pod.attachment, pod.result);
  });

  test("ADD into the kept namespace replaces the rules: one copy, and CHECK passes", async () => {
    const before = [pod.netns.save("nft", 4), pod.netns.save("nft", 6)];
    await pod.runtime.exec("ADD", pod.runtime.conflist.plugins[1]!, pod.attachment, pod.result);
    const after = [pod.netns.save("nft", 4), pod.netns.save("nft", 6)];
    const count = (t: string) => t.split("\n").filter((l) => l.includes("install-proxy-init-prerouting")).length;
    expect(after.map(count)).toEqual([1, 1]);
    expect(after.map((t) => t.replace(/^#.*\n/gm, ""))).toEqual(before.map((t) => t.replace(/^#.*\n/gm, "")));
    await pod.runtime.check(pod.attachment);
  });

  test("DEL with an empty CNI_NETNS (as containerd sends after the task exits) succeeds", async () => {
    await pod.runtime.exec("DEL", pod.runtime.conflist.plugins[1]!, { ...pod.attachment, netns: "" }, pod.result);
  });

  test("the whole chain's DEL after the namespace is gone succeeds and frees the address", async () => {
    pod.netns.delete();
    await pod.runtime.del(pod.attachment);
    await pod.runtime.del(pod.attachment);
  });

  test("STATUS and GC in a 1.1.0 list", async () => {
    const rt = lab.runtime(lab.entry(), "1.1.0");
    const status = await rt.exec("STATUS", rt.conflist.plugins[1]!, { containerId: "", netns: "" });
    expect(status).toBeUndefined();
    const gc = await rt.exec(
      "GC",
      { ...rt.conflist.plugins[1]!, "cni.dev/valid-attachments": [] },
      { containerId: "", netns: "" },
    );
    expect(gc).toBeUndefined();
    // STATUS says so when the plugin cannot work: here, its kubeconfig is gone.
    const broken = lab.runtime(lab.entry({ kubernetes: { kubeconfig: "/nonexistent/kubeconfig" } }), "1.1.0");
    const err = await broken
      .exec("STATUS", broken.conflist.plugins[1]!, { containerId: "", netns: "" })
      .catch((e) => e);
    expect(JSON.parse(err.run.stdout).code).toBe(50);
  });

  test("STATUS names what the host lacks (code 50)", async () => {
    // Without iptables, nft and the in-process nftables path (MESHCNI_NFT_INPROCESS=0).
    const r = await hidden(
      "/usr/sbin",
      { CNI_COMMAND: "STATUS", MESHCNI_NFT_INPROCESS: "0" },
      JSON.stringify({ cniVersion: "1.1.0", name: "n", kubernetes: { kubeconfig: lab.kubeconfig } }),
    );
    expect(r.code).toBe(1);
    const err = JSON.parse(r.stdout);
    expect(err.code).toBe(50);
    expect(err.details).toContain("iptables-restore");
  });

  test("STATUS: a host with libnftables but no iptables and no nft binary can serve ADD (auto: nftables in process)", async () => {
    const r = await hidden(
      "/usr/sbin",
      { CNI_COMMAND: "STATUS" },
      JSON.stringify({ cniVersion: "1.1.0", name: "n", kubernetes: { kubeconfig: lab.kubeconfig } }),
    );
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: "" });
  });
});

describe("CHECK with an IPv4-mapped IPv6 range", () => {
  let lab: PodLab;
  beforeAll(async () => {
    lab = await PodLab.start();
    lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
  });
  afterAll(() => lab?.close());

  test("skip-subnets ::ffff:a00:0/104 is applied and CHECK finds it (ip6tables-save prints ::ffff:10.0.0.0/104)", async () => {
    const pod = await lab.addPod(
      withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-mapped", {
        "config.linkerd.io/skip-subnets": "10.1.0.0/16,::ffff:a00:0/104",
      }),
      lab.entry({ linkerd: { ipv6: true } }),
    );
    expect(pod.netns.save("nft", 6)).toContain("-s ::ffff:10.0.0.0/104");
    await pod.runtime.check(pod.attachment);
  });
});

describe("dry run: the environment variable, never silent", () => {
  let lab: PodLab;
  beforeAll(async () => {
    lab = await PodLab.start();
    lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
  });
  afterAll(() => lab?.close());

  test("MESHCNI_DRY_RUN_FILE alone (a stray line in a runtime's unit file) fails a meshed pod's ADD with code 4, its payload written; a pod that is not meshed passes", async () => {
    const dry = `${lab.dir}/stray-dry-run`;
    const err = await lab
      .addPod(withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-stray", {}), lab.entry(), {
        env: { MESHCNI_DRY_RUN_FILE: dry },
      })
      .catch((e) => e);
    expect(err.run?.type).toBe("meshcni");
    expect(JSON.parse(err.run.stdout)).toMatchObject({ code: 4, msg: "MESHCNI_DRY_RUN_FILE is set: no rules applied" });
    expect(JSON.parse(err.run.stdout).details).toContain(`went to ${dry} instead`);
    expect(await Bun.file(dry).text()).toContain("PROXY_INIT_REDIRECT");
    expect(err.run.stderr).toMatch(
      /meshcni: error[^:]*: dry run: MESHCNI_DRY_RUN_FILE is set in the plugin's environment, so no rules are applied to this pod/,
    );
    // A pod that gets no rules applies nothing either way: it starts, and the line is still there.
    const plain = await lab.addPod(await readFixture("testdata/pods/not-injected.json"), lab.entry(), {
      env: { MESHCNI_DRY_RUN_FILE: dry },
    });
    expect(plain.result.ips.length).toBeGreaterThan(0);
    expect(await Bun.file(dry).text()).toBe("");
    const add = plain.runtime.runs.find((r) => r.type === "meshcni")!;
    expect(add.stderr).toMatch(/meshcni: error[^:]*: dry run: MESHCNI_DRY_RUN_FILE is set in the plugin's environment/);
  });

  test('"dry_run": true with the variable writes the payload and applies nothing; without it, ADD fails with code 7', async () => {
    const dry = `${lab.dir}/dry-run`;
    const pod = await lab.addPod(
      withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-dry", {}),
      lab.entry({ dry_run: true }),
      { env: { MESHCNI_DRY_RUN_FILE: dry } },
    );
    expect(pod.netns.save("nft", 4)).not.toContain("PROXY_INIT_REDIRECT");
    expect(await Bun.file(dry).text()).toContain("PROXY_INIT_REDIRECT");
    const err = await lab
      .addPod(
        withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-nofile", {}),
        lab.entry({ dry_run: true }),
      )
      .catch((e) => e);
    expect(JSON.parse(err.run.stdout).code).toBe(7);
    expect(JSON.parse(err.run.stdout).msg).toBe("dry_run needs MESHCNI_DRY_RUN_FILE");
  });
});

/**
 * Runs the plugin on a "host" without the binaries of `dir`: a private mount namespace with an
 * empty tmpfs over that folder.
 */
async function hidden(dir: string, env: Record<string, string>, stdin: string) {
  const proc = Bun.spawn(
    ["unshare", "-m", "--propagation", "private", "sh", "-c", `mount -t tmpfs none ${dir} && exec "$0"`, PLUGIN],
    {
      stdin: new Blob([withTestState(stdin)]),
      stdout: "pipe",
      stderr: "pipe",
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", ...env },
    },
  );
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { stdout, stderr, code };
}

describe("bad input leaves the namespace untouched", () => {
  let lab: PodLab;
  let netns: Netns;
  const before: Record<string, string> = {};
  beforeAll(async () => {
    lab = await PodLab.start();
    lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
    const base = await readFixture("testdata/pods/linkerd-meshed.json");
    lab.api.addPod(withAnnotations(base, "web-bad-ports", { "config.linkerd.io/skip-inbound-ports": "80,99999" }));
    lab.api.addPod(
      withAnnotations(base, "web-bad-subnet", { "config.linkerd.io/skip-subnets": "10.0.0.0/8,10.0.0.1" }),
    );
    lab.api.addPod(withAnnotations(base, "web-bad-uid", { "config.linkerd.io/proxy-uid": "2102; rm -rf /" }));
    lab.api.addPod(
      withAnnotations(base, "web-newline", { "config.linkerd.io/skip-outbound-ports": "443\n-A OUTPUT -j ACCEPT" }),
    );
    netns = Netns.create(`mcb-${uniq()}`);
    // something of the pod's own, which must survive
    netns.exec(["iptables-nft", "-t", "nat", "-A", "OUTPUT", "-p", "udp", "--dport", "53", "-j", "RETURN"]);
    before.nft = netns.save("nft");
    before.legacy = netns.save("legacy");
  });
  afterAll(async () => {
    netns?.delete();
    await lab?.close();
  });

  const args = (name: string) => `IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=${name}`;
  const conf = (extra: Record<string, unknown> = {}) =>
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "n",
      type: "meshcni",
      kubernetes: { kubeconfig: lab.kubeconfig },
      linkerd: { "iptables-mode": "nft" },
      ...extra,
    });
  const strip = (s: string) => s.replace(/^#.*$/gm, "");

  const cases: [string, () => Promise<{ code: number; stdout: string }>, number][] = [
    [
      "malformed JSON",
      () => runPlugin(cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-bad-ports") }), "{"),
      6,
    ],
    [
      "wrong types",
      () =>
        runPlugin(
          cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-bad-ports") }),
          conf({ linkerd: { "proxy-uid": "2102" } }),
        ),
      7,
    ],
    ["an unknown version", () => runPlugin(cniEnv("ADD", { CNI_NETNS: netns.path }), conf({ cniVersion: "9.9.9" })), 1],
    ["missing environment", () => runPlugin({ CNI_COMMAND: "ADD", CNI_NETNS: netns.path }, conf()), 4],
    [
      "an invalid port annotation",
      () => runPlugin(cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-bad-ports") }), conf()),
      7,
    ],
    [
      "a CIDR annotation without a prefix length",
      () => runPlugin(cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-bad-subnet") }), conf()),
      7,
    ],
    [
      "a uid annotation with a command in it",
      () => runPlugin(cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-bad-uid") }), conf()),
      7,
    ],
    [
      "an annotation smuggling a rule on a new line",
      () => runPlugin(cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-newline") }), conf()),
      7,
    ],
  ];
  for (const [name, run, code] of cases) {
    test(`${name}: code ${code}`, async () => {
      const r = await run();
      expect(r.code).toBe(1);
      expect(JSON.parse(r.stdout).code).toBe(code);
      expect(strip(netns.save("nft"))).toBe(strip(before.nft!));
      expect(strip(netns.save("legacy"))).toBe(strip(before.legacy!));
    });
  }

  test("ADD into a namespace that does not exist: code 4, nothing applied anywhere", async () => {
    lab.api.addPod(withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-gone", {}));
    const r = await runPlugin(
      cniEnv("ADD", { CNI_NETNS: "/var/run/netns/does-not-exist", CNI_ARGS: args("web-gone") }),
      conf(),
    );
    expect(JSON.parse(r.stdout).code).toBe(4);
  });

  test("a host without the iptables binaries and no agent: fails closed, retryable (11), naming the one it needs", async () => {
    lab.api.addPod(withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-nobin", {}));
    const r = await hidden("/usr/sbin", cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-nobin") }), conf());
    const err = JSON.parse(r.stdout);
    expect(err.code).toBe(11);
    expect(err.details).toContain("the meshcni agent applies the rules");
    expect(err.msg).toBe("iptables-nft-restore not found on the host");
    expect(strip(netns.save("nft"))).toBe(strip(before.nft!));
  });

  test("a host without nsenter and no agent: fails closed, retryable (11), naming it", async () => {
    const r = await hidden("/usr/bin", cniEnv("ADD", { CNI_NETNS: netns.path, CNI_ARGS: args("web-nobin") }), conf());
    const err = JSON.parse(r.stdout);
    expect(err.code).toBe(11);
    expect(err.msg).toBe("nsenter not found on the host");
    expect(strip(netns.save("nft"))).toBe(strip(before.nft!));
  });
});
