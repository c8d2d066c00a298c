"""Batches in the first payload layout (magic 1), built exactly as raylog wrote them before the
Arrow layout: one msgpack array [keys, values, timestamp_deltas, headers, offset_deltas] of
per-record bins. Tests use them to prove that old logs stay readable; production code no longer
writes this layout. ``V1_GOLDEN`` is a batch the old code produced (its golden test's bytes)."""

from __future__ import annotations

import crc32c
import lz4.block
import msgpack

from raylog.storage import batch as rb

V1_GOLDEN = bytes.fromhex(
    "0000000000000000" "0000003e" "ffffffff" "01" "cf6b401b" "0000" "00000000"
    "0000000000000005" "0000000000000005" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "95" "91c4016b" "91c40161" "9100" "c0" "c0")
"""build_v1([b"a"], keys=[b"k"], timestamps_ms=5, compression="none")."""


def build_v1(values, keys=None, timestamps_ms=0, headers=None, compression="lz4",
             producer_id=-1, producer_epoch=-1, base_sequence=-1) -> bytes:
    count = len(values)
    keys = keys if keys is not None else [None] * count
    stamps = [timestamps_ms] * count if isinstance(timestamps_ms, int) else list(timestamps_ms)
    base_ts, max_ts = min(stamps), max(stamps)
    hdrs = None
    if headers is not None and any(headers):
        hdrs = [[[k, v] for k, v in h] if h else [] for h in headers]
    raw = msgpack.packb([list(keys), list(values), [t - base_ts for t in stamps], hdrs, None], use_bin_type=True)
    codec = 3 if compression == "lz4" else 0
    body = lz4.block.compress(raw, store_size=True) if codec == 3 else raw
    header = bytearray(rb.HEADER.pack(0, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body), -1, 1, 0, codec, count - 1,
                                      base_ts, max_ts, producer_id, producer_epoch, base_sequence, count))
    crc = crc32c.crc32c(body, crc32c.crc32c(header[rb.ATTRIBUTES_POS:]))
    header[rb.CRC_POS:rb.CRC_POS + 4] = crc.to_bytes(4, "big")
    return bytes(header) + body
