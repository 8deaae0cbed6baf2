// The agent's work on one node: put the plugin binary and its kubeconfig in place, chain the
// entry into the runtime's config, say whether all of it is current, and undo it. Every step is
// idempotent, so a reconcile after any event (or a restart) simply does what is missing. Files
// are touched only through deps.fs; decisions come from the pure planners.
import { isChained, type JsonObject } from "./conflist/chain.ts";
import { isConfigFileName, parseHostConfig } from "./conflist/parse.ts";
import { type ReadFile, type Selection, selectNamedConfig, selectPrimaryConfig } from "./conflist/select.ts";
import { kubeconfigPath } from "../../config/entry.ts";
import { KubeconfigInputError, renderServerUrl } from "../../kube/server-url.ts";
import { readWrittenToken, renderKubeconfig, renderTime, type WrittenToken } from "./kubeconfig.ts";
import { accountName, validUntil } from "./token.ts";
import type { InstallStatus } from "../observe/status.ts";
import { HOST_CHECK_PATHS } from "./hostcheck/check.ts";
import { type BackoffOptions, DEFAULT_BACKOFF, RechainBackoff } from "./backoff.ts";
import type { FileStat, FolderFile, InstallerDeps, Patch } from "./deps.ts";
import { planElfRewrite } from "./hostcheck/elf-rewrite.ts";
import { ElfError, type ElfInfo, isElf, parseElf } from "./hostcheck/elf.ts";
import {
  FOLDER_NAME,
  type LoaderPaths,
  PRIVATE_DIR,
  planFolderName,
  planLoaderPaths,
  planStaleFolders,
} from "./private-loader.ts";
import { type Observe, planChain, planEntryRemoval, planUndoRecord, type Step } from "./plan.ts";
import {
  EMPTY_STATE,
  parseUndoState,
  renderUndoState,
  sha256Hex,
  UNDO_FILE,
  type UndoRecord,
  type UndoState,
} from "./undo-state.ts";

export { PRIVATE_DIR };
export const PLUGIN_BINARY_NAME = "meshcni";
/** The kubeconfig holds a token: owner only. */
const KUBECONFIG_MODE = 0o600;

export interface InstallerConfig {
  hostNetDir: string;
  hostBinDir: string;
  /**
   * hostBinDir as the host sees it (--dest-bin-dir): the installed binary names its loader there
   * (default: hostBinDir).
   */
  destBinDir?: string;
  /** The meshcni binary to install into hostBinDir, or several, comma-separated: the first that exists. */
  pluginBinary: string;
  /** The host's root file system as mounted here; when present, the host is looked at (what C library it has). */
  hostRoot?: string;
  /** Where the loader and libraries that go with the plugin are taken from: the agent's own root (default /). */
  libraryRoot?: string;
  serviceAccountDir: string;
  confName?: string;
  /** The conflist entry (see entry.ts). */
  entry: JsonObject;
  /** KUBERNETES_SERVICE_HOST/PORT; required to install, not to uninstall. */
  service?: { host: string; port: string };
}

export class InstallError extends Error {}
/** No token for the plugin yet: its source logs why (internal/agent/install/io/token.ts). */
class TokenPending extends InstallError {}

export type ChainStatus =
  | { kind: "chained"; file: string }
  | { kind: "in-place"; file: string }
  | { kind: "waiting" }
  | { kind: "blocked"; reason: string }
  | { kind: "backoff"; file: string; delayMs: number }
  /** The host wrote the file while meshcni was chaining it: look again. */
  | { kind: "changed"; file: string };

export interface Readiness {
  ready: boolean;
  problems: string[];
}

const join = (dir: string, name: string) => `${dir}/${name}`;
const basename = (path: string) => path.slice(path.lastIndexOf("/") + 1);
/** The temp names of io/fs.ts: a leading dot, then `.meshcni-tmp` at the end. */
const isTempName = (name: string) => name.startsWith(".") && name.endsWith(".meshcni-tmp");

interface PrivateFolder {
  /** Its name inside meshcni.d. */
  name: string;
  files: (FolderFile & { sha256: string })[];
  paths: LoaderPaths;
}

/** What installing one source binary writes. */
interface PluginPlan {
  src: string;
  stat: FileStat;
  /** sha256 of the binary as written into the bin folder. */
  hash: string;
  /** The rewrite that points it at its folder; none for a binary copied as it is. */
  patch?: Patch;
  /** The folder of its loader and libraries; none for a binary that names no loader. */
  folder?: PrivateFolder;
}

export class Installer {
  private state: UndoState = EMPTY_STATE;
  private binaryStat?: FileStat;
  /** The last plan made, and the one the binary in place was written (or found) from. */
  private plan?: PluginPlan;
  private installed?: PluginPlan;
  /** The loader folder's files as installed (or found), and for which folder. */
  private folderStats = new Map<string, FileStat>();
  private folderStatsFor?: PrivateFolder;
  /** Why the host cannot run any of the plugin binaries (empty when it can, or when unchecked). */
  private hostProblems: string[] = [];
  /** The host check's last answer, as logged: it can run one, it was skipped (why), or it cannot. */
  private hostCheck?: string;
  private readonly said = new Map<string, string>();
  private readonly backoff: RechainBackoff;

  constructor(
    readonly config: InstallerConfig,
    private readonly deps: InstallerDeps,
    private readonly backoffOptions: BackoffOptions = DEFAULT_BACKOFF,
  ) {
    this.backoff = new RechainBackoff(backoffOptions);
  }

  get kubeconfigPath(): string {
    return kubeconfigPath(this.config.hostNetDir);
  }
  get binaryPath(): string {
    return join(this.config.hostBinDir, PLUGIN_BINARY_NAME);
  }
  private get undoPath(): string {
    return join(this.config.hostNetDir, UNDO_FILE);
  }

  /** Logs `msg` under `key` unless the same message was the last one logged under it. */
  private once(key: string, level: "info" | "warn" | "error", msg: string): void {
    if (this.said.get(key) === msg) return;
    this.said.set(key, msg);
    this.deps.log[level](msg);
  }

  /** Start-up: the config folder exists, leftovers of interrupted writes are gone, the undo record is read. */
  prepare(): void {
    const { fs, log } = this.deps;
    fs.ensureDir(this.config.hostNetDir);
    fs.ensureDir(this.config.hostBinDir);
    for (const dir of [this.config.hostNetDir, this.config.hostBinDir, this.privateDir]) {
      for (const name of fs.recoverInterruptedWrites(dir))
        log.info(
          `recovered ${join(dir, name)}, left by an interrupted write (temp file removed, or host file put back)`,
        );
    }
    this.loadState();
  }

  private loadState(): void {
    const text = this.deps.fs.readText(this.undoPath);
    if (text === undefined) return;
    try {
      this.state = parseUndoState(text);
    } catch (e) {
      this.deps.log.error(
        `${(e as Error).message}; ignoring it: undo removes meshcni's entries but cannot restore original bytes`,
      );
      this.state = EMPTY_STATE;
    }
  }

  private saveState(state: UndoState): void {
    this.state = state;
    if (state.records.length === 0) this.deps.fs.remove(this.undoPath);
    else this.deps.fs.writeAtomic(this.undoPath, renderUndoState(state), 0o600);
  }

  /**
   * Runs the steps in order, each only over the content it was planned from. False when the host
   * changed a file meanwhile: its write stands, the remaining steps are not run.
   */
  private apply(steps: Step[]): boolean {
    const { fs, log } = this.deps;
    for (const step of steps) {
      const path = join(this.config.hostNetDir, step.file);
      if (step.op === "write") {
        if (!fs.replaceIfUnchanged(path, step.data, step.mode, step.expect)) return this.changed(path);
      } else {
        const r = fs.removeIfUnchanged(path, step.expect);
        if (r === "changed" || (r === "absent" && step.mustExist)) return this.changed(path);
        if (r === "absent") continue;
      }
      log.info(`${step.why}: ${step.op === "remove" ? "removed " : "wrote "}${path}`);
    }
    return true;
  }

  private changed(path: string): false {
    this.deps.log.info(`${path} changed while meshcni was updating it; the host's write stands, looking again`);
    return false;
  }

  /** Undoes a record, planning again while the host keeps changing the file under it. */
  private undoRecord(record: UndoRecord): void {
    for (let i = 0; i < 5 && !this.apply(planUndoRecord(record, this.observe)); i++);
    this.saveState({ version: 1, records: this.state.records.filter((r) => r !== record) });
  }

  // --- the plugin binary and its loader ----------------------------------------------------

  /** The folder of the plugin's own loaders and C libraries, here. */
  get privateDir(): string {
    return join(this.config.hostBinDir, PRIVATE_DIR);
  }

  /**
   * The plugin binary to install: the first candidate that exists. The host is looked at too
   * (config.hostRoot): for a binary that brings its own loader that only says what the host has;
   * for one that does not (a static binary, a script), a host that cannot run it gets nothing
   * (undefined, the reasons kept for check() and logged): installing it would fail every ADD.
   */
  pickPluginBinary(): string | undefined {
    const { fs } = this.deps;
    const candidates = this.config.pluginBinary
      .split(",")
      .map((c) => c.trim())
      .filter((c) => c !== "");
    const src = candidates.find((c) => fs.stat(c) !== undefined);
    if (src === undefined)
      throw new InstallError(`the plugin binary ${candidates.join(" or ")} does not exist (see --plugin-binary)`);
    const plan = this.planPlugin(src);
    return this.checkHost(plan) ? src : undefined;
  }

  /** What installing `src` writes (cached while the file is unchanged). InstallError when it cannot be made. */
  private planPlugin(src: string): PluginPlan {
    const { fs, canRun } = this.deps;
    const stat = fs.stat(src);
    if (!stat) throw new InstallError(`the plugin binary ${src} does not exist (see --plugin-binary)`);
    const cached = this.plan;
    if (cached && cached.src === src && sameStat(cached.stat, stat)) return cached;
    const file = fs.reader(src)!;
    let info: ElfInfo | undefined;
    if (isElf(file.read(0, Math.min(16, file.size)))) {
      try {
        info = parseElf(file.read, file.size);
      } catch (e) {
        if (!(e instanceof ElfError)) throw e;
        throw new InstallError(`the plugin binary ${src} is not an executable meshcni can read: ${e.message}`);
      }
    }
    const asIs = (): PluginPlan => (this.plan = { src, stat, hash: fs.hash(src)! });
    // A static binary or a script names no loader: nothing to bring, it is copied as it is.
    if (!info?.interpreter) return asIs();
    if (!canRun) {
      this.once("loader", "warn", `no way to read the agent's own libraries: installing ${src} as it is`);
      return asIs();
    }
    const root = this.config.libraryRoot ?? "/";
    const own = canRun(root, src);
    if (own.ok !== true) {
      const why = own.ok === false ? own.problems : own.skipped;
      throw new InstallError(
        `the loader and libraries ${src} loads are not all in ${root}, ` +
          `so the plugin cannot take its own: ${why.join("; ")}`,
      );
    }
    const files = own.files.map((f, i) => {
      const source = root === "/" ? f.real : `${root.replace(/\/+$/, "")}${f.real}`;
      // The kernel opens the interpreter as it opens a program: it must be executable.
      return { name: basename(f.path), source, mode: i === 0 ? 0o755 : 0o644, sha256: fs.hash(source)! };
    });
    const name = planFolderName(files);
    const paths = planLoaderPaths(this.config.destBinDir ?? this.config.hostBinDir, name, basename(info.interpreter));
    let patch: Patch;
    try {
      const plan = planElfRewrite(file.read, file.size, { interpreter: paths.interpreter, runPath: paths.runPath });
      patch = { keep: plan.keep, size: plan.size, writes: plan.writes };
    } catch (e) {
      if (!(e instanceof ElfError)) throw e;
      throw new InstallError(`cannot point ${src} at its own loader ${paths.interpreter}: ${e.message}`);
    }
    this.plan = { src, stat, hash: fs.hash(src, patch)!, patch, folder: { name, files, paths } };
    return this.plan;
  }

  /**
   * Looks at the host (config.hostRoot) and says what it has. False only for a binary without its
   * own loader that the host cannot run.
   */
  private checkHost(plan: PluginPlan): boolean {
    const { fs, canRun } = this.deps;
    const root = this.config.hostRoot;
    this.hostProblems = [];
    if (!canRun || root === undefined) return true;
    const own = plan.folder && `its own loader and C library are in ${plan.folder.paths.hostFolder}`;
    if (fs.list(root) === undefined) {
      this.hostCheck =
        `host check skipped: ${root} is not there (the DaemonSet mounts ` +
        `the host's ${HOST_CHECK_PATHS.join(", ")} under it, read-only; see --host-root)`;
      this.once(
        "host",
        own ? "info" : "warn",
        `${this.hostCheck}; ${own ? `the plugin needs nothing of it: ${own}` : `installing ${plan.src} unchecked`}`,
      );
      return true;
    }
    const v = canRun(root, plan.src);
    if (own) {
      // What the host has, for the log and /status; the plugin never loads it.
      const has = this.deps.hostLibc?.(root, v.machine) ?? "not looked at";
      const note = v.ok === null ? ` (${v.skipped.join("; ")})` : "";
      this.hostCheck = `the host's C library: ${has}${note}. The plugin loads none of it: ${own}`;
      this.once("host", "info", this.hostCheck);
      return true;
    }
    if (v.ok === true) {
      this.hostCheck =
        `this host can run ${plan.src} (${v.machine}, ` +
        `${v.libc}${v.files[0] ? `, loader ${v.files[0].path}` : ""})`;
      this.once("host", "info", this.hostCheck);
      return true;
    }
    if (v.ok === null) {
      this.hostCheck = `host check skipped: ${v.skipped.join("; ")}`;
      this.once("host", "warn", `${this.hostCheck}; installing ${plan.src} unchecked`);
      return true;
    }
    this.hostProblems = [
      `this host cannot run the plugin, so meshcni is not installed here: ${plan.src}: ${v.problems.join("; ")}`,
    ];
    this.hostCheck = this.hostProblems[0];
    this.once("host", "error", this.hostProblems[0]!);
    return false;
  }

  /**
   * Puts the plugin in place: its loader's folder, then the binary (rewritten to use it), each
   * only when it is not there already, each atomically; then removes the folders no binary
   * names any more. False when the host can run no candidate.
   */
  installBinary(): boolean {
    const { fs, log } = this.deps;
    const src = this.pickPluginBinary();
    if (src === undefined) return false;
    const plan = this.planPlugin(src);
    if (plan.folder) this.installFolder(plan.folder);
    const dest = this.binaryPath;
    const now = fs.stat(dest);
    const unchanged = now && this.binaryStat && sameStat(now, this.binaryStat) && this.installed === plan;
    if (!unchanged) {
      if (now && fs.hash(dest) === plan.hash) {
        if (!this.binaryStat) log.info(`${dest} already holds this meshcni binary`);
      } else {
        fs.copyAtomic(src, dest, 0o755, plan.patch);
        const loader = plan.folder ? ` (its loader: ${plan.folder.paths.interpreter})` : "";
        log.info(`installed the plugin binary: wrote ${dest}${loader}`);
      }
      this.binaryStat = fs.stat(dest);
      this.installed = plan;
    }
    this.removeStaleFolders(plan.folder?.name);
    return true;
  }

  /** The folder of the plugin's loader and libraries, unless it is there already with these files. */
  private installFolder(folder: PrivateFolder): void {
    const { fs, log } = this.deps;
    const dir = join(this.privateDir, folder.name);
    if (this.folderProblem(folder) === undefined) return;
    const names = (fs.list(dir) ?? []).sort().join("\0");
    const same =
      names ===
        folder.files
          .map((f) => f.name)
          .sort()
          .join("\0") &&
      folder.files.every((f) => fs.hash(join(dir, f.name)) === f.sha256 && fs.stat(join(dir, f.name))?.mode === f.mode);
    if (!same) {
      fs.ensureDir(this.privateDir);
      fs.placeFolder(this.privateDir, folder.name, folder.files);
      log.info(
        `installed the plugin's own loader and C library: wrote ${dir} (${folder.files.map((f) => f.name).join(", ")})`,
      );
    }
    this.folderStats = new Map(folder.files.map((f) => [f.name, fs.stat(join(dir, f.name))!]));
    this.folderStatsFor = folder;
  }

  /** Why the loader's folder is not as installed (a file missing or changed since). */
  private folderProblem(folder: PrivateFolder): string | undefined {
    const dir = join(this.privateDir, folder.name);
    if (this.folderStatsFor !== folder) return `${dir} is not installed`;
    for (const f of folder.files) {
      const now = this.deps.fs.stat(join(dir, f.name));
      if (!now) return `${join(dir, f.name)} is missing`;
      if (!sameStat(now, this.folderStats.get(f.name)!)) return `${join(dir, f.name)} is not what meshcni installed`;
    }
    return undefined;
  }

  /** The agent's folders in meshcni.d other than `keep`, once no plugin can still be loading from them. */
  private removeStaleFolders(keep: string | undefined): void {
    const { fs, log } = this.deps;
    const names = fs.list(this.privateDir);
    if (!names) return;
    const written = this.binaryStat?.mtimeMs ?? 0;
    const { remove, wait } = planStaleFolders(names, keep, written, (this.deps.wallClock ?? Date.now)());
    for (const name of remove) {
      if (fs.removeTree(join(this.privateDir, name)))
        log.info(`removed ${join(this.privateDir, name)}: no plugin binary loads from it any more`);
    }
    if (wait.length > 0)
      this.once(
        "stale",
        "info",
        `keeping ${wait.map((n) => join(this.privateDir, n)).join(", ")} for a few seconds: a plugin started ` +
          "from the previous binary may still be loading from it",
      );
  }

  /** Nothing in meshcni.d but the agent's own folders left? Then the folder goes too. */
  private removePrivateDir(): void {
    const { fs, log } = this.deps;
    const names = fs.list(this.privateDir);
    if (names === undefined) return;
    for (const name of names) {
      if (FOLDER_NAME.test(name) || isTempName(name)) fs.removeTree(join(this.privateDir, name));
    }
    const left = fs.list(this.privateDir) ?? [];
    if (left.length > 0) {
      log.warn(`left ${this.privateDir}: it holds ${left.join(", ")}, which meshcni did not write`);
      return;
    }
    if (fs.removeTree(this.privateDir))
      log.info(`removed the plugin's own loaders and C libraries: ${this.privateDir}`);
  }

  private binaryProblem(): string | undefined {
    const now = this.deps.fs.stat(this.binaryPath);
    if (!now) return `${this.binaryPath} is missing`;
    if (!this.binaryStat || !sameStat(now, this.binaryStat))
      return `${this.binaryPath} is not the installed meshcni binary`;
    const folder = this.installed?.folder;
    return folder && this.folderProblem(folder);
  }

  // --- the plugin's kubeconfig -------------------------------------------------------------

  /**
   * The kubeconfig as it should be now: the API server, the cluster CA from the agent's service
   * account folder and the plugin's current token. InstallError when an input is missing
   * (TokenPending while no token has arrived yet).
   */
  readDesiredKubeconfig(): string {
    const { fs, tokens } = this.deps;
    const service = this.config.service;
    if (!service) {
      throw new InstallError(
        "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; " +
          "they come with every pod, or set them to the API server's address",
      );
    }
    const sa = this.config.serviceAccountDir;
    const caPem = fs.readText(join(sa, "ca.crt"));
    if (caPem === undefined) throw new InstallError(`no cluster CA at ${sa}/ca.crt (see --service-account-dir)`);
    if (!tokens) throw new InstallError("no source of the plugin's token (a bug: only --uninstall runs without one)");
    const t = tokens.current();
    if (!t) {
      const why = tokens.problem();
      const yet = `no token of ${accountName(tokens.account)} for the plugin's kubeconfig yet`;
      throw new TokenPending(`${yet}${why ? ` (${why})` : " (requesting one)"}`);
    }
    try {
      return renderKubeconfig({
        host: service.host,
        port: service.port,
        token: t.token,
        caPem,
        account: t.account,
        expiresAt: t.expiresAt,
      });
    } catch (e) {
      if (e instanceof KubeconfigInputError)
        throw new InstallError(`cannot write the plugin's kubeconfig: ${e.message}`);
      throw e;
    }
  }

  /** What the kubeconfig on the host says of its token (undefined: none, or another scheme's). */
  readWrittenToken(): WrittenToken | undefined {
    const text = this.deps.fs.readText(this.kubeconfigPath);
    return text === undefined ? undefined : readWrittenToken(text);
  }

  /** Writes the kubeconfig when it is missing or stale (for instance after a token rotation). */
  writeKubeconfig(): boolean {
    const { fs, log } = this.deps;
    let text: string;
    try {
      text = this.readDesiredKubeconfig();
    } catch (e) {
      if (!(e instanceof InstallError)) throw e;
      if (!(e instanceof TokenPending)) this.once("kubeconfig", "error", e.message);
      return false;
    }
    const path = this.kubeconfigPath;
    const current = fs.read(path);
    if (current && current.mode === KUBECONFIG_MODE && new TextDecoder().decode(current.bytes) === text) return true;
    const before = current === undefined ? undefined : readWrittenToken(new TextDecoder().decode(current.bytes));
    fs.writeAtomic(path, text, KUBECONFIG_MODE);
    const server = renderServerUrl(this.config.service!.host, this.config.service!.port);
    const t = this.deps.tokens!.current()!;
    const why =
      current === undefined
        ? "wrote the plugin's kubeconfig"
        : before === undefined
          ? "rewrote the plugin's kubeconfig, which held no token of the plugin's own account " +
            "(written by an older meshcni: the agent's token)"
          : before.token !== t.token
            ? "rewrote the plugin's kubeconfig with a new token"
            : "rewrote the plugin's kubeconfig (CA, server or mode changed)";
    this.said.delete("kubeconfig");
    const whose = `service account ${accountName(t.account)}, valid until ${renderTime(t.expiresAt)}`;
    log.info(`${why} for ${server} (${whose}): ${path}`);
    return true;
  }

  /** Why the plugin's kubeconfig is not current (missing, stale, its token missing or expired). */
  kubeconfigProblem(): string | undefined {
    let want: string;
    try {
      want = this.readDesiredKubeconfig();
    } catch (e) {
      if (e instanceof InstallError) return e.message;
      throw e;
    }
    const have = this.deps.fs.read(this.kubeconfigPath);
    if (have === undefined) return `${this.kubeconfigPath} is missing`;
    if (have.mode !== KUBECONFIG_MODE) return `${this.kubeconfigPath} has mode ${have.mode.toString(8)}, not 600`;
    if (new TextDecoder().decode(have.bytes) !== want) return `${this.kubeconfigPath} is out of date`;
    const t = this.deps.tokens!.current()!;
    const now = (this.deps.wallClock ?? Date.now)();
    if (validUntil(t) <= now) {
      const why = this.deps.tokens!.problem();
      const whose = `${this.kubeconfigPath} (${accountName(t.account)})`;
      return (
        `the plugin's token in ${whose} expired at ${renderTime(t.expiresAt)}${why ? `: ${why}` : ""}; ` +
        "the plugin's fallback fails closed until the agent gets a new one"
      );
    }
    return undefined;
  }

  /** The plugin's token as the kubeconfig should carry it, for /status (never the token itself). */
  tokenStatus(): { account: string; expiresAt?: string; expired?: boolean } | undefined {
    const tokens = this.deps.tokens;
    if (!tokens) return undefined;
    const t = tokens.current();
    if (!t) return { account: accountName(tokens.account) };
    const now = (this.deps.wallClock ?? Date.now)();
    return { account: accountName(t.account), expiresAt: renderTime(t.expiresAt), expired: validUntil(t) <= now };
  }

  // --- the chain ---------------------------------------------------------------------------

  private observe: Observe = (name) => this.deps.fs.read(join(this.config.hostNetDir, name));

  private readSelection(): Selection {
    const { fs } = this.deps;
    const dir = this.config.hostNetDir;
    const read: ReadFile = (name) => fs.readText(join(dir, name));
    const sel = this.config.confName
      ? selectNamedConfig(this.config.confName, read)
      : selectPrimaryConfig(fs.list(dir) ?? [], read);
    for (const s of sel.skipped) this.once(`skip:${s.name}`, "warn", `skipped ${join(dir, s.name)}: ${s.reason}`);
    this.skippedLast = sel.skipped.length;
    return sel;
  }

  private skippedLast = 0;
  /** The last look at the folder passed over files it could not use (perhaps caught mid-write). */
  get sawUnusableConfig(): boolean {
    return this.skippedLast > 0;
  }

  /** Chains meshcni into the runtime's config, unless it is there already. */
  chain(): ChainStatus {
    const { log } = this.deps;
    const dir = this.config.hostNetDir;
    const sel = this.withoutReplacedList(this.readSelection());
    if (!sel.name || !sel.config) {
      const what = this.config.confName
        ? `${join(dir, this.config.confName)} to be a valid network config`
        : `a CNI network config in ${dir}`;
      this.once("chain", "info", `waiting for ${what}; the cluster's network plugin writes it`);
      return { kind: "waiting" };
    }
    const primary = { name: sel.name, config: sel.config, ...(sel.text !== undefined ? { text: sel.text } : {}) };
    if (isChained(sel.config, this.config.entry)) {
      this.undoStale(this.state.records.filter((r) => r.file !== sel.name));
      this.once("chain", "info", `meshcni is chained in ${join(dir, sel.name)}`);
      return { kind: "in-place", file: sel.name };
    }
    const rechain = this.isRechain(sel);
    if (rechain) {
      const wait = this.backoff.waitFor(sel.name, this.deps.now());
      if (wait > 0) return { kind: "backoff", file: sel.name, delayMs: wait };
    }
    // One read of the selected file for the whole plan: the bytes undo keeps are the ones the
    // list is made from (a file rewritten in place can read differently from one moment to the next).
    const seen = this.observe(sel.name);
    if (!seen || new TextDecoder().decode(seen.bytes) !== sel.text) return { kind: "changed", file: sel.name };
    const outcome = planChain(this.state, primary, this.config.entry, (name) =>
      name === sel.name ? seen : this.observe(name),
    );
    if (!outcome.ok) {
      this.once("chain", "error", outcome.reason);
      return { kind: "blocked", reason: outcome.reason };
    }
    const { plan } = outcome;
    this.saveState(plan.state);
    if (!this.apply(plan.steps)) {
      const made = plan.state.records[0]!;
      const list = this.observe(made.file);
      if (made.convertedFrom && list && sha256Hex(list.bytes) === made.wrote) {
        // The list is written, but the host rewrote or withdrew the file it was made from: it goes again.
        const { convertedFrom: _from, ...withoutSource } = made;
        for (let i = 0; i < 5 && !this.apply(planUndoRecord(withoutSource, this.observe)); i++);
        this.saveState({ version: 1, records: this.state.records.filter((r) => r !== made) });
      }
      return { kind: "changed", file: sel.name };
    }
    this.said.set("chain", `meshcni is chained in ${join(dir, plan.target)}`);
    if (rechain) {
      const verdict = this.backoff.note(sel.name, this.deps.now());
      if (verdict.startedBackoff) {
        log.warn(
          `${join(dir, sel.name)} keeps losing meshcni's entry (re-chained more than ` +
            `${this.backoffOptions.budget} times in ${this.backoffOptions.windowMs / 1000} s): ` +
            "another component rewrites it; backing off. If it is a CNI agent that " +
            "owns the folder, let it keep foreign plugins (Cilium: cni.exclusive=false)",
        );
      }
    }
    this.undoStale(plan.stale);
    return { kind: "chained", file: plan.target };
  }

  /**
   * A list meshcni made from a single-plugin file stands for that file only while the file is
   * gone. Once the host writes the file again, the list is out of date: the host's file is the
   * one to chain (a `.json` sorts after its `.conflist`, so selection alone would keep the old
   * list), or, when the runtime cannot use it, the list is undone and another file chosen.
   */
  private withoutReplacedList(sel: Selection): Selection {
    for (let i = 0; i <= this.state.records.length; i++) {
      const record = this.state.records.find((r) => r.file === sel.name && r.convertedFrom);
      const source = record?.convertedFrom?.name;
      const text = source === undefined ? undefined : this.deps.fs.readText(join(this.config.hostNetDir, source));
      if (!record || source === undefined || text === undefined) return sel;
      const parsed = parseHostConfig(source, text);
      if (parsed.ok) return { name: source, config: parsed.config, text, skipped: sel.skipped };
      this.deps.log.info(
        `${join(this.config.hostNetDir, source)} was written again and cannot be used; ` +
          `${record.file}, made from its earlier content, is out of date`,
      );
      this.undoRecord(record);
      sel = this.readSelection();
    }
    return sel;
  }

  /** meshcni chained this file before and something has changed it since (or wrote the `.conf` again). */
  private isRechain(sel: Selection): boolean {
    if (this.state.records.some((r) => r.convertedFrom?.name === sel.name)) return true;
    const record = this.state.records.find((r) => r.file === sel.name);
    const now = record && this.observe(record.file);
    return now !== undefined && sha256Hex(now.bytes) !== record!.wrote;
  }

  /** Files chained earlier that the runtime no longer reads first: put them back. */
  private undoStale(stale: UndoRecord[]): void {
    for (const record of stale) {
      this.deps.log.info(
        `${join(this.config.hostNetDir, record.file)} is no longer the ` +
          `config the runtime reads first; undoing meshcni's change there`,
      );
      this.undoRecord(record);
    }
  }

  /** Where meshcni's entry is: the config the runtime reads first, chained or not (status()'s chain alone). */
  chainStatus(): InstallStatus["chain"] {
    const dir = this.config.hostNetDir;
    const sel = this.readSelection();
    if (!sel.name || !sel.config) return { path: dir, current: false, problem: `no CNI network config in ${dir} yet` };
    const path = join(dir, sel.name);
    return isChained(sel.config, this.config.entry)
      ? { path, file: sel.name, current: true }
      : { path, file: sel.name, current: false, problem: `meshcni is not chained in ${path}` };
  }

  // --- all of it ---------------------------------------------------------------------------

  /** Does whatever is missing; returns the chain's status. */
  reconcile(): ChainStatus {
    if (!this.installBinary()) return { kind: "blocked", reason: this.hostProblems.join("; ") };
    this.writeKubeconfig();
    return this.chain();
  }

  /** Each part, where it is and why it is not current (a binary the host cannot run says so). */
  status(): InstallStatus {
    const part = (path: string, problem: string | undefined) =>
      problem === undefined ? { path, current: true } : { path, current: false, problem };
    const token = this.tokenStatus();
    return {
      chain: this.chainStatus(),
      binary: {
        ...part(this.binaryPath, this.hostProblems[0] ?? this.binaryProblem()),
        ...(this.hostCheck ? { hostCheck: this.hostCheck } : {}),
      },
      kubeconfig: { ...part(this.kubeconfigPath, this.kubeconfigProblem()), ...(token ? { token } : {}) },
    };
  }

  /** Ready only while the host can run the plugin, the chain is in place and the binary and kubeconfig are current. */
  check(): Readiness {
    const s = this.status();
    const problems = [s.chain.problem, s.binary.problem, s.kubeconfig.problem].filter(
      (p): p is string => p !== undefined,
    );
    return { ready: problems.length === 0, problems };
  }

  /**
   * Undoes everything: each recorded file goes back to what the host had (or, when the host
   * rewrote it, loses meshcni's entry), any other meshcni entry in the folder is removed, and
   * the kubeconfig, the binary and the undo record go. Failures are collected, not fatal.
   */
  uninstall(): void {
    const { fs, log } = this.deps;
    const dir = this.config.hostNetDir;
    const errors: Error[] = [];
    const attempt = (what: string, fn: () => void) => {
      try {
        fn();
      } catch (e) {
        errors.push(new Error(`${what}: ${(e as Error).message}`, { cause: e }));
      }
    };
    // What a kill -9 left half done first (a host file held aside, a temp file), as at start-up:
    // --uninstall after a crash must not leave a `.meshcni-held` or `.meshcni-tmp` file behind.
    for (const d of [dir, this.config.hostBinDir, this.privateDir]) {
      attempt(`recovering interrupted writes in ${d}`, () => {
        for (const name of fs.recoverInterruptedWrites(d))
          log.info(
            `recovered ${join(d, name)}, left by an interrupted write (temp file removed, or host file put back)`,
          );
      });
    }
    this.loadState();
    for (const record of [...this.state.records]) {
      attempt(`undoing ${join(dir, record.file)}`, () => this.undoRecord(record));
    }
    for (const name of fs.list(dir) ?? []) {
      const current = this.observe(name);
      if (current && isConfigFileName(name))
        attempt(`cleaning ${join(dir, name)}`, () => this.apply(planEntryRemoval(name, current)));
    }
    if (this.state.records.length === 0) attempt(`removing ${this.undoPath}`, () => fs.remove(this.undoPath));
    for (const [what, path] of [
      ["the plugin's kubeconfig", this.kubeconfigPath],
      ["the plugin binary", this.binaryPath],
    ] as const) {
      attempt(`removing ${path}`, () => {
        if (fs.remove(path)) log.info(`removed ${what}: ${path}`);
      });
    }
    // After the binary: no runtime can start a plugin that would look for its loader there.
    attempt(`removing ${this.privateDir}`, () => this.removePrivateDir());
    if (errors.length > 0)
      throw new AggregateError(errors, `undo left work undone:\n${errors.map((e) => `  ${e.message}`).join("\n")}`);
    log.info("meshcni is uninstalled from this node");
  }
}

function sameStat(a: FileStat, b: FileStat): boolean {
  return a.size === b.size && a.mtimeMs === b.mtimeMs && a.ino === b.ino;
}
