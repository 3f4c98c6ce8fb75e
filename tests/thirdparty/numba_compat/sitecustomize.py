"""sitecustomize for the numba tests (tests/thirdparty): numba 0.56's ctypes
binding on a CUDA 13 driver.

numba's ctypes binding looks every driver function up by name, `<name>_v2`
first. CUDA 13 added cuCtxGetDevice_v2(CUdevice *, CUcontext) and
cuCtxSynchronize_v2(CUcontext): new functions with an extra parameter, not
new ABIs of the old names (cuda.h keeps cuCtxGetDevice and cuCtxSynchronize
as they were). numba 0.56 therefore calls them without the context, and the
driver takes whatever the register holds for one: the simulator answers
CUDA_ERROR_INVALID_CONTEXT, and NVIDIA's CUDA 13 driver, which exports the
same names, meets the same call. numba-cuda fixed it in 0.8.1 by binding
these two by their plain names (NVIDIA/numba-cuda#185, "Stop Certain Driver
API Discovery for v2"); this does the same, and nothing else, when
numba.cuda.cudadrv.driver is imported. It is on
PYTHONPATH only in the processes the thirdparty tests start (children
spawned by multiprocessing inherit it). The interpreter's own
sitecustomize, which this one shadows, still runs.
"""
import importlib.abc
import importlib.util
import os
import sys

PLAIN_NAME_ONLY = ("cuCtxGetDevice", "cuCtxSynchronize")
TARGET = "numba.cuda.cudadrv.driver"


def _patch(module):
    driver_cls = module.Driver
    find_api = driver_cls._find_api

    def _find_api_plain(self, fname):
        if fname in PLAIN_NAME_ONLY:
            try:
                return getattr(self.lib, fname)
            except AttributeError:
                pass
        return find_api(self, fname)

    driver_cls._find_api = _find_api_plain


class _Finder(importlib.abc.MetaPathFinder):
    """Patches TARGET right after it executes; removes itself once used."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _Finder())


def _chain():
    """Run the sitecustomize this file shadows, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", candidate)
            try:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            except Exception:
                pass
            return


_chain()
