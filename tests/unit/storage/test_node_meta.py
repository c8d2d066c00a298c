"""meta.properties: a node's identity on its disk, written once, read and checked at every open."""

from __future__ import annotations

import pytest

from raylog.errors import InconsistentClusterIdError, LogDirError
from raylog.storage import node_meta
from raylog.storage.node_meta import FORMAT_VERSION, META_FILE, NodeMeta


def test_a_new_directory_has_no_identity_until_one_is_written(tmp_path):
    assert node_meta.read(tmp_path) is None
    node_meta.write(tmp_path, NodeMeta("abc", 3))
    assert node_meta.read(tmp_path) == NodeMeta("abc", 3, FORMAT_VERSION)


def test_the_identity_is_kafkas_properties_text(tmp_path):
    node_meta.write(tmp_path, NodeMeta("Vd2p0yCZRhyYfQLbXw7LfA", 2))
    lines = (tmp_path / META_FILE).read_text().splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == [f"version={FORMAT_VERSION}", "cluster.id=Vd2p0yCZRhyYfQLbXw7LfA", "node.id=2"]


def test_an_identity_once_written_never_changes(tmp_path):
    node_meta.write(tmp_path, NodeMeta("abc", 1))
    node_meta.write(tmp_path, NodeMeta("abc", 1))  # the same again: nothing to do
    with pytest.raises(LogDirError, match="already is node 1 of cluster abc"):
        node_meta.write(tmp_path, NodeMeta("abc", 2))
    assert node_meta.read(tmp_path) == NodeMeta("abc", 1)


def test_a_directory_of_another_cluster_is_refused_naming_both_ids(tmp_path):
    node_meta.write(tmp_path, NodeMeta("theirs", 4))
    meta = node_meta.read(tmp_path)
    meta.check_cluster("theirs", tmp_path)
    with pytest.raises(InconsistentClusterIdError) as refused:
        meta.check_cluster("ours", tmp_path)
    assert "theirs" in str(refused.value) and "ours" in str(refused.value) and str(tmp_path) in str(refused.value)


def test_a_directory_written_by_a_newer_format_is_refused(tmp_path):
    (tmp_path / META_FILE).write_text(f"version={FORMAT_VERSION + 1}\ncluster.id=abc\nnode.id=0\n")
    with pytest.raises(LogDirError, match="newer raylog"):
        node_meta.read(tmp_path)


@pytest.mark.parametrize("text", ["", "version=1\nnode.id=0\n", "version=1\ncluster.id=abc\nnode.id=x\n",
                                  "version=1\ncluster.id=../../etc\nnode.id=0\n",
                                  "version=1\ncluster.id=abc\nnode.id=-1\n", "version=0\ncluster.id=abc\nnode.id=0\n"])
def test_a_file_that_is_not_an_identity_is_refused_not_guessed(tmp_path, text):
    (tmp_path / META_FILE).write_text(text)
    with pytest.raises(LogDirError):
        node_meta.read(tmp_path)


def test_new_cluster_ids_have_kafkas_shape_and_differ():
    ids = {node_meta.new_cluster_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(len(i) == 22 and NodeMeta(i, 0) for i in ids)
