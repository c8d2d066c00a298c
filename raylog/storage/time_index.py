"""TimeIndex: sparse map from timestamp to offset for offsets_for_times and retention.

Entry layout, 12 bytes, big-endian:

    timestamp       i64   largest record timestamp in the segment up to this entry (ms)
    relative_offset u32   offset (minus the segment base) of the record carrying it

Entries are written next to offset-index entries, and only when the running
maximum timestamp grows, so timestamps strictly increase along the file. Every
record before an entry's offset has a timestamp <= the entry's; a lookup for
``t`` therefore starts from the last entry with timestamp < t and scans from
there. On roll and clean close the segment adds a final entry with its largest
timestamp, so a reopened segment reads that from the index instead of the log.
"""

from __future__ import annotations

import struct

from raylog.storage.index import Index


class TimeIndex(Index):
    ENTRY = struct.Struct(">qI")

    def maybe_append(self, timestamp: int, offset: int) -> None:
        last = self.last_entry()
        if (last is None or timestamp > last[0]) and not self.is_full:
            self._append_entry(timestamp, offset - self.base_offset)

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is < ``timestamp``; the base offset if none."""
        slot = self._floor_slot(timestamp, lambda e: e[0], strict=True)
        if slot < 0:
            return self.base_offset
        return self.base_offset + self.entry(slot)[1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset is at or above ``offset``."""
        keep = self.entries
        while keep > 0 and self.base_offset + self.entry(keep - 1)[1] >= offset:
            keep -= 1
        self.truncate_entries(keep)

    def max_timestamp(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        last = self.last_entry()
        return None if last is None else (last[0], self.base_offset + last[1])

    def sanity_ok(self) -> bool:
        prev = None
        for n in range(self.entries):
            ts, _ = self.entry(n)
            if prev is not None and ts <= prev:
                return False
            prev = ts
        return True
