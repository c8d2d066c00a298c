"""The `raylog` command against the module's local Ray: in-process for most behaviours, and as a
real child process where a terminal, a signal or a shell pipe is the point."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest
import ray

from raylog import cli
from raylog.records import TopicPartition

from .conftest import wait_for

pytestmark = pytest.mark.ray

RAY_LOG_LINE = re.compile(r"^(\x1b\[\d+m)?\((raylet|[A-Za-z_]+ pid=\d+)")


def run(capsys, monkeypatch, argv, stdin=""):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, _without_ray_logs(out), _without_ray_logs(err)


def _without_ray_logs(text: str) -> str:
    """What the command printed, without the lines Ray's log monitor prints into this test process."""
    return "".join(line for line in text.splitlines(keepends=True) if not RAY_LOG_LINE.match(line))


def make_topic(cluster, name: str, partitions: int = 1) -> str:
    cluster.admin().create_topic(name, partitions)
    return name


def send(cluster, topic: str, values, **kwargs) -> None:
    producer = cluster.producer()
    producer.send_batch(topic, values, **kwargs).wait(timeout=60)
    producer.close()


def cli_command(*argv: str) -> list[str]:
    """`raylog ...` as a child process attached to this module's Ray."""
    return [sys.executable, "-m", "raylog.cli", "--address", ray.get_runtime_context().gcs_address, *argv]


class Terminal:
    """A child process on a pseudo-terminal that is its controlling terminal (so ^C is a real SIGINT
    from the line discipline), with everything it writes collected."""

    def __init__(self, argv: list[str]):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(["setsid", "-c", *argv], stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        self.output = b""

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def read_until(self, pattern: bytes, timeout_s: float = 60.0) -> bytes:
        deadline = time.monotonic() + timeout_s
        while not re.search(pattern, self.output):
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not seen; the terminal shows {self.output.decode(errors='replace')!r}")
            self._read(0.2)
        return self.output

    def _read(self, wait_s: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait_s)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            return False
        self.output += chunk
        return bool(chunk)

    def wait(self, timeout_s: float = 60.0) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        while self._read(0.1) and time.monotonic() < deadline:
            pass
        code = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        os.close(self.master)
        return code


# --- topics, errors ----------------------------------------------------------------------------


def test_topics_create_list_describe_alter_delete(cluster, capsys, monkeypatch):
    assert run(capsys, monkeypatch, ["topics", "create", "cli-t", "--partitions", "2",
                                     "--config", "retention.ms=60000"])[0] == 0
    code, out, _ = run(capsys, monkeypatch, ["topics", "list"])
    assert code == 0 and "cli-t" in out.split()
    assert "cli-t" in json.loads(run(capsys, monkeypatch, ["topics", "list", "--json"])[1])
    code, out, _ = run(capsys, monkeypatch, ["topics", "describe", "cli-t"])
    assert code == 0 and "partition 0" in out and "partition 1" in out
    code, out, _ = run(capsys, monkeypatch, ["topics", "alter", "cli-t", "--partitions", "3"])
    assert code == 0 and "2 -> 3 partitions" in out
    (described,) = json.loads(run(capsys, monkeypatch, ["topics", "describe", "cli-t", "--json"])[1])
    assert described["partition_count"] == 3
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["leader"] is not None and p["isr"] for p in described["partitions"])
    assert run(capsys, monkeypatch, ["topics", "delete", "cli-t"])[0] == 0
    assert "cli-t" not in run(capsys, monkeypatch, ["topics", "list"])[1].split()


def test_a_raylog_error_is_one_line_on_stderr_and_exit_status_1(cluster, capsys, monkeypatch):
    before = run(capsys, monkeypatch, ["topics", "list"])[1]
    code, out, err = run(capsys, monkeypatch, ["topics", "create", "bad name!"])
    assert code == 1 and err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err
    assert run(capsys, monkeypatch, ["topics", "list"])[1] == before


# --- produce ------------------------------------------------------------------------------------


def test_a_line_typed_into_produce_reaches_a_consumer_while_input_stays_open(cluster):
    topic = make_topic(cluster, "cli-typed")
    consumer = cluster.consumer(topic, auto_offset_reset="earliest")
    term = Terminal(cli_command("produce", topic))
    try:
        term.type("first line\n")
        seen = []
        wait_for(lambda: seen.extend(r.value for rs in consumer.poll(500).values() for r in rs) or seen,
                 timeout_s=60, describe=lambda: term.output)
        assert seen == [b"first line"], "the record arrived while the producer's input was still open"
        assert term.proc.poll() is None
        term.type("\x04")  # ^D: end of input
        assert term.wait() == 0
        assert b"produced 1 records" in term.output and b"Traceback" not in term.output
        assert b"Connecting to existing Ray cluster" not in term.output, "Ray's start-up lines stay off the terminal"
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
        consumer.close()


def test_produce_keys_headers_null_values_and_producer_settings(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-produce-forms")
    code, _, err = run(capsys, monkeypatch, ["produce", topic, "-K", ":", "-H", "src=cli", "-H", "n=1",
                                             "--null-value", "NULL", "-X", "linger.ms=20", "-X", "acks=1",
                                             "-X", "compression_type=none"],
                       "a:1\nb:NULL\nno key\n")
    assert code == 0 and "produced 3 records" in err
    records = [r for rs in cluster.consumer(topic, auto_offset_reset="earliest").poll(10_000).values() for r in rs]
    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"a", b"1", [("src", b"cli"), ("n", b"1")]),
        (b"b", None, [("src", b"cli"), ("n", b"1")]),
        (None, b"no key", [("src", b"cli"), ("n", b"1")])]


def test_an_unknown_producer_setting_is_an_error_before_anything_is_sent(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-bad-setting")
    code, _, err = run(capsys, monkeypatch, ["produce", topic, "-X", "lingr_ms=5"], "x\n")
    assert code == 1 and "lingr_ms" in err
    assert cluster.admin().end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)] == 0


def test_delivery_failures_are_reported_with_exit_status_1(cluster, capsys, monkeypatch):
    cluster.admin().create_topic("cli-small-messages", 1, max_message_bytes=1024)
    code, _, err = run(capsys, monkeypatch, ["produce", "cli-small-messages", "-X", "compression.type=none"],
                       "x" * 5000 + "\n")
    assert code == 1 and "1 of 1 records were not delivered" in err and "RecordTooLarge" in err


# --- consume ------------------------------------------------------------------------------------


def test_consume_stops_at_max_messages_at_the_end_or_after_the_timeout(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-stops", 2)
    send(cluster, topic, [b"v%d" % i for i in range(10)], keys=[b"k%d" % i for i in range(10)])
    code, out, err = run(capsys, monkeypatch, ["consume", topic, "--offset", "earliest", "--exit-at-end"])
    assert code == 0 and sorted(out.splitlines()) == sorted(f"v{i}" for i in range(10))
    assert "consumed 10 records" in err
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "--offset", "earliest", "--max-messages", "3"])
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "--timeout-ms", "500"])  # latest: nothing new
    assert code == 0 and out == ""


def test_format_strings_and_json_show_every_field(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-formats")
    run(capsys, monkeypatch, ["produce", topic, "-K", "=", "-H", "h=1", "--null-value", "-"], "k=v\nk2=-\n")
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "-o", "earliest", "-e",
                                             "-f", r"%t %p %o %k %K %s %S %h|\n"])
    assert code == 0 and out == f"{topic} 0 0 k 1 v 1 h=1|\n{topic} 0 1 k2 2  -1 h=1|\n"
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "-o", "earliest", "-e", "--json"])
    first, second = (json.loads(line) for line in out.splitlines())
    assert {k: first[k] for k in ("topic", "partition", "offset", "tstype", "key", "payload", "headers")} == {
        "topic": topic, "partition": 0, "offset": 0, "tstype": "create", "key": "k", "payload": "v",
        "headers": ["h", "1"]}
    assert isinstance(first["ts"], int) and second["payload"] is None
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "-o", "earliest", "-e", "--print-key",
                                             "--print-offset", "--key-separator", ":"])
    assert out.splitlines() == ["0:0:k:v", "0:1:k2:null"]


def test_offset_forms_absolute_from_end_and_by_timestamp(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-offsets", 2)
    for p in (0, 1):
        send(cluster, topic, [b"p%d-%d" % (p, i) for i in range(5)], partition=p,
             timestamps_ms=[1000 * (i + 1) for i in range(5)])

    def lines(offset):
        code, out, _ = run(capsys, monkeypatch, ["consume", topic, "-o", offset, "-e", "-f", r"%p:%o\n"])
        assert code == 0
        return sorted(out.splitlines())

    assert lines("3") == ["0:3", "0:4", "1:3", "1:4"]
    assert lines("-1") == ["0:4", "1:4"]
    assert lines("-50") == sorted(f"{p}:{o}" for p in (0, 1) for o in range(5))
    assert lines("@4000") == ["0:3", "0:4", "1:3", "1:4"]
    assert lines("@99000") == []
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "-p", "1", "-o", "earliest", "-e", "-f", r"%p:%o\n"])
    assert out.splitlines() == [f"1:{o}" for o in range(5)]


def test_a_group_member_commits_what_it_printed_and_the_next_one_goes_on_from_there(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-group")
    send(cluster, topic, [b"%d" % i for i in range(10)])
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "--group", "cli-g", "-o", "earliest",
                                             "--max-messages", "4"])
    assert code == 0 and out.splitlines() == ["0", "1", "2", "3"]
    tp = TopicPartition(topic, 0)
    assert cluster.admin().list_consumer_group_offsets("cli-g")[tp].offset == 4
    code, out, _ = run(capsys, monkeypatch, ["consume", topic, "--group", "cli-g", "--exit-at-end"])
    assert out.splitlines() == [str(i) for i in range(4, 10)]
    assert cluster.admin().list_consumer_group_offsets("cli-g")[tp].offset == 10


def test_a_pattern_reads_every_matching_topic(cluster, capsys, monkeypatch):
    for name in ("cli-pat-a", "cli-pat-b", "cli-other"):
        make_topic(cluster, name)
        send(cluster, name, [name.encode()])
    code, out, _ = run(capsys, monkeypatch, ["consume", "--pattern", r"cli-pat-.*", "-o", "earliest", "-e",
                                             "-f", r"%t %s\n"])
    assert code == 0 and sorted(out.splitlines()) == ["cli-pat-a cli-pat-a", "cli-pat-b cli-pat-b"]
    code, out, _ = run(capsys, monkeypatch, ["consume", "cli-pat-a", "cli-other", "-o", "earliest", "-e"])
    assert sorted(out.splitlines()) == ["cli-other", "cli-pat-a"]


def test_ctrl_c_ends_a_following_group_consumer_quietly_and_it_leaves_the_group(cluster):
    topic = make_topic(cluster, "cli-ctrl-c")
    send(cluster, topic, [b"before-%d" % i for i in range(3)])
    term = Terminal(cli_command("consume", topic, "--group", "cli-ctrl-c-g", "--offset", "earliest"))
    try:
        term.read_until(rb"before-2")
        time.sleep(0.5)  # still following: nothing ends it but the signal
        assert term.proc.poll() is None
        term.type("\x03")  # ^C from the terminal: SIGINT to the foreground process group
        code = term.wait()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    text = term.output.decode(errors="replace")
    assert code == 130 and "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert "consumed 3 records" in text
    (group,) = cluster.admin().describe_consumer_groups(["cli-ctrl-c-g"])
    assert group["members"] == [], "the member left the group on its way out"
    assert cluster.admin().list_consumer_group_offsets("cli-ctrl-c-g")[TopicPartition(topic, 0)].offset == 3


def test_consume_into_head_ends_quietly_when_head_has_its_lines(cluster):
    topic = make_topic(cluster, "cli-head")
    send(cluster, topic, [b"line-%d" % i for i in range(20)])
    command = " ".join(f"'{a}'" for a in cli_command("consume", topic, "--offset", "earliest"))
    result = subprocess.run(["bash", "-c", f"{command} | head -n 3; echo \"status=${{PIPESTATUS[0]}}\" >&2"],
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines() == ["line-0", "line-1", "line-2"]
    assert "status=0" in result.stderr and "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, \
        result.stderr


# --- configs ------------------------------------------------------------------------------------


def test_configs_describe_and_alter_as_kafka_configs(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-configs")
    code, out, err = run(capsys, monkeypatch, ["configs", "alter", "--topic", topic,
                                               "--add-config", "retention.ms=60000,cleanup.policy=compact"])
    assert code == 0, err
    code, out, _ = run(capsys, monkeypatch, ["configs", "describe", "--entity-type", "topics",
                                             "--entity-name", topic, "--json"])
    configs = {c["name"]: c for c in json.loads(out)["configs"]}
    assert configs["retention.ms"]["value"] == "60000" and configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["value"] == "compact"
    code, _, _ = run(capsys, monkeypatch, ["configs", "alter", "--topic", topic, "--delete-config", "retention.ms"])
    assert code == 0
    code, out, _ = run(capsys, monkeypatch, ["configs", "describe", "--topic", topic])
    assert "cleanup.policy" in out and "retention.ms" not in out
    code, _, err = run(capsys, monkeypatch, ["configs", "alter", "--topic", topic, "--add-config", "retention.msec=1"])
    assert code == 1 and err.startswith("error: ") and "retention.ms" in err


# --- groups reset -------------------------------------------------------------------------------


def _committed(cluster, group):
    return {(tp.topic, tp.partition): om.offset for tp, om in cluster.admin().list_consumer_group_offsets(group).items()}


def test_groups_reset_is_a_dry_run_until_execute(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-reset", 2)
    for p in (0, 1):
        send(cluster, topic, [b"x"] * 10, partition=p)
    group = "cli-reset-g"
    cluster.admin().reset_consumer_group_offsets(group, [topic], to="latest")
    code, out, _ = run(capsys, monkeypatch, ["groups", "reset", "--group", group, "--topic", topic, "--shift-by", "-3"])
    assert code == 0 and "dry run" in out
    assert [line.split() for line in out.splitlines()[1:3]] == [[group, topic, "0", "10", "7"],
                                                                [group, topic, "1", "10", "7"]]
    assert _committed(cluster, group) == {(topic, 0): 10, (topic, 1): 10}, "a dry run changes nothing"
    code, out, _ = run(capsys, monkeypatch, ["groups", "reset", group, "--topic", f"{topic}:1", "--to-offset", "2",
                                             "--execute", "--json"])
    assert json.loads(out)["plan"] == [{"group": group, "topic": topic, "partition": 1, "current_offset": 10,
                                        "new_offset": 2}]
    assert _committed(cluster, group) == {(topic, 0): 10, (topic, 1): 2}
    code, out, _ = run(capsys, monkeypatch, ["groups", "reset", group, "--all-topics", "--to-earliest", "--execute"])
    assert _committed(cluster, group) == {(topic, 0): 0, (topic, 1): 0}
    lag = json.loads(run(capsys, monkeypatch, ["groups", "lag", "--group", group, "--json"])[1])
    assert lag["total_lag"] == 20


def test_groups_reset_by_datetime_and_by_duration(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-reset-time")
    now_ms = int(time.time() * 1000)
    hour = 3600 * 1000
    send(cluster, topic, [b"old", b"mid", b"new"], timestamps_ms=[now_ms - 5 * hour, now_ms - 2 * hour, now_ms])
    group = "cli-reset-time-g"
    when = time.strftime("%Y-%m-%dT%H:%M:%S.000", time.localtime((now_ms - 3 * hour) / 1000))  # local, no zone
    code, out, _ = run(capsys, monkeypatch, ["groups", "reset", group, "--topic", topic, "--to-datetime", when,
                                             "--execute"])
    assert code == 0 and _committed(cluster, group) == {(topic, 0): 1}
    code, out, _ = run(capsys, monkeypatch, ["groups", "reset", group, "--topic", topic, "--by-duration", "PT6H",
                                             "--execute"])
    assert _committed(cluster, group) == {(topic, 0): 0}
    code, out, _ = run(capsys, monkeypatch, ["groups", "reset", group, "--topic", topic, "--by-duration", "PT1H",
                                             "--json"])
    assert json.loads(out)["plan"][0]["new_offset"] == 2 and _committed(cluster, group) == {(topic, 0): 0}


def test_groups_list_and_describe_as_json(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-groups-json")
    cluster.admin().reset_consumer_group_offsets("cli-json-g", [topic], to="earliest")
    groups = json.loads(run(capsys, monkeypatch, ["groups", "list", "--json"])[1])
    assert any(g["group_id"] == "cli-json-g" for g in groups)
    described = json.loads(run(capsys, monkeypatch, ["groups", "describe", "cli-json-g", "--json"])[1])
    assert described["group_id"] == "cli-json-g" and described["members"] == []


# --- top ----------------------------------------------------------------------------------------


def test_top_once_shows_partitions_rates_and_group_lag(cluster, capsys, monkeypatch):
    topic = make_topic(cluster, "cli-top", 2)
    send(cluster, topic, [b"x"] * 30, partition=0)
    cluster.admin().reset_consumer_group_offsets("cli-top-g", [topic], to="earliest")
    code, out, _ = run(capsys, monkeypatch, ["top", "--once", "--topic", topic, "--group", "cli-top-g",
                                             "--interval", "0.2"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("raylog top") and "partitions 2" in lines[0] and "under-replicated 0" in lines[0]
    assert f"kafka {cluster.bootstrap_servers}" in lines[0]  # where Kafka clients connect
    rows = {line.split()[1]: line.split() for line in lines if line.startswith(topic + " ")}
    assert rows["0"][-3:-1] == ["30", "30"] and rows["1"][-3:-1] == ["0", "0"]  # log end, high watermark
    group_row = next(line.split() for line in lines if line.startswith("cli-top-g"))
    assert group_row[3:] == [topic, "0", "0", "30", "30"]
    frame = json.loads(run(capsys, monkeypatch, ["top", "--once", "--json", "--topic", topic,
                                                 "--interval", "0.2"])[1])
    assert [p["log_end_offset"] for p in frame["topics"][0]["partitions"]] == [30, 0]
