// The parts of Pod and Namespace objects meshcni reads. Loose: the API server sends far more.
import * as v from "valibot";

const StringMap = v.optional(v.nullable(v.record(v.string(), v.string())), {});

const EnvVarSchema = v.looseObject({ name: v.string(), value: v.optional(v.nullable(v.string())) });

export const ContainerSchema = v.looseObject({
  name: v.string(),
  image: v.optional(v.string()),
  args: v.optional(v.nullable(v.array(v.string()))),
  env: v.optional(v.nullable(v.array(EnvVarSchema))),
  restartPolicy: v.optional(v.string()),
  securityContext: v.optional(
    v.nullable(
      v.looseObject({
        runAsUser: v.optional(v.nullable(v.number())),
        runAsGroup: v.optional(v.nullable(v.number())),
      }),
    ),
  ),
});
export type Container = v.InferOutput<typeof ContainerSchema>;

const MetaSchema = v.looseObject({
  name: v.string(),
  namespace: v.optional(v.string()),
  labels: StringMap,
  annotations: StringMap,
});

export const PodSchema = v.looseObject({
  kind: v.optional(v.string()),
  metadata: MetaSchema,
  spec: v.looseObject({
    containers: v.array(ContainerSchema),
    initContainers: v.optional(v.nullable(v.array(ContainerSchema))),
    securityContext: v.optional(v.nullable(v.looseObject({}))),
  }),
});
export type Pod = v.InferOutput<typeof PodSchema>;

export const NamespaceSchema = v.looseObject({
  kind: v.optional(v.string()),
  metadata: MetaSchema,
});
export type Namespace = v.InferOutput<typeof NamespaceSchema>;

const ServicePortSchema = v.looseObject({
  port: v.number(),
  targetPort: v.optional(v.nullable(v.union([v.number(), v.string()]))),
});

/** A Service: only its ports are read (linkerd-cni reads `default/kubernetes`'s). */
export const ServiceSchema = v.looseObject({
  kind: v.optional(v.string()),
  metadata: v.looseObject({ name: v.string(), namespace: v.optional(v.string()) }),
  spec: v.optional(v.nullable(v.looseObject({ ports: v.optional(v.nullable(v.array(ServicePortSchema))) }))),
});
export type Service = v.InferOutput<typeof ServiceSchema>;

/** Reads an annotation the way both meshes do: the pod's non-empty value, else the namespace's. */
export function annotation(pod: Pod, ns: Namespace | undefined, key: string): string | undefined {
  const p = pod.metadata.annotations?.[key];
  if (p !== undefined && p !== "") return p;
  const n = ns?.metadata.annotations?.[key];
  return n !== undefined && n !== "" ? n : undefined;
}

/** All containers, init containers (native sidecars among them) included. */
export function allContainers(pod: Pod): Container[] {
  return [...(pod.spec.initContainers ?? []), ...pod.spec.containers];
}

export function parsePod(raw: unknown): Pod | undefined {
  const r = v.safeParse(PodSchema, raw);
  return r.success ? r.output : undefined;
}

export function parseService(raw: unknown): Service | undefined {
  const r = v.safeParse(ServiceSchema, raw);
  return r.success ? r.output : undefined;
}

export function parseNamespace(raw: unknown): Namespace | undefined {
  const r = v.safeParse(NamespaceSchema, raw);
  return r.success ? r.output : undefined;
}
