"""The Python halves of the Spark connector that need no Spark: option names as Spark hands them
to a source, the JVM's raylog errors raised as raylog's types, and reading Spark's offset log."""

from __future__ import annotations

import json

import pytest

from raylog.errors import InvalidConfigError, OffsetOutOfRangeError, RaylogError, UnknownTopicOrPartitionError
from raylog.ranges import parse_options
from raylog.records import TopicPartition
from spark_bridge.jvm_errors import raylog_error, raylog_errors
from spark_bridge.planner import canonical_options
from raylog.ranges import Position
from spark_bridge.planner import positions, positions_json
from spark_bridge.stream import batch_end_offsets


@pytest.mark.parametrize("given", ["startingoffsets", "startingOffsets", "starting_offsets", "STARTINGOFFSETS"])
def test_every_spelling_spark_or_python_uses_reaches_the_same_option(given):
    assert canonical_options({given: "earliest"}) == {"starting_offsets": "earliest"}


def test_lower_cased_names_from_spark_parse_as_the_kafka_source_options():
    spec = parse_options(canonical_options({
        "subscribepattern": "t-.*", "startingoffsetsbytimestampstrategy": "latest", "minpartitions": "4",
        "failondataloss": "false", "includeheaders": "true"}))
    assert (spec.subscribe_pattern, spec.starting_strategy, spec.min_partitions, spec.fail_on_data_loss,
            spec.include_headers) == ("t-.*", "latest", 4, False, True)


def test_a_misspelt_option_is_still_refused_by_name():
    with pytest.raises(InvalidConfigError, match="unknown read options: startingoffset"):
        parse_options(canonical_options({"subscribe": "t", "startingoffset": "earliest"}))


def test_an_unknown_option_through_spark_lists_the_known_ones_as_spark_users_type_them():
    """Finding 10 of issue 32: a Spark user who typed startingOffset was shown starting_offsets."""
    with pytest.raises(InvalidConfigError) as caught:
        parse_options(canonical_options({"subscribe": "t", "startingOffset": "earliest"}), spark_names=True)
    message = str(caught.value)
    assert "unknown read options: startingOffset (known: " in message
    assert "startingOffsets" in message and "failOnDataLoss" in message and "maxOffsetsPerTrigger" in message
    assert "_" not in message.split("known: ")[1]
    with pytest.raises(InvalidConfigError, match="known: .*starting_offsets"):
        parse_options({"subscribe": "t", "no_such": 1})


def test_a_jvm_error_line_becomes_the_raylog_error_it_names():
    text = ("An error occurred while calling o79.count.\n: org.apache.spark.SparkException: Job aborted\n"
            "Caused by: io.raylog.spark.RaylogSparkException: OffsetOutOfRangeError: t-0: offset 3 of the range "
            "[0, 9) is gone (log start 5, end 9); set failOnDataLoss=false to skip\n\tat io.raylog...")
    err = raylog_error(Exception(text))
    assert type(err) is OffsetOutOfRangeError
    assert str(err) == "t-0: offset 3 of the range [0, 9) is gone (log start 5, end 9); set failOnDataLoss=false to skip"
    assert raylog_error(Exception("io.raylog.spark.RaylogSparkException: NoSuchError: odd")).__class__ is RaylogError
    assert raylog_error(Exception("java.lang.NullPointerException")) is None


def test_raylog_errors_reraises_the_raylog_type_and_leaves_others_alone():
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope'") as caught:
        with raylog_errors():
            raise RuntimeError("io.raylog.spark.RaylogSparkException: UnknownTopicOrPartitionError: 'nope' is unknown")
    assert isinstance(caught.value.__cause__, RuntimeError)
    with pytest.raises(ValueError):
        with raylog_errors():
            raise ValueError("not from raylog")


def test_a_batchs_end_offsets_come_from_the_third_line_of_sparks_offset_log(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "7").write_text("v1\n" + json.dumps({"batchWatermarkMs": 0, "conf": {}}) + "\n"
                                            + json.dumps({"a": {"0": 12, "1": 3}, "b": {"0": 0},
                                                          "@raylog": {"ids": {"a": "x"}, "epochs": {"a": {"0": 2}}}}))
    assert batch_end_offsets(str(tmp_path), 7) == {
        TopicPartition("a", 0): 12, TopicPartition("a", 1): 3, TopicPartition("b", 0): 0}


def test_stream_offsets_keep_kafkas_shape_with_raylogs_ids_and_epochs_beside_it():
    """Issue 32, finding 3: the offset JSON carries each topic's id (a re-created topic is found)
    and each partition's epoch (a diverged log is found), under a key no topic can be named."""
    at = {TopicPartition("a", 0): Position(12, 2, "id-a"), TopicPartition("a", 1): Position(3, -1, "id-a"),
          TopicPartition("b", 0): Position(0)}
    as_json = positions_json(at)
    assert as_json == {"a": {"0": 12, "1": 3}, "b": {"0": 0}, "@raylog": {"ids": {"a": "id-a"}, "epochs": {"a": {"0": 2}}}}
    assert positions(json.loads(json.dumps(as_json))) == at
    assert positions({"a": {"0": 5}}) == {TopicPartition("a", 0): Position(5)}, "Kafka's plain JSON reads as before"
