"""Key -> partition exactly as Kafka's DefaultPartitioner / BuiltInPartitioner computes it.

``murmur2`` is Kafka's ``Utils.murmur2`` (seed 0x9747b28c, 32-bit arithmetic
with Java's signed ints emulated by masking), and a keyed record goes to
``toPositive(murmur2(key)) % num_partitions`` (toPositive = & 0x7fffffff), so
a key lands on the partition a Kafka producer would choose.

``murmur2_many`` is the same hash over many keys at once with numpy: the
producer hashes the keys of a whole staged batch in one call, because the
pure-Python hash costs ~9 us per key (cProfile of a keyed send() loop) and the
vectorized one ~0.1 us per key for the 1-24-byte keys of a typical workload.
"""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np

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


SMALL_BATCH = 16
"""Below this many keys the per-key hash is cheaper than numpy's fixed cost per call."""


def murmur2_many(keys: Sequence[bytes], lengths: np.ndarray | None = None) -> np.ndarray:
    """murmur2 of each key as int32 (Java's signed result), bit-identical to ``murmur2``;
    ``lengths`` may be given when the caller has them."""
    n = len(keys)
    if n < SMALL_BATCH:
        return np.fromiter(map(murmur2, keys), dtype=np.int32, count=n) if n else np.empty(0, np.int32)
    if lengths is None:
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    return murmur2_joined(b"".join(keys), lengths)


def murmur2_joined(joined, lengths: np.ndarray) -> np.ndarray:
    """``murmur2_many`` of keys laid end to end in ``joined`` (Arrow's binary layout: a data
    buffer and the keys' ``lengths``), with no Python object per key."""
    n = len(lengths)
    if n == 0:
        return np.empty(0, np.int32)
    lengths = np.asarray(lengths, dtype=np.int64)
    joined = bytes(joined) + b"\0\0\0\0"
    blob = np.frombuffer(joined, dtype=np.uint8)
    # The little-endian u32 starting at every byte of the blob (an unaligned strided view).
    word_at = np.ndarray(shape=(len(joined) - 3,), dtype="<u4", buffer=joined, strides=(1,))
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    words = lengths >> 2
    # Longest keys first, so the keys still hashing full words at step j are a prefix: slices, not masks.
    order = np.argsort(-words, kind="stable")
    words_desc = words[order]
    starts_sorted = starts[order]
    lengths_sorted = lengths[order]
    active_at = n - np.searchsorted(words_desc[::-1], np.arange(int(words_desc[0]) + 1), side="right")
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lengths_sorted.astype(np.uint32)
    for j in range(int(words_desc[0])):
        active = int(active_at[j])
        k = word_at[starts_sorted[:active] + 4 * j]
        k *= m
        k ^= k >> np.uint32(24)
        k *= m
        h[:active] *= m
        h[:active] ^= k
    rest = lengths_sorted & 3
    tail = starts_sorted + (words_desc << 2)
    sel = rest == 3
    h[sel] ^= blob[tail[sel] + 2].astype(np.uint32) << np.uint32(16)
    sel = rest >= 2
    h[sel] ^= blob[tail[sel] + 1].astype(np.uint32) << np.uint32(8)
    sel = rest >= 1
    h[sel] ^= blob[tail[sel]].astype(np.uint32)
    h[sel] *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    out = np.empty(n, dtype=np.uint32)
    out[order] = h
    return out.view(np.int32)


def partitions_for_keys(keys, num_partitions: int, lengths: np.ndarray | None = None) -> np.ndarray:
    """``partition_for_key`` of each key (bytes, or a BinaryColumn without nulls), as int64."""
    hashes = murmur2_many(keys, lengths) if isinstance(keys, (list, tuple)) else murmur2_joined(
        keys.data, keys.lengths())
    return (hashes.view(np.uint32) & 0x7FFFFFFF).astype(np.int64) % num_partitions


class StickyPartitioner:
    """Null-key records stick to one partition until its batch is sent (Kafka's KIP-480)."""

    __slots__ = ("_current", "_filled", "_rng")

    def __init__(self, seed: int | None = None):
        self._current: dict[str, int] = {}
        self._filled: dict[str, int] = {}
        """Bytes already sent to the current sticky partition by ``runs``."""
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
            self._filled[topic] = 0

    def runs(self, topic: str, num_partitions: int, sizes: np.ndarray, run_bytes: int) -> np.ndarray:
        """Partitions of unkeyed records of these sizes, sent together: runs that each close before a
        record would take them past run_bytes (a larger record runs alone), round-robin over the
        partitions. Records that fit in what the sticky partition's run has left continue it (a slow
        producer's small stages fill one partition's batch after another, KIP-480); the next call
        goes on where this one stopped, so many calls spread over every partition."""
        start = self.partition(topic, num_partitions)
        n = len(sizes)
        cum = np.cumsum(sizes)
        run = np.empty(n, dtype=np.int64)
        filled = self._filled.get(topic, 0)
        r = i = before = 0
        if filled and int(cum[-1]) > run_bytes - filled:
            # More than the sticky run has room for: continuing it would send its rest as a batch
            # smaller than every other; the records make whole runs from the next partition on.
            r, filled = 1, 0
        while i < n:  # once per run: a run is about a batch of records
            end = int(np.searchsorted(cum, before + run_bytes - filled, side="right"))
            if end == i:  # a record larger than run_bytes runs alone
                end = i + 1
            run[i:end] = r
            filled += int(cum[end - 1]) - before
            before, i = int(cum[end - 1]), end
            if i < n:
                r, filled = r + 1, 0
        self._current[topic] = (start + r) % num_partitions
        self._filled[topic] = filled
        return (start + run) % num_partitions


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: h = 31 * h + c over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] | data[i + 1] << 8)) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition (and so the coordinator) that owns ``group_id``: Kafka's
    ``Utils.abs(groupId.hashCode()) % partitions``, where Utils.abs maps Integer.MIN_VALUE to 0."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
