"""Storage benchmark: PartitionLog appends and reads of 100-byte records vs the raw disk.

In the same run, on the same directory, it measures the disk's raw sequential
write bandwidth two ways (mmap into a posix_fallocate'd file, and plain
write()), then appends pre-built batches of 100-byte records through
PartitionLog.append (validation, CRC, offsets, index) and reads them back with
PartitionLog.read (+ column decode). The figure is the ratio of log append
bandwidth to raw mmap bandwidth. Medians of --runs runs.

    python -m bench.storage_bench [--mb 512] [--batch-kb 100] [--runs 3] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from raylog.config import TopicConfig
from raylog.storage import batch as record_batch
from raylog.storage.log import PartitionLog

RECORD_BYTES = 100


def raw_mmap_write(path: Path, total: int, chunk: bytes) -> float:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, total)
        mm = mmap.mmap(fd, total)
        start = time.perf_counter()
        for pos in range(0, total - len(chunk) + 1, len(chunk)):
            mm[pos:pos + len(chunk)] = chunk
        elapsed = time.perf_counter() - start
        mm.close()
    finally:
        os.close(fd)
        path.unlink()
    return total / elapsed


def raw_write(path: Path, total: int, chunk: bytes) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // len(chunk)):
            os.write(fd, chunk)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return total / elapsed


def build_batches(total: int, batch_bytes: int) -> list[bytes]:
    per_batch = max(1, batch_bytes // RECORD_BYTES)
    values = [os.urandom(RECORD_BYTES // 2).hex().encode()[:RECORD_BYTES] for _ in range(per_batch)]
    one = record_batch.build(values, timestamps_ms=int(time.time() * 1000), compression="none")
    return [one] * max(1, total // len(one))


def log_round(directory: Path, batches: list[bytes], per_batch: int) -> dict:
    if directory.exists():
        shutil.rmtree(directory)
    config = TopicConfig(segment_bytes=1 << 30, retention_ms=-1)
    log = PartitionLog(directory, config)
    start = time.perf_counter()
    for b in batches:
        log.append(b)
    append_s = time.perf_counter() - start
    nbytes = sum(map(len, batches))
    start = time.perf_counter()
    offset, read_bytes, decoded = 0, 0, 0
    while offset < log.log_end_offset:
        data = log.read(offset, 8 * 1024 * 1024)
        read_bytes += len(data)
        for batch in record_batch.iter_batches(data):
            decoded += len(batch.columns().values)
            offset = batch.next_offset
    read_s = time.perf_counter() - start
    log.close()
    shutil.rmtree(directory)
    records = len(batches) * per_batch
    assert decoded == records
    return {
        "append_records_per_s": records / append_s,
        "append_bytes_per_s": nbytes / append_s,
        "read_records_per_s": records / read_s,
        "read_bytes_per_s": read_bytes / read_s,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="bytes written per run, in MiB")
    parser.add_argument("--batch-kb", type=int, default=100, help="record batch size in KiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    args = parser.parse_args(argv)
    base = Path(args.dir or tempfile.mkdtemp(prefix="raylog-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    total = args.mb * 1024 * 1024
    batches = build_batches(total, args.batch_kb * 1024)
    per_batch = max(1, args.batch_kb * 1024 // RECORD_BYTES)
    chunk = batches[0]
    runs = []
    for _ in range(args.runs):
        runs.append({
            "raw_mmap_bytes_per_s": raw_mmap_write(base / "raw.mmap", len(batches) * len(chunk), chunk),
            "raw_write_bytes_per_s": raw_write(base / "raw.write", len(batches) * len(chunk), chunk),
            **log_round(base / "log-0", batches, per_batch),
        })
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["append_vs_raw_mmap"] = statistics.median(r["append_bytes_per_s"] / r["raw_mmap_bytes_per_s"] for r in runs)
    med["append_vs_raw_write"] = statistics.median(r["append_bytes_per_s"] / r["raw_write_bytes_per_s"] for r in runs)
    print(f"storage bench: {args.mb} MiB per run, {len(chunk) // 1024} KiB batches of {per_batch} x "
          f"{RECORD_BYTES}-byte records, median of {args.runs} runs")
    print(f"  raw mmap write (fallocated) {med['raw_mmap_bytes_per_s'] / 1e9:6.2f} GB/s")
    print(f"  raw write()                 {med['raw_write_bytes_per_s'] / 1e9:6.2f} GB/s")
    print(f"  log append  {med['append_records_per_s'] / 1e6:8.2f} M records/s  "
          f"{med['append_bytes_per_s'] / 1e9:6.2f} GB/s  = {med['append_vs_raw_mmap']:.0%} of raw mmap, "
          f"{med['append_vs_raw_write']:.0%} of raw write()")
    print(f"  log read+decode {med['read_records_per_s'] / 1e6:8.2f} M records/s  "
          f"{med['read_bytes_per_s'] / 1e9:6.2f} GB/s")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "storage.json").write_text(json.dumps({"median": med, "runs": runs}, indent=2))
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return med


if __name__ == "__main__":
    main()
