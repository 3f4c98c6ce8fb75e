#!/usr/bin/env python3
"""cuda_core_pair.py: a producer and a consumer sharing buffers through
cuda.core's IPC-enabled DeviceMemoryResource, the way its documentation
shows it (the memory resource and the buffers sent through
multiprocessing, which maps the pool and imports each buffer in the
consumer). It knows nothing of ipcshim.

  cuda_core_pair.py [--free early|late] [--blocks N]

--free late (default) keeps NVIDIA's rule: the consumer closes its buffers
before the producer closes (frees) its own. --free early breaks it: the
producer closes its buffers (cuMemFreeAsync) while the consumer still
holds them and reads them afterwards.

Prints "consumer: ok N", "consumer: poison N" or "consumer: wrong N" (N
buffers read), or "consumer: error WHAT". Exit status 0 when the consumer
read what was written, 1 otherwise.
"""
import argparse
import multiprocessing as mp
import sys

import numpy as np
from cuda.bindings import driver
from cuda.core import Device, DeviceMemoryResource, DeviceMemoryResourceOptions

NBYTES = 1 << 16
POISON = 0xDEADBEEF


def check(result):
    """A cuda.bindings call's result: the error raised, or the values."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {int(err)}")
    return rest[0] if len(rest) == 1 else rest


def pattern(i):
    return (np.arange(NBYTES // 4, dtype=np.uint32) + np.uint32(0x10000000 + i * 0x10000))


def consumer(conn):
    try:
        Device(0).set_current()
        mr = conn.recv()  # a mapped memory resource (the pool imported)
        buffers = conn.recv()  # each buffer imported from its descriptor
        conn.send("imported")
        conn.recv()  # the producer's turn (an early free, or nothing)
        verdict = "ok"
        for i, buf in enumerate(buffers):
            host = np.zeros(NBYTES // 4, dtype=np.uint32)
            check(driver.cuMemcpyDtoH(host.ctypes.data, int(buf.handle), NBYTES))
            if not np.array_equal(host, pattern(i)):
                verdict = "poison" if host[0] == POISON else "wrong"
                break
        for buf in buffers:
            buf.close()  # the consumer's free of its import
        check(driver.cuCtxSynchronize())
        del mr
        conn.send(f"{verdict} {len(buffers)}")
    except Exception as e:  # noqa: BLE001 - reported, not raised: the parent prints it
        conn.send(f"error {type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--free", choices=["early", "late"], default="late")
    ap.add_argument("--blocks", type=int, default=4)
    args = ap.parse_args()
    mp.set_start_method("spawn")

    dev = Device(0)
    dev.set_current()
    stream = dev.create_stream()
    mr = DeviceMemoryResource(dev, DeviceMemoryResourceOptions(ipc_enabled=True))
    buffers = []
    for i in range(args.blocks):
        buf = mr.allocate(NBYTES, stream=stream)
        host = pattern(i)
        check(driver.cuMemcpyHtoD(int(buf.handle), host.ctypes.data, NBYTES))
        buffers.append(buf)
    stream.sync()

    here, there = mp.Pipe()
    p = mp.Process(target=consumer, args=(there,))
    p.start()
    here.send(mr)
    here.send(buffers)
    verdict = "error no answer"
    if here.poll(60) and here.recv() == "imported":
        if args.free == "early":
            for buf in buffers:
                buf.close(stream)  # cuMemFreeAsync while the consumer holds them
            stream.sync()
        here.send("go")
        verdict = here.recv() if here.poll(60) else "error no verdict"
    p.join(30)
    for buf in buffers:
        buf.close(stream)
    stream.sync()
    print(f"consumer: {verdict}", flush=True)
    return 0 if verdict.startswith("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
