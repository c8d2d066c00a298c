"""`raylog consume`: records to stdout, following the log until told to stop (kafka-console-consumer
and kcat -C).

Stops at --max-messages, after --timeout-ms without a record, at --exit-at-end (kcat -e), on
Ctrl-C (exit 130, as kafka-console-consumer, after leaving the group) or when the reader of
stdout goes away (`| head`: exit 0). Never prints a traceback for any of these.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import select
import signal
import stat
import sys
import threading
import time
from dataclasses import dataclass

from raylog.cli.common import connect, key_values
from raylog.cli.output import compile_format, console_line, json_record
from raylog.errors import InvalidConfigError, InvalidOffsetError
from raylog.records import TopicPartition

POLL_MS = 200
"""Longest single poll: how late --timeout-ms and --exit-at-end notice they are due."""


@dataclass(frozen=True)
class StartOffset:
    """Where --offset starts each partition: kind is earliest, latest, absolute (value N),
    from_end (value N before the end) or timestamp (value ms)."""

    kind: str
    value: int = 0


def parse_offset(text: str | None) -> StartOffset | None:
    """kcat's -o forms: earliest|beginning, latest|end, N, -N, @timestamp_ms (and s@ts as kcat)."""
    if text is None:
        return None
    t = text.strip().lower()
    if t in ("earliest", "beginning", "smallest"):
        return StartOffset("earliest")
    if t in ("latest", "end", "largest"):
        return StartOffset("latest")
    try:
        if t.startswith(("@", "s@")):
            return StartOffset("timestamp", int(t.split("@", 1)[1]))
        n = int(t)
    except ValueError:
        raise InvalidConfigError(f"--offset takes earliest, latest, N, -N or @timestamp_ms, got {text!r}") from None
    return StartOffset("from_end", -n) if n < 0 else StartOffset("absolute", n)


def _writer(args):
    if args.json:
        return lambda r: json_record(r) + "\n"
    if args.format is not None:
        return compile_format(args.format)
    return console_line(args.print_key, args.print_offset, args.print_timestamp, args.key_separator)


def _topics(args, admin) -> list[str]:
    topics = list(args.topics) + list(args.topic or [])
    if bool(topics) == (args.pattern is not None):
        raise InvalidConfigError("name topics (raylog consume T1 T2, --topic T) or give --pattern REGEX, one of them")
    if args.pattern is None:
        return topics
    try:
        rx = re.compile(args.pattern)
    except re.error as exc:
        raise InvalidConfigError(f"--pattern {args.pattern!r} is not a regular expression: {exc}") from None
    found = [t for t in admin.list_topics() if rx.fullmatch(t)]
    if not found and args.group is None:
        raise InvalidConfigError(f"no topic matches --pattern {args.pattern!r}")
    return found


def _position(consumer, admin, tps: list[TopicPartition], start: StartOffset) -> None:
    if start.kind == "absolute":
        for tp in tps:
            consumer.seek(tp, start.value)
    elif start.kind == "from_end":
        begins, ends = admin.beginning_offsets(tps), admin.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(begins[tp], ends[tp] - start.value))
    elif start.kind == "timestamp":
        found = admin.list_offsets({tp: start.value for tp in tps})
        ends = admin.end_offsets([tp for tp in tps if found[tp] is None])
        for tp in tps:
            consumer.seek(tp, found[tp].offset if found[tp] is not None else ends[tp])


def open_consumer(args, cluster):
    """A group member (subscribed) with --group, else a consumer assigned every chosen partition."""
    start = parse_offset(args.offset if args.offset is not None else ("earliest" if args.from_beginning else None))
    settings = {k.replace(".", "_"): v for k, v in key_values(args.consumer_property, "-X").items()}
    admin = cluster.admin()
    topics = _topics(args, admin)
    if args.group is not None:
        if start is not None and start.kind not in ("earliest", "latest"):
            raise InvalidConfigError("with --group, --offset is where a partition without a committed offset starts: "
                                     "earliest or latest (move committed offsets with raylog groups reset)")
        if args.partition:
            raise InvalidConfigError("--partition reads exact partitions; it cannot be combined with --group")
        settings.setdefault("auto_offset_reset", start.kind if start else "latest")
        consumer = cluster.consumer(group_id=args.group, client_id="raylog-cli", **settings)
        if args.pattern is not None:
            consumer.subscribe(pattern=args.pattern)
        else:
            consumer.subscribe(topics)
        return consumer
    if start is not None and start.kind in ("earliest", "latest"):
        settings.setdefault("auto_offset_reset", start.kind)
    settings.setdefault("auto_offset_reset", "latest")
    consumer = cluster.consumer(**settings)
    tps = []
    for topic in topics:
        n = cluster.metadata.partition_count(topic)
        wanted = args.partition or range(n)
        for p in wanted:
            if not 0 <= p < n:
                raise InvalidOffsetError(f"topic {topic!r} has no partition {p} ({n} partitions)")
        tps += [TopicPartition(topic, p) for p in wanted]
    consumer.assign(tps)
    if start is not None:
        _position(consumer, admin, tps, start)
    return consumer


class EndTracker:
    """--exit-at-end: a partition is done once its position reached the end the log had when this
    consumer got there (kcat -e); done when every assigned partition is."""

    def __init__(self, consumer, admin):
        self.consumer = consumer
        self.admin = admin
        self.done: set[TopicPartition] = set()

    def all_done(self, idle: bool) -> bool:
        assigned = self.consumer.assignment()
        if not assigned:
            return False
        pending = [tp for tp in assigned if tp not in self.done]
        for tp in list(pending):
            hw = self.consumer.highwater(tp)
            if hw is not None and self.consumer.position(tp) >= hw:
                self.done.add(tp)
                pending.remove(tp)
        if pending and idle:
            ends = self.admin.end_offsets(pending)
            self.done.update(tp for tp in pending if self.consumer.position(tp) >= ends[tp])
        return all(tp in self.done for tp in assigned)


def _reader_gone(out) -> bool:
    """True when stdout is a pipe whose reader closed it (`| head` done): a consumer waiting for
    records would otherwise notice only at its next write, which may never come."""
    try:
        fd = out.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


def _quiet_stdout() -> None:
    """The reader of stdout has gone: point stdout at /dev/null so Python's final flush is silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def cmd_consume(args) -> int:
    write = _writer(args)
    cluster = connect(args)
    consumer = open_consumer(args, cluster)
    out = sys.stdout
    count, status = 0, 0
    limit = args.max_messages
    ends = EndTracker(consumer, cluster.admin()) if args.exit_at_end else None
    last_record = time.monotonic()
    try:
        with _interrupts() as interrupted:
            while (limit is None or count < limit) and not interrupted.is_set():
                wait_ms = POLL_MS
                if args.timeout_ms is not None:
                    wait_ms = max(0, min(POLL_MS, args.timeout_ms - (time.monotonic() - last_record) * 1000))
                polled = consumer.poll(timeout_ms=wait_ms, max_records=None if limit is None else limit - count)
                for records in polled.values():
                    for r in records:
                        out.write(write(r))
                    count += len(records)
                if polled:
                    out.flush()
                    last_record = time.monotonic()
                elif args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                    break
                elif _reader_gone(out):
                    raise BrokenPipeError
                if ends is not None and ends.all_done(idle=not polled):
                    break
            if interrupted.is_set():
                status = 130
    except KeyboardInterrupt:
        status = 130
    except BrokenPipeError:
        _quiet_stdout()
    finally:
        with contextlib.suppress(KeyboardInterrupt):  # a second ^C: leave without waiting
            consumer.close()
    if not args.quiet:
        print(f"consumed {count} records", file=sys.stderr)
    return status


@contextlib.contextmanager
def _interrupts():
    """An Event ^C sets, which the poll loop checks between polls, instead of a KeyboardInterrupt
    raised wherever the main thread is: inside the client it can leave a lock held or a call half
    done, and close() (commit, leave the group) then hang. A second ^C raises at once."""
    interrupted = threading.Event()

    def on_sigint(signum, frame):
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: ^C stays Python's
        previous = None
    try:
        yield interrupted
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)

