// The agent's life: install, then sleep on inotify until the host's config folder, the
// plugin binary or the service account folder (the CA) changes, or a new token for the plugin
// arrives, and reconcile shortly after. A periodic resync (once a minute by default) reconciles
// too, so one missed event cannot leave a stale kubeconfig or a lost chain behind. When told to
// stop it asks whether to undo (the agent's answer: internal/agent/stop.ts) and undoes only then.
import type { StopDecision } from "../stop.ts";
import type { Watch, WatchDir } from "./deps.ts";
import type { Logger } from "../../log/logger.ts";
import { type ChainStatus, type Installer, PLUGIN_BINARY_NAME, PRIVATE_DIR } from "./installer.ts";

export interface RunDeps {
  watch: WatchDir;
  log: Logger;
  /** Reconcile this often besides the watches (run mode); DEFAULT_RESYNC_MS when absent. */
  resyncMs?: number;
  /** Called at each periodic resync with what was not current before it (empty: nothing). */
  onResync?(problemsBefore: string[], fixed: boolean): void;
  /** Run mode, once stopped: undo everything, or leave it all in place? */
  decideOnStop?(): Promise<StopDecision>;
  /** Hands over the function that makes the agent reconcile soon (called when a new token arrives). */
  reconcileOn?(kick: () => void): void;
}

export const DEFAULT_RESYNC_MS = 60_000;

/** Events come in bursts (a rename is several); one reconcile answers a burst. */
export const DEBOUNCE_MS = 10;
/**
 * A config caught mid-write (an in-place rewrite read between its write and its truncate) is
 * unusable, and the event of the rest of the write can be folded into the one already handled:
 * after such a look, look again a few times before trusting that the file is really broken.
 */
const RECHECK_MS = 100;
const RECHECKS = 10;
/** After a failed reconcile (a full disk, a read-only mount), try again after this, doubling. */
const RETRY_MS = 500;
const RETRY_MAX_MS = 30_000;

/**
 * Watches and reconciles until `signal` aborts (run) or the chain and the plugin's kubeconfig are
 * in place (once). Returns false when --once was stopped before that.
 */
export async function runInstall(
  inst: Installer,
  mode: "run" | "once",
  deps: RunDeps,
  signal: AbortSignal,
): Promise<boolean> {
  const { log } = deps;
  const { hostNetDir, hostBinDir, serviceAccountDir } = inst.config;
  inst.prepare();
  inst.installBinary();

  let timer: ReturnType<typeof setTimeout> | undefined;
  let failures = 0;
  let installed = false;
  let rechecks = 0;
  let finished: () => void = () => {};
  const done = new Promise<void>((resolve) => (finished = resolve));
  const watches: Watch[] = [];

  const settled = (s: ChainStatus) => s.kind === "chained" || s.kind === "in-place";
  // Resync: look at everything, whatever the watches said. A problem it finds is an event
  // some watch missed (or a write that is still being retried); the reconcile puts it right.
  let resyncTimer: ReturnType<typeof setInterval> | undefined;
  let lastSaid = "";
  const resync = () => {
    if (signal.aborted) return;
    let before: string[];
    try {
      before = inst.check().problems;
    } catch (e) {
      before = [(e as Error).message];
    }
    // Said once per distinct finding: a node waiting for its CNI config is not news every minute.
    const said = before.join("; ");
    if (said !== "" && said !== lastSaid) log.info(`periodic resync: ${said}; reconciling`);
    lastSaid = said;
    if (timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
    tick();
    let fixed = false;
    if (before.length > 0) {
      try {
        fixed = inst.check().ready;
      } catch {
        fixed = false;
      }
    }
    deps.onResync?.(before, fixed);
  };
  if (mode === "run") {
    resyncTimer = setInterval(resync, deps.resyncMs ?? DEFAULT_RESYNC_MS);
  }
  const schedule = (delay: number) => {
    if (timer !== undefined || signal.aborted) return;
    timer = setTimeout(tick, delay);
  };
  const tick = () => {
    timer = undefined;
    if (signal.aborted) return;
    let status: ChainStatus;
    try {
      status = inst.reconcile();
      failures = 0;
    } catch (e) {
      failures++;
      const wait = Math.min(RETRY_MAX_MS, RETRY_MS * 2 ** (failures - 1));
      log.error(`${(e as Error).message}; trying again in ${wait} ms`);
      schedule(wait);
      return;
    }
    if (status.kind === "backoff") schedule(status.delayMs);
    if (status.kind === "changed") schedule(DEBOUNCE_MS);
    if (!inst.sawUnusableConfig) rechecks = 0;
    else if (rechecks++ < RECHECKS) schedule(RECHECK_MS);
    if (mode === "once" && settled(status) && inst.kubeconfigProblem() === undefined) {
      installed = true;
      finished();
    }
  };
  deps.reconcileOn?.(() => schedule(DEBOUNCE_MS));

  // A folder that cannot be watched (missing, or inotify out of watches) is tried again, less
  // and less often; a reconcile follows each new watch, so nothing that changed meanwhile is lost.
  const watchOrRetry = (dir: string, relevant: (name: string | null) => boolean) => {
    let wait = RETRY_MS;
    const retry = (why: string) => {
      log.error(`${why}; watching it again in ${wait} ms`);
      setTimeout(start, wait);
      wait = Math.min(RETRY_MAX_MS, wait * 2);
    };
    const start = (): void => {
      if (signal.aborted) return;
      try {
        const w = deps.watch(
          dir,
          (name) => relevant(name) && schedule(DEBOUNCE_MS),
          (e) => {
            w.close();
            retry(e.message);
          },
        );
        watches.push(w);
        if (wait > RETRY_MS) schedule(DEBOUNCE_MS);
        wait = RETRY_MS;
      } catch (e) {
        retry((e as Error).message);
      }
    };
    start();
  };
  // Watches first, then the first reconcile: nothing that happens in between is missed.
  watchOrRetry(hostNetDir, () => true);
  watchOrRetry(hostBinDir, (name) => name === null || name === PLUGIN_BINARY_NAME || name === PRIVATE_DIR);
  watchOrRetry(serviceAccountDir, () => true);
  const onAbort = () => finished();
  signal.addEventListener("abort", onAbort, { once: true });
  if (signal.aborted) finished();
  tick();

  await done;
  signal.removeEventListener("abort", onAbort);
  if (timer !== undefined) clearTimeout(timer);
  if (resyncTimer !== undefined) clearInterval(resyncTimer);
  for (const w of watches) w.close();
  if (mode === "run") {
    const decision = deps.decideOnStop
      ? await deps.decideOnStop()
      : { undo: false, why: "nobody asked the API server" };
    if (decision.undo) {
      log.info(`stopping: ${decision.why}; undoing the installation`);
      inst.uninstall();
    } else {
      log.info(
        `stopping: ${decision.why}; leaving meshcni installed (pods that need ` +
          `the mesh fail closed until an agent runs again; --uninstall undoes)`,
      );
    }
    return true;
  }
  if (installed) {
    const token = inst.tokenStatus();
    const until = token?.expiresAt
      ? `; the plugin's token (${token.account}) is valid until ${token.expiresAt} and nothing renews it without an ` +
        "agent: after that the plugin's fallback to its kubeconfig fails closed"
      : "";
    log.info(`installed; exiting (--once)${until}`);
  } else {
    const chained = inst.chainStatus().current;
    log.error(`stopped before ${chained ? "the plugin's kubeconfig had a token" : "meshcni was chained"} (--once)`);
  }
  return installed;
}
