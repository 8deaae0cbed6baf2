// Starts test/istio/transparent-listener.ts inside a namespace (the TPROXY inbound stand-in).
import type { Listener, Netns } from "../support/netns.ts";
import { BUN } from "../support/netns.ts";
import { repoPath } from "../support/golden.ts";

export async function listenTransparent(netns: Netns, tag: string, port: number, family: 4 | 6 = 4): Promise<Listener> {
  const proc = Bun.spawn(
    [
      "ip",
      "netns",
      "exec",
      netns.name,
      BUN,
      repoPath("test/istio/transparent-listener.ts"),
      tag,
      String(port),
      String(family),
    ],
    {
      stdout: "pipe",
      stderr: "pipe",
    },
  );
  const reader = proc.stdout.getReader();
  const { value } = await Promise.race([reader.read(), Bun.sleep(10000).then(() => ({ value: undefined }))]);
  reader.releaseLock();
  if (!value || !new TextDecoder().decode(value).includes("ready")) {
    proc.kill("SIGKILL");
    throw new Error(`transparent listener did not start: ${await new Response(proc.stderr).text()}`);
  }
  return { stop: () => proc.kill("SIGKILL") };
}
