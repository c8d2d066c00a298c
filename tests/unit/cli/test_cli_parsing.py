"""The pure parts of the `raylog` command: offsets, formats, input lines, durations, top's frame."""

from __future__ import annotations

import argparse
import datetime
import json

import pytest

from raylog.cli import build_parser
from raylog.cli.admin_commands import parse_datetime_ms, parse_duration_ms
from raylog.cli.consume import StartOffset, parse_offset
from raylog.cli.output import compile_format, console_line, json_record
from raylog.cli.produce import LineParser, producer_settings
from raylog.cli.top import Sample, produce_rates, render
from raylog.errors import InvalidConfigError
from raylog.records import ConsumerRecord

RECORD = ConsumerRecord(topic="events", partition=2, leader_epoch=0, offset=41, timestamp=1_700_000_000_123,
                        timestamp_type=0, key=b"k1", value=b"v\xff1", headers=[("src", b"seq"), ("n", b"2")],
                        checksum=None, serialized_key_size=2, serialized_value_size=3, serialized_header_size=8)


def test_offset_forms_are_kcats():
    assert parse_offset("earliest") == StartOffset("earliest") == parse_offset("beginning")
    assert parse_offset("end") == StartOffset("latest")
    assert parse_offset("17") == StartOffset("absolute", 17)
    assert parse_offset("-5") == StartOffset("from_end", 5)
    assert parse_offset("@1700000000000") == StartOffset("timestamp", 1_700_000_000_000)
    assert parse_offset(None) is None
    with pytest.raises(InvalidConfigError):
        parse_offset("yesterday")


def test_a_negative_offset_is_taken_as_the_offsets_value_not_an_option():
    args = build_parser().parse_args(["consume", "events", "-o", "-5"])
    assert args.offset == "-5" and args.topics == ["events"]


def test_format_string_fields_and_escapes():
    fmt = compile_format(r"%t|%p|%o|%k|%K|%s|%S|%T|%h|100%%\n")
    assert fmt(RECORD) == "events|2|41|k1|2|v\ufffd1|3|1700000000123|src=seq,n=2|100%\n"
    assert compile_format(r"%k\t%s")(RECORD._replace(key=None, value=None)) == "\t"
    with pytest.raises(InvalidConfigError):
        compile_format("%q")


def test_json_record_is_kcats_shape():
    obj = json.loads(json_record(RECORD))
    assert obj == {"topic": "events", "partition": 2, "offset": 41, "tstype": "create", "ts": 1_700_000_000_123,
                   "headers": ["src", "seq", "n", "2"], "key": "k1", "payload": "v\ufffd1"}
    assert json.loads(json_record(RECORD._replace(value=None, key=None)))["payload"] is None


def test_console_line_prints_null_for_a_tombstone_as_kafka_console_consumer():
    line = console_line(print_key=True, print_offset=True, print_timestamp=False, key_separator="\t")
    assert line(RECORD._replace(value=None)) == "2:41\tk1\tnull\n"


def _produce_args(*argv):
    return build_parser().parse_args(["produce", "t", *argv])


def test_lines_split_into_key_value_and_headers():
    parser = LineParser(_produce_args("-K", ":", "-H", "a=1", "-H", "b=x=y", "--null-value", "NULL"))
    assert parser.parse("k:v:w") == (b"k", b"v:w", [("a", b"1"), ("b", b"x=y")])
    assert parser.parse("no separator") == (None, b"no separator", [("a", b"1"), ("b", b"x=y")])
    assert parser.parse("k:NULL") == (b"k", None, [("a", b"1"), ("b", b"x=y")])


def test_kafka_console_producer_properties_parse_keys_and_headers():
    parser = LineParser(_produce_args("--property", "parse.key=true", "--property", "key.separator=|",
                                      "--property", "parse.headers=true"))
    assert parser.parse("h1:v1,h2:v2\tkey|value") == (b"key", b"value", [("h1", b"v1"), ("h2", b"v2")])
    with pytest.raises(InvalidConfigError):
        LineParser(_produce_args("--property", "parse.keys=true"))


def test_producer_settings_take_kafka_python_and_dotted_names_typed():
    assert producer_settings(["linger.ms=50", "acks=1,compression_type=none", "enable_idempotence=false"]) == {
        "linger_ms": 50, "acks": 1, "compression_type": "none", "enable_idempotence": False}
    with pytest.raises(InvalidConfigError):
        producer_settings(["linger_ms"])


def test_iso_durations_as_java_reads_them():
    assert parse_duration_ms("PT15M") == 15 * 60_000
    assert parse_duration_ms("P1DT2H30M") == (26 * 60 + 30) * 60_000
    assert parse_duration_ms("PT0.5S") == 500
    for bad in ("15m", "P", "PT", "P1DT"):
        with pytest.raises(InvalidConfigError):
            parse_duration_ms(bad)


def test_datetimes_with_zone_and_in_local_time():
    assert parse_datetime_ms("2026-11-23T10:00:00.000Z") == 1_795_428_000_000
    assert parse_datetime_ms("2026-11-23T11:00:00.000+01:00") == 1_795_428_000_000
    local = datetime.datetime(2026, 11, 23, 10, 0).astimezone()
    assert parse_datetime_ms("2026-11-23T10:00:00.000") == int(local.timestamp() * 1000)
    with pytest.raises(InvalidConfigError):
        parse_datetime_ms("23/11/2026")


def _partition(p, leo, urp=False):
    return {"partition": p, "leader": 0, "leader_epoch": 1, "isr": [0] if urp else [0, 1], "offline": False,
            "under_replicated": urp, "log_end_offset": leo, "high_watermark": leo,
            "replicas": [{"replica_id": 0, "node_id": 1, "alive": True},
                         {"replica_id": 1, "node_id": 2, "alive": not urp}]}


def test_top_rates_come_from_log_end_offset_growth():
    before = Sample(10.0, 0.0, {"t": [_partition(0, 100), _partition(1, 50)]})
    after = Sample(12.0, 2.0, {"t": [_partition(0, 300), _partition(1, 40)], "new": [_partition(0, 5)]})
    assert produce_rates(before, after) == {("t", 0): 100.0}
    assert produce_rates(None, after) == {}


def test_top_frame_shows_partitions_flags_and_group_lag():
    sample = Sample(1.0, 0.0, {"t": [_partition(0, 300), _partition(1, 40, urp=True)]},
                    [{"group_id": "g", "state": "Stable", "member_count": 1, "total_lag": 7,
                      "partitions": [{"topic": "t", "partition": 0, "committed": 293, "end_offset": 300, "lag": 7}]}])
    lines = render(sample, {("t", 0): 150.0}, 1.0)
    assert "under-replicated 1" in lines[0] and "produce 150 rec/s" in lines[0]
    row1 = next(line for line in lines if line.startswith("t ") and " URP " in line)
    assert "0,1!" in row1 and row1.split()[1] == "1"
    assert any(line.split() == ["g", "Stable", "1", "t", "0", "293", "300", "7"] for line in lines)


def test_every_subcommand_that_describes_takes_json():
    parser = build_parser()
    for argv in (["topics", "list"], ["topics", "describe"], ["groups", "list"], ["groups", "describe", "g"],
                 ["groups", "lag", "g"], ["configs", "describe", "--topic", "t"],
                 ["groups", "reset", "g", "--topic", "t", "--to-latest"], ["partitions", "elect-leaders"],
                 ["nodes", "list"], ["nodes", "drain", "2"]):
        assert isinstance(parser.parse_args([*argv, "--json"]), argparse.Namespace)


def test_top_frame_shows_each_node_alive_registered_or_missing():
    node = {"host": "127.0.0.1", "data_dir": "/d", "draining": False, "lost": False, "replicas": 2, "leaders": 1,
            "missing_ms": 0}
    cluster = {"nodes": [{**node, "node_id": 0, "state": "alive"},
                         {**node, "node_id": 1, "state": "registered", "draining": True},
                         {**node, "node_id": 2, "state": "missing", "lost": True, "missing_ms": 84_000}]}
    lines = render(Sample(1.0, 0.0, {"t": [_partition(0, 3)]}, cluster=cluster), {}, 1.0)
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in ("0", "1", "2")}
    assert "alive" in rows["0"] and "registered, draining" in rows["1"]
    assert "missing (lost)" in rows["2"] and "84 s" in rows["2"]
