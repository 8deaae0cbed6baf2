// The least any plugin that asks a node agent can do, compiled as the plugin is and run in the
// same rounds, to show where the warm agent's targets sit against the steps no design can skip:
// read stdin, parse it, and then
// - ADD: one request and its whole answer on the agent's socket (GET /v1/pods/NS/NAME, answered
//   from memory), the result on stdout; no report, since the agent reports an answer without
//   rules itself (as it does for the plugin's planned ADD);
// - DEL: look for the container's record (a stat), one report on a new connection.
// No validation, no decision, no rules, no log line: a floor, not a plugin.
// With LEAST_PAYLOAD (iptables-restore text) in its environment, an ADD also applies it in
// CNI_NETNS as the plugin must (Bun.spawn of nsenter + iptables-nft-restore) and then reports
// on the same connection: what a meshed pod's ADD costs any Bun plugin, the process start
// included.
// With LEAST_VERSION (the plugin's version) instead, an ADD is the plugin's own request to an
// agent that applies: POST /v1/add with the command (the agent decides, applies in the pod's
// namespace, writes the record and reports), its whole answer read, the result printed: the
// least a plugin does when the agent does the work.
const stdin = await Bun.file(0).text();
const conf = JSON.parse(stdin) as { agent_socket: string; state_dir: string };
const env = Bun.env;
const args = Object.fromEntries((env.CNI_ARGS ?? "").split(";").map((kv) => kv.split("=") as [string, string]));
const report = JSON.stringify({
  v: 1,
  command: env.CNI_COMMAND,
  containerId: env.CNI_CONTAINERID,
  outcome: "ok",
  reason: "floor",
  durationMs: 0,
  lines: [],
  time: new Date().toISOString(),
  version: "floor",
});
const post =
  `POST /v1/reports HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n` +
  `Content-Length: ${Buffer.byteLength(report)}\r\nConnection: close\r\n\r\n${report}`;

if (env.CNI_COMMAND === "DEL") {
  void Bun.file(`${conf.state_dir}/containers/${env.CNI_CONTAINERID}.json`).size;
  await new Promise<void>((done) => {
    Bun.connect({
      unix: conf.agent_socket,
      socket: {
        open(s) {
          s.end(post);
          done();
        },
        data() {},
        error() {
          done();
        },
        connectError() {
          done();
        },
      },
    }).catch(() => done());
  });
} else if (env.LEAST_VERSION) {
  const keys = ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"];
  const e: Record<string, string> = {};
  for (const k of keys) if (env[k] !== undefined) e[k] = env[k];
  const body = JSON.stringify({ v: 1, version: env.LEAST_VERSION, env: e, stdin, startedMs: Date.now() });
  const req = `POST /v1/add HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
  const answer = await new Promise<string>((done) => {
    let got = "";
    Bun.connect({
      unix: conf.agent_socket,
      socket: {
        open(s) {
          s.write(req);
        },
        data(_s, d) {
          got += d.toString("latin1");
        },
        close() {
          done(got);
        },
        error() {
          done(got);
        },
        connectError() {
          done(got);
        },
      },
    }).catch(() => done(got));
  });
  if (!answer.includes('"applied"')) {
    await Bun.write(Bun.stderr, `the agent did not apply: ${answer.slice(0, 500)}\n`);
    process.exit(1);
  }
  await Bun.write(Bun.stdout, `${JSON.stringify(conf)}\n`);
} else {
  await new Promise<void>((done) => {
    let got = "";
    Bun.connect({
      unix: conf.agent_socket,
      socket: {
        open(s) {
          s.write(`GET /v1/pods/${args.K8S_POD_NAMESPACE}/${args.K8S_POD_NAME} HTTP/1.1\r\nHost: a\r\n\r\n`);
        },
        data(s, d) {
          got += d.toString("latin1");
          const head = got.indexOf("\r\n\r\n");
          const at = got.indexOf("Content-Length: ");
          if (head < 0 || at < 0) return;
          if (got.length - head - 4 < Number(got.slice(at + 16, got.indexOf("\r\n", at)))) return;
          if (env.LEAST_PAYLOAD) {
            const p = Bun.spawn(["nsenter", `--net=${env.CNI_NETNS}`, "--", "iptables-nft-restore", "--noflush"], {
              stdin: new Blob([env.LEAST_PAYLOAD]),
              stdout: "pipe",
              stderr: "pipe",
            });
            void Promise.all([p.stdout.text(), p.stderr.text(), p.exited]).then(() => {
              s.end(post);
              done();
            });
            return;
          }
          s.end();
          done();
        },
        error() {
          done();
        },
        connectError() {
          done();
        },
      },
    }).catch(() => done());
  });
  await Bun.write(Bun.stdout, `${JSON.stringify(conf)}\n`);
}
process.exit(0);
export {};
