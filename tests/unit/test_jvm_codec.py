"""The Spark connector's Java codec against raylog's Python one, on real bytes, both ways.

BatchDecoder and BatchEncoder (spark_bridge/jvm) are a second implementation of the batch
format of raylog/storage/batch.py and payload.py (the decoder: every codec, none, gzip, snappy,
lz4 and zstd; the encoder: lz4 and none), and Murmur2 a second murmur2: a difference
would mean Spark reads other records than a Python consumer, or writes batches the broker
refuses, or sends a key to another partition than a Python producer. tests/unit/jvm/CodecCheck.java
runs the package-private classes in a plain JVM (no Spark session, no Ray) on files this test
writes; several cases share one JVM run because a JVM start costs more than their decoding.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
import sysconfig
import time
import zlib
from pathlib import Path

import crc32c
import lz4.block
import msgpack
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylog.arrow_records import spark_schema, to_spark_arrow
from raylog.consumer.column_batch import decode as python_fetch_decode
from raylog.errors import CorruptRecordError
from raylog.producer.partitioner import murmur2
from raylog.storage import batch as rb
from tests.support.v1_batches import build_v1
from tests.unit.producer.test_partitioner import KAFKA_UTILS_TEST_VECTORS
from tests.unit.storage.test_codecs import corrupt_bodies, golden, with_body

ROOT = Path(__file__).resolve().parents[2]
JVM_DIR = ROOT / "spark_bridge" / "jvm"
JAR = JVM_DIR / "raylog-spark.jar"
HARNESS = Path(__file__).parent / "jvm" / "CodecCheck.java"
CODEC_SOURCES = ["BatchDecoder", "BatchEncoder", "ComputedColumns", "LocalSegments", "Murmur2", "RaylogSparkException"]
"""What the harness exercises: the jar must be newer than these, or the tests would check old code."""

TOPIC = "events-\u00e9"  # CodecCheck.TOPIC / PARTITION
PARTITION = 7
SPARK_SCHEMA = spark_schema(include_headers=True, time_zone="UTC")
NOT_PAST = 2**62
"""An `until` beyond every test batch (Spark's end of an unbounded range)."""


# --- the JVM ---------------------------------------------------------------------------------------


class Jvm:
    def __init__(self, classpath: str, tmp: Path):
        self.classpath = classpath
        self.tmp = tmp
        self.runs = 0

    def file(self, data: bytes, suffix: str) -> str:
        self.runs += 1
        path = self.tmp / f"{self.runs}-{random.randrange(1 << 30)}{suffix}"
        path.write_bytes(data)
        return str(path)

    def run(self, *args: str) -> list[str]:
        # Arrow's memory needs java.nio opened on Java 17 (Spark's launcher passes it to the connector);
        # the other flags keep a short-lived JVM light on a shared 2-core machine.
        cmd = ["java", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Xmx512m", "-cp", self.classpath, "io.raylog.spark.CodecCheck", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"CodecCheck {args[0]} exited {done.returncode}:\n{done.stderr[-6000:]}"
        return [line for line in done.stdout.splitlines() if line.startswith("{")]  # not log4j's lines

    def decode(self, cases: list[tuple[bytes, int, int]]) -> list[dict]:
        """Java's view of each (fetch bytes, from, until): {"records": [...], "error": str | None}."""
        args = []
        for buf, start, until in cases:
            args += [self.file(bytes(buf), ".bin"), str(start), str(until)]
        out = [{"records": [], "error": None} for _ in cases]
        for line in self.run("decode", *args):
            row = json.loads(line)
            case = out[row.pop("case")]
            assert "crash" not in row, f"BatchDecoder threw something other than RaylogSparkException: {row['crash']}"
            if "error" in row:
                case["error"] = row["error"]
            else:
                case["records"].append(row)
        return out

    def encode(self, cases: list[tuple[list[dict], int, int]],
               restamp: tuple[int, int] | None = None) -> list[tuple[bytes, bytes, int]]:
        """The (lz4, uncompressed) batch BatchEncoder makes of each (records, producer id, base
        sequence), and its size(): what RecordSender bounds batches by. ``restamp``: (producer
        epoch, base sequence) each batch gets afterwards (BatchEncoder.restamp)."""
        extra = {} if restamp is None else {"restamp": list(restamp)}
        records = self.file(json.dumps([{"records": [_to_json(r) for r in recs], "producer_id": pid,
                                         "base_sequence": seq, **extra} for recs, pid, seq in cases]).encode(),
                            ".json")
        out = self.tmp / f"{self.runs}-encoded.bin"
        sizes = [json.loads(line)["size"] for line in self.run("encode", records, str(out))]
        buf = out.read_bytes()
        infos = rb.validate_all(buf, check_payload=True)  # Python's broker-side check of what Java wrote
        assert len(infos) == 2 * len(cases) == 2 * len(sizes), "one lz4 and one uncompressed batch per case"
        batches = [buf[i.position:i.position + i.size] for i in infos]
        return list(zip(batches[::2], batches[1::2], sizes))

    def murmur2(self, keys: list[bytes]) -> list[int]:
        path = self.file("".join(k.hex() + "\n" for k in keys).encode(), ".keys")
        lines = [json.loads(line) for line in self.run("murmur2", path)]
        assert [line["key"] for line in lines] == [k.hex() for k in keys]
        return [line["hash"] for line in lines]


@pytest.fixture(scope="module")
def jvm(tmp_path_factory) -> Jvm:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("javac/java not on PATH: the Java codec cannot be compiled here")
    if not JAR.exists():
        made = subprocess.run(["make", "jar"], cwd=ROOT, capture_output=True, text=True)
        if made.returncode != 0 or not JAR.exists():
            pytest.fail(f"{JAR} is missing and `make jar` failed:\n{made.stdout[-3000:]}{made.stderr[-3000:]}")
    stale = [name for name in CODEC_SOURCES
             if (JVM_DIR / "src" / "io" / "raylog" / "spark" / f"{name}.java").stat().st_mtime > JAR.stat().st_mtime]
    if stale:
        pytest.fail(f"{JAR} is older than {', '.join(stale)}.java: run `make jar` so this tests the current code")
    site = Path(sysconfig.get_paths()["purelib"])
    deps = f"{site}/pyspark/jars/*:{site}/raydp/jars/*:{site}/ray/jars/ray_dist.jar"  # as the Makefile's javac
    classes = tmp_path_factory.mktemp("codec-check")
    compiled = subprocess.run(["javac", "--release", "17", "-nowarn", "-d", str(classes), "-cp", f"{JAR}:{deps}",
                               str(HARNESS)], capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0, f"javac {HARNESS.name} failed:\n{compiled.stderr[-6000:]}"
    return Jvm(f"{classes}:{JAR}:{deps}", tmp_path_factory.mktemp("codec-files"))


# --- Python's side -----------------------------------------------------------------------------------


def _hex(b):
    return None if b is None else b.hex()


def _to_json(record: dict) -> dict:
    headers = record.get("headers")
    return {"key": _hex(record["key"]), "value": _hex(record["value"]), "timestamp": record["timestamp"],
            "headers": None if headers is None else [[k, _hex(v)] for k, v in headers]}


def python_rows(buf, start: int, until: int) -> list[dict]:
    """What the Python reader hands Spark for [start, until): column_batch.decode, then the rows
    of to_spark_arrow (Spark's Kafka schema, timestamps in microseconds), in CodecCheck's form."""
    chunks, _ = python_fetch_decode(TOPIC, PARTITION, bytes(buf), start)
    rows = []
    for chunk in chunks:
        arrow = to_spark_arrow(chunk, SPARK_SCHEMA)
        stamps = arrow.column("timestamp").cast(pa.int64()).to_pylist()
        for i, row in enumerate(arrow.to_pylist()):
            if row["offset"] >= until:
                break
            rows.append({"key": _hex(row["key"]), "value": _hex(row["value"]), "topic": row["topic"],
                         "partition": row["partition"], "offset": row["offset"], "timestamp": stamps[i],
                         "timestampType": row["timestampType"],
                         "headers": [[h["key"], _hex(h["value"])] for h in row["headers"]]})
    return rows


def log_of(batches: list[bytearray], first_offset: int = 0, gap: int = 0) -> tuple[bytes, list[tuple[int, int]]]:
    """Batches stamped one after another as a leader appends them (``gap`` offsets between them,
    as compaction can leave): the fetch buffer, and each batch's [base, next) offsets."""
    out = bytearray()
    spans = []
    offset = first_offset
    for data in batches:
        data = bytearray(data)
        batch = rb.RecordBatch(data)
        batch.stamp(offset, 5)
        spans.append((offset, batch.next_offset))
        offset = batch.next_offset + gap
        out += data
    return bytes(out), spans


def windows(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[from, until) windows: everything, each batch alone, and windows that start and end
    inside batches (one record in, one record short) or in a gap or past the end."""
    first, last = spans[0][0], spans[-1][1]
    out = {(0, NOT_PAST), (first, last), (last, NOT_PAST), (first + 1, last - 1)}
    for base, nxt in spans:
        out |= {(base, nxt), (base + 1, nxt), (base, nxt - 1), (base + 1, nxt - 1), (nxt - 1, nxt), (base, base + 1),
                (base + 1, base + 2), (nxt, nxt + 1)}
    for (_, a_next), (b_base, b_next) in zip(spans, spans[1:]):
        out |= {(a_next - 1, b_base + 1), (a_next - 2, b_next - 1)}
    return sorted((a, b) for a, b in out if 0 <= a < b)


def assert_java_reads_as_python(jvm: Jvm, buf: bytes, spans: list[tuple[int, int]], results=None) -> None:
    """Java's records of every window of ``windows(spans)`` (``results``, when decoded already) are Python's."""
    cases = [(buf, a, b) for a, b in windows(spans)]
    results = jvm.decode(cases) if results is None else results
    assert len(results) == len(cases)
    for (_, a, b), got in zip(cases, results):
        assert got["error"] is None, f"window [{a}, {b}): {got['error']}"
        assert got["records"] == python_rows(buf, a, b), f"window [{a}, {b}) differs"
    assert len(results[0]["records"]) == sum(rb.RecordBatch(buf, i.position).record_count
                                             for i in rb.validate_all(buf)), "[0, past the end) holds every record"


def build_v1_compacted(values, keys, timestamps_ms, headers, offset_deltas, last_offset_delta,
                       compression="lz4") -> bytes:
    """A magic-1 batch the cleaner wrote before the layout change (offset deltas in the payload);
    tests.support.v1_batches.build_v1 writes only uncompacted ones, with this same layout."""
    count = len(values)
    base_ts, max_ts = min(timestamps_ms), max(timestamps_ms)
    hdrs = [[[k, v] for k, v in h] if h else [] for h in headers]
    raw = msgpack.packb([keys, values, [t - base_ts for t in timestamps_ms], hdrs, offset_deltas], use_bin_type=True)
    codec = 3 if compression == "lz4" else 0
    body = lz4.block.compress(raw, store_size=True) if codec == 3 else raw
    header = bytearray(rb.HEADER.pack(0, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(body), -1, 1, 0, codec,
                                      last_offset_delta, base_ts, max_ts, -1, -1, -1, count))
    out = header + body
    out[rb.CRC_POS:rb.CRC_POS + 4] = crc32c.crc32c(bytes(out[rb.ATTRIBUTES_POS:])).to_bytes(4, "big")
    rb.RecordBatch(out).validate()
    return bytes(out)


# --- Python writes, Java reads ---------------------------------------------------------------------

TS = 1_700_000_000_000
MIXED = dict(
    values=[b"v0", b"", None, b"\x00\xff" * 40, b"", b"v5", None, b"v7", b"v8", b"\x80"],
    keys=[b"k0", None, b"k2", b"", None, b"k5", b"k6", None, b"\xe9", b"k9"],
    timestamps_ms=[TS + 5, TS, TS + 3, TS - 7, TS + 100, TS, TS + 1, TS + 2, TS + 2, TS + 9],
    headers=[[("h", b"1")], None, [("x\u00e9\u4e2d", None), ("h", b"")], [], None, [("\U0001f600", b"\x00")], None,
             None, [("a", b"1"), ("a", b"2")], None],
)


def _log_append_time(data: bytearray, now_ms: int) -> bytearray:
    rb.RecordBatch(data).set_log_append_time(now_ms)
    return data


def _gzip_member(raw: bytes, flags: int) -> bytes:
    """An RFC 1952 member with the optional header fields ``flags`` names (FHCRC 2, FEXTRA 4,
    FNAME 8, FCOMMENT 16): what another gzip writer may produce, and Python reads."""
    head = bytearray(b"\x1f\x8b\x08" + bytes([flags]) + b"\x5e\x00\x00\x00\x02\x03")
    if flags & 4:
        head += struct.pack("<H", 5) + b"ex\x00tr"
    if flags & 8:
        head += "n\u00e4me.bin".encode() + b"\x00"
    if flags & 16:
        head += b"a comment\x00"
    if flags & 2:
        head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return bytes(head) + c.compress(raw) + c.flush() + struct.pack("<II", zlib.crc32(raw), len(raw))


def _gzip_of_other_writers() -> bytearray:
    """MIXED as gzip, written as an empty member then one with every optional header field."""
    raw = bytes(rb.build(**MIXED, compression="none")[rb.HEADER_SIZE:])
    return bytearray(with_body(rb.build(**MIXED, compression="gzip"), _gzip_member(b"", 0) + _gzip_member(raw, 30)))


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


SCENARIOS = {
    "mixed lz4": lambda: [rb.build(**MIXED, compression="lz4")],
    "mixed uncompressed": lambda: [rb.build(**MIXED, compression="none")],
    "mixed gzip": lambda: [rb.build(**MIXED, compression="gzip")],
    "mixed snappy": lambda: [rb.build(**MIXED, compression="snappy")],
    "mixed zstd": lambda: [rb.build(**MIXED, compression="zstd")],
    "every codec in one fetch": lambda: [rb.build(**MIXED, compression=c) for c in CODECS] + [
        rb.build([b"x%d" % i for i in range(5)], keys=[b"k"] * 5, timestamps_ms=TS, compression=c) for c in CODECS],
    "gzip from other writers (header fields, two members)": lambda: [_gzip_of_other_writers()],
    "LogAppendTime, every codec": lambda: [_log_append_time(rb.build(**MIXED, compression=c), TS + 7)
                                           for c in CODECS],
    "compacted, every codec": lambda: [
        rb.build([b"a", None, b"c"], keys=[b"k1", b"k2", b"k3"], timestamps_ms=[TS, TS + 1, TS + 2],
                 offset_deltas=[0, 2, 5], last_offset_delta=6, compression=c) for c in CODECS],
    "no keys, no headers": lambda: [rb.build([b"a", b"bb", b""], timestamps_ms=TS)],
    "every value null": lambda: [rb.build([None, None], keys=[b"a", b"b"], timestamps_ms=TS, compression="none")],
    "every key and value null": lambda: [rb.build([None] * 3, keys=[None] * 3, timestamps_ms=TS)],
    "headers only on the last record": lambda: [rb.build([b"a", b"b", b"c"], headers=[None, [], [("z", b"9")]])],
    "LogAppendTime": lambda: [_log_append_time(rb.build(**MIXED), TS + 12345),
                              _log_append_time(rb.build([b"x"], timestamps_ms=1, compression="none"), TS)],
    "compacted": lambda: [
        rb.build([b"a", None, b"c", b"d"], keys=[b"k1", b"k2", b"k3", b"k4"], timestamps_ms=[TS, TS + 1, TS + 2, TS + 3],
                 headers=[None, [("h", b"x")], None, None], offset_deltas=[0, 2, 5, 6], last_offset_delta=9),
        rb.build([b"e", b"f"], keys=[b"k5", b"k6"], timestamps_ms=TS, offset_deltas=[1, 4], compression="none")],
    "magic 1": lambda: [
        build_v1(MIXED["values"], keys=MIXED["keys"], timestamps_ms=MIXED["timestamps_ms"], headers=MIXED["headers"]),
        build_v1([b"a", None], keys=None, timestamps_ms=TS, compression="none"),
        build_v1([b"b"], keys=[b"k"], timestamps_ms=TS, headers=[[("h\u00e9", None)]], compression="none")],
    "magic 1 compacted": lambda: [
        build_v1_compacted([b"a", None, b"c"], [b"k1", b"k2", None], [TS, TS + 5, TS - 5], [None, [("h", b"1")], []],
                           offset_deltas=[1, 3, 4], last_offset_delta=6),
        build_v1_compacted([b"d", b"e"], [b"k4", b"k5"], [TS, TS], [None, None], offset_deltas=[0, 2],
                           last_offset_delta=2, compression="none")],
    "magic 1 and magic 2 in one fetch": lambda: [
        build_v1([b"old"] * 3, keys=[b"k", None, b"k"], timestamps_ms=TS), rb.build(**MIXED),
        build_v1([b"old2"], timestamps_ms=TS + 1, compression="none"), rb.build([b"new"], keys=[b"k"])],
    "one record": lambda: [rb.build([b"only"], keys=[b"k"], timestamps_ms=TS)],
    "3000 records": lambda: [rb.build(
        [None if i % 97 == 0 else bytes([i % 256]) * (i % 50) for i in range(3000)],
        keys=[None if i % 3 == 0 else b"key-%d" % (i % 17) for i in range(3000)],
        timestamps_ms=[TS + (i * 7919) % 1000 for i in range(3000)],
        headers=[[("n", b"%d" % i)] if i % 250 == 0 else None for i in range(3000)])],
    "3000 records, gzip, snappy and zstd": lambda: [rb.build(
        [None if i % 97 == 0 else bytes([i % 256]) * (i % 50) for i in range(3000)],
        keys=[None if i % 3 == 0 else b"key-%d" % (i % 17) for i in range(3000)],
        timestamps_ms=[TS + (i * 7919) % 1000 for i in range(3000)], compression=c)
        for c in ("gzip", "snappy", "zstd")],
}


def _scenario_log(name: str) -> tuple[bytes, list[tuple[int, int]]]:
    return log_of(SCENARIOS[name](), first_offset=1000, gap=3 if "compacted" in name else 0)


@pytest.fixture(scope="module")
def scenario_results(jvm) -> dict[str, list[dict]]:
    """Every window of every scenario, decoded in one JVM run."""
    cases, names = [], []
    for name in SCENARIOS:
        buf, spans = _scenario_log(name)
        cases += [(buf, a, b) for a, b in windows(spans)]
        names += [name] * len(windows(spans))
    out: dict[str, list[dict]] = {name: [] for name in SCENARIOS}
    for name, got in zip(names, jvm.decode(cases)):
        out[name].append(got)
    return out


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_java_decodes_python_batches_as_python_does(jvm, scenario_results, scenario):
    buf, spans = _scenario_log(scenario)
    assert_java_reads_as_python(jvm, buf, spans, scenario_results[scenario])


def test_java_leaves_out_a_partial_trailing_batch_as_python_does(jvm):
    """A fetch cut by max_bytes is not a case (whole batches only), but a reader must not read past the end."""
    buf, spans = log_of([rb.build(**MIXED), rb.build([b"x"] * 5)], first_offset=10)
    cut = buf[:-7]
    [got] = jvm.decode([(cut, 0, NOT_PAST)])
    assert got == {"records": python_rows(cut, 0, NOT_PAST), "error": None}
    assert [r["offset"] for r in got["records"]] == list(range(10, 20))


def test_java_timestamps_and_types_are_sparks(jvm):
    """Spot checks in Spark's units, independent of the Python reference: microseconds, LogAppendTime
    as the batch's max_timestamp and timestampType 1."""
    buf, _ = log_of([rb.build([b"a", b"b"], timestamps_ms=[TS, TS + 2]),
                     _log_append_time(rb.build([b"c"], timestamps_ms=TS), TS + 50)])
    [got] = jvm.decode([(buf, 0, NOT_PAST)])
    assert [(r["offset"], r["timestamp"], r["timestampType"], r["topic"], r["partition"]) for r in got["records"]] == [
        (0, TS * 1000, 0, TOPIC, PARTITION), (1, (TS + 2) * 1000, 0, TOPIC, PARTITION),
        (2, (TS + 50) * 1000, 1, TOPIC, PARTITION)]


def test_java_refuses_a_flipped_byte_with_a_crc_error(jvm):
    """Every byte from attributes to the end is covered; Java's message is the Python reader's."""
    good, _ = log_of([rb.build([b"a"], timestamps_ms=TS), rb.build(**MIXED), rb.build([b"z"])], first_offset=40)
    second = rb.RecordBatch(good, rb.RecordBatch(good).size)
    assert second.base_offset == 41
    positions = [second.position + p for p in (rb.ATTRIBUTES_POS + 1, rb.MAX_TIMESTAMP_POS + 3, rb.RECORD_COUNT_POS,
                                               rb.HEADER_SIZE, rb.HEADER_SIZE + 17, second.size - 1)]
    cases = []
    for pos in positions:
        bad = bytearray(good)
        bad[pos] ^= 0x01
        cases.append((bytes(bad), 0, NOT_PAST))
    for pos, (bad, _, _), got in zip(positions, cases, jvm.decode(cases)):
        with pytest.raises(CorruptRecordError) as python_error:
            python_fetch_decode(TOPIC, PARTITION, bad, 0)
        assert got["error"] == f"CorruptRecordError: {python_error.value}", f"byte {pos} flipped"
        assert "fails its CRC" in got["error"] and "offset 41" in got["error"]
        assert [r["offset"] for r in got["records"]] == [40], "the batch before the bad one was read"


def _recrc(data: bytearray) -> bytes:
    rb.RecordBatch(data).set_producer_state(-1, -1)  # recomputes the CRC over the forged bytes
    return bytes(data)


def _forged_payload(values, keys, edit, offset_deltas=None) -> bytes:
    """An uncompressed magic-2 batch whose payload ``edit`` changed and whose CRC still matches: a
    producer's bug, not a disk's, which only payload validation catches."""
    data = bytearray(rb.build(values, keys=keys, compression="none", offset_deltas=offset_deltas))
    size = int.from_bytes(data[rb.HEADER_SIZE:rb.HEADER_SIZE + 4], "little")
    header = msgpack.unpackb(bytes(data[rb.HEADER_SIZE + 4:rb.HEADER_SIZE + 4 + size]))
    buffers_at = rb.HEADER_SIZE + 4 + size + (-(4 + size) % 8)
    edit(data, header, buffers_at)
    packed = msgpack.packb(header)
    assert len(packed) == size, "a forged header keeps its size"
    data[rb.HEADER_SIZE + 4:rb.HEADER_SIZE + 4 + size] = packed
    return _recrc(data)


def _set(field, value):
    def edit(data, header, at):
        header[field] = value
    return edit


def _set_size(index, value):
    def edit(data, header, at):
        header[3][index] = value
    return edit


VALUE_OFFSETS, OFFSET_DELTAS = 4, 7
"""Indexes in the payload's buffer order (key validity, offsets, data, value validity, offsets, data, ...)."""


def _int32(buffer, item, value):
    """Overwrite int32 number ``item`` of payload buffer ``buffer``."""
    def edit(data, header, at):
        pos = at + sum(s + (-s % 8) for s in header[3][:buffer]) + 4 * item
        data[pos:pos + 4] = value.to_bytes(4, "little", signed=True)
    return edit


def _lz4_prefix(value):
    data = bytearray(rb.build([b"abc"] * 4))
    data[rb.HEADER_SIZE:rb.HEADER_SIZE + 4] = value.to_bytes(4, "little")
    return _recrc(data)


def _magic(value):
    data = bytearray(rb.build([b"abc"]))
    data[rb.MAGIC_POS] = value
    return bytes(data)


VALUES_WITH_A_NULL = dict(values=[b"ab", None, b"c"], keys=[b"k", None, b"kk"])
FORGED = {
    "record count differs from the header's": lambda: _forged_payload([b"ab", b"c"], None, _set(0, 3)),
    "a buffer runs past the payload": lambda: _forged_payload([b"ab", b"c"], None, _set_size(5, 100)),
    "timestamp deltas of the wrong size": lambda: _forged_payload([b"ab", b"c"], None, _set_size(6, 8)),
    "lz4 size prefix above 256 MiB": lambda: _lz4_prefix(2**31),
    "lz4 size prefix that is not the size": lambda: _lz4_prefix(7),
    "unknown magic": lambda: _magic(3),
    "a bitmap with a null count of 0": lambda: _forged_payload(**VALUES_WITH_A_NULL, edit=_set(2, 0)),
    "a null count above the bitmap's": lambda: _forged_payload(**VALUES_WITH_A_NULL, edit=_set(2, 2)),
    "an all-null column with buffers": lambda: _forged_payload(**VALUES_WITH_A_NULL, edit=_set(1, 3)),
    "a value offset past the data": lambda: _forged_payload([b"ab", b"cde", b"f"], None, _int32(VALUE_OFFSETS, 1, 9)),
    "value offsets that decrease": lambda: _forged_payload([b"ab", b"cde", b"f"], None, _int32(VALUE_OFFSETS, 2, 1)),
    "offset deltas that repeat": lambda: _forged_payload([b"a", b"b", b"c"], [b"1", b"2", b"3"],
                                                         _int32(OFFSET_DELTAS, 2, 2), offset_deltas=[0, 2, 3]),
    "a negative offset delta": lambda: _forged_payload([b"a", b"b"], [b"1", b"2"], _int32(OFFSET_DELTAS, 0, -1),
                                                       offset_deltas=[0, 1]),
    # gzip, snappy and zstd payloads that do not inflate to their declared size or past the bound
    # (tests/unit/storage/test_codecs.py's list, each in the batch of that test's golden records).
    **{name: (lambda codec=codec, body=body: with_body(golden(codec), body))
       for name, (codec, body) in corrupt_bodies().items()},
}

@pytest.fixture(scope="module")
def forged_results(jvm) -> dict[str, dict]:
    forged = {name: make() for name, make in FORGED.items()}
    # Read here, not with Jvm.decode (which stops at a crash): a crash is a finding of one case only.
    lines = jvm.run("decode", *[arg for bad in forged.values()
                                for arg in (jvm.file(bad, ".bin"), "0", str(NOT_PAST))])
    out = {name: {"bytes": bad, "records": [], "error": None, "crash": None} for name, bad in forged.items()}
    names = list(forged)
    for line in lines:
        row = json.loads(line)
        case = out[names[row.pop("case")]]
        if "error" in row or "crash" in row:
            case.update(row)
        else:
            case["records"].append(row)
    return out


@pytest.mark.parametrize("forgery", list(FORGED))
def test_java_refuses_payloads_python_refuses(forged_results, forgery):
    """A CRC proves the bytes are the producer's, not that they are a payload (architecture.md). Such
    bytes should not reach a reader (the leader decodes every produced payload before appending it),
    so this is the two decoders agreeing on what a payload is, not a path users hit."""
    got = forged_results[forgery]
    with pytest.raises(CorruptRecordError):
        python_fetch_decode(TOPIC, PARTITION, got["bytes"], 0)
    assert got["crash"] is None, f"BatchDecoder threw something other than RaylogSparkException: {got['crash']}"
    assert got["records"] == [], f"Java read records Python refuses: {got['records']}"
    assert got["error"] is not None and got["error"].startswith("CorruptRecordError: "), got


# --- Java writes, Python reads ---------------------------------------------------------------------


def _records(values, keys=None, timestamps=None, headers=None) -> list[dict]:
    n = len(values)
    keys = keys or [None] * n
    timestamps = timestamps or [TS] * n
    headers = headers or [None] * n
    return [{"key": k, "value": v, "timestamp": t, "headers": h} for k, v, t, h in zip(keys, values, timestamps, headers)]


def _as_sent(cases: list[list[dict]], seed: int) -> list[tuple[list[dict], int, int]]:
    """Each list of records as RecordSender sends it: a random 62-bit producer id, a sequence."""
    rng = random.Random(seed)
    return [(records, rng.getrandbits(62), rng.choice([0, rng.randrange(2**31 - 1)])) for records in cases]


def assert_python_reads_java_batches(jvm: Jvm, cases: list[tuple[list[dict], int, int]]) -> None:
    for (records, producer_id, sequence), (lz4_batch, plain, _) in zip(cases, jvm.encode(cases)):
        python_plain = rb.build([r["value"] for r in records], keys=[r["key"] for r in records],
                                timestamps_ms=[r["timestamp"] for r in records],
                                headers=[r["headers"] for r in records], compression="none",
                                producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
        for data, codec in ((lz4_batch, 3), (plain, 0)):
            batch = rb.RecordBatch(data)
            batch.validate(check_payload=True)
            stamps = [r["timestamp"] for r in records]
            assert (batch.magic, batch.codec, batch.record_count, batch.last_offset_delta, batch.base_offset,
                    batch.leader_epoch, batch.base_timestamp, batch.max_timestamp, batch.log_append_time,
                    batch.producer_id, batch.base_sequence) == (
                2, codec, len(records), len(records) - 1, 0, -1, min(stamps), max(stamps), False, producer_id,
                sequence)
            cols = batch.columns()
            assert cols.keys.to_pylist() == [r["key"] for r in records]
            assert cols.values.to_pylist() == [r["value"] for r in records]
            assert batch.timestamps(cols).tolist() == stamps
            assert batch.offsets(cols).tolist() == list(range(len(records)))
            assert cols.offset_deltas is None
            headers = cols.headers or [[] for _ in records]
            assert [[tuple(p) for p in h] for h in headers] == [list(r["headers"] or []) for r in records]
        # Byte for byte, header included (producer epoch 0: what RecordSender's producer starts with).
        assert plain == bytes(python_plain), "the uncompressed batch is byte for byte the one Python builds"


ENCODE_CASES = {
    "mixed": _records(MIXED["values"], MIXED["keys"], MIXED["timestamps_ms"], MIXED["headers"]),
    "one record": _records([b"v"], [b"k"]),
    "empty value, no key": _records([b""]),
    "every value null": _records([None, None], [b"a", b"b"]),
    "every key and value null": _records([None] * 9),
    "headers from the 9th record on": _records([b"x"] * 12, headers=[None] * 8 + [[("h", b"1")], [], None,
                                                                                   [("\u00e9", None)]]),
    "negative and far timestamps": _records([b"a", b"b", b"c"], timestamps=[-5, 2**40, 0]),
    "2500 records (past the encoder's first 1024 slots)": _records(
        [None if i % 101 == 0 else b"%d" % i * (i % 7) for i in range(2500)],
        [None if i % 2 else b"k%d" % i for i in range(2500)], [TS + (i * 31) % 977 for i in range(2500)],
        [[("i", b"%d" % i)] if i % 600 == 599 else None for i in range(2500)]),
    "100 kB values": _records([bytes(range(256)) * 400, b"\x00" * 100_000], [b"a", b"b"]),
}


def test_python_reads_java_batches_as_written(jvm):
    assert_python_reads_java_batches(jvm, _as_sent(list(ENCODE_CASES.values()), seed=1))


def test_a_batch_is_never_longer_than_the_size_the_sender_bounds_it_by(jvm):
    """Finding 4 of issue 32: size() left headers and the batch's own overhead out, so RecordSender
    closed a batch too late and the topic refused it (RecordTooLargeError) after the task's
    earlier batches had landed. size() must bound the uncompressed batch, and lz4 adds at most
    BatchEncoder.lz4Growth to it."""
    rng = random.Random(7)
    header_heavy = [_records([b"v"] * n, headers=[[("\u00e9\u4e2d" * rng.randrange(1, 60), rng.randbytes(rng.randrange(300)))
                                                   for _ in range(rng.randrange(1, 9))] for _ in range(n)])
                    for n in (1, 3, 40, 700)]
    random_records = [_records([rng.randbytes(rng.randrange(200)) if rng.random() > 0.1 else None for _ in range(n)],
                               [rng.randbytes(rng.randrange(30)) if rng.random() > 0.5 else None for _ in range(n)])
                      for n in (1, 9, 1025, 3000)]
    cases = _as_sent(list(ENCODE_CASES.values()) + header_heavy + random_records, 3)
    for (records, _, _), (lz4_batch, plain, size) in zip(cases, jvm.encode(cases)):
        assert len(plain) <= size, f"{len(records)} records: an uncompressed batch of {len(plain)} bytes, bounded by {size}"
        assert len(lz4_batch) <= size + size // 255 + 20


def test_a_restamped_batch_carries_its_new_producer_epoch_and_sequence_with_a_valid_crc(jvm):
    """Finding 6 of issue 32: the sink resent a batch into a sequence gap that could not close (a
    leader elected without batches acks=1 acknowledged) until delivery_timeout_ms. It now starts
    the partition over under a new producer epoch, rewriting each unacknowledged batch's epoch
    and base sequence in place: the broker must take the result as such a batch."""
    cases = _as_sent(list(ENCODE_CASES.values()), seed=4)
    for (records, producer_id, _), batches in zip(cases, jvm.encode(cases, restamp=(3, 17))):
        for data in batches[:2]:
            batch = rb.RecordBatch(data)
            batch.validate(check_payload=True)  # the CRC covers the rewritten fields
            assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (producer_id, 3, 17)
            assert batch.columns().values.to_pylist() == [r["value"] for r in records]


def test_java_reads_back_what_java_wrote_as_python_does(jvm):
    """The connector's writes read back through the connector: the same records Python reads."""
    encoded = jvm.encode(_as_sent(list(ENCODE_CASES.values()), seed=2))
    buf, spans = log_of([data for lz4_batch, plain, _ in encoded for data in (lz4_batch, plain)], first_offset=7)
    assert_java_reads_as_python(jvm, buf, spans)


# --- both ways, generated ------------------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=40))
_header_pairs = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))),
                                              max_size=3))
_record = st.fixed_dictionaries({"key": _bytes, "value": _bytes, "timestamp": st.integers(TS - 10**6, TS + 10**6),
                                 "headers": _header_pairs})
_batch = st.tuples(st.lists(_record, min_size=1, max_size=40), st.sampled_from(CODECS),
                   st.booleans())  # the last: stamp LogAppendTime


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches=st.lists(_batch, min_size=1, max_size=12), data=st.data())
def test_generated_records_agree_both_ways(jvm, batches, data):
    """Each example is many batches, so two JVM runs (one per direction) cover them all."""
    built = []
    for records, compression, log_append in batches:
        b = rb.build([r["value"] for r in records], keys=[r["key"] for r in records],
                     timestamps_ms=[r["timestamp"] for r in records], headers=[r["headers"] for r in records],
                     compression=compression)
        built.append(_log_append_time(b, TS + 1) if log_append else b)
    buf, spans = log_of(built, first_offset=data.draw(st.integers(0, 2**40)))
    first, last = spans[0][0], spans[-1][1]
    start = data.draw(st.integers(first, last - 1))
    extra = [(start, data.draw(st.integers(start + 1, last + 2)))]
    cases = [(buf, a, b) for a, b in windows(spans) + extra]
    for (_, a, b), got in zip(cases, jvm.decode(cases)):
        assert got == {"records": python_rows(buf, a, b), "error": None}, f"window [{a}, {b})"
    assert_python_reads_java_batches(jvm, _as_sent([records for records, _, _ in batches],
                                                   seed=data.draw(st.integers(0, 2**32))))


# --- Murmur2 -------------------------------------------------------------------------------------


def test_java_murmur2_is_pythons_and_kafkas(jvm):
    rng = random.Random(2100990462)
    keys = list(KAFKA_UTILS_TEST_VECTORS) + [b"", b"\x80", b"\xff\xff", b"\xff\xfe\xfd", b"\x80\x81\x82\x83"]
    keys += [bytes(rng.randrange(256) for _ in range(n)) for n in range(70) for _ in range(5)]
    got = jvm.murmur2(keys)
    assert got == [murmur2(k) for k in keys]
    assert got[:len(KAFKA_UTILS_TEST_VECTORS)] == list(KAFKA_UTILS_TEST_VECTORS.values())


@settings(max_examples=2, deadline=None)
@given(keys=st.lists(st.binary(max_size=64), min_size=1, max_size=300))
def test_generated_keys_hash_alike(jvm, keys):
    assert jvm.murmur2(keys) == [murmur2(k) for k in keys]


# --- reading a leader's files on its node (LocalSegments, the twin of local_reader.py) ---------------


def test_java_reads_a_leaders_files_exactly_as_the_fetch_path(jvm, tmp_path, seed):
    from raylog.config import TopicConfig
    from raylog.storage.local_reader import LocalReader
    from raylog.storage.log import PartitionLog
    from raylog.storage.read_view import ReadViewWriter

    rng = random.Random(seed)
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=4000, index_interval_bytes=300))
    writer = ReadViewWriter(tmp_path)
    for _ in range(60):
        n = rng.randint(1, 20)
        log.append(rb.build([rng.randbytes(rng.randint(0, 80)) for _ in range(n)], timestamps_ms=[1] * n,
                            compression=rng.choice(["lz4", "none", "zstd"])))
    log.delete_records(rng.randrange(1, 40))
    hw = log.log_end_offset - rng.randrange(1, 15)
    writer.lease(time.monotonic_ns() + 3600 * 10**9)
    writer.publish(hw, 5, 1, **log.reader_state())
    start, end = log.log_start_offset, log.log_end_offset
    asks = [(rng.randrange(start, end + 1), rng.choice([1, 500, 1 << 20]), 5) for _ in range(40)]
    asks += [(rng.randrange(max(start, hw - 40), end + 1), rng.choice([1, 1 << 20]), 5) for _ in range(20)]
    asks += [(start - 1, 1000, 5), (start, 1000, 6)]
    args = [str(x) for ask in asks for x in ask]
    lines = jvm.run("local", str(tmp_path), *args)
    python = LocalReader(tmp_path)
    for (offset, max_bytes, epoch), line in zip(asks, lines, strict=True):
        expected, java = python.read(offset, max_bytes, epoch), json.loads(line)
        if expected is None:
            assert java["data"] is None, (offset, epoch)
            continue
        assert bytes.fromhex(java["data"]) == expected[0] == bytes(log.read(offset, max_bytes, hw)), offset
        assert java["hw"] == hw
    log.close()


def test_java_never_steps_over_a_batch_header_that_is_not_one_to_the_next_segment(jvm, tmp_path):
    """Finding 6 of issue 31, in the connector's reader: bit rot in a length field of the first
    segment must stop the read there (the task then fetches from the leader, which refuses it
    visibly), never return the second segment's batches for an offset of the first."""
    from raylog.config import TopicConfig
    from raylog.storage.log import PartitionLog
    from raylog.storage.read_view import ReadViewWriter

    size = len(rb.build([b"r00"], timestamps_ms=[1]))
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=37 * size))
    for i in range(74):
        log.append(rb.build([b"r%02d" % i], timestamps_ms=[1]))
    assert [seg.base_offset for seg in log.segments][:2] == [0, 37]
    writer = ReadViewWriter(tmp_path)
    writer.lease(time.monotonic_ns() + 3600 * 10**9)
    writer.publish(log.log_end_offset, 5, 1, **log.reader_state())
    intact = [json.loads(line)["data"] for line in jvm.run("local", str(tmp_path), "10", "100000", "5")]
    assert intact[0] is not None
    position = next(b.position for b in rb.iter_batches(bytes(log.read(0, 1 << 20, 37))) if b.base_offset == 10)
    with open(tmp_path / "00000000000000000000.log", "r+b") as f:
        f.seek(position + 8)
        f.write((2**31 - 1).to_bytes(4, "big"))
    lines = jvm.run("local", str(tmp_path), "10", "100000", "5", "37", "100000", "5")
    assert [json.loads(line)["data"] is None for line in lines] == [True, False]
    log.close()
