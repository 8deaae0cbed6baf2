// A TCP relay from inside a network namespace to this process's own: it listens on 127.0.0.1:PORT
// in the namespace at `netns` (the listening socket is made with this thread in that namespace,
// internal/firewall/io/setns.ts) and carries each connection to `to` here. A container on a
// network of its own (podman --network none) reaches the stand-in API server through it as a
// pod reaches the API server, with nothing else of the host's network.
import { inNetns, loadNetnsCalls } from "../../internal/firewall/io/setns.ts";

export interface Relay {
  port: number;
  stop(): void;
}

type Peer = { write(d: Uint8Array): number; end(): void };

export async function relayInto(netns: string, port: number, to: { host: string; port: number }): Promise<Relay> {
  await loadNetnsCalls();
  const peers = new Map<object, { peer?: Peer; queue: Uint8Array[]; closed: boolean }>();
  const server = inNetns(netns, () =>
    Bun.listen({
      hostname: "127.0.0.1",
      port,
      socket: {
        open(inside) {
          const state: { peer?: Peer; queue: Uint8Array[]; closed: boolean } = { queue: [], closed: false };
          peers.set(inside, state);
          Bun.connect({
            hostname: to.host,
            port: to.port,
            socket: {
              open(out) {
                state.peer = out;
                for (const q of state.queue) out.write(q);
                state.queue = [];
                if (state.closed) out.end();
              },
              data(_out, d) {
                inside.write(d);
              },
              close() {
                inside.end();
              },
              error() {
                inside.end();
              },
              connectError() {
                inside.end();
              },
            },
          }).catch(() => inside.end());
        },
        data(inside, d) {
          const state = peers.get(inside)!;
          if (state.peer) state.peer.write(d);
          else state.queue.push(new Uint8Array(d));
        },
        close(inside) {
          const state = peers.get(inside);
          if (state) {
            state.closed = true;
            state.peer?.end();
          }
          peers.delete(inside);
        },
        error() {},
      },
    }),
  );
  return { port: server.port, stop: () => server.stop(true) };
}
