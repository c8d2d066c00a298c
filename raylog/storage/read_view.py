"""ReadView: the page a partition replica publishes so readers on its node read its segments
without asking it.

One file per partition directory, ``read-view`` (files.py), PAGE_SIZE bytes, written only by
the replica that owns the directory, read (mapped read-only) by processes of the same user on the
node (the file is 0600, as every file of the partition). Layout, little-endian (the page never
leaves the node, so no byte order is imposed on it):

    offset size field
         0    4 magic               b"RLRV"
         4    4 version             2 (1 had no valid_until_ns nor writer_start_ticks: not read)
         8    8 sequence            seqlock: odd while the replica writes, even when stable
        16    8 high_watermark      offsets below it are committed: what fetch returns
        24    8 log_start_offset    the first offset readers may ask for
        32    8 log_end_offset
        40    4 leader_epoch
        44    4 role                0 none, 1 leader, 2 follower
        48    8 active_base_offset  base offset of the active segment
        56    8 active_size         bytes of the active segment fully written
        64    8 active_index_entries entries written to the active segment's offset index
        72    8 generation          odd while a truncation, segment deletion or compaction swap
                                    changes the files, or while the replica opens its log, bumped
                                    again when done (PartitionLog.generation, plus a base that grows
                                    with each writer process)
        80    8 writer_pid          the replica process that writes the page
        88    8 updated_ns          time.time_ns() of the last publication
        96    8 valid_until_ns      CLOCK_MONOTONIC: the replica's lease (its last heartbeat the
                                    controller answered, plus the session timeout less a margin);
                                    past it the replica may have been replaced, and no one reads here
       104    8 writer_start_ticks  the writer's start time (/proc/<pid>/stat field 22): a reused
                                    pid is not the writer

Every publication wakes the processes waiting on the sequence's low 32 bits with a futex
(futex.py): a reader that found nothing new sleeps on the word it last saw
(``ReadView.wait_word``), so a new high watermark reaches it in one wake-up, without polling.

A reader takes a snapshot (``ReadView.snapshot``): it reads the sequence, the fields, and the
sequence again, and retries while the two differ or are odd, so it never sees a torn value
(Linux's seqlock; the replica is the page's only writer). Fences (futex.fence) keep the sequence
and the fields in order on machines that reorder memory accesses; where no fence is at hand,
no page is read. Everything a reader then reads from
the segment files is checked against a second snapshot taken after the read: a changed
generation or log start means the bytes may be stale and are thrown away. The page is a hint
that makes reads cheap; correctness rests on the batch CRCs and that second check.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from raylog.storage import files, futex

PAGE_SIZE = 4096
MAGIC = b"RLRV"
VERSION = 2
ROLE_NONE, ROLE_LEADER, ROLE_FOLLOWER = 0, 1, 2

_HEADER = struct.Struct("<4sI")
_SEQUENCE = struct.Struct("<Q")
_FIELDS = struct.Struct("<qqqiiqqqQqQqQ")
_FIELDS_AT = 16
_SNAPSHOT_RETRIES = 1000


@dataclass(frozen=True, slots=True)
class ViewSnapshot:
    """One consistent reading of the page."""

    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    role: int
    active_base_offset: int
    active_size: int
    active_index_entries: int
    generation: int
    writer_pid: int
    updated_ns: int
    valid_until_ns: int
    writer_start_ticks: int
    sequence: int = 0
    """The seqlock's (even) sequence this reading was taken at: what ``ReadView.wait_word`` waits
    to see change."""


class ReadViewWriter:
    """The replica's side: owns the page and publishes new values (single writer). Until the log
    is open the page says nobody serves here (``unavailable``)."""

    def __init__(self, directory: str | Path):
        path = Path(directory) / files.READ_VIEW_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, files.FILE_MODE)
        try:
            # Blocks allocated before the page is mapped: a store into an unallocated page of a
            # shared mapping on a full disk would kill the replica with SIGBUS.
            os.posix_fallocate(fd, 0, PAGE_SIZE)
            self._mm = mmap.mmap(fd, PAGE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._sequence = _SEQUENCE.unpack_from(self._mm, 8)[0]
        if self._sequence % 2:
            self._sequence += 1  # a writer killed mid-publication left it odd
        previous = _FIELDS.unpack_from(self._mm, _FIELDS_AT)[8] \
            if _HEADER.unpack_from(self._mm, 0) == (MAGIC, VERSION) else 0
        # A new process's log counts generations from 0 again: start above every value published
        # before, at an even base, so a reader never sees the same generation on changed files.
        self._base_generation = previous + 2 + (previous % 2)
        self._start_ticks = start_ticks(os.getpid()) or 0
        self._last: tuple | None = None
        self._valid_until_ns = 0
        _HEADER.pack_into(self._mm, 0, MAGIC, VERSION)
        self._word = ctypes.c_char.from_buffer(self._mm, 8)
        self._word_address = ctypes.addressof(self._word)
        self.path = path
        self.unavailable()

    def unavailable(self) -> None:
        """Say nobody serves reads here now (role none, an odd generation): published before the
        log opens, while recovery may cut the files a previous process's page described."""
        self._write((0, 0, 0, -1, ROLE_NONE, 0, 0, 0, self._base_generation - 1))

    def publish(self, high_watermark: int, leader_epoch: int, role: int, *, log_start_offset: int,
                log_end_offset: int, active_base_offset: int, active_size: int, active_index_entries: int,
                generation: int) -> None:
        """New values: the replica's, and the log's (``PartitionLog.reader_state()``; its
        ``generation`` is odd while its files change)."""
        mm = self._mm
        if mm is None:
            return
        values = (high_watermark, log_start_offset, log_end_offset, leader_epoch, role, active_base_offset,
                  active_size, active_index_entries, self._base_generation + generation)
        if values == self._last:
            return
        self._last = values
        self._write(values)

    def touch(self, valid_until_ns: int) -> None:
        """Republish the same values with the replica's lease as it is now (renewed or not): past
        it no reader trusts the page, so a paused or fenced replica's page stops being read."""
        self._valid_until_ns = valid_until_ns
        if self._mm is not None and self._last is not None:
            self._write(self._last)

    def lease(self, valid_until_ns: int) -> None:
        """The replica's lease, published with the next write."""
        self._valid_until_ns = valid_until_ns

    def _write(self, values: tuple) -> None:
        """The seqlock's write: odd sequence, the fields, even sequence, with a fence between each."""
        seq = self._sequence + 1
        _SEQUENCE.pack_into(self._mm, 8, seq)
        _fence()
        _FIELDS.pack_into(self._mm, _FIELDS_AT, *values, os.getpid(), time.time_ns(), self._valid_until_ns,
                          self._start_ticks)
        _fence()
        self._sequence = seq + 1
        _SEQUENCE.pack_into(self._mm, 8, self._sequence)
        futex.wake(self._word_address)

    def close(self) -> None:
        """Publish that nobody serves reads here any more (role none, generation moved), and unmap."""
        if self._mm is None:
            return
        f = _FIELDS.unpack_from(self._mm, _FIELDS_AT)
        log_generation = f[8] - self._base_generation
        self._base_generation += 2  # a reader mid-read sees the generation move
        self.publish(f[0], f[3], ROLE_NONE, log_start_offset=f[1], log_end_offset=f[2], active_base_offset=f[5],
                     active_size=f[6], active_index_entries=f[7], generation=log_generation)
        self._word = None  # the mapping cannot close while ctypes holds a view of it
        self._mm.close()
        self._mm = None


def _fence() -> None:
    if futex.fence is not None:
        futex.fence()


class ReadView:
    """A reader's read-only mapping of a replica's page."""

    def __init__(self, directory: str | Path):
        path = Path(directory) / files.READ_VIEW_FILE
        fd = os.open(path, os.O_RDONLY)
        try:
            if os.fstat(fd).st_size < PAGE_SIZE:
                raise FileNotFoundError(f"{path} is not a read view yet")
            self._page = futex.SharedPage(fd, PAGE_SIZE)
        finally:
            os.close(fd)
        magic, version = _HEADER.unpack_from(self._page.buffer, 0)
        if magic != MAGIC or version != VERSION or futex.fence is None:
            self._page.close()
            raise FileNotFoundError(f"{path} is not a version {VERSION} read view"
                                    if futex.fence is not None else "no memory fence on this machine: "
                                    "the read view's seqlock cannot be read safely")
        self.path = path

    def snapshot(self) -> ViewSnapshot | None:
        """A consistent reading; None if the writer stayed mid-publication (it died there)."""
        page = self._page.buffer
        for _ in range(_SNAPSHOT_RETRIES):
            before = _SEQUENCE.unpack_from(page, 8)[0]
            if before % 2 == 0:
                _fence()
                fields = _FIELDS.unpack_from(page, _FIELDS_AT)
                _fence()
                if _SEQUENCE.unpack_from(page, 8)[0] == before:
                    return ViewSnapshot(*fields, before)
        return None

    def wait_word(self, snapshot: ViewSnapshot) -> tuple[int, int]:
        """(address, value) for ``futex.wait``/``wait_any``: sleeps until the replica publishes
        anything after ``snapshot``."""
        return self._page.address + 8, snapshot.sequence & 0xFFFFFFFF

    def wait(self, snapshot: ViewSnapshot, timeout_s: float) -> None:
        """Sleep until the replica publishes anything after ``snapshot``, at most ``timeout_s``."""
        futex.wait(*self.wait_word(snapshot), timeout_s)

    def close(self) -> None:
        self._page.close()


def writer_alive(snapshot: ViewSnapshot) -> bool:
    """Whether the page may be trusted now: the replica's lease has not lapsed (a paused, hung or
    fenced replica's lapses within the session timeout), and the process that wrote it is still
    that process (a SIGKILLed replica's page stays; its pid may be reused by another process)."""
    if time.monotonic_ns() >= snapshot.valid_until_ns:
        return False
    return start_ticks(snapshot.writer_pid) == snapshot.writer_start_ticks


def start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None
