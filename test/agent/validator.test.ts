// The mesh validator's latest run as evidence (internal/agent/repair/validator.ts): only the run that
// kubelet reports as the latest, only the exit code that means "no redirect", only in the current
// sandbox.
import { describe, expect, test } from "bun:test";
import {
  describeValidatorFailure,
  latestRun,
  sandboxReadyAt,
  validatorFailure,
} from "../../internal/agent/repair/validator.ts";

const failed = (exitCode: number, finishedAt = "2026-11-24T10:00:20Z") => ({
  terminated: { exitCode, reason: "Error", finishedAt },
});
const status = (c: Record<string, unknown>, readyAt?: string) => ({
  phase: "Pending",
  ...(readyAt
    ? { conditions: [{ type: "PodReadyToStartContainers", status: "True", lastTransitionTime: readyAt }] }
    : {}),
  initContainerStatuses: [{ name: "linkerd-network-validator", ...c }],
});

describe("latestRun", () => {
  test("terminated wins over lastState; waiting reads lastState; running and nothing are no run", () => {
    expect(latestRun({ state: { terminated: { exitCode: 0 } }, lastState: failed(95) })).toEqual({ exitCode: 0 });
    expect(latestRun({ state: { waiting: { reason: "CrashLoopBackOff" } }, lastState: failed(95) })).toEqual(
      failed(95).terminated,
    );
    expect(latestRun({ state: { running: {} }, lastState: failed(95) })).toBeUndefined();
    expect(latestRun({ state: { waiting: { reason: "PodInitializing" } } })).toBeUndefined();
    expect(latestRun({})).toBeUndefined();
    expect(latestRun("not a status")).toBeUndefined();
  });
});

describe("validatorFailure", () => {
  test("Linkerd 95 and Istio 126, each only for its own validator", () => {
    expect(validatorFailure(status({ state: failed(95) }))).toEqual({
      container: "linkerd-network-validator",
      exitCode: 95,
      detail: "Error",
      finishedAt: "2026-11-24T10:00:20Z",
    });
    expect(
      validatorFailure({
        initContainerStatuses: [{ name: "istio-validation", state: { waiting: {} }, lastState: failed(126) }],
      })?.exitCode,
    ).toBe(126);
    expect(
      validatorFailure({ initContainerStatuses: [{ name: "istio-validation", state: failed(95) }] }),
    ).toBeUndefined();
    expect(validatorFailure(status({ state: failed(126) }))).toBeUndefined();
    expect(validatorFailure(status({ state: failed(1) }))).toBeUndefined();
    expect(
      validatorFailure({ initContainerStatuses: [{ name: "some-other-init", state: failed(95) }] }),
    ).toBeUndefined();
  });

  test("the old validator failure in lastState of a now-meshed pod (its latest run succeeded): no evidence", () => {
    expect(
      validatorFailure(status({ state: { terminated: { exitCode: 0, reason: "Completed" } }, lastState: failed(95) })),
    ).toBeUndefined();
  });

  test("a failure that finished before the current sandbox was ready belongs to an earlier sandbox", () => {
    const c = { state: { waiting: { reason: "PodInitializing" } }, lastState: failed(95, "2026-11-24T10:00:20Z") };
    expect(sandboxReadyAt(status(c, "2026-11-24T10:05:00Z"))).toBe(Date.parse("2026-11-24T10:05:00Z"));
    expect(validatorFailure(status(c, "2026-11-24T10:05:00Z"))).toBeUndefined();
    expect(validatorFailure(status(c, "2026-11-24T10:00:20Z"))?.exitCode).toBe(95);
    expect(validatorFailure(status(c, "2026-11-24T10:00:10Z"))?.exitCode).toBe(95);
    // Without a finish time, or without the condition, the failure counts.
    expect(
      validatorFailure(
        status({ state: { waiting: {} }, lastState: { terminated: { exitCode: 95 } } }, "2026-11-24T10:05:00Z"),
      )?.exitCode,
    ).toBe(95);
    expect(validatorFailure(status(c))?.exitCode).toBe(95);
  });

  test("the line for logs and Events names the container, the code and kubelet's words", () => {
    expect(
      describeValidatorFailure({
        container: "istio-validation",
        exitCode: 126,
        detail: "Error: iptables validation failed",
      }),
    ).toBe(
      "its istio-validation init container's latest run failed (exit code 126, " +
        "Error: iptables validation failed): the redirect was not in place",
    );
  });
});
