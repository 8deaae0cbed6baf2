// The plugin's token, kept current: the agent asks the TokenRequest API for a token of the
// plugin's own service account with its own credentials (internal/kube/client.ts), renews it
// at 80 % of the lifetime the server granted, and tries again with back-off while a request
// fails, saying so in the log. The agent writes whatever token is current into the plugin's
// kubeconfig (internal/agent/install/installer.ts); what the answers mean is internal/agent/install/token.ts.
import type { PluginTokens } from "../deps.ts";
import type { Logger } from "../../../log/logger.ts";
import {
  accountName,
  buildTokenRequest,
  judgeTokenAnswer,
  type PluginAccount,
  type PluginToken,
  renewalDelayMs,
  retryDelayMs,
  tokenRequestPath,
  validUntil,
} from "../token.ts";
import { renderTime } from "../kubeconfig.ts";
import type { KubeClient } from "../../../kube/client.ts";

const REQUEST_TIMEOUT_MS = 10_000;

export interface PluginTokenOptions {
  api: Pick<KubeClient, "request" | "server">;
  account: PluginAccount;
  /** expirationSeconds to ask for. */
  seconds: number;
  log: Logger;
  /** Called after each new token, so that the kubeconfig is written with it (also settable later). */
  onToken?: (t: PluginToken) => void;
  /** Epoch milliseconds (Date.now). */
  now?: () => number;
  random?: () => number;
}

/** What /status says of the plugin's token (never the token). */
export interface PluginTokenStatus {
  account: string;
  /** Expiry as the API server said it; absent while there is no token. */
  expiresAt?: string;
  /** Lifetime granted and asked, seconds. */
  grantedSeconds?: number;
  requestedSeconds?: number;
  /** When the next request is due (renewal or retry). */
  nextRequestAt?: string;
  /** The last request's failure, while requests fail. */
  lastError?: string;
  /** Requests answered with a token, and failed ones in a row. */
  obtained: number;
  failures: number;
}

export class PluginTokenSource implements PluginTokens {
  private token?: PluginToken;
  private lastError?: string;
  private obtained = 0;
  private failures = 0;
  private nextAt?: number;
  private readonly now: () => number;
  private readonly random: () => number;

  /** Called after each new token. */
  onToken?: (t: PluginToken) => void;

  constructor(private readonly o: PluginTokenOptions) {
    this.now = o.now ?? Date.now;
    this.random = o.random ?? Math.random;
    if (o.onToken) this.onToken = o.onToken;
  }

  get account(): PluginAccount {
    return this.o.account;
  }

  current(): PluginToken | undefined {
    return this.token;
  }

  problem(): string | undefined {
    return this.lastError;
  }

  /**
   * A token found in the kubeconfig a previous agent wrote, used until a request succeeds (an
   * agent restarted while the API server is away keeps the plugin's working token).
   */
  adopt(t: { token: string; account: PluginAccount; expiresAt: number }): boolean {
    const now = this.now();
    if (this.token || accountName(t.account) !== accountName(this.o.account) || t.expiresAt <= now) return false;
    this.token = { ...t, issuedAt: now, lifetimeMs: t.expiresAt - now };
    return true;
  }

  /** One TokenRequest; true when it brought a token. */
  async request(signal?: AbortSignal): Promise<boolean> {
    const { api, account, seconds, log } = this.o;
    const who = accountName(account);
    const sentAt = this.now();
    const answer = await api.request("POST", tokenRequestPath(account), REQUEST_TIMEOUT_MS, {
      body: buildTokenRequest(seconds),
      ...(signal ? { signal } : {}),
    });
    if (signal?.aborted) return false;
    const outcome = judgeTokenAnswer(answer, account, sentAt, seconds);
    if (!outcome.ok) {
      this.failures++;
      this.lastError = `cannot get a token of ${who} from ${api.server}: ${outcome.why}`;
      return false;
    }
    const first = this.obtained === 0;
    this.token = outcome.token;
    this.obtained++;
    this.failures = 0;
    delete this.lastError;
    const granted = grantedSeconds(outcome.token);
    const shortened = granted < seconds ? ` (asked for ${seconds} s; the API server granted ${granted} s)` : "";
    const renewIn = Math.round(renewalDelayMs(outcome.token) / 1000);
    log.info(
      `${first ? "got" : "renewed"} the plugin's token: service account ${who}, ` +
        `valid until ${renderTime(outcome.token.expiresAt)}${shortened}; renewing it after ${renewIn} s`,
    );
    this.onToken?.(outcome.token);
    return true;
  }

  /** Requests, renews and retries until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const { log } = this.o;
    while (!signal.aborted) {
      const ok = await this.request(signal).catch((e) => {
        this.failures++;
        this.lastError = `cannot get a token of ${accountName(this.o.account)}: ${(e as Error).message}`;
        return false;
      });
      if (signal.aborted) return;
      const now = this.now();
      let wait: number;
      if (ok) {
        wait = Math.max(1000, this.token!.issuedAt + renewalDelayMs(this.token!) - now);
      } else {
        wait = retryDelayMs(this.failures, this.random());
        const t = this.token;
        const standing =
          t === undefined
            ? "the plugin's kubeconfig has no token until then, so its fallback fails closed"
            : validUntil(t) > now
              ? `the current token stays valid until ${renderTime(t.expiresAt)}`
              : `the current token expired at ${renderTime(t.expiresAt)}: ` +
                "the plugin's fallback fails closed (401) until a new one arrives";
        log.warn(`${this.lastError}; trying again in ${(wait / 1000).toFixed(1)} s (${standing})`);
      }
      this.nextAt = now + wait;
      await sleep(wait, signal);
    }
  }

  status(): PluginTokenStatus {
    const t = this.token;
    return {
      account: accountName(this.o.account),
      ...(t ? { expiresAt: renderTime(t.expiresAt), grantedSeconds: grantedSeconds(t) } : {}),
      ...(t?.requestedSeconds !== undefined ? { requestedSeconds: t.requestedSeconds } : {}),
      ...(this.nextAt !== undefined ? { nextRequestAt: new Date(this.nextAt).toISOString() } : {}),
      ...(this.lastError !== undefined ? { lastError: this.lastError } : {}),
      obtained: this.obtained,
      failures: this.failures,
    };
  }
}

/** The lifetime granted, as the server said it, else as the expiry shows it. */
const grantedSeconds = (t: PluginToken) => t.grantedSeconds ?? Math.round(t.lifetimeMs / 1000);

/** setTimeout's longest delay; a longer wait is slept in parts. */
const MAX_TIMER_MS = 2 ** 31 - 1;

async function sleep(ms: number, signal: AbortSignal): Promise<void> {
  for (let left = ms; left > 0 && !signal.aborted; left -= MAX_TIMER_MS) {
    await sleepOnce(Math.min(left, MAX_TIMER_MS), signal);
  }
}

function sleepOnce(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
