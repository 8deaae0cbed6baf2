// The real outside world for meshcnictl: stdout, a consola logger on stderr, files, standard
// input and HTTPS to the API server.
import { readFile } from "node:fs/promises";
import { createConsola } from "consola";
import type { CliContext, CliLogger } from "../context.ts";
import { openApiClient } from "./api-client.ts";

export function createCliLogger(): CliLogger {
  // Human output goes to stderr, so stdout carries nothing but the command's product. On a
  // terminal consola draws its badges; otherwise one plain line each, for logs and tests.
  const plain = {
    log(entry: { type: string; args: unknown[] }) {
      process.stderr.write(
        `meshcnictl: ${entry.type === "success" ? "" : `${entry.type}: `}${entry.args.map(String).join(" ")}\n`,
      );
    },
  };
  const consola = createConsola({
    stdout: process.stderr,
    stderr: process.stderr,
    level: 3,
    ...(process.stderr.isTTY ? {} : { reporters: [plain] }),
  });
  return {
    debug: (m) => consola.debug(m),
    info: (m) => consola.info(m),
    success: (m) => consola.success(m),
    warn: (m) => consola.warn(m),
    error: (m) => consola.error(m),
  };
}

export function createCliContext(version: string): CliContext & { flush(): Promise<void> } {
  const chunks: string[] = [];
  return {
    out: (text) => void chunks.push(text),
    log: createCliLogger(),
    env: process.env,
    readFile: async (path) => (path === "-" ? await Bun.stdin.text() : await readFile(path, "utf8")),
    openApi: openApiClient,
    version,
    async flush() {
      if (chunks.length) await Bun.write(Bun.stdout, chunks.join(""));
    },
  };
}
