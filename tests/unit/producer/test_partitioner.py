"""Keys land where Kafka would put them: murmur2 against Kafka's own test vectors."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raylog.producer.partitioner import (
    StickyPartitioner, coordinator_partition, java_string_hash, murmur2, murmur2_many, partition_for_key,
    partitions_for_keys,
)

KAFKA_UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,expected", KAFKA_UTILS_TEST_VECTORS.items())
def test_murmur2_matches_kafka_utils_test_vectors(key, expected):
    assert murmur2(key) == expected


def test_partition_for_key_is_positive_murmur2_modulo_partitions():
    for key, h in KAFKA_UTILS_TEST_VECTORS.items():
        assert partition_for_key(key, 7) == (h & 0x7FFFFFFF) % 7


def test_sticky_partitioner_moves_to_another_partition_when_its_batch_closes():
    sticky = StickyPartitioner(seed=1)
    first = sticky.partition("t", 5)
    assert sticky.partition("t", 5) == first
    sticky.on_new_batch("t", 5, first)
    assert sticky.partition("t", 5) != first


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=300), min_size=0, max_size=80))
def test_vectorized_murmur2_equals_the_reference_for_keys_of_any_length(keys):
    assert murmur2_many(keys).tolist() == [murmur2(k) for k in keys]


def test_vectorized_murmur2_matches_kafka_vectors_in_one_call():
    keys = list(KAFKA_UTILS_TEST_VECTORS) * 5
    assert murmur2_many(keys).tolist() == [KAFKA_UTILS_TEST_VECTORS[k] for k in keys]


def test_partitions_for_keys_is_positive_murmur2_modulo_partitions(seed):
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randint(1, 24)) for _ in range(1000)]
    assert partitions_for_keys(keys, 6).tolist() == [partition_for_key(k, 6) for k in keys]


@pytest.mark.parametrize("text,expected", [
    ("", 0), ("a", 97), ("hello", 99162322), ("my-group", -1906497762), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -2147483648), ("\u00e9t\u00e9", 227742), ("\U0001F600", 1772899),
])
def test_java_string_hash_matches_javas(text, expected):
    """Values printed by Java 17's String.hashCode (a surrogate pair and Integer.MIN_VALUE included)."""
    assert java_string_hash(text) == expected


def test_a_group_maps_to_its_offsets_partition_as_kafka_does():
    assert coordinator_partition("polygenelubricants", 8) == 0, "Utils.abs(Integer.MIN_VALUE) is 0"
    assert coordinator_partition("my-group", 50) == 1906497762 % 50
    assert coordinator_partition("a", 8) == 97 % 8
