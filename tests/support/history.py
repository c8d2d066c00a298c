"""A Jepsen-style history of a produce/consume workload, and a checker that names the anomalies.

The workload writes records with unique values ``b"<key>:<n>"`` (n counts up per key)
and records every send's outcome (acknowledged at a partition and offset, or
failed) and every record any consumer read along the way. After the faults,
one final read of every partition gives the log as it ended up. ``check``
compares them and names each anomaly, as Jepsen's Kafka checker does:

- ``lost``: an acknowledged record missing from the final log;
- ``inconsistent-offset``: an acknowledged record at another offset than its ack said;
- ``duplicate``: a value at two offsets of the final log;
- ``reordered``: two acknowledged records of one key in the final log out of send order;
- ``vanished-read``: a record a consumer read that is not at that offset in the final log (a
  consumer saw a record that later disappeared: a read past the committed high watermark);
- ``unacked-present`` is *allowed* (a send whose outcome was an error may still have landed: the
  producer gave up waiting), and so is a failed send that is absent.

For acks='all' with idempotence every other anomaly must be absent.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field


def value_of(key: bytes, n: int) -> bytes:
    return key + b":" + str(n).encode()


def parse(value: bytes) -> tuple[bytes, int]:
    key, _, n = value.rpartition(b":")
    return key, int(n)


@dataclass
class History:
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    """value -> (partition, offset) its acknowledgement reported."""
    failed: dict[bytes, str] = field(default_factory=dict)
    reads: dict[tuple[int, int], bytes] = field(default_factory=dict)
    """(partition, offset) -> the value a consumer read there (first time)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, value: bytes, partition: int, offset: int) -> None:
        with self._lock:
            self.acked[value] = (partition, offset)

    def fail(self, value: bytes, error: BaseException) -> None:
        with self._lock:
            self.failed[value] = f"{type(error).__name__}: {error}"

    def read(self, partition: int, offsets, values) -> None:
        with self._lock:
            for offset, value in zip(offsets, values):
                self.reads.setdefault((partition, offset), value)

    def check(self, final: dict[int, list[tuple[int, bytes]]]) -> dict[str, list]:
        """``final``: partition -> [(offset, value), ...] read from the start after the faults."""
        anomalies: dict[str, list] = defaultdict(list)
        at: dict[tuple[int, int], bytes] = {}
        where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        for partition, records in final.items():
            for offset, value in records:
                at[(partition, offset)] = value
                where[value].append((partition, offset))
        for value, places in where.items():
            if len(places) > 1:
                anomalies["duplicate"].append((value, places))
        for value, (partition, offset) in self.acked.items():
            places = where.get(value)
            if not places:
                anomalies["lost"].append((value, partition, offset))
            elif (partition, offset) not in places:
                anomalies["inconsistent-offset"].append((value, (partition, offset), places))
        for (partition, offset), value in self.reads.items():
            if at.get((partition, offset)) != value:
                anomalies["vanished-read"].append((partition, offset, value, at.get((partition, offset))))
        by_key: dict[bytes, list[tuple[int, int, int]]] = defaultdict(list)
        for value, places in where.items():
            if value in self.acked:
                key, n = parse(value)
                partition, offset = places[0]
                by_key[key].append((n, partition, offset))
        for key, entries in by_key.items():
            entries.sort()
            positions = [(p, o) for _, p, o in entries]
            if positions != sorted(positions):
                anomalies["reordered"].append(key)
        return dict(anomalies)
