"""Keep the job store out of the cyclic garbage collector.

A node may hold millions of jobs. CPython's cycle collector walks every tracked
container on a full collection: with a million jobs that is a pause of ~300 ms every
few hundred thousand ADDJOBs (measured in bench/RESULTS.md). Job records and the lists
that hold only jobs (queue blocks, timer buckets) can never be part of a reference
cycle (a job refers only to bytes, ints, None and sets of strings), so reference
counting alone frees them and the collector has nothing to find there. `untrack` takes
such an object off the collector's lists (CPython's PyObject_GC_UnTrack): through the
small C extension `disq._gcfree` built at install (one call per job created: ctypes
spends ~0.4 us converting its argument), else through ctypes. On an interpreter
without either, it does nothing and the collector simply keeps working.
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any


def _noop(obj: Any) -> None:
    return None


def _load() -> Any:
    if sys.implementation.name != "cpython":
        return _noop
    fn: Any
    try:
        fn = importlib.import_module("disq._gcfree").untrack
    except ImportError:
        import ctypes  # only without the extension: ctypes costs ~2 ms to import

        try:
            fn = ctypes.pythonapi.PyObject_GC_UnTrack
        except AttributeError:
            return _noop
        fn.argtypes = [ctypes.py_object]
        fn.restype = None
    probe: list[int] = []
    fn(probe)
    return fn if not gc.is_tracked(probe) else _noop


untrack = _load()


def tune_collector() -> None:
    """Young-generation collections every 700 allocations (the default) cost ~40% of
    ADDJOB's time; with the job store untracked, rarer ones find the same garbage."""
    gc.set_threshold(50_000, 20, 20)
