"""Plain builders for storage tests: seeded batches, and reading a log back as records."""

from __future__ import annotations

import random

from raylog.storage import batch as rb


def make_batch(rng: random.Random, count: int, ts: int = 1_700_000_000_000, value_bytes: int = 50,
               keys: list | None = None) -> tuple[bytes, list[bytes]]:
    values = [rng.randbytes(rng.randint(0, value_bytes)) for _ in range(count)]
    return rb.build(values, keys=keys, timestamps_ms=[ts + i for i in range(count)],
                    compression=rng.choice(["lz4", "none"])), values


def append_batches(log, rng: random.Random, batches: int = 40, per: int = 5) -> list[bytes]:
    """Append ``batches`` seeded batches of ``per`` records; returns the values in order."""
    values = []
    for _ in range(batches):
        data, vals = make_batch(rng, per)
        log.append(data)
        values += vals
    return values


def read_all(log, start: int | None = None) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every (offset, key, value) from ``start`` (default log start) to the log end."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        data = log.read(offset, 64 * 1024)
        if not data:
            break
        for batch in rb.iter_batches(data):
            batch.validate()
            cols = batch.columns()
            out += [(o, k, v) for o, k, v in zip(batch.offsets(cols).tolist(), cols.keys.to_pylist(),
                                                  cols.values.to_pylist()) if o >= offset]
            offset = batch.next_offset
    return out
