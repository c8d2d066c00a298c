"""OffsetIndex: sparse map from offset to byte position in a segment's .log file.

Entry layout, 8 bytes, big-endian:

    relative_offset u32   batch base_offset minus the segment's base offset
    position        u32   byte position of that batch in the .log file

One entry per index_interval_bytes of log, so a lookup lands at most that many
bytes before its target and the reader scans batch headers from there. A
position fits u32 because a segment never grows past 2 GiB (segment_bytes is
an int, as in Kafka).
"""

from __future__ import annotations

import struct

from raylog.storage.index import Index


class OffsetIndex(Index):
    ENTRY = struct.Struct(">II")

    def append(self, offset: int, position: int) -> None:
        self._append_entry(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below ``offset``; (base, 0) if none."""
        slot = self._floor_slot(offset - self.base_offset, lambda e: e[0])
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self.entry(slot)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Drop entries at or above ``offset``."""
        slot = self._floor_slot(offset - self.base_offset, lambda e: e[0], strict=True)
        self.truncate_entries(slot + 1)

    def last_offset_position(self) -> tuple[int, int]:
        last = self.last_entry()
        if last is None:
            return self.base_offset, 0
        return self.base_offset + last[0], last[1]

    def sanity_ok(self) -> bool:
        prev = -1
        for n in range(self.entries):
            rel, _ = self.entry(n)
            if rel <= prev:
                return False
            prev = rel
        return True
