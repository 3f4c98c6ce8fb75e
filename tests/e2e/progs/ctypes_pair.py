#!/usr/bin/env python3
"""ctypes_pair: a producer and a consumer written the way Python stacks reach
CUDA: libcudart loaded late through ctypes (dlopen with RTLD_LOCAL), every
function looked up by name on that handle, and the consumer started with
multiprocessing's "spawn" method (a fresh interpreter). The producer frees
the block while the consumer still has it open.

Prints "first: ipcshim_active N" (when asked with --ask-first), then
"consumer: ok|poison|wrong|error ..." and exits 0 (ok), 1 (other bytes), 2.
"""
import ctypes
import multiprocessing as mp
import struct
import sys

N = 1 << 16
POISON = 0xDEADBEEF


class IpcHandle(ctypes.Structure):
    """cudaIpcMemHandle_t: 64 bytes, passed by value to cudaIpcOpenMemHandle."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


def runtime():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)  # RTLD_LOCAL, as every extension does
        except OSError:
            continue
    raise SystemExit("error: no libcudart")


def check(rt, what, r):
    if r != 0:
        print(f"error: {what} returned {r}", flush=True)
        raise SystemExit(2)


def consumer(handle, opened, freed, result):
    rt = runtime()
    check(rt, "cudaSetDevice", rt.cudaSetDevice(0))
    ptr = ctypes.c_void_p()
    h = IpcHandle.from_buffer_copy(handle)
    check(rt, "cudaIpcOpenMemHandle", rt.cudaIpcOpenMemHandle(ctypes.byref(ptr), h, ctypes.c_uint(1)))
    opened.set()
    freed.wait(30)
    host = (ctypes.c_uint32 * (N // 4))()
    check(rt, "cudaMemcpy", rt.cudaMemcpy(host, ptr, ctypes.c_size_t(N), 2))
    words = list(host)
    if all(w == (i * 2654435761) & 0xFFFFFFFF for i, w in enumerate(words)):
        result.put("ok")
    elif all(w == POISON for w in words):
        result.put("poison")
    else:
        result.put("wrong")
    check(rt, "cudaIpcCloseMemHandle", rt.cudaIpcCloseMemHandle(ptr))


def main():
    if "--ask-first" in sys.argv:
        try:
            active = ctypes.CDLL(None).ipcshim_active()
        except AttributeError:
            active = -1
        print(f"first: ipcshim_active {active}", flush=True)
    rt = runtime()
    check(rt, "cudaSetDevice", rt.cudaSetDevice(0))
    ptr = ctypes.c_void_p()
    check(rt, "cudaMalloc", rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(N)))
    data = (ctypes.c_uint32 * (N // 4))(*[(i * 2654435761) & 0xFFFFFFFF for i in range(N // 4)])
    check(rt, "cudaMemcpy", rt.cudaMemcpy(ptr, data, ctypes.c_size_t(N), 1))
    handle = IpcHandle()
    check(rt, "cudaIpcGetMemHandle", rt.cudaIpcGetMemHandle(ctypes.byref(handle), ptr))

    ctx = mp.get_context("spawn")
    opened, freed, result = ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=consumer, args=(bytes(handle), opened, freed, result))
    child.start()
    if not opened.wait(30):
        print("error: the consumer did not open the block", flush=True)
        child.kill()
        return 2
    check(rt, "cudaFree", rt.cudaFree(ptr))
    freed.set()
    try:
        verdict = result.get(timeout=30)
    except Exception:
        verdict = "error"
    child.join(30)
    print(f"consumer: {verdict}", flush=True)
    return {"ok": 0, "poison": 1, "wrong": 1}.get(verdict, 2)


if __name__ == "__main__":
    sys.exit(main())
