"""ModelLog: the list-backed specification PartitionLog is checked against.

Batches are atomic: truncate_to removes the batch holding the offset, as the
real log does. delete_records moves the start; whole batches below it vanish
only from what a reader can see.
"""

from __future__ import annotations


class ModelLog:
    def __init__(self) -> None:
        self.batches: list[tuple[int, list]] = []  # (base_offset, [(key, value), ...])
        self.log_start_offset = 0
        self.log_end_offset = 0

    def append(self, records: list) -> int:
        base = self.log_end_offset
        self.batches.append((base, list(records)))
        self.log_end_offset += len(records)
        return base

    def records(self) -> list[tuple[int, object, object]]:
        out = []
        for base, recs in self.batches:
            for i, (k, v) in enumerate(recs):
                if base + i >= self.log_start_offset:
                    out.append((base + i, k, v))
        return out

    def truncate_to(self, offset: int) -> None:
        """Only for offset in [log_start_offset, log_end_offset], as replication uses it."""
        if offset >= self.log_end_offset:
            return
        removed = [b for b, r in self.batches if b + len(r) - 1 >= offset]
        self.batches = [(b, r) for b, r in self.batches if b + len(r) - 1 < offset]
        if self.batches:
            base, recs = self.batches[-1]
            self.log_end_offset = base + len(recs)
        else:
            self.log_end_offset = min(offset, removed[0]) if removed else offset
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)

    def delete_records(self, offset: int) -> None:
        self.log_start_offset = max(self.log_start_offset, offset)

    def drop_last_batch(self) -> None:
        """A crash tore the last batch: it was never acknowledged, so it goes."""
        base, recs = self.batches.pop()
        self.log_end_offset = base
