"""How raylog tunes a process's memory management: glibc's large buffers and
CPython's cyclic collector.

raylog moves data in buffers of about a MiB (an encoded batch, a fetch
response, a decompressed payload). glibc serves allocations that large with
a fresh mmap and unmaps them on free, so every new buffer costs a page fault
per 4 KiB page: measured here, encoding a 1 MiB batch took 140 ns per record
with the defaults and 14 ns with large allocations kept on the heap, and
decoding one 128 ns against 10 ns (10,000 x 100-byte records per batch).
``tune()`` raises M_MMAP_THRESHOLD to 32 MiB (glibc's own ceiling for it)
and M_TRIM_THRESHOLD to 64 MiB, so freed buffers are reused. Replicas call it
at start; clients call it when a producer or consumer is made, unless
RAYLOG_TUNE_MALLOC=0. Elsewhere than glibc it does nothing.

A program that keeps many futures (``send()`` then ``get()``) sets off the
collector's full collections, and each one walks every container alive: after
``raylog.connect()`` that is ~110,000 objects of Ray's, numpy's, pyarrow's and
raylog's modules, 70-80 ms a walk on this machine, twice per 200,000 keyed
sends (0.7-0.9 us per record). ``freeze_startup_heap()`` collects once and
moves what is alive then into the collector's permanent generation, as Ray
Serve does in its replicas and proxies: those objects live as long as the
process, and later collections skip them. connect() calls it once per process,
unless RAYLOG_FREEZE_GC=0 or the program has turned the collector off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024

_tuned = False
_frozen = False


REPLICA_TRIM_THRESHOLD_BYTES = 16 * 1024 * 1024
"""A replica keeps at most this much freed heap: one 8 MiB fetch buffer to reuse. There may be
hundreds of replicas on a node, and at 64 MiB each kept ~22 MB more after serving traffic (256
replicas: 5.6 GB)."""


def tune(trim_threshold_bytes: int = TRIM_THRESHOLD_BYTES) -> bool:
    """Apply the thresholds once per process; returns whether glibc took them."""
    global _tuned
    if _tuned or os.environ.get("RAYLOG_TUNE_MALLOC", "1") == "0":
        return _tuned
    _tuned = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold_bytes))


def freeze_startup_heap() -> bool:
    """Once per process: collect, then exclude every object alive now from later collections.
    Returns whether the heap is frozen (now or by an earlier call)."""
    global _frozen
    if _frozen or os.environ.get("RAYLOG_FREEZE_GC", "1") == "0" or not gc.isenabled():
        return _frozen
    _frozen = True
    # Collected first, so no garbage cycle alive now is frozen with the rest (it would never be freed).
    gc.collect()
    gc.freeze()
    return True
