"""ipcshim: the Python view of libipcshim.so's public API (include/ipcshim.h).

The functions are looked up in the running process (dlsym RTLD_DEFAULT,
ctypes.CDLL(None)), never loaded: under the shim (ipcshim-run, python -m
ipcshim, LD_PRELOAD) they answer for it; without it active() is False,
collect() is 0 and stats() is None, so a program can call them either way.

    import ipcshim
    ipcshim.active()     # True when the shim is loaded and tracking
    ipcshim.collect()    # blocks of this process freed now
    ipcshim.stats()      # dict of struct ipcshim_stats, or None
    ipcshim.library()    # path of the libipcshim.so this package carries
"""
import ctypes
import os

__all__ = ["active", "collect", "stats", "version", "library", "loaded"]

_STATS_FIELDS = ("exports", "opens", "closes", "frees_deferred", "frees_reclaimed", "bytes_reclaimed",
                 "limbo_blocks", "limbo_bytes", "handoffs_expired", "longest_limbo_ns", "calls_runtime",
                 "calls_driver", "calls_resolver")


class _Stats(ctypes.Structure):
    """struct ipcshim_stats, IPCSHIM_STATS_VERSION 1."""
    _fields_ = [("version", ctypes.c_uint32), ("size", ctypes.c_uint32)] + [(f, ctypes.c_uint64)
                                                                            for f in _STATS_FIELDS]


def _lookup(name, restype, argtypes=()):
    """The function NAME of the process (the preloaded shim), or None."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


def loaded():
    """True when libipcshim.so is loaded in this process (tracking or not)."""
    return _lookup("ipcshim_active", ctypes.c_int) is not None


def active():
    """True when the shim is loaded and tracking (ipcshim_active())."""
    fn = _lookup("ipcshim_active", ctypes.c_int)
    return bool(fn and fn())


def collect():
    """Free every block of this process whose importers have all let go; the
    number freed (0 without the shim). Raises OSError on a negative errno."""
    fn = _lookup("ipcshim_collect", ctypes.c_int)
    if fn is None:
        return 0
    rc = fn()
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc), "ipcshim_collect")
    return rc


def stats():
    """ipcshim_stats() as a dict (field -> int), or None without the shim."""
    fn = _lookup("ipcshim_stats", ctypes.c_int, (ctypes.POINTER(_Stats), ctypes.c_size_t))
    if fn is None:
        return None
    s = _Stats()
    rc = fn(ctypes.byref(s), ctypes.sizeof(s))
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc), "ipcshim_stats")
    return {name: getattr(s, name) for name, _ in _Stats._fields_}


def version():
    """The loaded library's version (ipcshim_version()), or None without it."""
    fn = _lookup("ipcshim_version", ctypes.c_char_p)
    return fn().decode() if fn else None


def library():
    """The libipcshim.so installed with this package (a wheel), else the one
    IPCSHIM_LIBRARY names, else None."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libipcshim.so")
    if os.path.isfile(here):
        return here
    return os.environ.get("IPCSHIM_LIBRARY") or None


def launcher():
    """The ipcshim-run script installed with this package, or None."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ipcshim-run")
    return here if os.path.isfile(here) else None
