"""LocalReader: a partition's committed batches read straight from its segment files, by a
process on the replica's node, with no call to the replica.

It answers what the leader's fetch answers (``PartitionLog.read(offset, max_bytes,
high_watermark)``: whole batches of one segment from the batch holding ``offset``, none
reaching the high watermark) or says it cannot (None), and the caller asks the leader. It
cannot when the replica's page (read_view.py) is mid-publication, from another leader epoch or
role, or its writer is gone, when ``offset`` is outside [log start, log end], and when the
page's generation or log start moved while it read: the bytes may then be from a truncated,
deleted or compacted file.

An in-sync follower's files serve the same committed records: below the follower's high
watermark (the leader's, as of its last fetch, capped at its own log end) its log holds
exactly the leader's batches, so a reader of a follower gets the leader's answer for a
slightly older high watermark.

Files are read with pread, never mapped: a segment the replica truncates under a mapping
would raise SIGBUS in the reader, while pread just returns fewer bytes. Every batch's CRC is
checked before its bytes are returned (a torn read fails it, and the caller falls back), so
callers decode without checking again.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

from raylog.storage import files
from raylog.storage.batch import HEADER_SIZE, LAST_OFFSET_DELTA_POS, LOG_OVERHEAD, iter_batches
from raylog.storage.read_view import ROLE_FOLLOWER, ROLE_LEADER, ReadView, ViewSnapshot, writer_alive

_PEEK = struct.Struct(">qi")
"""base_offset, batch_length: the first 12 bytes of a batch."""
_LAST_DELTA = struct.Struct(">i")
_INDEX_ENTRY = struct.Struct(">II")
_PEEK_BYTES = LAST_OFFSET_DELTA_POS + 4


class LocalReader:
    """Reads one partition replica's directory; not thread-safe (one per consumer partition)."""

    def __init__(self, directory: str | Path, role: int = ROLE_LEADER):
        if role not in (ROLE_LEADER, ROLE_FOLLOWER):
            raise ValueError(f"a reader reads a leader's or a follower's files, not role {role}")
        self.directory = Path(directory)
        self.role = role
        """The role the replica must publish for its files to be read (its page says)."""
        self.view = ReadView(self.directory)
        self._bases: list[int] = []
        self._listed_for: tuple[int, int] | None = None
        self._fds: dict[int, int] = {}
        self._hint: tuple[int, int, int] | None = None
        """(segment base, offset, position): where the last read ended, so the next sequential
        read starts there without an index lookup."""

    def snapshot(self) -> ViewSnapshot | None:
        return self.view.snapshot()

    def read(self, offset: int, max_bytes: int, leader_epoch: int | None = None) -> tuple[bytes, int] | None:
        """(batches, high watermark) as the leader's fetch returns them, or None: ask the leader.
        ``leader_epoch``: the leader the caller expects; a page from another epoch answers None."""
        s1 = self.view.snapshot()
        if s1 is None or s1.role != self.role or s1.generation % 2 \
                or (leader_epoch is not None and s1.leader_epoch != leader_epoch) or not writer_alive(s1):
            return None
        if offset < s1.log_start_offset or offset > s1.log_end_offset:
            return None
        if offset >= s1.high_watermark:
            return b"", s1.high_watermark
        try:
            data = self._read(s1, offset, max_bytes)
        except OSError:
            data = None  # a segment deleted or replaced under us: the replica knows
        s2 = self.view.snapshot()
        if data is None or s2 is None or s2.generation != s1.generation or s2.log_start_offset > offset:
            self._forget()
            return None
        return data, s1.high_watermark

    def close(self) -> None:
        self._forget()
        self.view.close()

    # --- segments -----------------------------------------------------------------------

    def _segments(self, s: ViewSnapshot) -> list[int]:
        key = (s.generation, s.active_base_offset)
        if key != self._listed_for:
            bases = set()
            for name in os.listdir(self.directory):
                if name.endswith(files.LOG_SUFFIX):
                    base = files.base_offset_of(Path(name))
                    if base is not None and base <= s.active_base_offset:
                        bases.add(base)
            # A new generation may have replaced files under the same names (compaction swaps):
            # open them again. A roll alone keeps every file, so its descriptors stay.
            for base in [b for b in self._fds if b not in bases or self._listed_for is None
                         or self._listed_for[0] != s.generation]:
                os.close(self._fds.pop(base))
            self._bases = sorted(bases)
            self._listed_for = key
            self._hint = None
        return self._bases

    def _fd(self, base: int) -> int:
        fd = self._fds.get(base)
        if fd is None:
            fd = self._fds[base] = os.open(files.log_path(self.directory, base), os.O_RDONLY)
        return fd

    def _forget(self) -> None:
        self._hint = None
        self._listed_for = None
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _start_position(self, s: ViewSnapshot, base: int, offset: int) -> int:
        hint = self._hint
        if hint is not None and hint[0] == base and hint[1] <= offset:
            return hint[2]
        path = files.index_path(self.directory, base)
        if base == s.active_base_offset:
            entries = s.active_index_entries
        else:
            try:
                entries = os.stat(path).st_size // _INDEX_ENTRY.size
            except FileNotFoundError:
                return 0
        if entries <= 0:
            return 0
        fd = os.open(path, os.O_RDONLY)
        try:
            def entry(i: int) -> tuple[int, int]:
                raw = os.pread(fd, _INDEX_ENTRY.size, i * _INDEX_ENTRY.size)
                return _INDEX_ENTRY.unpack(raw) if len(raw) == _INDEX_ENTRY.size else (1 << 32, 0)

            target = offset - base
            slot = bisect.bisect_right(range(entries), target, key=lambda i: entry(i)[0]) - 1
            return entry(slot)[1] if slot >= 0 else 0
        finally:
            os.close(fd)

    def _read(self, s: ViewSnapshot, offset: int, max_bytes: int) -> bytes | None:
        bases = self._segments(s)
        slot = max(0, bisect.bisect_right(bases, offset) - 1)
        for base in bases[slot:]:
            limit = s.active_size if base == s.active_base_offset else None
            found = self._read_segment(s, base, offset, max_bytes, limit)
            if found is None:
                return None
            data, stopped = found
            if data or stopped:
                return data
        return b""

    def _read_segment(self, s: ViewSnapshot, base: int, offset: int, max_bytes: int,
                      limit: int | None) -> tuple[bytes, bool] | None:
        """(batches, whether the read must stop in this segment: the high watermark, max_bytes or
        the active segment's written end stopped it) from one segment; None when its bytes do not
        hold together (a torn or stale read, a header that is not one). The next segment is read
        only after a scan that ended exactly at this one's end: bytes that stop making sense
        before it must never let a reader step over the records behind them."""
        fd = self._fd(base)
        active = limit is not None
        if limit is None:
            limit = os.fstat(fd).st_size
        pos = self._start_position(s, base, offset)
        start = None
        end = pos
        hw = s.high_watermark
        while end < limit:
            head = os.pread(fd, _PEEK_BYTES, end)
            if len(head) < _PEEK_BYTES:
                return None
            batch_base, length = _PEEK.unpack_from(head)
            size = LOG_OVERHEAD + length
            if size < HEADER_SIZE or end + size > limit:
                return None  # the page says these bytes are written batches: they are not
            last = batch_base + _LAST_DELTA.unpack_from(head, LAST_OFFSET_DELTA_POS)[0]
            if last >= hw:
                return self._finish(fd, base, start, end, hw, True)
            if start is None:
                if last >= offset:
                    start = end
            elif end + size - start > max_bytes:
                return self._finish(fd, base, start, end, hw, True)
            end += size
        if start is None:
            return b"", active
        return self._finish(fd, base, start, end, hw, active)

    def _finish(self, fd: int, base: int, start: int | None, end: int, hw: int,
                stopped: bool) -> tuple[bytes, bool] | None:
        if start is None or end == start:
            return b"", stopped
        data = os.pread(fd, end - start, start)
        last = _last_offset_if_intact(data) if len(data) == end - start else None
        if last is None:
            return None
        self._hint = (base, last + 1, end)
        return data, stopped



def _last_offset_if_intact(data: bytes) -> int | None:
    """The last offset of ``data`` when it is whole batches that all pass their CRC (a torn read
    does not), else None."""
    last, end = None, 0
    for batch in iter_batches(data):
        if batch.compute_crc() != batch.crc:
            return None
        last, end = batch.last_offset, batch.position + batch.size
    return last if end == len(data) else None
