"""Futex waits and wakes on a 32-bit word of a shared file mapping (Linux), through ctypes.

A replica bumps its read view's sequence on every publication and wakes whoever waits on it; a
reader on the same node that found nothing new sleeps in the kernel until the word moves, so a
new high watermark reaches it in the time of one wake-up (tens of microseconds) with no polling
and no Ray call. The word lives in a file mapping, so the futex is shared (not
FUTEX_PRIVATE_FLAG): the kernel keys it by file and offset, which is the same in every process
that maps the page, read-only mappings included.

Waiting on several words at once (a consumer reading several partitions locally) uses
futex_waitv (Linux 5.16). Where a call is missing (another OS, an older kernel), ``available``
is False and callers poll instead. ctypes releases the GIL for the length of the call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import platform
import time
import weakref

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_SYS_FUTEX_WAITV = 449  # the same number on every architecture (a syscall added after the unified table)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_FUTEX2_SIZE_U32 = 2
_CLOCK_MONOTONIC = 1
_WAKE_ALL = 0x7FFFFFFF
_PROT_READ = mmap.PROT_READ
_MAP_SHARED = mmap.MAP_SHARED
_MAP_ZEROS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x10  # MAP_FIXED: in place of the file's mapping
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Waiter(ctypes.Structure):
    """struct futex_waitv."""
    _fields_ = [("val", ctypes.c_uint64), ("uaddr", ctypes.c_uint64), ("flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_munmap = _libc.munmap
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _probe_waitv() -> bool:
    if _SYS_FUTEX is None:
        return False
    word = ctypes.c_uint32(0)
    waiter = _Waiter(1, ctypes.addressof(word), _FUTEX2_SIZE_U32, 0)
    # A value that differs from the word's returns EAGAIN at once where the call exists.
    result = _syscall(ctypes.c_long(_SYS_FUTEX_WAITV), ctypes.byref(waiter), ctypes.c_uint(1), ctypes.c_uint(0),
                      None, ctypes.c_int(_CLOCK_MONOTONIC))
    return result == -1 and ctypes.get_errno() == errno.EAGAIN


available = platform.system() == "Linux" and _SYS_FUTEX is not None
"""Whether wait/wake work here; when False, wake does nothing and wait returns at once."""
waitv_available = available and _probe_waitv()


def wake(address: int) -> None:
    """Wake every process waiting on the word at ``address``."""
    if available:
        _syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_int(_FUTEX_WAKE),
                 ctypes.c_int(_WAKE_ALL), None, None, ctypes.c_int(0))


def wait(address: int, expected: int, timeout_s: float) -> None:
    """Sleep until the word at ``address`` is woken, for at most ``timeout_s``; at once if it no
    longer holds ``expected``. Callers re-read what they wait for: a wake may be spurious."""
    if not available or timeout_s <= 0:
        return
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    _syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(address), ctypes.c_int(_FUTEX_WAIT),
             ctypes.c_uint32(expected), ctypes.byref(ts), None, ctypes.c_int(0))


def wait_any(words: list[tuple[int, int]], timeout_s: float) -> None:
    """``wait`` on several (address, expected) words at once: returns when any is woken or
    differs, or after ``timeout_s``. Needs ``waitv_available``; otherwise sleeps a short while
    so the caller polls."""
    if timeout_s <= 0:
        return
    if len(words) == 1:
        wait(*words[0], timeout_s)
        return
    if not waitv_available:
        time.sleep(min(timeout_s, 0.0005))
        return
    waiters = (_Waiter * len(words))(*(_Waiter(v, a, _FUTEX2_SIZE_U32, 0) for a, v in words))
    deadline = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + int(timeout_s * 1e9)
    ts = _Timespec(deadline // 10**9, deadline % 10**9)
    _syscall(ctypes.c_long(_SYS_FUTEX_WAITV), waiters, ctypes.c_uint(len(words)), ctypes.c_uint(0),
             ctypes.byref(ts), ctypes.c_int(_CLOCK_MONOTONIC))


class SharedPage:
    """A read-only shared mapping of a file's first ``size`` bytes with a known address (Python's
    mmap hides the address of a read-only mapping, and a futex needs it)."""

    def __init__(self, fd: int, size: int):
        address = _mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.address: int = address
        self.size = size
        self.closed = False
        self.buffer = (ctypes.c_char * size).from_address(address)
        """The page's bytes for struct.unpack_from (read it, never write: the mapping is read-only)."""
        # Unmapped when the buffer goes, not before: a thread still reading it keeps the mapping.
        weakref.finalize(self.buffer, _munmap, address, size)

    def close(self) -> None:
        """Let go of the file. Another thread may be reading the page this moment, so the address
        stays mapped, to zeros (a page no reader trusts: no lease), until the buffer is dropped."""
        if not self.closed:
            self.closed = True
            _mmap(self.address, self.size, _PROT_READ, _MAP_ZEROS, -1, 0)


def _fence_function():
    """A full memory fence for the read view's seqlock, or None where none is at hand. x86-64 keeps
    stores in order with stores and loads with loads (TSO), which is all a seqlock needs, and each
    field is read or written by its own C call, which the compiler cannot reorder: nothing to do.
    Elsewhere (aarch64 reorders both) libatomic's ``__atomic_thread_fence`` does it; without it,
    readers must not trust the page (read_view.py then refuses to map one)."""
    if platform.machine() in ("x86_64", "AMD64"):
        return lambda: None
    name = ctypes.util.find_library("atomic")
    if name is None:
        return None
    try:
        fence = ctypes.CDLL(name).__atomic_thread_fence
    except (OSError, AttributeError):
        return None
    fence.argtypes, fence.restype = [ctypes.c_int], None
    return lambda: fence(5)  # __ATOMIC_SEQ_CST


fence = _fence_function()
"""Call between a seqlock's sequence and its fields (read_view.py); None: no fence here."""
