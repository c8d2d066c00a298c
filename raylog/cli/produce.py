"""`raylog produce`: stdin lines as records, each sent as it is read (kafka-console-producer, kcat -P).

The producer's linger_ms groups lines that arrive together into one batch; a line typed at a
terminal goes out within linger_ms of its newline. Delivery failures are collected by an errback
(never a future kept per line) and reported at the end with exit status 1.
"""

from __future__ import annotations

import sys

from raylog.cli.common import connect, key_values, progress, typed
from raylog.errors import InvalidConfigError

# kafka-console-producer's --property names this command reads (LineMessageReader's).
_PROPERTY_DEFAULTS = {"parse.key": "false", "key.separator": "\t", "parse.headers": "false",
                      "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":",
                      "null.marker": None, "ignore.error": "false"}


class LineParser:
    """One input line -> (key, value, headers), as kafka-console-producer's LineMessageReader with
    kcat's -K (key separator) and -H (fixed headers)."""

    def __init__(self, args):
        props = dict(_PROPERTY_DEFAULTS)
        given = key_values(args.property, "--property", convert=str)
        unknown = sorted(set(given) - set(props))
        if unknown:
            raise InvalidConfigError(f"unknown --property {', '.join(unknown)} (known: {', '.join(props)})")
        props.update(given)
        self.key_separator = args.key_separator
        if self.key_separator is None and props["parse.key"].lower() == "true":
            self.key_separator = props["key.separator"]
        self.parse_headers = props["parse.headers"].lower() == "true"
        self.headers_delimiter = props["headers.delimiter"]
        self.headers_separator = props["headers.separator"]
        self.headers_key_separator = props["headers.key.separator"]
        self.null_value = args.null_value if args.null_value is not None else props["null.marker"]
        self.fixed_headers = []
        for h in args.header or []:
            name, sep, value = h.partition("=")
            if not sep or not name:
                raise InvalidConfigError(f"-H takes name=value, got {h!r}")
            self.fixed_headers.append((name, value.encode()))

    def parse(self, line: str):
        headers = list(self.fixed_headers)
        if self.parse_headers:
            head, sep, line = line.partition(self.headers_delimiter)
            if not sep:
                raise InvalidConfigError(f"no headers delimiter {self.headers_delimiter!r} in line {line!r}")
            for pair in head.split(self.headers_separator) if head else []:
                name, sep, value = pair.partition(self.headers_key_separator)
                headers.append((name, value.encode() if sep else None))
        key = None
        if self.key_separator is not None:
            k, sep, rest = line.partition(self.key_separator)
            if sep:
                key, line = k, rest
        value = None if self.null_value is not None and line == self.null_value else line.encode()
        if key is not None:
            key = None if self.null_value is not None and key == self.null_value else key.encode()
        return key, value, headers or None


def producer_settings(pairs) -> dict:
    """-X key=value settings in kafka-python's names; Kafka's dotted names are mapped '.' -> '_'."""
    return {k.replace(".", "_"): v for k, v in key_values(pairs, "-X", convert=typed).items()}


def cmd_produce(args) -> int:
    parser = LineParser(args)
    producer = connect(args).producer(**producer_settings(args.producer_property))
    sent = 0
    failures: list[BaseException] = []
    bar = progress(args)
    topic, partition = args.topic, args.partition
    try:
        for raw in sys.stdin:
            key, value, headers = parser.parse(raw[:-1] if raw.endswith("\n") else raw)
            future = producer.send(topic, value, key=key, headers=headers, partition=partition)
            future.add_errback(failures.append)
            sent += 1
            bar.update(1)
        producer.flush(timeout=args.flush_timeout_s)
    finally:
        producer.close(timeout=args.flush_timeout_s)
        bar.close()
    if failures:
        print(f"error: {len(failures)} of {sent} records were not delivered; first: "
              f"{type(failures[0]).__name__}: {failures[0]}", file=sys.stderr)
        return 1
    print(f"produced {sent} records", file=sys.stderr)
    return 0
