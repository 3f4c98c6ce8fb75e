"""torch_pair.py: a PyTorch producer shares CUDA tensors with a consumer
through a torch.multiprocessing queue, for as long as asked, and both say
in plain words what they share and read.

    ipcshim-run -- python3 torch_pair.py [--seconds N] [--mib M]

Once a second the producer (a process named torch-producer) makes a tensor
of M MiB (default 4) filled with the round's number, puts it on the queue
(PyTorch sends it as a CUDA IPC handle), drops its own reference and
empties its allocator's cache (cudaFree of the memory the consumer still
maps). The consumer (torch-consumer) reads each tensor every half second
for 2.5 s, says whether every element is the value written, then lets it
go. After N seconds (default 20) both exit; status 0 when every read was
right. Without torch it says so and exits 0 (nothing to show)."""
import argparse
import ctypes
import queue as queue_module
import sys
import time


def set_name(name):
    """The process name ps and ipcshim-stat show (Linux prctl PR_SET_NAME)."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def say(who, text):
    import os
    print(f"{who} (pid {os.getpid()}): {text}", file=sys.stderr, flush=True)


def consumer(q, hold, result):
    import torch
    set_name("torch-consumer")
    held, wrong, ended = [], 0, False
    while not ended or held:
        try:
            item = q.get(timeout=0.1) if not ended else None
        except queue_module.Empty:
            item = None
        if item == "end":
            ended = True
        elif item is not None:
            n, t = item
            held.append([n, t, time.monotonic(), 0.0])
            say("consumer", f"tensor {n}: opened, {t.numel() * 4 >> 20} MiB on {t.device}")
        for entry in list(held):
            n, t, since, last = entry
            now = time.monotonic()
            if now - last >= 0.5:
                ok = bool((t == float(n)).all().item())
                wrong += not ok
                say("consumer", f"tensor {n}: every element {float(n)}, as the producer wrote it" if ok else
                    f"tensor {n}: WRONG: first element {t[0].item()}, expected {float(n)}")
                entry[3] = now
            if now - since >= hold or (ended and now - since >= 0.5):
                held.remove(entry)
                del t, entry
                say("consumer", f"tensor {n}: let go after {now - since:.1f} s")
        torch.cuda.synchronize()
    result.put(wrong)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--mib", type=int, default=4)
    ap.add_argument("--hold", type=float, default=2.5, help="seconds the consumer holds each tensor")
    args = ap.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("torch_pair.py: PyTorch is not installed (pip install torch): nothing to show", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("torch_pair.py: PyTorch sees no CUDA device: nothing to show", file=sys.stderr)
        return 0
    mp.set_start_method("spawn")
    q, result = mp.Queue(), mp.Queue()
    p = mp.Process(target=consumer, args=(q, args.hold, result))
    p.start()
    set_name("torch-producer")
    elements = (args.mib << 20) // 4
    start, n = time.monotonic(), 0
    while time.monotonic() - start < args.seconds:
        n += 1
        t = torch.full((elements,), float(n), device="cuda")
        torch.cuda.synchronize()
        q.put((n, t))
        say("producer", f"tensor {n}: {args.mib} MiB, every element {float(n)}, shared")
        del t
        torch.cuda.empty_cache()  # cudaFree of what no tensor here uses: the consumer still may
        say("producer", f"tensor {n}: dropped, and the cache emptied (cudaFree) while the consumer reads it")
        time.sleep(max(0.0, start + n - time.monotonic()))
    q.put("end")
    wrong = result.get(timeout=120)
    p.join(60)
    say("producer", "done: " + ("some reads were WRONG" if wrong else "every read was right"))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
