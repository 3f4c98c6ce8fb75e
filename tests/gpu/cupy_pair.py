"""cupy_pair: a CuPy producer exports an array with
cupy.cuda.runtime.ipcGetMemHandle; a consumer process opens it with
ipcOpenMemHandle; the producer frees the array (plain cudaFree: CuPy's pool
is turned off) and allocates over it while the consumer still has it open;
then the consumer reads it and checks the values. Run by scripts/gpu-check
with and without the shim.

Prints "consumer: ok", "consumer: wrong ..." or "consumer: error ...".
Exit status 0 when the consumer read what was written."""
import multiprocessing as mp
import sys

ELEMENTS = 1 << 20
VALUE = 7


def consumer(handle, opened, go, results):
    try:
        import cupy as cp
        from cupy.cuda import runtime

        ptr = runtime.ipcOpenMemHandle(handle)
        opened.set()
        go.wait(60)  # the producer has freed the array and allocated over it
        mem = cp.cuda.UnownedMemory(ptr, ELEMENTS * 4, None)
        arr = cp.ndarray((ELEMENTS,), cp.int32, cp.cuda.MemoryPointer(mem, 0))
        wrong = int((arr != VALUE).sum())
        first = int(arr[0])
        del arr, mem
        runtime.ipcCloseMemHandle(ptr)
        results.put("ok" if wrong == 0 else f"wrong {wrong} of {ELEMENTS} elements (first {first:#x})")
    except Exception as e:  # noqa: BLE001 - reported, not raised
        opened.set()
        results.put(f"error {type(e).__name__}: {e}")


def main():
    import cupy as cp
    from cupy.cuda import runtime

    cp.cuda.set_allocator(None)  # cudaMalloc/cudaFree for every array: no pool
    mp.set_start_method("spawn")
    a = cp.full((ELEMENTS,), VALUE, dtype=cp.int32)
    cp.cuda.runtime.deviceSynchronize()
    handle = runtime.ipcGetMemHandle(a.data.ptr)
    opened, go, results = mp.Event(), mp.Event(), mp.Queue()
    p = mp.Process(target=consumer, args=(handle, opened, go, results))
    p.start()
    opened.wait(120)
    del a  # cudaFree while the consumer has the block open
    scribble = [cp.full((ELEMENTS,), -1, dtype=cp.int32) for _ in range(4)]
    cp.cuda.runtime.deviceSynchronize()
    go.set()
    verdict = results.get(timeout=120)
    p.join(60)
    del scribble
    print(f"consumer: {verdict}")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
