"""`raylog top`: a live view of partitions and consumer group lag, redrawn every --interval.

Per node: its state (alive, registered, missing), host, data directory, replicas and leaders. Per
partition: leader, replicas, ISR, under-replicated/offline, log end offset, high watermark
and produce records/s (the log end offset's change between two samples); per group and
partition: committed offset, end and lag. On a terminal it redraws in place with ANSI escapes
(alternate screen, as top) and quits on q or Ctrl-C; --once and --iterations N print plain frames
for scripts, each frame's rates measured against a sample taken --interval before it.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
import time
from dataclasses import dataclass, field

from raylog.cli.admin_commands import NODE_COLUMNS, node_rows
from raylog.cli.common import connect, table
from raylog.errors import RaylogError, UnknownTopicOrPartitionError

_ENTER = "\x1b[?1049h\x1b[?25l"  # alternate screen, hide the cursor
_LEAVE = "\x1b[?25h\x1b[?1049l"
_HOME_CLEAR = "\x1b[H\x1b[2J"


@dataclass
class Sample:
    """One look at the cluster: partitions per topic and lag per group, taken at ``at`` (monotonic s)."""

    at: float
    wall: float
    partitions: dict[str, list[dict]] = field(default_factory=dict)
    groups: list[dict] = field(default_factory=list)
    """{group_id, state, member_count, partitions: [{topic, partition, committed, end_offset, lag}]}"""
    cluster: dict = field(default_factory=dict)
    """describe_cluster(): the registered nodes and their state."""


def take_sample(admin, topics: list[str] | None, groups: list[str] | None) -> Sample:
    sample = Sample(time.monotonic(), time.time(), cluster=admin.describe_cluster())
    for topic in topics if topics else admin.list_topics():
        try:
            sample.partitions[topic] = admin.describe_partitions(topic)
        except UnknownTopicOrPartitionError:
            if topics:
                raise  # a topic asked for by name: say so
            # deleted since it was listed: gone from this frame
    listed = {g["group_id"]: g for g in admin.list_consumer_groups()}
    for group_id in groups if groups else sorted(listed):
        info = listed.get(group_id, {"group_id": group_id, "state": "Dead", "member_count": 0})
        try:
            lag = admin.consumer_group_lag(group_id)
        except RaylogError as exc:  # a group deleted since it was listed, a coordinator moving
            sample.groups.append({**info, "partitions": [], "total_lag": None, "error": str(exc)})
            continue
        rows = [r for r in lag["partitions"] if not topics or r["topic"] in topics]
        sample.groups.append({**info, "partitions": rows, "total_lag": sum(r["lag"] or 0 for r in rows)})
    return sample


def produce_rates(before: Sample | None, after: Sample) -> dict[tuple[str, int], float]:
    """Records/s per (topic, partition): the log end offset's growth between two samples. None
    where either sample lacks the partition's offsets or the log shrank (a truncation)."""
    if before is None or after.at <= before.at:
        return {}
    old = {(t, i["partition"]): i.get("log_end_offset") for t, infos in before.partitions.items() for i in infos}
    rates = {}
    for topic, infos in after.partitions.items():
        for info in infos:
            key = (topic, info["partition"])
            new, prev = info.get("log_end_offset"), old.get(key)
            if new is not None and prev is not None and new >= prev:
                rates[key] = (new - prev) / (after.at - before.at)
    return rates


def _rate_text(rate: float | None) -> str | None:
    if rate is None:
        return None
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}"


def render(sample: Sample, rates: dict, interval_s: float, hint: str = "") -> list[str]:
    """The frame as lines (no escapes)."""
    rows, urp, offline = [], 0, 0
    for topic, infos in sample.partitions.items():
        for info in infos:
            urp += bool(info["under_replicated"])
            offline += bool(info["offline"])
            leader = next((r for r in info["replicas"] if r["replica_id"] == info["leader"]), None)
            state = "OFFLINE" if info["offline"] else ("URP" if info["under_replicated"] else "")
            rows.append([topic, info["partition"],
                         f"{info['leader']}@node{leader['node_id']}" if leader else "none",
                         ",".join(str(r["replica_id"]) + ("" if r["alive"] else "!") for r in info["replicas"]),
                         ",".join(map(str, info["isr"])), state, info.get("log_end_offset"),
                         info.get("high_watermark"), _rate_text(rates.get((topic, info["partition"])))])
    total_rate = sum(rates.values()) if rates else None
    stamp = time.strftime("%H:%M:%S", time.localtime(sample.wall))
    lines = [f"raylog top  {stamp}  every {interval_s:g}s  topics {len(sample.partitions)}  partitions {len(rows)}  "
             f"under-replicated {urp}  offline {offline}  produce "
             f"{'-' if total_rate is None else _rate_text(total_rate)} rec/s"
             f"{'  kafka ' + sample.cluster['bootstrap_servers'] if sample.cluster.get('bootstrap_servers') else ''}"
             f"{hint}", ""]
    if sample.cluster:
        lines += table(NODE_COLUMNS, node_rows(sample.cluster)).splitlines() + [""]
    lines += table(["TOPIC", "PART", "LEADER", "REPLICAS", "ISR", "STATE", "LOG-END", "HW", "REC/S"],
                   rows, right=frozenset({"REC/S"})).splitlines() if rows else ["no topics"]
    group_rows = [[g["group_id"], g["state"], g["member_count"], r["topic"], r["partition"], r["committed"],
                   r["end_offset"], r["lag"]] for g in sample.groups for r in g["partitions"]]
    group_rows += [[g["group_id"], g["state"], g["member_count"], None, None, None, None, None]
                   for g in sample.groups if not g["partitions"]]
    lines.append("")
    lines += table(["GROUP", "STATE", "MEMBERS", "TOPIC", "PART", "COMMITTED", "END", "LAG"],
                   group_rows).splitlines() if group_rows else ["no consumer groups"]
    return lines


def _json_frame(sample: Sample, rates: dict) -> str:
    return json.dumps({"time_ms": int(sample.wall * 1000), "nodes": sample.cluster.get("nodes", []), "topics": [
        {"topic": topic, "partitions": [
            {"partition": i["partition"], "leader": i["leader"], "replicas": [r["replica_id"] for r in i["replicas"]],
             "isr": i["isr"], "under_replicated": i["under_replicated"], "offline": i["offline"],
             "log_end_offset": i.get("log_end_offset"), "high_watermark": i.get("high_watermark"),
             "records_per_s": rates.get((topic, i["partition"]))} for i in infos]}
        for topic, infos in sample.partitions.items()],
        "groups": sample.groups})


class _Keys:
    """Single key presses from a terminal's stdin (cbreak mode while open); nothing otherwise."""

    def __init__(self):
        self._saved = None
        if sys.stdin.isatty():
            import termios
            import tty

            self._saved = termios.tcgetattr(sys.stdin.fileno())
            tty.setcbreak(sys.stdin.fileno())

    def wait(self, seconds: float) -> str:
        """Wait up to ``seconds``; the key pressed meanwhile ('' if none)."""
        if self._saved is None:
            time.sleep(max(0.0, seconds))
            return ""
        ready, _, _ = select.select([sys.stdin], [], [], max(0.0, seconds))
        return os.read(sys.stdin.fileno(), 1).decode(errors="replace") if ready else ""

    def close(self) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)


def cmd_top(args) -> int:
    admin = connect(args).admin()
    topics, groups = args.topic or None, args.group or None
    iterations = 1 if args.once else args.iterations
    live = iterations is None and sys.stdout.isatty()
    if not live:
        return _batch(admin, topics, groups, args.interval, iterations, args.json)
    keys = _Keys()
    sys.stdout.write(_ENTER)
    try:
        before = None
        while True:
            sample = take_sample(admin, topics, groups)
            size = shutil.get_terminal_size()
            lines = render(sample, produce_rates(before, sample), args.interval, "   (q quits)")
            if len(lines) > size.lines - 1:
                lines = lines[:size.lines - 2] + [f"... {len(lines) - size.lines + 2} more lines"]
            sys.stdout.write(_HOME_CLEAR + "\n".join(line[:size.columns] for line in lines))
            sys.stdout.flush()
            before = sample
            if keys.wait(args.interval - (time.monotonic() - sample.at)).lower() == "q":
                return 0
    except KeyboardInterrupt:
        return 0
    finally:
        keys.close()
        sys.stdout.write(_LEAVE)
        sys.stdout.flush()


def _batch(admin, topics, groups, interval_s: float, iterations: int | None, as_json: bool) -> int:
    """Plain frames one after another (every frame's rates from a sample ``interval_s`` earlier)."""
    before = take_sample(admin, topics, groups)
    shown = 0
    try:
        while iterations is None or shown < iterations:
            time.sleep(max(0.0, interval_s - (time.monotonic() - before.at)))
            sample = take_sample(admin, topics, groups)
            rates = produce_rates(before, sample)
            if as_json:
                print(_json_frame(sample, rates), flush=True)
            else:
                print(("\n" if shown else "") + "\n".join(render(sample, rates, interval_s)), flush=True)
            before, shown = sample, shown + 1
    except KeyboardInterrupt:
        pass
    return 0
