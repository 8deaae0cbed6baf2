// A Worker of probe.ts: on a folder, tries to mount a tmpfs there from its own thread.
import { dlopen, FFIType as T, ptr, read } from "bun:ffi";

declare const self: Worker;
const c = dlopen("libc.so.6", {
  mount: { args: [T.ptr, T.ptr, T.ptr, T.u64, T.ptr], returns: T.i32 },
  __errno_location: { args: [], returns: T.ptr },
}).symbols;
const cstr = (s: string) => ptr(Buffer.from(`${s}\0`));
self.onmessage = (e: MessageEvent) => {
  if (e.data === "hello") return self.postMessage("ready");
  const r = c.mount(cstr("none"), cstr(e.data as string), cstr("tmpfs"), 0n, null);
  self.postMessage(r === 0 ? "ok" : `errno ${read.i32(c.__errno_location()!, 0)}`);
};
