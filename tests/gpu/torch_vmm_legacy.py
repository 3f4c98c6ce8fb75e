"""torch_vmm_legacy: a legacy IPC handle on VMM memory, opened by a PyTorch
consumer (issue 29, item 5). The producer is a PyTorch process whose
allocator uses the VMM API (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
set here before torch is imported); it fills a tensor and calls
cudaIpcGetMemHandle on it through ctypes (as a legacy-IPC library on top of
torch would). Without the shim the driver refuses it (cudaErrorInvalidValue,
"export: 1"); under the shim the handle is the shim's synthetic one. The
consumer, a second PyTorch process (torch's CUDA initialised first), opens
it with cudaIpcOpenMemHandle through ctypes on the libcudart torch loaded,
reads it back with cudaMemcpy and checks the values.

Run by scripts/gpu-check with and without the shim; on the 2026-11-26
H200 the export was refused without it (1) and the consumer read every
value with it (docs/gpu-validation.md).

Prints "export: CODE", then "consumer: ok", "consumer: wrong ..." or
"consumer: error ..."; exit status 0 when the consumer read what was
written."""
import ctypes
import os
import subprocess
import sys

ELEMENTS = 1 << 19  # 2 MiB of int32: one VMM granule


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def libs():
    """The libcudart torch loaded (by soname), and libcuda."""
    import torch  # noqa: F401 - loads libcudart

    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"):
        try:
            return ctypes.CDLL(name), ctypes.CDLL("libcuda.so.1")
        except OSError:
            continue
    raise OSError("no libcudart")


def consumer(hexhandle, offset):
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # torch's context is current
    rt, _ = libs()
    h = Handle()
    raw = bytes.fromhex(hexhandle)
    ctypes.memmove(ctypes.byref(h), raw, len(raw))  # not .reserved: a c_char array stops at NUL
    p = ctypes.c_void_p()
    rc = rt.cudaIpcOpenMemHandle(ctypes.byref(p), h, ctypes.c_uint(1))
    if rc:
        print(f"consumer: error open {rc}")
        return 1
    host = (ctypes.c_int32 * ELEMENTS)()
    rc = rt.cudaMemcpy(host, ctypes.c_void_p(p.value + offset), ctypes.c_size_t(ELEMENTS * 4), 2)
    bad = [i for i in range(0, ELEMENTS, 4099) if host[i] != i * 7]
    rt.cudaIpcCloseMemHandle(p)
    if rc:
        print(f"consumer: error copy {rc}")
    elif bad:
        print(f"consumer: wrong at {bad[0]}: {host[bad[0]]}")
    else:
        print("consumer: ok")
    return 0 if not rc and not bad else 1


def producer():
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    x = torch.arange(ELEMENTS, dtype=torch.int32, device="cuda") * 7
    torch.cuda.synchronize()
    rt, cu = libs()
    h = Handle()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(x.data_ptr()))
    rc = rt.cudaIpcGetMemHandle(ctypes.byref(h), ctypes.c_void_p(x.data_ptr()))
    print(f"export: {rc}", flush=True)
    if rc:
        return 0
    offset = x.data_ptr() - base.value if base.value else 0
    got = subprocess.run(
        [sys.executable, __file__, "--consumer", ctypes.string_at(ctypes.byref(h), 64).hex(), str(offset)],
        capture_output=True, text=True, timeout=240)
    sys.stdout.write(got.stdout + got.stderr)
    return got.returncode


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--consumer":
        sys.exit(consumer(sys.argv[2], int(sys.argv[3])))
    sys.exit(producer())
