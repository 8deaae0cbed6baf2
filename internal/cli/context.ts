// What a meshcnictl command gets from the outside world. cmd/cli.ts builds the real one
// (internal/cli/io/context.ts); tests may build their own.
import type { Logger } from "../log/logger.ts";

/** meshcnictl's log: the one Logger, and a success line. */
export interface CliLogger extends Logger {
  success(message: string): void;
}

export interface HttpAnswer {
  status: number;
  body: string;
}

/** One Kubernetes API server, with the credentials of the user's kubeconfig. */
export interface ApiClient {
  readonly server: string;
  get(path: string): Promise<HttpAnswer>;
  post(path: string, body: unknown): Promise<HttpAnswer>;
}

export interface CliContext {
  /** Writes the command's product (YAML, JSON, payloads, the check list) to stdout. */
  out(text: string): void;
  /** Human messages, on stderr. */
  log: CliLogger;
  env: Readonly<Record<string, string | undefined>>;
  /** Reads a file; "-" reads standard input. */
  readFile(path: string): Promise<string>;
  /** Connects to an API server described by a resolved kubeconfig. */
  openApi(target: import("./kubeconfig.ts").ResolvedKubeconfig, timeoutMs: number): Promise<ApiClient>;
  version: string;
}
