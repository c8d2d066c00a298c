"""The read planner: Spark-Kafka options into offset ranges, as Spark's Kafka source plans them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raylog.errors import InvalidConfigError, OffsetOutOfRangeError
from raylog.ranges import LogNow, OffsetRange, Position, parse_options, place, plan, readable, split
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
    with pytest.raises(OffsetOutOfRangeError, match=r"t-1: records 3..9 are gone \(offset 3 is below the log start offset 10") as err:
        ranges(starting_offsets='{"t": {"0": -2, "1": 3, "2": -2}}')
    assert (err.value.log_start_offset, err.value.log_end_offset) == (10, 50)
    got, warnings = ranges(starting_offsets='{"t": {"0": -2, "1": 3, "2": -2}}', fail_on_data_loss="false")
    assert OffsetRange("t", 1, 10, 50) in got
    assert warnings == ["t-1: records 3..9 are gone (offset 3 is below the log start offset 10: retention or "
                        "delete_records removed them); reading from 10"]


def test_an_end_past_the_latest_offset_is_refused():
    with pytest.raises(OffsetOutOfRangeError, match="t-0: offset 500 is past the log's end 100"):
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


# --- the data-loss decision (issue 32, findings 1-3): one function for plans, triggers and readers ---


def test_a_position_inside_the_log_is_kept_and_nothing_is_lost():
    log = LogNow(10, 50, "id-a", {3: 50})
    assert place(T0, Position(20, 3, "id-a"), log) == (20, None)
    assert readable(T0, Position(20, 3, "id-a"), None, log, True) == (20, 50, [])


def test_a_start_past_the_end_resumes_at_the_end_or_fails_with_fail_on_data_loss():
    """Finding 1: startingOffsets {"t": {"0": 15}} over a log of 10 records."""
    log = LogNow(0, 10)
    begin, until, lost = readable(T0, Position(15), None, log, False)
    assert (begin, until) == (10, 10)
    assert lost == ["t-0: offset 15 is past the log's end 10 (truncated, re-created or given past the end): "
                    "records 10..14 are not in the log; reading from 10"]
    with pytest.raises(OffsetOutOfRangeError, match="offset 15 is past the log's end 10.*failOnDataLoss=false"):
        readable(T0, Position(15), None, log, True)


def test_a_log_that_diverged_below_the_position_resumes_where_it_diverged():
    """An unclean election: the stream read to 40 at epoch 2; the new leader's epoch 2 ended at 30 and
    its own records since fill the log to 60. Records 30..39 that were read are gone; 30.. are new."""
    log = LogNow(0, 60, "id", {2: 30})
    begin, until, lost = readable(T0, Position(40, 2, "id"), None, log, False)
    assert (begin, until) == (30, 60)
    assert lost == ["t-0: the log diverged at offset 30 (an unclean leader election replaced records 30..39 that "
                    "were read); reading on from 30"]
    assert place(T0, Position(30, 2, "id"), log) == (30, None), "nothing read past the divergence: nothing lost"
    assert place(T0, Position(40, 5, "id"), log) == (40, None), "an epoch not asked about is not judged"


def test_a_recorded_batch_over_a_diverged_log_reads_only_what_is_still_the_same():
    """A batch [20, 40) planned before the election is re-planned after it: it reads [20, 30) and
    the next one starts at 30 (its start, 40 at epoch 2, is placed at 30 too): nothing twice."""
    log = LogNow(0, 60, "id", {2: 30})
    begin, until, lost = readable(T0, Position(20, 2, "id"), Position(40, 2, "id"), log, False)
    assert (begin, until) == (20, 30) and "diverged at offset 30" in lost[0]
    assert readable(T0, Position(40, 2, "id"), Position(60, 7, "id"), log, False)[:2] == (30, 60)


def test_a_re_created_topic_is_read_from_its_new_start_and_the_old_rest_is_reported():
    """Finding 3: the offset carries the topic id; a topic deleted, re-created and refilled past the
    stream's offset is no longer read from that offset on."""
    log = LogNow(0, 80, "id-new")
    begin, until, lost = readable(T0, Position(50, 1, "id-old"), None, log, False)
    assert (begin, until) == (0, 80)
    assert "was deleted and created again (id id-old is now id-new)" in lost[0]
    assert readable(T0, Position(20, 1, "id-old"), Position(50, 1, "id-old"), log, False)[:2] == (0, 0), \
        "a batch planned on the old topic reads nothing of the new one"
    with pytest.raises(OffsetOutOfRangeError, match="deleted and created again"):
        readable(T0, Position(50, 1, "id-old"), None, log, True)


def test_a_partition_that_appeared_is_read_from_its_start_and_a_missing_head_is_reported():
    assert readable(T0, None, None, LogNow(0, 5), True) == (0, 5, [])
    begin, until, lost = readable(T0, None, None, LogNow(3, 5), False)
    assert (begin, until) == (3, 5) and lost == ["t-0 appeared with its log starting at 3, not 0: records 0..2 "
                                                 "were never read"]


def test_a_batch_end_past_a_truncated_log_reads_to_the_log_end_and_reports_the_rest():
    """Finding 2's decision: a range [10, 40) over a log now ending at 25 (no epochs known)."""
    begin, until, lost = readable(T0, Position(10), Position(40), LogNow(0, 25), False)
    assert (begin, until) == (10, 25)
    assert lost == ["t-0: offset 40 is past the log's end 25 (truncated, re-created or given past the end): "
                    "records 25..39 are not in the log; reading from 25"]


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 100), st.integers(0, 100), st.booleans())
def test_what_is_read_always_lies_inside_the_log(log_start, length, start, end, known_end):
    log = LogNow(log_start, log_start + length)
    begin, until, lost = readable(T0, Position(start), Position(end) if known_end else None, log, False)
    assert log.log_start <= begin <= until <= log.end
    if start < log.log_start or start > log.end:
        assert lost, "a start outside the log is reported"
    if not lost and known_end and start <= end:
        assert (begin, until) == (start, end)


def test_a_position_whose_epoch_the_leader_still_holds_is_kept_while_the_high_watermark_catches_up():
    """After a clean election the new leader's high watermark can be below what the old one
    acknowledged for a moment: the position's epoch shows nothing was lost, so the read waits."""
    log = LogNow(0, 35, "id", {4: 42}, 5)
    assert place(T0, Position(40, 4, "id"), log) == (40, None)
    assert readable(T0, Position(30, 4, "id"), Position(40, 4, "id"), log, True) == (30, 40, [])
    assert readable(T0, Position(40, 4, "id"), None, log, True)[:2] == (40, 40), "nothing to read yet"


def test_stream_admission_options_are_checked_here_once_for_spark_and_python():
    """Issue 32's cleanup: the connector checked maxOffsetsPerTrigger, minOffsetsPerTrigger and
    maxTriggerDelay itself as well; parse_options is now the one check, and through Spark its
    errors name the options as Spark's users type them."""
    spec = parse_options({"subscribe": "t", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "3s",
                          "maxOffsetsPerTrigger": 7}, batch=False)
    assert (spec.min_offsets_per_trigger, spec.max_trigger_delay_ms, spec.max_offsets_per_trigger) == (100, 3000, 7)
    assert parse_options({"subscribe": "t"}).max_trigger_delay_ms == 15 * 60 * 1000
    assert [parse_options({"subscribe": "t", "max_trigger_delay": d}).max_trigger_delay_ms
            for d in ("500ms", "2m", "1h", "250", "2 min")] == [500, 120_000, 3_600_000, 250, 120_000]
    with pytest.raises(InvalidConfigError, match="^maxTriggerDelay must be a duration like '15m'"):
        parse_options({"subscribe": "t", "maxTriggerDelay": "soon"}, spark_names=True)
    with pytest.raises(InvalidConfigError, match="^minOffsetsPerTrigger must be a positive integer"):
        parse_options({"subscribe": "t", "min_offsets_per_trigger": 0}, spark_names=True)
    with pytest.raises(InvalidConfigError, match="^min_offsets_per_trigger must be a positive integer"):
        parse_options({"subscribe": "t", "min_offsets_per_trigger": 0})
