"""numba_early_free.py: a numba producer frees device arrays that a numba
consumer process still needs, and reports what the consumer saw.

Run by numba_run.py under the interpreter that has numba, on the simulated
driver, with or without the shim; writes a JSON summary to argv[1].

The producer fills two device arrays A and B with a known pattern, exports
both (DeviceNDArray.get_ipc_handle) and hands the pickled handles to a
consumer started with multiprocessing's 'spawn' (a fresh interpreter with
this environment). The consumer opens A and says so; the producer then
drops every reference to A and B and flushes numba's pending deallocations,
which is where numba calls cuMemFree. Only then does the consumer read A
(freed while mapped) and open and read B (freed before it was opened).
Without the shim the driver releases both at once: A's mapping reads the
simulator's poison (0xDEADBEEF words) and B cannot be opened. With the shim
both frees wait for the consumer, which reads the producer's data.
"""
import gc
import json
import multiprocessing as mp
import pickle
import sys

import numpy as np
from numba import cuda

WORDS = 4096  # int64 per array: 32 KiB, a few simulator granules
POISON = 0xDEADBEEF


def pattern(seed):
    return np.arange(WORDS, dtype=np.int64) * 2654435761 + seed


def summarize(got, expect):
    """Counts of 32-bit words equal to the expected data and to the poison."""
    got32 = np.ascontiguousarray(got).view(np.uint32)
    exp32 = np.ascontiguousarray(expect).view(np.uint32)
    return {"words": int(got32.size), "expected": int((got32 == exp32).sum()),
            "poison": int((got32 == POISON).sum())}


def consumer(conn):
    result = {}
    try:
        handle_a, handle_b = (pickle.loads(b) for b in conn.recv())
        array_a = handle_a.open()
        conn.send("opened A")
        if conn.recv() != "freed":
            raise RuntimeError("protocol: expected 'freed'")
        result["a"] = summarize(array_a.copy_to_host(), pattern(1))
        handle_a.close()
        try:
            array_b = handle_b.open()
        except Exception as e:  # the driver's answer, kept for the report
            result["b"] = {"open_error": "%s: %s" % (type(e).__name__, e)}
        else:
            result["b"] = summarize(array_b.copy_to_host(), pattern(2))
            handle_b.close()
    except Exception as e:
        result["consumer_error"] = "%s: %s" % (type(e).__name__, e)
    conn.send(result)


def main():
    out = sys.argv[1]
    a = cuda.to_device(pattern(1))
    b = cuda.to_device(pattern(2))
    handles = (pickle.dumps(a.get_ipc_handle()), pickle.dumps(b.get_ipc_handle()))

    spawn = mp.get_context("spawn")
    parent, child = spawn.Pipe()
    proc = spawn.Process(target=consumer, args=(child,))
    proc.start()
    parent.send(handles)
    report = {}
    if parent.poll(60) and parent.recv() == "opened A":
        # Free: the arrays' finalizers queue cuMemFree on the pending
        # deallocations of numba's memory manager (not the context's own
        # queue, which holds modules); clear() makes the calls now.
        pending = cuda.current_context().memory_manager.deallocations
        del a, b
        gc.collect()
        report["queued_frees"] = len(pending._cons)
        pending.clear()
        report["pending_after_clear"] = len(pending._cons)
        parent.send("freed")
    if parent.poll(60):
        report.update(parent.recv())
    else:
        report["consumer_error"] = "no answer from the consumer"
    proc.join(30)
    report["consumer_exit"] = proc.exitcode
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
