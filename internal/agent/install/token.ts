// The plugin's token: the TokenRequest the agent sends for the plugin's own service account, what
// the API server's answer means, and when to renew it or try again. Pure; io/token.ts
// sends the requests and keeps the current token.
//
// The token is bound to no object (no boundObjectRef): a rollout of the agent deletes its pod,
// and a token bound to that pod would stop working with it. It lives for what the API server
// grants (about a day is asked; a server may shorten it) and is renewed at 80 % of that.

export interface PluginAccount {
  namespace: string;
  name: string;
}

export const accountName = (a: PluginAccount) => `${a.namespace}/${a.name}`;

/** What the agent asks for by default: a day. */
export const DEFAULT_TOKEN_SECONDS = 86_400;
/** The API server refuses a TokenRequest for less than 10 minutes. */
export const MIN_TOKEN_SECONDS = 600;
/** Renewed once this share of the granted lifetime has passed. */
export const RENEW_AT = 0.8;
/** Never sooner than this after a token arrived, however short its life (no busy loop). */
const MIN_RENEW_MS = 1000;
/** Failed requests are tried again after 1 s, doubling up to a minute, jittered (50-100 %). */
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 60_000;

export const tokenRequestPath = (a: PluginAccount) =>
  `/api/v1/namespaces/${a.namespace}/serviceaccounts/${a.name}/token`;

/** An authentication.k8s.io/v1 TokenRequest: the API server's default audiences, no bound object. */
export function buildTokenRequest(seconds: number): Record<string, unknown> {
  return { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: seconds } };
}

export interface PluginToken {
  token: string;
  account: PluginAccount;
  /** status.expirationTimestamp, as the API server said it (epoch milliseconds). */
  expiresAt: number;
  /** When the request was sent, by this node's clock (epoch milliseconds). */
  issuedAt: number;
  /**
   * The lifetime granted: the shorter of the answer's spec.expirationSeconds and what is left
   * of expiresAt by this node's clock when the request was sent (a node clock that runs ahead of
   * the server's then renews early, never late).
   */
  lifetimeMs: number;
  /** What was asked (seconds); absent for a token read back from the kubeconfig. */
  requestedSeconds?: number;
  /** What the server says it granted (the answer's spec.expirationSeconds), when it says. */
  grantedSeconds?: number;
}

/** The moment, by this node's clock, after which the API server rejects the token. */
export const validUntil = (t: PluginToken) => t.issuedAt + t.lifetimeMs;

/** An HTTP answer, or none (internal/kube/client.ts's RawAnswer). */
export type TokenAnswer = { kind: "answer"; status: number; body: string } | { kind: "unreachable"; reason: string };

export type TokenOutcome = { ok: true; token: PluginToken } | { ok: false; why: string };

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** What a TokenRequest's answer gives: the token, or why there is none (never the token in the reason). */
export function judgeTokenAnswer(
  a: TokenAnswer,
  account: PluginAccount,
  sentAt: number,
  requestedSeconds: number,
): TokenOutcome {
  const who = accountName(account);
  if (a.kind === "unreachable") return { ok: false, why: `the API server did not answer: ${a.reason}` };
  let body: unknown;
  try {
    body = JSON.parse(a.body);
  } catch {
    body = undefined;
  }
  const message = isObj(body) && typeof body.message === "string" ? `: ${body.message.slice(0, 300)}` : "";
  if (a.status === 401) {
    return { ok: false, why: `the API server rejected the agent's own credentials (401)${message}` };
  }
  if (a.status === 403) {
    return {
      ok: false,
      why:
        `the agent may not create tokens for ${who} (403)${message}; its Role needs create on ` +
        `serviceaccounts/token for ${account.name} (meshcnictl install-cni renders it)`,
    };
  }
  if (a.status === 404) {
    return { ok: false, why: `there is no ServiceAccount ${who} (404)${message}; meshcnictl install-cni renders it` };
  }
  if (a.status !== 200 && a.status !== 201) return { ok: false, why: `the API server answered ${a.status}${message}` };
  const spec = isObj(body) && isObj(body.spec) ? body.spec : {};
  const status = isObj(body) && isObj(body.status) ? body.status : {};
  const token = typeof status.token === "string" ? status.token.trim() : "";
  const expiresAt = typeof status.expirationTimestamp === "string" ? Date.parse(status.expirationTimestamp) : NaN;
  if (token === "" || !Number.isFinite(expiresAt)) {
    return { ok: false, why: `the API server's answer holds no token and expirationTimestamp (status ${a.status})` };
  }
  const grantedSeconds =
    typeof spec.expirationSeconds === "number" && spec.expirationSeconds > 0 ? spec.expirationSeconds : undefined;
  const lifetimeMs = Math.min(grantedSeconds === undefined ? Infinity : grantedSeconds * 1000, expiresAt - sentAt);
  if (!(lifetimeMs > 0)) {
    return {
      ok: false,
      why:
        `the API server granted a token of ${who} that has expired already ` +
        `(expirationTimestamp ${status.expirationTimestamp}; is this node's clock right?)`,
    };
  }
  const t: PluginToken = { token, account, expiresAt, issuedAt: sentAt, lifetimeMs, requestedSeconds };
  if (grantedSeconds !== undefined) t.grantedSeconds = grantedSeconds;
  return { ok: true, token: t };
}

/** How long after the token arrived to ask for the next one: 80 % of its granted life. */
export function renewalDelayMs(t: PluginToken): number {
  return Math.max(MIN_RENEW_MS, Math.floor(RENEW_AT * t.lifetimeMs));
}

/** The wait before the `failures`-th try again; `random` in [0, 1). */
export function retryDelayMs(failures: number, random: number): number {
  const base = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.max(0, failures - 1));
  return Math.round(base * (0.5 + random / 2));
}
