// A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate, made
// with openssl for tests that need TLS.
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TestPki {
  dir: string;
  caPem: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  paths: { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string };
}

function openssl(args: string[], cwd: string): void {
  const r = Bun.spawnSync(["openssl", ...args], { cwd, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`openssl ${args.join(" ")}: ${r.stderr.toString()}`);
}

let cached: TestPki | undefined;

/** One PKI for every test process of the day, kept in the system's temp folder (certificates last 2 days). */
const SHARED = join(tmpdir(), "meshcni-test-pki");
const FRESH_MS = 24 * 3600 * 1000;

function generate(dir: string): void {
  openssl(
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-days",
      "2",
      "-subj",
      "/CN=meshcni-test-ca",
      "-keyout",
      "ca.key",
      "-out",
      "ca.crt",
    ],
    dir,
  );
  Bun.spawnSync(["sh", "-c", "printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\\n' > san.ext"], { cwd: dir });
  openssl(
    [
      "req",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-subj",
      "/CN=kube-apiserver",
      "-keyout",
      "server.key",
      "-out",
      "server.csr",
    ],
    dir,
  );
  openssl(
    [
      "x509",
      "-req",
      "-in",
      "server.csr",
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "2",
      "-extfile",
      "san.ext",
      "-out",
      "server.crt",
    ],
    dir,
  );
  openssl(
    [
      "req",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-subj",
      "/CN=system:serviceaccount:meshcni:meshcni/O=meshcni",
      "-keyout",
      "client.key",
      "-out",
      "client.csr",
    ],
    dir,
  );
  openssl(
    [
      "x509",
      "-req",
      "-in",
      "client.csr",
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "2",
      "-out",
      "client.crt",
    ],
    dir,
  );
}

export function makePki(): TestPki {
  if (cached) return cached;
  const ready =
    existsSync(join(SHARED, "client.crt")) && Date.now() - statSync(join(SHARED, "client.crt")).mtimeMs < FRESH_MS;
  if (!ready) {
    const fresh = mkdtempSync(join(tmpdir(), "meshcni-pki-"));
    generate(fresh);
    rmSync(SHARED, { recursive: true, force: true });
    try {
      renameSync(fresh, SHARED);
    } catch {
      rmSync(fresh, { recursive: true, force: true }); // another process won the race; use theirs
    }
  }
  const dir = SHARED;
  const read = (f: string) => readFileSync(join(dir, f), "utf8");
  cached = {
    dir,
    caPem: read("ca.crt"),
    serverCert: read("server.crt"),
    serverKey: read("server.key"),
    clientCert: read("client.crt"),
    clientKey: read("client.key"),
    paths: {
      ca: join(dir, "ca.crt"),
      serverCert: join(dir, "server.crt"),
      serverKey: join(dir, "server.key"),
      clientCert: join(dir, "client.crt"),
      clientKey: join(dir, "client.key"),
    },
  };
  return cached;
}
