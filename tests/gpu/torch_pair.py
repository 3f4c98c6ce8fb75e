"""torch_pair: a PyTorch producer sends CUDA tensors to a consumer through a
torch.multiprocessing queue, deletes its references, empties its cache and
allocates over the freed memory; the consumer then reads every tensor and
checks its values. Run by scripts/gpu-check with and without the shim.

Prints "consumer: ok N tensors", "consumer: wrong ..." or "consumer: error ...".
Exit status 0 when the consumer read what was written."""
import sys

import torch
import torch.multiprocessing as mp

N_TENSORS = 4
ELEMENTS = 1 << 20


def consumer(queue, go, results):
    try:
        tensors = [queue.get(timeout=60) for _ in range(N_TENSORS)]  # each opened through CUDA IPC
        go.wait(60)  # the producer has let go of its references by now
        bad = []
        for i, t in enumerate(tensors):
            want = float(i + 1)
            if not bool((t == want).all().item()):
                bad.append(f"tensor {i}: saw {t[0].item()} expected {want}")
        results.put("ok" if not bad else "wrong " + "; ".join(bad))
        del tensors
    except Exception as e:  # noqa: BLE001 - reported, not raised
        results.put(f"error {type(e).__name__}: {e}")


def main():
    if not torch.cuda.is_available():
        print("consumer: error no CUDA device visible to torch")
        return 2
    mp.set_start_method("spawn")
    queue, go, results = mp.Queue(), mp.Event(), mp.Queue()
    p = mp.Process(target=consumer, args=(queue, go, results))
    p.start()
    for i in range(N_TENSORS):
        t = torch.full((ELEMENTS,), float(i + 1), device="cuda")
        queue.put(t)
        del t
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # hands unused cached segments back with cudaFree
    scribble = [torch.full((ELEMENTS,), -1.0, device="cuda") for _ in range(N_TENSORS)]
    torch.cuda.synchronize()
    go.set()
    verdict = results.get(timeout=120)
    p.join(60)
    del scribble
    print(f"consumer: {verdict}" + (f" {N_TENSORS} tensors" if verdict == "ok" else ""))
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
