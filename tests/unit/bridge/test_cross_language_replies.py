"""The replies a replica sends the Spark connector's JVM: one Python definition (raylog.protocol's
NamedTuples) and one Java definition (RayCalls.java's FIELDS), with the same names in the same
order. Ray's Java API gets them as lists, so a field moved on one side only would be read as
another field on the other: this is where that is caught."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raylog.protocol import ErrorReply, FetchBytesReply, ProduceBytesReply

RAY_CALLS = Path(__file__).resolve().parents[3] / "spark_bridge" / "jvm" / "src" / "io" / "raylog" / "spark" / "RayCalls.java"


def java_fields(class_name: str) -> tuple[str, ...]:
    source = RAY_CALLS.read_text()
    body = source[source.index(f"static final class {class_name} "):]
    declared = re.search(r'static final String\[\] FIELDS = \{([^}]*)\};', body)
    assert declared, f"{class_name} declares no FIELDS"
    return tuple(re.findall(r'"([a-z_]+)"', declared.group(1)))


@pytest.mark.parametrize("java, python", [("FetchReply", FetchBytesReply), ("ProduceReply", ProduceBytesReply),
                                          ("ReplicaError", ErrorReply)])
def test_java_reads_each_reply_field_where_python_puts_it(java, python):
    assert java_fields(java) == python._fields


def test_every_field_java_reads_is_one_it_declares():
    """RayCalls reads a field by name (at(FIELDS, name)): a misspelt name would be position -1."""
    source = RAY_CALLS.read_text()
    for class_name in ("FetchReply", "ProduceReply", "ReplicaError"):
        body = source[source.index(f"static final class {class_name} "):]
        body = body[:body.index("\n  }\n")]
        read = set(re.findall(r'at\(FIELDS, "([a-z_]+)"\)', body))
        assert read and read <= set(java_fields(class_name)), (class_name, read)
