"""The read planner: Spark-Kafka options into offset ranges, as Spark's Kafka source plans them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylog.errors import InvalidConfigError, OffsetOutOfRangeError
from raylog.ranges import OffsetRange, parse_options, plan, split
from raylog.records import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
EARLIEST = {T0: 0, T1: 10, T2: 0}
LATEST = {T0: 100, T1: 50, T2: 0}


def ranges(**options):
    spec = parse_options({"subscribe": "t", **options})
    return plan(spec, [T0, T1, T2], EARLIEST, LATEST)


def test_default_batch_read_is_earliest_to_latest_and_skips_empty_partitions():
    got, warnings = ranges()
    assert got == [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 10, 50)]
    assert warnings == []


def test_json_offsets_with_earliest_and_latest_markers_and_left_out_ending_partitions():
    got, _ = ranges(starting_offsets='{"t": {"0": 20, "1": -2, "2": -2}}', ending_offsets='{"t": {"0": 30, "2": -1}}')
    assert got == [OffsetRange("t", 0, 20, 30), OffsetRange("t", 1, 10, 50)]


def test_starting_json_that_leaves_a_partition_out_is_refused_naming_it():
    """Finding 10 of issue 32: Spark's Kafka source refuses it; raylog started those partitions at
    the earliest offset without a word."""
    with pytest.raises(InvalidConfigError, match="must name every partition .* leaves out t-2$"):
        ranges(starting_offsets='{"t": {"0": 20, "1": -2}}')
    with pytest.raises(InvalidConfigError, match="leaves out t-0, t-1, t-2"):
        ranges(starting_offsets='{"other": {"0": 1}}')
    got, _ = plan(parse_options({"subscribe": "t", "starting_offsets": '{"t": {"0": 20}}',
                                 "starting_offsets_by_timestamp": '{"t": {"1": 5, "2": 5}}',
                                 "starting_offsets_by_timestamp_strategy": "latest"}),
                  [T0, T1, T2], EARLIEST, LATEST, {T1: (12, None), T2: (None, None)})
    assert got == [OffsetRange("t", 0, 20, 100), OffsetRange("t", 1, 12, 50)], "timestamps cover the others"


def test_camel_case_names_are_spark_s_own():
    got, _ = plan(parse_options({"subscribe": "t", "startingOffsets": {"t": {"0": 40}}, "endingOffsets": "latest"}),
                  [T0], EARLIEST, LATEST)
    assert got == [OffsetRange("t", 0, 40, 100)]


@pytest.mark.parametrize("options, message", [
    ({"starting_offsets": "latest"}, "not allowed for a batch read"),
    ({"starting_offsets": '{"t": {"0": -1}}'}, "-1 (latest) is not allowed"),
    ({"ending_offsets": "earliest"}, "ending_offsets 'earliest' is not allowed"),
    ({"ending_offsets": '{"t": {"0": -2}}'}, "-2 (earliest) is not allowed"),
    ({"starting_offsets": "{nope"}, "starting_offsets must be JSON"),
    ({"starting_offsets": '{"t": {"x": 1}}'}, "partition 'x' of 't' is not a number"),
    ({"min_partitions": 0}, "min_partitions must be a positive integer"),
    ({"fail_on_data_loss": "maybe"}, "fail_on_data_loss must be true or false"),
    ({"starting_offsets_by_timestamp_strategy": "first"}, "must be 'error' or 'latest'"),
    ({"no_such_option": 1}, "unknown read options: no_such_option"),
    ({"starting_timestamp": "yesterday"}, "starting_timestamp must be a timestamp in ms"),
])
def test_refused_options_name_what_is_wrong(options, message):
    with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_options({"subscribe": "t", **options})


def test_exactly_one_way_to_choose_topics():
    with pytest.raises(InvalidConfigError, match="exactly one of assign, subscribe or subscribe_pattern"):
        parse_options({})
    with pytest.raises(InvalidConfigError, match=r"\(got assign, subscribe\)"):
        parse_options({"subscribe": "t", "assign": '{"t": [0]}'})
    with pytest.raises(InvalidConfigError, match="assign must be JSON like"):
        parse_options({"assign": '["t"]'})


def test_topic_selection_by_assign_subscribe_and_full_pattern_match():
    existing = ["events", "events-dlq", "other"]
    assert parse_options({"assign": '{"events": [2, 0, 2]}'}).assign == {"events": [0, 2]}
    assert parse_options({"subscribe": "a, b"}).select_topics(existing) == ["a", "b"]
    assert parse_options({"subscribe_pattern": "events"}).select_topics(existing) == ["events"]
    assert parse_options({"subscribe_pattern": "ev.*"}).select_topics(existing) == ["events", "events-dlq"]


def test_timestamps_take_precedence_over_offsets():
    spec = parse_options({"subscribe": "t", "starting_offsets": '{"t": {"0": 1}}', "starting_timestamp": 500,
                          "ending_offsets_by_timestamp": '{"t": {"0": 900}}'})
    assert spec.timestamps_needed([T0, T1]) == {T0: (500, 900), T1: (500, None)}
    got, _ = plan(spec, [T0, T1], EARLIEST, LATEST, {T0: (40, 60), T1: (20, None)})
    assert got == [OffsetRange("t", 0, 40, 60), OffsetRange("t", 1, 20, 50)]


def test_a_starting_timestamp_past_every_record_errors_or_starts_at_the_end():
    spec = parse_options({"subscribe": "t", "starting_timestamp": 10**13})
    with pytest.raises(OffsetOutOfRangeError, match="t-0 has no record at or after starting timestamp"):
        plan(spec, [T0], EARLIEST, LATEST, {T0: (None, None)})
    spec = parse_options({"subscribe": "t", "starting_timestamp": 10**13,
                          "starting_offsets_by_timestamp_strategy": "latest"})
    assert plan(spec, [T0], EARLIEST, LATEST, {T0: (None, None)}) == ([], [])


def test_a_start_below_the_log_start_fails_naming_partition_and_both_offsets():
    with pytest.raises(OffsetOutOfRangeError, match="t-1: starting offset 3 is below the log start offset 10") as err:
        ranges(starting_offsets='{"t": {"0": -2, "1": 3, "2": -2}}')
    assert (err.value.log_start_offset, err.value.log_end_offset) == (10, 50)
    got, warnings = ranges(starting_offsets='{"t": {"0": -2, "1": 3, "2": -2}}', fail_on_data_loss="false")
    assert OffsetRange("t", 1, 10, 50) in got
    assert warnings == ["t-1: records 3..9 are gone (below the log start offset 10); reading from 10 "
                        "(fail_on_data_loss=False)"]


def test_an_end_past_the_latest_offset_is_refused():
    with pytest.raises(OffsetOutOfRangeError, match="ending offset 500 is past the latest committed offset 100"):
        ranges(ending_offsets='{"t": {"0": 500}}')
    with pytest.raises(InvalidConfigError, match="starting offset 60 is after ending offset 40"):
        ranges(starting_offsets='{"t": {"0": 60, "1": -2, "2": -2}}', ending_offsets='{"t": {"0": 40}}')


def test_min_partitions_splits_large_ranges_in_proportion():
    got, _ = ranges(min_partitions=7)
    assert len(got) >= 7
    assert sum(r.size for r in got) == 140
    by_partition = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r)
    for p, pieces in by_partition.items():
        assert all(a.until_offset == b.from_offset for a, b in zip(pieces, pieces[1:]))
    assert len(by_partition[0]) > len(by_partition[1])


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=8), st.integers(1, 50))
def test_split_covers_every_offset_exactly_once(sizes, wanted):
    rs = [OffsetRange("t", p, 7, 7 + n) for p, n in enumerate(sizes) if n]
    out = split(rs, wanted)
    assert sum(r.size for r in out) == sum(r.size for r in rs)
    assert all(r.size > 0 for r in out)
    if rs:
        assert len(out) >= min(wanted, sum(r.size for r in rs))
    for r in rs:
        pieces = [o for o in out if o.partition == r.partition]
        assert pieces[0].from_offset == r.from_offset and pieces[-1].until_offset == r.until_offset
