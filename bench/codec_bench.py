"""Codec benchmark: each compression_type on one ~1.2 MB payload of 100-byte records.

10,000 records, each a JSON-like 100-byte value (random ids, so it compresses about as
event data does) and a short key, laid out as a magic-2 payload. Per codec: the compression
ratio, compress and inflate alone (the codec's call on the laid-out bytes), and a whole
batch built from columns (``batch.build_columns``) and decoded back to columns
(``RecordBatch.columns``). Medians of --runs timings, MB/s of uncompressed payload.

Then the Kafka listener's conversions of the same records (raylog/kafka/record_batch.py), in
records/s: a raylog batch to Kafka's v2 (every fetch), Kafka's v2 to a raylog batch (every
produce, lz4 both sides as librdkafka sends it), and the step that reads a Kafka batch's records,
by columns and one record at a time.

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

from raylog.kafka import record_batch as kafka_batch
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
    kafka = kafka_conversions(key_col, value_col, stamps, args.runs)
    for name, rate in kafka.items():
        print(f"kafka v2 {name:36s} {rate:12,.0f} records/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"payload_bytes": len(raw), "records": RECORDS, "runs": args.runs, "codecs": results,
                       "kafka_v2_records_per_s": kafka}, f, indent=2)


def kafka_conversions(key_col, value_col, stamps, runs: int) -> dict[str, float]:
    """Records/s of the Kafka listener's batch conversions on the bench's records."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    stored = record_batch.RecordBatch(record_batch.build_columns(key_col, value_col, stamps, compression="lz4"))
    cols = stored.columns()
    plain = kafka_batch.from_raylog(stored)
    header = (0, -1, 0, RECORDS - 1, int(stamps[0]), int(stamps[-1]), -1, -1, -1)
    body = plain[kafka_batch.HEADER_SIZE:]
    produced = kafka_batch.decode(plain)[0]
    # The same records as a Kafka client sends them with lz4, written by kafka-python (the tests'
    # judge of the format).
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=payload.CODEC_LZ4, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, (key, value) in enumerate(zip(produced.keys, produced.values)):
        builder.append(i, timestamp=int(stamps[i]), key=key, value=value, headers=[])
    lz4_batch = bytes(builder.build())
    assert kafka_batch.decode(lz4_batch)[0].codec == payload.CODEC_LZ4
    timed = {
        "raylog to kafka (fetch), by columns": lambda: kafka_batch.from_raylog(stored),
        "raylog to kafka, one record at a time": lambda: kafka_batch._encode_each(cols, RECORDS),
        "kafka lz4 to raylog lz4 (produce)": lambda: kafka_batch.to_raylog(kafka_batch.decode(lz4_batch)[0]),
        "kafka records read, by columns": lambda: kafka_batch._records(body, RECORDS, header),
        "kafka records read, one record at a time": lambda: kafka_batch._each_record(body, RECORDS, header),
    }
    return {name: RECORDS / median_s(fn, runs) for name, fn in timed.items()}


if __name__ == "__main__":
    main()
