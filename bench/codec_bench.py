"""Codec benchmark: each compression_type on one ~1.2 MB payload of 100-byte records.

10,000 records, each a JSON-like 100-byte value (random ids, so it compresses about as
event data does) and a short key, laid out as a magic-2 payload. Per codec: the compression
ratio, compress and inflate alone (the codec's call on the laid-out bytes), and a whole
batch built from columns (``batch.build_columns``) and decoded back to columns
(``RecordBatch.columns``). Medians of --runs timings, MB/s of uncompressed payload.

    python -m bench.codec_bench [--runs 25] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np

from raylog.storage import batch as record_batch
from raylog.storage import payload

RECORDS = 10_000
VALUE_BYTES = 100


def records(seed: int = 7) -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(seed)
    values = []
    for _ in range(RECORDS):
        value = b'{"user":%d,"event":"%s","page":"/p/%d","ms":%d,"ok":true}' % (
            rng.randrange(10**6), rng.choice([b"click", b"view", b"buy", b"scroll"]), rng.randrange(5000),
            rng.randrange(10**9))
        values.append(value.ljust(VALUE_BYTES, b" ")[:VALUE_BYTES])
    keys = [b"user-%d" % rng.randrange(1000) for _ in range(RECORDS)]
    return keys, values


def median_s(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--json", default=str(Path(__file__).parent / "results" / "codec_bench.json"),
                        help="where the results go (default bench/results/codec_bench.json)")
    args = parser.parse_args(argv)
    keys, values = records()
    key_col = payload.BinaryColumn.from_pylist(keys)
    value_col = payload.BinaryColumn.from_pylist(values)
    stamps = np.full(RECORDS, 1_700_000_000_000, dtype=np.int64)
    raw = payload.encode(key_col, value_col, stamps - stamps[0], None, None, payload.CODEC_NONE)
    mb = len(raw) / 1e6
    print(f"payload: {RECORDS} records, {len(raw)} bytes uncompressed")
    print(f"{'codec':8s} {'ratio':>6s} {'compress':>10s} {'inflate':>10s} {'build batch':>12s} {'decode batch':>13s}")
    results = {}
    for name in ("none", "gzip", "snappy", "lz4", "zstd"):
        codec = payload.CODEC_BY_NAME[name]
        compressed = payload.encode(key_col, value_col, stamps - stamps[0], None, None, codec)
        if codec == payload.CODEC_NONE:
            compress_s = inflate_s = float("nan")
        else:
            # The codec's own share: the whole encode minus laying out the uncompressed payload.
            layout_s = median_s(lambda: payload.encode(key_col, value_col, stamps - stamps[0], None, None,
                                                       payload.CODEC_NONE), args.runs)
            compress_s = median_s(lambda: payload.encode(key_col, value_col, stamps - stamps[0], None, None, codec),
                                  args.runs) - layout_s
            inflate_s = median_s(lambda: payload._inflate(compressed, codec), args.runs)
        batch = record_batch.build_columns(key_col, value_col, stamps, compression=name)
        build_s = median_s(lambda: record_batch.build_columns(key_col, value_col, stamps, compression=name),
                           args.runs)
        decode_s = median_s(lambda: record_batch.RecordBatch(batch).columns(), args.runs)
        plain = codec == payload.CODEC_NONE
        row = {"ratio": len(raw) / len(compressed), "compress_mb_s": None if plain else mb / compress_s,
               "inflate_mb_s": None if plain else mb / inflate_s, "build_batch_mb_s": mb / build_s,
               "decode_batch_mb_s": mb / decode_s, "build_batch_ms": build_s * 1e3, "decode_batch_ms": decode_s * 1e3}
        results[name] = row
        print(f"{name:8s} {row['ratio']:6.2f} {mb / compress_s:10.0f} {mb / inflate_s:10.0f} "
              f"{row['build_batch_mb_s']:12.0f} {row['decode_batch_mb_s']:13.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"payload_bytes": len(raw), "records": RECORDS, "runs": args.runs, "codecs": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
