"""The `raylog` command, run in-process against the module's local Ray."""

from __future__ import annotations

import io

import pytest

from raylog import cli

pytestmark = pytest.mark.ray


def run(capsys, monkeypatch, argv, stdin=""):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_topics_create_list_describe_delete(cluster, capsys, monkeypatch):
    assert run(capsys, monkeypatch, ["topics", "create", "cli-t", "--partitions", "2",
                                     "--config", "retention.ms=60000"])[0] == 0
    code, out, _ = run(capsys, monkeypatch, ["topics", "list"])
    assert code == 0 and "cli-t" in out.split()
    code, out, _ = run(capsys, monkeypatch, ["topics", "describe", "cli-t"])
    assert code == 0 and "partition 0" in out and "partition 1" in out
    assert run(capsys, monkeypatch, ["topics", "delete", "cli-t"])[0] == 0
    assert "cli-t" not in run(capsys, monkeypatch, ["topics", "list"])[1].split()


def test_lines_produced_from_stdin_are_consumed_in_order(cluster, capsys, monkeypatch):
    run(capsys, monkeypatch, ["topics", "create", "cli-lines"])
    lines = [f"line {i}" for i in range(100)]
    code, _, err = run(capsys, monkeypatch, ["produce", "cli-lines"], "\n".join(lines) + "\n")
    assert code == 0 and "produced 100 records" in err
    code, out, _ = run(capsys, monkeypatch, ["consume", "cli-lines", "--from-beginning",
                                             "--max-messages", "100", "--timeout-ms", "10000"])
    assert code == 0 and out.splitlines() == lines


def test_keys_split_by_separator_are_kept(cluster, capsys, monkeypatch):
    run(capsys, monkeypatch, ["topics", "create", "cli-keys"])
    run(capsys, monkeypatch, ["produce", "cli-keys", "--key-separator", ":"], "a:1\nb:2\n")
    code, out, _ = run(capsys, monkeypatch, ["consume", "cli-keys", "--offset", "0", "--print-key",
                                             "--max-messages", "2", "--timeout-ms", "10000"])
    assert out.splitlines() == ["a\t1", "b\t2"]


def test_invalid_topic_name_is_an_error_and_creates_nothing(cluster, capsys, monkeypatch):
    before = run(capsys, monkeypatch, ["topics", "list"])[1]
    code, _, err = run(capsys, monkeypatch, ["topics", "create", "bad name!"])
    assert code == 1 and "InvalidTopicError" in err
    assert run(capsys, monkeypatch, ["topics", "list"])[1] == before
