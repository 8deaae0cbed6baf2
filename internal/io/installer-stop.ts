// The DaemonSet's preStop: ask the running installer to undo (SIGTERM, which it handles by
// undoing everything) and wait until it has exited, so one process undoes, once.

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Sends SIGTERM to `pid` and waits up to `timeoutMs` for it to end. Returns false when there was
 * no such process or it did not end in time, so the caller undoes by itself.
 */
export async function stopRunningInstaller(pid: number, timeoutMs: number): Promise<boolean> {
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    return false;
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive(pid)) return true;
    await Bun.sleep(50);
  }
  return false;
}
