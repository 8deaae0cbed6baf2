// Runs inside a network namespace (ip netns exec NS bun tag-server.ts TAG@PORT ...): listens on
// each port and answers every connection with its tag and the port it arrived on, then closes.
// Prints "ready" once every port listens. A stand-in for the proxy and for applications.
const specs = Bun.argv.slice(2).map((s) => {
  const at = s.lastIndexOf("@");
  return { tag: s.slice(0, at), port: Number(s.slice(at + 1)) };
});
for (const { tag, port } of specs) {
  const handler = {
    open(socket: { end(data: string): void }) {
      socket.end(`${tag} port=${port}\n`);
    },
    data() {},
  };
  try {
    Bun.listen({ hostname: "::", port, socket: handler });
  } catch {
    Bun.listen({ hostname: "0.0.0.0", port, socket: handler });
  }
}
console.log("ready");
