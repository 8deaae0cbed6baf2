// A stand-in for the Kubernetes API server: it answers GETs for the objects it holds, the way
// kube-apiserver does (JSON objects, Status bodies for errors), checks a bearer token or a client
// certificate, and can be told to misbehave: any status, slow answers, dropped connections,
// truncated bodies. Used by the plugin tests, the CLI's `check` tests and `npm run demo`.
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import { makePki } from "./certs.ts";

export type Fault =
  | { kind: "status"; code: number }
  | { kind: "slow"; ms: number }
  | { kind: "drop" }
  | { kind: "truncate" }
  | { kind: "garbage" };

export interface ApiRequest {
  method: string;
  path: string;
  authorization?: string;
  clientCertCN?: string;
}

export interface ApiServerOptions {
  tls?: boolean;
  /** Bearer token the server accepts; undefined accepts any request. */
  token?: string;
  /** Also accept a client certificate signed by the test CA. */
  acceptClientCert?: boolean;
  host?: string;
}

/** A route's answer; `text` is sent as it is (text/plain) instead of `body` as JSON. */
export type HandlerAnswer = { status: number; body: unknown; text?: string };
export type Handler = (req: ApiRequest, body: string) => HandlerAnswer | undefined | Promise<HandlerAnswer | undefined>;

export interface ApiServer {
  url: string;
  caPem: string;
  token?: string;
  requests: ApiRequest[];
  /** Objects by API path, e.g. /api/v1/namespaces/demo/pods/web. */
  objects: Map<string, unknown>;
  faults: Map<string, Fault>;
  /** A fault for every path. */
  setGlobalFault(f: Fault | undefined): void;
  addPod(pod: { metadata: { name: string; namespace?: string } }): void;
  addNamespace(ns: { metadata: { name: string; annotations?: Record<string, string> } }): void;
  /** Extra routes (e.g. POST of SelfSubjectAccessReview); return undefined to fall through. */
  handlers: Handler[];
  /** A kubeconfig (YAML text) for this server. */
  kubeconfig(opts?: { token?: string; clientCert?: boolean; caFile?: string }): string;
  close(): Promise<void>;
}

function status(code: number, reason: string, message: string) {
  return { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code };
}

const REASONS: Record<number, string> = {
  400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "AlreadyExists",
  429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
};

export async function startApiServer(opts: ApiServerOptions = {}): Promise<ApiServer> {
  const tls = opts.tls ?? true;
  const pki = makePki();
  const objects = new Map<string, unknown>();
  const faults = new Map<string, Fault>();
  const requests: ApiRequest[] = [];
  const handlers: Handler[] = [];
  let globalFault: Fault | undefined;

  const listener = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0]!;
    let body = "";
    for await (const chunk of req) body += chunk;
    const sock = req.socket as TLSSocket;
    let cn: string | undefined;
    // With requestCert and rejectUnauthorized off, `authorized` says a client certificate signed
    // by the test CA was presented (Bun's sockets do not offer getPeerCertificate everywhere).
    if (tls && opts.acceptClientCert && sock.authorized) {
      const subject = typeof sock.getPeerCertificate === "function" ? sock.getPeerCertificate()?.subject?.CN : undefined;
      cn = (Array.isArray(subject) ? subject[0] : subject) ?? "verified-client-certificate";
    }
    const entry: ApiRequest = { method: req.method ?? "GET", path };
    if (req.headers.authorization) entry.authorization = req.headers.authorization;
    if (cn) entry.clientCertCN = cn;
    requests.push(entry);
    const send = (code: number, obj: unknown) => {
      const text = JSON.stringify(obj);
      res.writeHead(code, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
      res.end(text);
    };
    const fault = faults.get(path) ?? globalFault;
    if (fault?.kind === "drop") {
      req.socket.destroy();
      return;
    }
    if (fault?.kind === "slow") await Bun.sleep(fault.ms);
    if (fault?.kind === "status") {
      send(fault.code, status(fault.code, REASONS[fault.code] ?? "Unknown", `stand-in fault ${fault.code}`));
      return;
    }
    const authorized = opts.token === undefined || req.headers.authorization === `Bearer ${opts.token}` || cn !== undefined;
    if (!authorized) {
      send(401, status(401, "Unauthorized", "Unauthorized"));
      return;
    }
    for (const h of handlers) {
      const out = await h(entry, body);
      if (out?.text !== undefined) {
        res.writeHead(out.status, { "Content-Type": "text/plain; charset=utf-8", "Content-Length": Buffer.byteLength(out.text) });
        res.end(out.text);
        return;
      }
      if (out) return send(out.status, out.body);
    }
    const obj = req.method === "GET" ? objects.get(path) : undefined;
    if (obj === undefined) {
      const name = path.split("/").pop() ?? "";
      send(404, status(404, "NotFound", `${path.split("/").slice(-2, -1)[0] ?? "object"} "${name}" not found`));
      return;
    }
    if (fault?.kind === "truncate") {
      const text = JSON.stringify(obj);
      res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
      res.write(text.slice(0, Math.floor(text.length / 2)));
      setTimeout(() => req.socket.destroy(), 20);
      return;
    }
    if (fault?.kind === "garbage") {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end("<html>not json</html>");
      return;
    }
    send(200, obj);
  };

  const server = tls
    ? https.createServer({
        cert: pki.serverCert,
        key: pki.serverKey,
        ca: pki.caPem,
        requestCert: !!opts.acceptClientCert,
        rejectUnauthorized: false,
      }, listener)
    : http.createServer(listener);
  const host = opts.host ?? "127.0.0.1";
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  const hostPart = host.includes(":") ? `[${host}]` : host;
  const url = `${tls ? "https" : "http"}://${hostPart}:${port}`;

  const api: ApiServer = {
    url,
    caPem: pki.caPem,
    requests,
    objects,
    faults,
    handlers,
    setGlobalFault: (f) => { globalFault = f; },
    addPod(pod) {
      objects.set(`/api/v1/namespaces/${pod.metadata.namespace ?? "default"}/pods/${pod.metadata.name}`, pod);
    },
    addNamespace(ns) {
      objects.set(`/api/v1/namespaces/${ns.metadata.name}`, ns);
    },
    kubeconfig(k = {}) {
      const token = k.token ?? opts.token;
      const caLine = !tls ? "" : k.caFile
        ? `    certificate-authority: ${k.caFile}\n`
        : `    certificate-authority-data: ${Buffer.from(pki.caPem).toString("base64")}\n`;
      const userLines = [
        token !== undefined ? `    token: ${token}` : "",
        k.clientCert ? `    client-certificate-data: ${Buffer.from(pki.clientCert).toString("base64")}` : "",
        k.clientCert ? `    client-key-data: ${Buffer.from(pki.clientKey).toString("base64")}` : "",
      ].filter(Boolean).join("\n");
      return [
        "# kubeconfig for the stand-in API server",
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: local",
        "  cluster:",
        `    server: ${url}`,
        caLine.trimEnd(),
        "users:",
        "- name: meshcni",
        "  user:",
        userLines || "    username: anonymous",
        "contexts:",
        "- name: meshcni-context",
        "  context:",
        "    cluster: local",
        "    user: meshcni",
        "current-context: meshcni-context",
        "",
      ].filter((l) => l !== "").join("\n") + "\n";
    },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections?.();
      server.close(() => resolve());
    }),
  };
  if (opts.token !== undefined) api.token = opts.token;
  return api;
}

// ---- the pod proxy ----------------------------------------------------------------------------
// GET /api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH, as kube-apiserver forwards it to the pod:
// the pod's own answer passed through, a Status 503 "error trying to reach service" when the
// pod does not answer, a Status 404 for a pod the route table does not know.

export type PodProxyTarget =
  /** A canned answer for every path of this pod (JSON body, or `text` as it is). */
  | { status?: number; body?: unknown; text?: string }
  /** Forwards to a real server (e.g. an agent's health port): "http://127.0.0.1:PORT". */
  | { forward: string }
  /** The dial fails, as for a pod whose process is down. */
  | { unreachable: string };

const PROXY_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/:]+)(?::(\d+))?\/proxy(\/.*)?$/;

/** A Handler answering the pod proxy paths of the pods in `routes` (keyed "NS/NAME"). */
export function podProxyHandler(routes: Map<string, PodProxyTarget>): Handler {
  return async (req) => {
    const m = PROXY_PATH.exec(req.path);
    if (!m || req.method !== "GET") return undefined;
    const [, ns, name, port, rest] = m;
    const target = routes.get(`${ns}/${name}`);
    if (!target) return { status: 404, body: status(404, "NotFound", `pods "${name}" not found`) };
    if ("unreachable" in target) {
      return { status: 503, body: status(503, "ServiceUnavailable", `error trying to reach service: dial tcp 10.244.0.10:${port ?? "80"}: ${target.unreachable}`) };
    }
    if ("forward" in target) {
      try {
        const res = await fetch(`${target.forward}${rest ?? "/"}`, { signal: AbortSignal.timeout(5000) });
        const text = await res.text();
        try {
          return { status: res.status, body: JSON.parse(text) };
        } catch {
          return { status: res.status, body: null, text };
        }
      } catch (e) {
        return { status: 503, body: status(503, "ServiceUnavailable", `error trying to reach service: ${(e as Error).message}`) };
      }
    }
    if (target.text !== undefined) return { status: target.status ?? 200, body: null, text: target.text };
    return { status: target.status ?? 200, body: target.body ?? {} };
  };
}
