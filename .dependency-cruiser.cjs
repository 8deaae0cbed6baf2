// The import rules of meshcni, checked by `npm test` (scripts/lint.ts): no import circles, and
// no folder of internal/ importing a folder above it. The layers, lowest first: a folder may
// import its own and any folder listed before it, never one after.
const LAYERS = [
  "text", // escaping of pod-controlled text
  "net", // ports, CIDRs, addresses
  "log", // the one Logger interface and the log levels
  "kube", // Kubernetes objects, names, kubeconfig, the API client
  "cni", // the CNI protocol
  "plan", // the backend-neutral plan
  "firewall", // the backends, their registry, and running them in a pod's namespace
  "wire", // the plugin <-> agent contract
  "config", // the plugin's conflist entry
  "mesh", // the mesh profiles
  "plugin", // the CNI plugin
  "agent", // the node agent
  "cli", // meshcnictl
];

const above = (i) => LAYERS.slice(i + 1).join("|");

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment: "Files that import each other in a loop.",
      from: {},
      to: { circular: true },
    },
    ...LAYERS.slice(0, -1).map((layer, i) => ({
      name: `${layer}-imports-no-layer-above`,
      severity: "error",
      comment: `internal/${layer}/ sits below ${above(i).replaceAll("|", ", ")}.`,
      from: { path: `^internal/${layer}/` },
      to: { path: `^internal/(${above(i)})/` },
    })),
    {
      name: "internal-imports-no-entrypoint",
      severity: "error",
      comment: "cmd/ wires internal/, never the other way.",
      from: { path: "^internal/" },
      to: { path: "^cmd/" },
    },
    {
      name: "only-firewall-names-a-backend",
      severity: "error",
      comment: "A backend is a folder of firewall/ and a line in its registry: nothing else imports it.",
      from: { path: "^internal/", pathNot: "^internal/firewall/" },
      to: { path: "^internal/firewall/(iptables|nftables)/" },
    },
    {
      name: "code-imports-no-test",
      severity: "error",
      comment: "Tests import the code, not the other way.",
      from: { path: "^(internal|cmd)/", pathNot: "\\.test\\.ts$" },
      to: { path: "(^test/|\\.test\\.ts$)" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "(^node_modules|^dist|^testdata)" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { extensions: [".ts", ".js"] },
    moduleSystems: ["es6"],
  },
};
