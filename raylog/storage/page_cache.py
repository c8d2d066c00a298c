"""Drop-behind for an append-only file: its share of the page cache stays at its newest bytes.

Left alone, the kernel keeps every byte a replica writes in the page cache until memory runs
short, so a log that grows by gigabytes grows the page cache by as much. Where fresh memory is
expensive that shows as throughput falling with stored data: on this project's machines (a VM
whose memory the host backs on first touch) a GiB of page cache in memory not used before cost
2.1-2.7 s of kernel time, against 0.43 s/GiB in memory already used (docs/performance.md, row
10). Redpanda sidesteps the page cache entirely; raylog keeps it (same-node readers and followers
read the tail from it) but bounds it: every ``chunk`` bytes the writer starts writeback of what
it wrote (``sync_file_range(WRITE)``, asynchronous), and what lies more than ``window`` bytes
behind the end, long since written back, is waited for and dropped (``posix_fadvise(DONTNEED)``),
so the kernel reuses those pages for the next writes. Readers of dropped ranges read from disk.

Linux only; elsewhere ``available`` is False and nothing is done. A write-back error reported
here makes ``advance`` return False: the caller must treat it as a failed fsync (the kernel may
report an error only once per file description).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_SYNC_FILE_RANGE_WAIT_BEFORE = 1
_SYNC_FILE_RANGE_WRITE = 2
_SYNC_FILE_RANGE_WAIT_AFTER = 4

DEFAULT_CHUNK = 8 << 20
"""Bytes between two writeback submissions: large enough that the calls cost nothing per record,
small enough that writeback runs steadily instead of in the kernel's bursts."""


def _load():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        call = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call if hasattr(os, "posix_fadvise") else None


_sync_file_range = _load()
available = _sync_file_range is not None


class DropBehind:
    """Bounds the page cache one append-only file descriptor fills to about ``window + chunk`` bytes."""

    def __init__(self, fd: int, window: int, chunk: int = DEFAULT_CHUNK):
        if window < 0 or chunk <= 0:
            raise ValueError(f"window must be >= 0 and chunk > 0, got {window}, {chunk}")
        self.fd = fd
        self.window = window
        self.chunk = chunk
        self.submitted = 0
        """Writeback has been started for every byte below this."""
        self.dropped = 0
        """Every byte below this has been written back and dropped from the page cache."""

    def advance(self, end: int) -> bool:
        """The file now holds ``end`` bytes of data. False: the kernel reported a write-back error."""
        if end < self.submitted:  # the file was cut back (a truncation): start over from there
            self.submitted = end
            self.dropped = min(self.dropped, end)
        if not available or end - self.submitted < self.chunk:
            return True
        if _sync_file_range(self.fd, self.submitted, end - self.submitted, _SYNC_FILE_RANGE_WRITE) != 0:
            return False
        self.submitted = end
        limit = self.submitted - self.window
        if limit - self.dropped < self.chunk:
            return True
        # Submitted at least ``window`` bytes ago, so the wait is normally already over.
        flags = _SYNC_FILE_RANGE_WAIT_BEFORE | _SYNC_FILE_RANGE_WRITE | _SYNC_FILE_RANGE_WAIT_AFTER
        if _sync_file_range(self.fd, self.dropped, limit - self.dropped, flags) != 0:
            return False
        os.posix_fadvise(self.fd, self.dropped, limit - self.dropped, os.POSIX_FADV_DONTNEED)
        self.dropped = limit
        return True

    def drop_all(self, end: int) -> bool:
        """Write back and drop everything below ``end`` not dropped yet (the file is no longer
        appended to and its newest bytes are now ``window`` behind another file's end)."""
        if not available or end <= self.dropped:
            return True
        flags = _SYNC_FILE_RANGE_WAIT_BEFORE | _SYNC_FILE_RANGE_WRITE | _SYNC_FILE_RANGE_WAIT_AFTER
        if _sync_file_range(self.fd, self.dropped, end - self.dropped, flags) != 0:
            return False
        os.posix_fadvise(self.fd, self.dropped, end - self.dropped, os.POSIX_FADV_DONTNEED)
        self.dropped = self.submitted = end
        return True
