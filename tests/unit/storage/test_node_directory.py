"""A node's data directory: partition paths stay inside it, and removal spares other topics' files."""

from __future__ import annotations

import pytest

from raylog.errors import InvalidRequestError
from raylog.storage import files
from raylog.storage.node_directory import NodeDirectory


@pytest.mark.parametrize("name", ["", "/etc", "..", "../x", "abc/../../x", "abc/../..", "."])
def test_a_partition_directory_outside_the_data_directory_is_refused(tmp_path, name):
    node = NodeDirectory(tmp_path / "node")
    with pytest.raises(InvalidRequestError):
        node.resolve(name)


def test_partition_directories_resolve_under_the_data_directory(tmp_path):
    node = NodeDirectory(tmp_path / "node")
    assert node.resolve("0123abcd/t-0") == (tmp_path / "node" / "0123abcd" / "t-0").resolve()


def make_partition(node: NodeDirectory, relative: str, topic_id: str):
    path = node.path / relative
    path.mkdir(parents=True)
    files.write_text_value(path / files.PARTITION_METADATA_FILE, "raylog-partition 1", topic_id)
    (path / "00000000000000000000.log").write_bytes(b"x")
    return path


def test_removing_a_partition_spares_one_that_belongs_to_another_incarnation_of_its_topic(tmp_path):
    node = NodeDirectory(tmp_path)
    path = make_partition(node, "aaaa0000/t-0", "new-topic-id")
    assert not node.remove_partition("aaaa0000/t-0", "old-topic-id")
    assert path.exists()


def test_removing_the_last_partition_of_a_topic_removes_the_topics_directory(tmp_path):
    node = NodeDirectory(tmp_path)
    first = make_partition(node, "aaaa0000/t-0", "tid")
    make_partition(node, "aaaa0000/t-1", "tid")
    assert node.remove_partition("aaaa0000/t-0", "tid")
    assert not first.exists() and first.parent.exists()
    assert node.remove_partition("aaaa0000/t-1", "tid")
    assert not first.parent.exists()
