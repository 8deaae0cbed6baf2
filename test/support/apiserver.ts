// A stand-in for the Kubernetes API server: it answers GETs for the objects it holds, the way
// kube-apiserver does (JSON objects, Status bodies for errors), checks a bearer token or a client
// certificate, and can be told to misbehave: any status, slow answers, dropped connections,
// truncated bodies. Used by the plugin tests, the CLI's `check` tests and `npm run demo`.
//
// It also lists and watches pods and namespaces with Kubernetes' semantics, for the agent's watch
// cache: every change made through addPod/updatePod/deletePod/addNamespace/deleteNamespace gets the
// next resourceVersion (a cluster-wide counter, in metadata.resourceVersion and in the lists'
// metadata); `GET /api/v1/pods?fieldSelector=spec.nodeName=NODE`, `GET /api/v1/namespaces/NS/pods`
// (field selectors `spec.nodeName=NODE`, `metadata.name=NAME`, comma-separated: all must match)
// and `GET /api/v1/namespaces` list;
// `?watch=1&resourceVersion=RV` streams the changes after RV as chunked JSON lines
// ({"type":"ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK","object":...}), a pod that starts or stops
// matching the field selector arriving as ADDED or DELETED, as kube-apiserver does. A watch from a
// resourceVersion older than the last compaction gets one ERROR event with a 410 Status (or a 410
// answer with `expiredAsStatus`). Helpers: bookmarks, compaction, dropping every watch, an outage.
//
// Identities: the TokenRequest API (`POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`)
// issues a token for a service account with an expiry (`expirationSeconds` honoured, shortened
// to `maxTokenSeconds` when that is set, as kube-apiserver's --service-account-max-token-expiration
// does), and the server answers 401 for an issued token once it has expired. With `identities`
// (static tokens and the user each stands for), only known tokens are accepted; with `rbac` (the
// Roles, ClusterRoles and bindings, e.g. meshcnictl install-cni's), each request of a known user
// is authorized against them and refused with a 403 Status when the user lacks the verb. Without
// either, any request (or the one `token`) is accepted, as before.
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import { makePki } from "./certs.ts";
import { forbiddenMessage, rbacAllows, requestAttributes, serviceAccountUser } from "./rbac.ts";

export type Fault =
  | { kind: "status"; code: number }
  | { kind: "slow"; ms: number }
  | { kind: "drop" }
  | { kind: "truncate" }
  | { kind: "garbage" };

export interface ApiRequest {
  method: string;
  path: string;
  /** The query string without `?` ("" when none). */
  query: string;
  authorization?: string;
  clientCertCN?: string;
  /** The user an issued or known token stands for. */
  user?: string;
}

/** A token the TokenRequest API issued. */
export interface IssuedToken {
  token: string;
  /** system:serviceaccount:NS:NAME */
  user: string;
  /** Epoch milliseconds; the server answers 401 for it from then on. */
  expiresAt: number;
  /** The lifetime asked for, and the one granted. */
  requestedSeconds?: number;
  grantedSeconds: number;
  /** The request's spec.boundObjectRef, as sent (null when none). */
  boundObjectRef: unknown;
  /** Who asked (the user of the request's token), when known. */
  by?: string;
}

export interface ApiServerOptions {
  tls?: boolean;
  /** Bearer token the server accepts; undefined accepts any request. */
  token?: string;
  /** Also accept a client certificate signed by the test CA. */
  acceptClientCert?: boolean;
  host?: string;
  /**
   * Static bearer tokens and the user each stands for (e.g. the agent's own service account,
   * `system:serviceaccount:meshcni:meshcni`). With it, only these and issued tokens are
   * accepted, and a TokenRequest needs the ServiceAccount object.
   */
  identities?: Record<string, string>;
  /** RBAC objects authorizing the requests of known users (403 otherwise). */
  rbac?: unknown[];
  /** TokenRequest grants at most this many seconds. */
  maxTokenSeconds?: number;
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
  /** Replaces a pod (MODIFIED to watchers; ADDED when it was not there). */
  updatePod(pod: { metadata: { name: string; namespace?: string } }): void;
  deletePod(namespace: string, name: string): void;
  deleteNamespace(name: string): void;
  /** The current resourceVersion (the last change's). */
  resourceVersion(): number;
  /**
   * Requests so far: all of them, or those for `path` (without query), optionally only one kind:
   * "get" (not a list or a watch), "list" or "watch".
   */
  count(path?: string, kind?: "get" | "list" | "watch"): number;
  /** Sends a BOOKMARK with the current resourceVersion to every watch that allowed bookmarks. */
  bookmark(): void;
  /**
   * Forgets the change history up to now: a watch or list from an older resourceVersion gets 410.
   * With `expireWatches`, open watches get the 410 ERROR event and are closed (a watch that fell
   * too far behind).
   */
  compact(opts?: { expireWatches?: boolean }): void;
  /** Closes every open watch connection abruptly (no final chunk), as a restarting API server does. */
  dropWatches(): void;
  /** Open watch connections. */
  watches(): number;
  /**
   * An outage: "refuse" closes every connection as it arrives, "500" answers 500 to everything;
   * both drop open watches. undefined ends it.
   */
  setOutage(kind: "refuse" | "500" | undefined): void;
  /** Answer a watch from an expired resourceVersion with a 410 status instead of an ERROR event. */
  expiredAsStatus: boolean;
  /** A kubeconfig (YAML text) for this server. */
  kubeconfig(opts?: { token?: string; clientCert?: boolean; caFile?: string }): string;
  /** Static tokens and their users (see ApiServerOptions.identities); changes take effect at once. */
  identities: Map<string, string>;
  /** RBAC objects (see ApiServerOptions.rbac); undefined authorizes everything. */
  rbac: unknown[] | undefined;
  /** TokenRequest's cap (seconds); undefined grants what is asked. */
  maxTokenSeconds: number | undefined;
  /** Tokens issued so far, in order. */
  issued: IssuedToken[];
  /** Issues a token as TokenRequest does (for a test that needs one without asking). */
  issueToken(namespace: string, name: string, seconds: number): IssuedToken;
  /** Expires the issued tokens (of one user, or all) now: from now on they get 401. */
  expireTokens(user?: string): void;
  close(): Promise<void>;
}

function status(code: number, reason: string, message: string) {
  return { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code };
}

/** A namespace's pods: /api/v1/namespaces/NS/pods. */
const NAMESPACED_PODS = /^\/api\/v1\/namespaces\/([^/]+)\/pods$/;

const REASONS: Record<number, string> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  409: "AlreadyExists",
  429: "TooManyRequests",
  500: "InternalError",
  503: "ServiceUnavailable",
};

export async function startApiServer(opts: ApiServerOptions = {}): Promise<ApiServer> {
  const tls = opts.tls ?? true;
  const pki = makePki();
  const objects = new Map<string, unknown>();
  const faults = new Map<string, Fault>();
  const requests: ApiRequest[] = [];
  const handlers: Handler[] = [];
  let globalFault: Fault | undefined;

  // ---- list and watch ----
  let rv = 0;
  let compactedAt = 0;
  let outage: "refuse" | "500" | undefined;
  interface Change {
    rv: number;
    kind: "pods" | "namespaces";
    type: "ADDED" | "MODIFIED" | "DELETED";
    object: unknown;
    before: unknown;
  }
  const history: Change[] = [];
  /** What a list or watch selects: the node (spec.nodeName), the namespace (from the path), the name. */
  interface Selection {
    node?: string;
    namespace?: string;
    name?: string;
  }
  interface Watch extends Selection {
    kind: "pods" | "namespaces";
    bookmarks: boolean;
    res: http.ServerResponse;
    socket: import("node:net").Socket;
  }
  const open = new Set<Watch>();
  const podKey = (p: string) => /^\/api\/v1\/namespaces\/[^/]+\/pods\/[^/]+$/.test(p);
  const nsKey = (p: string) => /^\/api\/v1\/namespaces\/[^/]+$/.test(p);
  const nodeOf = (o: unknown) => (o as { spec?: { nodeName?: string } } | undefined)?.spec?.nodeName;
  const metaOf = (o: unknown) => (o as { metadata?: { name?: string; namespace?: string } } | undefined)?.metadata;
  const selects = (s: Selection, o: unknown) =>
    (s.node === undefined || nodeOf(o) === s.node) &&
    (s.name === undefined || metaOf(o)?.name === s.name) &&
    (s.namespace === undefined || (metaOf(o)?.namespace ?? "default") === s.namespace);
  const matches = (w: Watch, kind: string, o: unknown) => o !== undefined && w.kind === kind && selects(w, o);
  // GETs answer the stored objects as they were added (unchanged for the tests that compare
  // them); lists and watch events carry each object's resourceVersion.
  const versions = new Map<string, number>();
  const withRv = (o: unknown, v: number) => {
    const obj = o as { metadata?: Record<string, unknown> };
    return { ...obj, metadata: { ...obj.metadata, resourceVersion: String(v) } };
  };
  /** What a watcher sees of a change: ADDED when the object starts matching, DELETED when it stops. */
  const eventFor = (w: Watch, c: Change): { type: string; object: unknown } | undefined => {
    const now = c.type === "DELETED" ? undefined : c.object;
    const was = c.before;
    const m1 = matches(w, c.kind, now);
    const m0 = matches(w, c.kind, was);
    if (c.type === "DELETED") return m0 ? { type: "DELETED", object: c.object } : undefined;
    if (m1 && m0) return { type: "MODIFIED", object: now };
    if (m1) return { type: "ADDED", object: now };
    if (m0) return { type: "DELETED", object: withRv(was, c.rv) };
    return undefined;
  };
  const writeEvent = (w: Watch, e: unknown) => {
    if (!w.res.writableEnded) w.res.write(`${JSON.stringify(e)}\n`);
  };
  const record = (kind: Change["kind"], path: string, next: unknown | undefined) => {
    const stored = objects.get(path);
    const before = stored === undefined ? undefined : withRv(stored, versions.get(path) ?? 0);
    rv++;
    let object: unknown;
    let type: Change["type"];
    if (next === undefined) {
      if (before === undefined) return;
      objects.delete(path);
      versions.delete(path);
      object = withRv(before, rv);
      type = "DELETED";
    } else {
      object = withRv(next, rv);
      objects.set(path, next);
      versions.set(path, rv);
      type = before === undefined ? "ADDED" : "MODIFIED";
    }
    const c: Change = { rv, kind, type, object, before };
    history.push(c);
    for (const w of open) {
      const e = eventFor(w, c);
      if (e) writeEvent(w, e);
    }
  };
  const listed = (kind: "pods" | "namespaces", sel: Selection) => {
    const items: unknown[] = [];
    for (const [p, o] of objects) {
      if (kind === "pods" ? podKey(p) && selects(sel, o) : nsKey(p)) items.push(withRv(o, versions.get(p) ?? 0));
    }
    return items;
  };
  const gone = (from: number) => status(410, "Expired", `too old resource version: ${from} (${compactedAt})`);
  const closeWatch = (w: Watch, abrupt: boolean) => {
    open.delete(w);
    if (abrupt) w.socket.destroy();
    else if (!w.res.writableEnded) w.res.end();
  };
  const counts = new Map<string, number>();
  const countKey = (path: string, kind: string) => `${kind} ${path}`;

  /** LIST or WATCH of pods or namespaces; false when the request is neither. */
  const listOrWatch = (
    req: http.IncomingMessage,
    res: http.ServerResponse,
    path: string,
    q: URLSearchParams,
    send: (code: number, obj: unknown) => void,
  ): boolean => {
    const namespaced = NAMESPACED_PODS.exec(path)?.[1];
    const kind =
      path === "/api/v1/pods" || namespaced ? "pods" : path === "/api/v1/namespaces" ? "namespaces" : undefined;
    if (!kind || req.method !== "GET") return false;
    const selector = q.get("fieldSelector") ?? "";
    const sel: Selection = namespaced ? { namespace: namespaced } : {};
    for (const term of selector ? selector.split(",") : []) {
      const m = /^(spec\.nodeName|metadata\.name)=([^=]+)$/.exec(term);
      if (!m || kind !== "pods") {
        send(
          400,
          status(400, "BadRequest", `field selector ${JSON.stringify(selector)} is not supported by the stand-in`),
        );
        return true;
      }
      if (m[1] === "spec.nodeName") sel.node = m[2]!;
      else sel.name = m[2]!;
    }
    const watching = q.get("watch") === "1" || q.get("watch") === "true";
    // A test that sets the collection itself (a cluster-wide pod list for meshcnictl check) gets
    // it back as set.
    const fixed = objects.get(path);
    if (!watching && !selector && fixed !== undefined) {
      send(200, fixed);
      return true;
    }
    if (!watching) {
      const items = listed(kind, sel);
      send(200, {
        kind: kind === "pods" ? "PodList" : "NamespaceList",
        apiVersion: "v1",
        metadata: { resourceVersion: String(rv) },
        items,
      });
      return true;
    }
    const fromText = q.get("resourceVersion");
    const from = fromText === null || fromText === "" || fromText === "0" ? undefined : Number(fromText);
    if (from !== undefined && (!Number.isInteger(from) || from < 0)) {
      send(400, status(400, "BadRequest", `invalid resourceVersion ${fromText}`));
      return true;
    }
    if (from !== undefined && from < compactedAt && api.expiredAsStatus) {
      send(410, gone(from));
      return true;
    }
    res.writeHead(200, { "Content-Type": "application/json", "Transfer-Encoding": "chunked" });
    res.flushHeaders();
    const w: Watch = {
      kind,
      bookmarks: q.get("allowWatchBookmarks") === "true" || q.get("allowWatchBookmarks") === "1",
      res,
      socket: req.socket,
      ...sel,
    };
    if (from !== undefined && from < compactedAt) {
      writeEvent(w, { type: "ERROR", object: gone(from) });
      res.end();
      return true;
    }
    if (from === undefined) {
      // No resourceVersion: the current state as ADDED events, then the changes.
      for (const o of listed(kind, sel)) writeEvent(w, { type: "ADDED", object: o });
    } else {
      for (const c of history) {
        if (c.rv <= from) continue;
        const e = eventFor(w, c);
        if (e) writeEvent(w, e);
      }
    }
    open.add(w);
    const seconds = Number(q.get("timeoutSeconds") ?? 0);
    const timer = seconds > 0 ? setTimeout(() => closeWatch(w, false), seconds * 1000) : undefined;
    res.on("close", () => {
      open.delete(w);
      if (timer) clearTimeout(timer);
    });
    return true;
  };

  // ---- identities ----
  const issued: IssuedToken[] = [];
  const issuedByToken = new Map<string, IssuedToken>();
  let tokenSerial = 0;
  const issue = (namespace: string, name: string, granted: number, extra: Partial<IssuedToken> = {}): IssuedToken => {
    const token = `stand-in-token.${namespace}.${name}.${++tokenSerial}.${Math.random().toString(36).slice(2)}`;
    const t: IssuedToken = {
      token,
      user: serviceAccountUser(namespace, name),
      expiresAt: Date.now() + granted * 1000,
      grantedSeconds: granted,
      boundObjectRef: null,
      ...extra,
    };
    issued.push(t);
    issuedByToken.set(token, t);
    return t;
  };
  const DEFAULT_AUDIENCE = "https://kubernetes.default.svc.cluster.local";
  const TOKEN_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/serviceaccounts\/([^/]+)\/token$/;
  /** POST .../serviceaccounts/NAME/token, as kube-apiserver answers it. */
  const tokenRequest = (entry: ApiRequest, body: string): HandlerAnswer | undefined => {
    const m = entry.method === "POST" ? TOKEN_PATH.exec(entry.path) : null;
    if (!m) return undefined;
    const [, namespace, name] = m as unknown as [string, string, string];
    if (api.identities.size > 0 && !objects.has(`/api/v1/namespaces/${namespace}/serviceaccounts/${name}`)) {
      return { status: 404, body: status(404, "NotFound", `serviceaccounts "${name}" not found`) };
    }
    type Spec = { expirationSeconds?: unknown; audiences?: unknown; boundObjectRef?: unknown };
    let req: { apiVersion?: unknown; kind?: unknown; spec?: Spec };
    try {
      req = JSON.parse(body);
    } catch {
      return { status: 400, body: status(400, "BadRequest", "the body is not JSON") };
    }
    if (req?.kind !== "TokenRequest" || req.apiVersion !== "authentication.k8s.io/v1") {
      const got = `${JSON.stringify(req?.apiVersion)} ${JSON.stringify(req?.kind)}`;
      const message = `expected an authentication.k8s.io/v1 TokenRequest, got ${got}`;
      return { status: 400, body: status(400, "BadRequest", message) };
    }
    const asked = req.spec?.expirationSeconds;
    const valid = (n: unknown) => typeof n === "number" && Number.isInteger(n) && n >= 600 && n <= 2 ** 32;
    if (asked !== undefined && !valid(asked)) {
      const message =
        `TokenRequest.authentication.k8s.io "${name}" is invalid: spec.expirationSeconds: ` +
        `Invalid value: ${JSON.stringify(asked)}: may not specify a duration less than 10 minutes`;
      return { status: 422, body: status(422, "Invalid", message) };
    }
    const requested = (asked as number | undefined) ?? 3600;
    const granted = api.maxTokenSeconds !== undefined ? Math.min(requested, api.maxTokenSeconds) : requested;
    const t = issue(namespace, name, granted, {
      requestedSeconds: requested,
      boundObjectRef: req.spec?.boundObjectRef ?? null,
      ...(entry.user ? { by: entry.user } : {}),
    });
    // metav1.Time: whole seconds, UTC.
    const expirationTimestamp = new Date(Math.floor(t.expiresAt / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
    return {
      status: 201,
      body: {
        kind: "TokenRequest",
        apiVersion: "authentication.k8s.io/v1",
        metadata: { name, namespace, creationTimestamp: null },
        spec: {
          audiences: Array.isArray(req.spec?.audiences) ? req.spec.audiences : [DEFAULT_AUDIENCE],
          expirationSeconds: granted,
          boundObjectRef: t.boundObjectRef,
        },
        status: { token: t.token, expirationTimestamp },
      },
    };
  };

  const listener = async (req: http.IncomingMessage, res: http.ServerResponse) => {
    const [path = "/", query = ""] = (req.url ?? "/").split(/\?(.*)/s);
    const q = new URLSearchParams(query);
    const isCollection = path === "/api/v1/pods" || path === "/api/v1/namespaces" || NAMESPACED_PODS.test(path);
    const kindOfRequest = !isCollection
      ? "get"
      : q.get("watch") === "1" || q.get("watch") === "true"
        ? "watch"
        : "list";
    counts.set(countKey(path, kindOfRequest), (counts.get(countKey(path, kindOfRequest)) ?? 0) + 1);
    if (outage === "refuse") {
      req.socket.destroy();
      return;
    }
    let body = "";
    for await (const chunk of req) body += chunk;
    const sock = req.socket as TLSSocket;
    let cn: string | undefined;
    // With requestCert and rejectUnauthorized off, `authorized` says a client certificate signed
    // by the test CA was presented (Bun's sockets do not offer getPeerCertificate everywhere).
    if (tls && opts.acceptClientCert && sock.authorized) {
      const subject =
        typeof sock.getPeerCertificate === "function" ? sock.getPeerCertificate()?.subject?.CN : undefined;
      cn = (Array.isArray(subject) ? subject[0] : subject) ?? "verified-client-certificate";
    }
    const entry: ApiRequest = { method: req.method ?? "GET", path, query };
    if (req.headers.authorization) entry.authorization = req.headers.authorization;
    if (cn) entry.clientCertCN = cn;
    requests.push(entry);
    const send = (code: number, obj: unknown) => {
      const text = JSON.stringify(obj);
      res.writeHead(code, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
      res.end(text);
    };
    const fault = outage === "500" ? { kind: "status" as const, code: 500 } : (faults.get(path) ?? globalFault);
    if (fault?.kind === "drop") {
      req.socket.destroy();
      return;
    }
    if (fault?.kind === "slow") await Bun.sleep(fault.ms);
    if (fault?.kind === "status") {
      send(fault.code, status(fault.code, REASONS[fault.code] ?? "Unknown", `stand-in fault ${fault.code}`));
      return;
    }
    const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    const minted = bearer === undefined ? undefined : issuedByToken.get(bearer);
    const known = bearer === undefined ? undefined : api.identities.get(bearer);
    if (minted) entry.user = minted.user;
    else if (known) entry.user = known;
    const authorized = minted
      ? Date.now() < minted.expiresAt
      : known !== undefined ||
        cn !== undefined ||
        (api.identities.size === 0 && (opts.token === undefined || bearer === opts.token));
    if (!authorized) {
      send(401, status(401, "Unauthorized", "Unauthorized"));
      return;
    }
    if (api.rbac && entry.user) {
      const attrs = requestAttributes(entry.method, path, query);
      if (!rbacAllows(api.rbac, entry.user, attrs)) {
        const forbidden = status(403, "Forbidden", forbiddenMessage(entry.user, attrs!));
        send(403, { ...forbidden, details: { ...(attrs!.name ? { name: attrs!.name } : {}), kind: attrs!.resource } });
        return;
      }
    }
    const minting = tokenRequest(entry, body);
    if (minting) return send(minting.status, minting.body);
    for (const h of handlers) {
      const out = await h(entry, body);
      if (out?.text !== undefined) {
        res.writeHead(out.status, {
          "Content-Type": "text/plain; charset=utf-8",
          "Content-Length": Buffer.byteLength(out.text),
        });
        res.end(out.text);
        return;
      }
      if (out) return send(out.status, out.body);
    }
    if (listOrWatch(req, res, path, q, send)) return;
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
    ? https.createServer(
        {
          cert: pki.serverCert,
          key: pki.serverKey,
          ca: pki.caPem,
          requestCert: !!opts.acceptClientCert,
          rejectUnauthorized: false,
        },
        listener,
      )
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
    setGlobalFault: (f) => {
      globalFault = f;
    },
    addPod(pod) {
      record("pods", `/api/v1/namespaces/${pod.metadata.namespace ?? "default"}/pods/${pod.metadata.name}`, pod);
    },
    updatePod(pod) {
      record("pods", `/api/v1/namespaces/${pod.metadata.namespace ?? "default"}/pods/${pod.metadata.name}`, pod);
    },
    deletePod(namespace, name) {
      record("pods", `/api/v1/namespaces/${namespace}/pods/${name}`, undefined);
    },
    addNamespace(ns) {
      record("namespaces", `/api/v1/namespaces/${ns.metadata.name}`, ns);
    },
    deleteNamespace(name) {
      record("namespaces", `/api/v1/namespaces/${name}`, undefined);
    },
    resourceVersion: () => rv,
    count(path, kind) {
      if (path === undefined) return [...counts.values()].reduce((a, b) => a + b, 0);
      const kinds = kind ? [kind] : ["get", "list", "watch"];
      return kinds.reduce((n, k) => n + (counts.get(countKey(path, k)) ?? 0), 0);
    },
    bookmark() {
      for (const w of open) {
        if (w.bookmarks)
          writeEvent(w, {
            type: "BOOKMARK",
            object: {
              kind: w.kind === "pods" ? "Pod" : "Namespace",
              apiVersion: "v1",
              metadata: { resourceVersion: String(rv) },
            },
          });
      }
    },
    compact(o = {}) {
      compactedAt = rv;
      history.length = 0;
      if (o.expireWatches) {
        for (const w of [...open]) {
          writeEvent(w, { type: "ERROR", object: gone(0) });
          closeWatch(w, false);
        }
      }
    },
    dropWatches() {
      for (const w of [...open]) closeWatch(w, true);
    },
    watches: () => open.size,
    setOutage(kind) {
      outage = kind;
      if (kind) for (const w of [...open]) closeWatch(w, true);
    },
    expiredAsStatus: false,
    identities: new Map(Object.entries(opts.identities ?? {})),
    rbac: opts.rbac,
    maxTokenSeconds: opts.maxTokenSeconds,
    issued,
    issueToken: (namespace, name, seconds) => issue(namespace, name, seconds),
    expireTokens(user) {
      for (const t of issued) {
        if (user === undefined || t.user === user) t.expiresAt = Math.min(t.expiresAt, Date.now());
      }
    },
    kubeconfig(k = {}) {
      const token = k.token ?? opts.token;
      const caLine = !tls
        ? ""
        : k.caFile
          ? `    certificate-authority: ${k.caFile}\n`
          : `    certificate-authority-data: ${Buffer.from(pki.caPem).toString("base64")}\n`;
      const userLines = [
        token !== undefined ? `    token: ${token}` : "",
        k.clientCert ? `    client-certificate-data: ${Buffer.from(pki.clientCert).toString("base64")}` : "",
        k.clientCert ? `    client-key-data: ${Buffer.from(pki.clientKey).toString("base64")}` : "",
      ]
        .filter(Boolean)
        .join("\n");
      return `${[
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
      ]
        .filter((l) => l !== "")
        .join("\n")}\n`;
    },
    close: () =>
      new Promise<void>((resolve) => {
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
      return {
        status: 503,
        body: status(
          503,
          "ServiceUnavailable",
          `error trying to reach service: dial tcp 10.244.0.10:${port ?? "80"}: ${target.unreachable}`,
        ),
      };
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
        return {
          status: 503,
          body: status(503, "ServiceUnavailable", `error trying to reach service: ${(e as Error).message}`),
        };
      }
    }
    if (target.text !== undefined) return { status: target.status ?? 200, body: null, text: target.text };
    return { status: target.status ?? 200, body: target.body ?? {} };
  };
}
