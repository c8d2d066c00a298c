"""raylog/logs.py: one logger tree, and event lines that parse back."""

from __future__ import annotations

import logging
import re
import shlex

from raylog.logs import event_line, get_logger, log_event


def test_every_package_logs_under_raylog():
    assert get_logger("actors.replica").name == "raylog.actors.replica"
    assert get_logger("spark_bridge.read").name == "raylog.spark_bridge.read"
    assert get_logger("raylog.cluster").name == "raylog.cluster"
    assert get_logger("raylog").name == "raylog"
    assert get_logger("raylogger").name == "raylog.raylogger"


def test_an_event_line_is_event_first_then_the_fields_in_order():
    line = event_line("election", topic="orders", partition=0, leader=2, isr=[1, 2], reason="replica_died")
    assert line == "event=election topic=orders partition=0 leader=2 isr=1,2 reason=replica_died"


def test_values_with_spaces_quotes_or_nothing_are_quoted_so_the_line_splits_back():
    line = event_line("member_fenced", group='a "b" c', member="", error="x=y")
    assert dict(part.split("=", 1) for part in shlex.split(line)) == {
        "event": "member_fenced", "group": 'a "b" c', "member": "", "error": "x=y"}


def test_log_event_logs_at_info_by_default(caplog):
    logger = get_logger("tests.logs")
    with caplog.at_level(logging.INFO, logger="raylog"):
        log_event(logger, "rebalance", group="g", group_epoch=3)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("raylog.tests.logs", logging.INFO, "event=rebalance group=g group_epoch=3")]
    assert re.fullmatch(r"event=\w+( \w+=\S+)*", caplog.records[0].getMessage())
