"""A kafka-python 3.x program runs on raylog with only its imports changed (docs/migrating.md)."""

from __future__ import annotations

import difflib
import importlib
import pathlib

import pytest

pytestmark = [pytest.mark.ray]
PROGRAMS = pathlib.Path(__file__).parent / "programs"


def _changed_lines(a: str, b: str) -> list[str]:
    return [line for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_the_port_differs_from_the_kafka_python_program_only_in_its_imports():
    original = (PROGRAMS / "kafka_python_app.py").read_text()
    ported = (PROGRAMS / "raylog_app.py").read_text()
    changed = _changed_lines(original, ported)
    assert changed, "the two programs are the same file"
    assert all(line[1:].startswith(("from ", "import ")) for line in changed), changed
    assert all("kafka" in line for line in changed if line.startswith("-")), changed


def test_the_ported_program_creates_alters_produces_with_callbacks_and_commits_as_a_group(cluster, caplog):
    app = importlib.import_module("tests.compat.programs.raylog_app")
    with caplog.at_level("WARNING", logger="raylog"):
        result = app.main(topic="compat-orders", group="compat-billing", count=200)

    assert result["retention"] == ("3600000", "7200000")
    assert len(result["partitions"][0].partitions) == 3
    # The producer's network and security settings are named once as ignored, never refused.
    ignored = [r.getMessage() for r in caplog.records if "ignoring kafka-python settings" in r.getMessage()]
    assert any("api_version" in m and "bootstrap_servers" in m and "security_protocol" in m for m in ignored)

    assert result["failed"] == []
    delivered = result["delivered"]
    assert len(delivered) == 200
    assert {d[0] for d in delivered} == {"compat-orders"}
    assert all(key_size == len("customer-0") and value_size > 0 for *_, key_size, value_size in delivered)
    assert result["producer_metrics"]["producer-metrics"]["record-send-total"] == 200

    seen = result["seen"]
    assert sorted(order for _, _, _, order, _ in seen) == list(range(200))
    assert all(headers == [("source", b"compat")] for *_, headers in seen)
    # Same key, same partition: the default partitioner is murmur2 of the serialized key.
    by_key = {}
    for partition, _, key, _, _ in seen:
        by_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    # Each partition's committed offset is one past the last record consumed from it.
    last = {}
    for partition, offset, *_ in seen:
        last[partition] = max(last.get(partition, -1), offset)
    assert result["committed"] == {p: last.get(p, -1) + 1 if p in last else None for p in range(3)}
