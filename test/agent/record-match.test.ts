// Matching the plugin's records to a pod's current sandbox (internal/agent/repair/record-match.ts): by
// UID (or namespace and name when a side has no UID), and by the time of the ADD against the
// sandbox's PodReadyToStartContainers transition, so a record of an earlier sandbox of the same
// pod never covers the one running now.
import { describe, expect, test } from "bun:test";
import type { PodRecord } from "../../internal/wire/state.ts";
import {
  ADD_BEFORE_READY_MAX_MS,
  matchRecord,
  recordOfPod,
  type SandboxRef,
} from "../../internal/agent/repair/record-match.ts";

const READY = Date.parse("2026-11-24T10:00:05Z");
const UID = "7d0c0001-1111-4222-8333-000000000001";
const pod = (over: Partial<SandboxRef> = {}): SandboxRef => ({
  namespace: "emojivoto",
  name: "web-1",
  uid: UID,
  readyAt: READY,
  ...over,
});
const rec = (containerId: string, atMs: number, over: Partial<PodRecord> = {}): PodRecord => ({
  v: 1,
  containerId,
  namespace: "emojivoto",
  name: "web-1",
  uid: UID,
  decision: "meshed",
  reason: "runs linkerd-proxy",
  time: new Date(atMs).toISOString(),
  ...over,
});

describe("whose record", () => {
  test("same UID; a record or a pod without UID falls back on namespace and name", () => {
    expect(recordOfPod(rec("a", READY), pod())).toBe(true);
    expect(recordOfPod(rec("a", READY, { uid: "another" }), pod())).toBe(false);
    expect(recordOfPod(rec("a", READY, { uid: undefined }), pod())).toBe(true);
    expect(recordOfPod(rec("a", READY), pod({ uid: undefined }))).toBe(true);
    expect(recordOfPod(rec("a", READY, { namespace: "other" }), pod())).toBe(false);
    expect(recordOfPod(rec("a", READY, { name: "web-2", uid: undefined }), pod())).toBe(false);
  });
});

describe("which sandbox", () => {
  test("the ADD just before the sandbox became ready covers it", () => {
    const r = rec("c1", READY - 400);
    expect(matchRecord(pod(), [r])).toEqual({ kind: "current", record: r });
  });

  test("the status' whole seconds: an ADD in the same second after the truncated transition still covers it", () => {
    // Ready at 10:00:05.700 is reported as 10:00:05; the ADD came at 10:00:05.300.
    const r = rec("c1", READY + 300);
    expect(matchRecord(pod(), [r]).kind).toBe("current");
  });

  test(`an ADD up to ${ADD_BEFORE_READY_MAX_MS / 1000} s before the transition (a busy node) still covers it; one before that is an earlier sandbox's`, () => {
    expect(matchRecord(pod(), [rec("c1", READY - ADD_BEFORE_READY_MAX_MS)]).kind).toBe("current");
    const old = rec("c0", READY - ADD_BEFORE_READY_MAX_MS - 1);
    expect(matchRecord(pod(), [old])).toEqual({ kind: "older", record: old });
  });

  test("several records of the pod: the newest decides (an old sandbox's record left behind by a DEL that never reached meshcni)", () => {
    const old = rec("c0", READY - 3_600_000);
    const cur = rec("c1", READY - 1000);
    expect(matchRecord(pod(), [cur, old])).toEqual({ kind: "current", record: cur });
    expect(matchRecord(pod(), [old, cur])).toEqual({ kind: "current", record: cur });
    // The current sandbox got no ADD through meshcni: only the old record is there.
    expect(matchRecord(pod(), [old])).toEqual({ kind: "older", record: old });
  });

  test("without the condition (older kubelets): the UID alone decides", () => {
    const old = rec("c0", READY - 3_600_000);
    expect(matchRecord(pod({ readyAt: undefined }), [old])).toEqual({ kind: "current", record: old });
  });

  test("a record whose time cannot be read is older than any sandbox with a known transition", () => {
    const bad = rec("c0", READY, { time: "yesterday" });
    expect(matchRecord(pod(), [bad])).toEqual({ kind: "older", record: bad });
    expect(matchRecord(pod({ readyAt: undefined }), [bad]).kind).toBe("current");
  });

  test("no record of the pod, or only other pods' records: none", () => {
    expect(matchRecord(pod(), [])).toEqual({ kind: "none" });
    expect(
      matchRecord(pod(), [rec("x", READY, { uid: "other" }), rec("y", READY, { namespace: "b", uid: undefined })]),
    ).toEqual({ kind: "none" });
  });
});
