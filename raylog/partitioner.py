"""Key -> partition exactly as Kafka's DefaultPartitioner / BuiltInPartitioner computes it.

``murmur2`` is Kafka's ``Utils.murmur2`` (seed 0x9747b28c, 32-bit arithmetic
with Java's signed ints emulated by masking), and a keyed record goes to
``toPositive(murmur2(key)) % num_partitions`` (toPositive = & 0x7fffffff), so
a key lands on the partition a Kafka producer would choose.
"""

from __future__ import annotations

import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int (what Java returns)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Null-key records stick to one partition until its batch is sent (Kafka's KIP-480)."""

    __slots__ = ("_current", "_rng")

    def __init__(self, seed: int | None = None):
        self._current: dict[str, int] = {}
        self._rng = random.Random(seed)

    def partition(self, topic: str, num_partitions: int) -> int:
        p = self._current.get(topic)
        if p is None or p >= num_partitions:
            p = self._rng.randrange(num_partitions)
            self._current[topic] = p
        return p

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> None:
        """The sticky partition's batch filled or was sent: move to another partition."""
        if num_partitions > 1 and self._current.get(topic) == previous:
            p = self._rng.randrange(num_partitions - 1)
            self._current[topic] = p if p < previous else p + 1
