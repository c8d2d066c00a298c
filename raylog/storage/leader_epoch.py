"""LeaderEpochCache: which leader epoch started at which offset, checkpointed beside the log.

Kafka's KIP-101 design. Every batch carries the epoch of the leader that
appended it; the cache keeps, per epoch, the first offset written in it
(``(epoch, start_offset)`` entries, both strictly increasing). A follower, or
an old leader coming back, asks the current leader for the end offset of its
own latest epoch (``end_offset_for``: the start of the next epoch the leader
knows, or its log end for its current epoch) and truncates what lies beyond:
exactly the suffix the leader never had. Truncating to the high watermark
instead loses acknowledged records or lets replicas diverge (KIP-101's two
scenarios, tested in tests/unit/storage/test_leader_epoch.py).

File ``leader-epoch-checkpoint`` (text, written atomically and durably by
``files.write_atomically``, like every raylog checkpoint): a first line
``raylog-epochs 1``, then one ``<epoch> <start_offset>`` line per entry.
Entries change only when a new epoch writes its first batch or on truncation,
so a write per change costs nothing measurable.

Not thread-safe: the partition's replica actor owns it.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from raylog.storage import files

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
HEADER = "raylog-epochs 1"


class LeaderEpochCache:
    def __init__(self, directory: Path):
        self.path = Path(directory) / files.LEADER_EPOCH_CHECKPOINT_FILE
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self._load()

    def _load(self) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return
        if not lines or lines[0] != HEADER:
            return  # unreadable: start empty, as Kafka does; truncation then falls back to the log
        for line in lines[1:]:
            try:
                epoch, start = (int(x) for x in line.split())
            except ValueError:
                break
            if self._epochs and (epoch <= self._epochs[-1] or start < self._starts[-1]):
                break
            self._epochs.append(epoch)
            self._starts.append(start)

    def _write(self) -> None:
        files.make_directory(self.path.parent)
        body = "\n".join([HEADER] + [f"{e} {s}" for e, s in zip(self._epochs, self._starts)]) + "\n"
        files.write_atomically(self.path, body.encode())

    # --- queries ------------------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def start_offset(self, epoch: int) -> int:
        """First offset of ``epoch``, or UNDEFINED_OFFSET if the cache does not hold it."""
        i = bisect.bisect_left(self._epochs, epoch)
        return self._starts[i] if i < len(self._epochs) and self._epochs[i] == epoch else UNDEFINED_OFFSET

    def epoch_of(self, offset: int) -> int:
        """The epoch of the leader that wrote the record at ``offset`` (UNDEFINED_EPOCH below the
        first epoch known)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 and offset >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer for ``epoch``: the largest epoch this replica knows
        that is <= ``epoch``, and the offset that epoch ended at (the next epoch's start, or the
        log end for the latest). For an epoch below the first one known, ``(epoch, the first
        epoch's start)``: nothing of ours goes back further, so a follower holding that epoch must
        cut there (Kafka's LeaderEpochFileCache.endOffsetFor; without it a follower of an unclean
        leader fell back to its high watermark and kept records the leader never had).
        (UNDEFINED_EPOCH, UNDEFINED_OFFSET) for an empty cache or an undefined epoch."""
        if not self._epochs or epoch < 0:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch < self._epochs[0]:
            return epoch, self._starts[0]
        i = bisect.bisect_right(self._epochs, epoch) - 1
        if i == len(self._epochs) - 1:
            return self._epochs[i], log_end_offset
        return self._epochs[i], self._starts[i + 1]

    # --- changes --------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` wrote its first batch at ``start_offset``; returns whether the
        cache changed. Older or equal epochs are ignored (their start is already known)."""
        if epoch < 0 or (self._epochs and epoch <= self._epochs[-1]):
            return False
        if self._starts and start_offset < self._starts[-1]:
            # A later epoch cannot start below an earlier one's start: the log was truncated
            # below it without the cache hearing, so the stale entries go.
            self.truncate_from_end(start_offset)
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._write()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: drop the epochs that start at or after it."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:], self._starts[keep:]
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: epochs wholly below it go, the one holding it
        starts there."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i <= 0 and (not self._starts or self._starts[0] >= start_offset):
            return
        del self._epochs[:i], self._starts[:i]
        self._starts[0] = start_offset
        self._write()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self._write()
