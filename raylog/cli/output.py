"""How `raylog consume` writes a record: kcat's -f format string, kcat's -J JSON, or the console
consumer's plain lines."""

from __future__ import annotations

import json
import re

from raylog.errors import InvalidConfigError
from raylog.records import ConsumerRecord

_TOKEN = re.compile(r"%[tpokKsSTh%]|\\[ntr\\]|%|[^%\\]+|\\")
_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r", "\\\\": "\\"}


def text(data: bytes | None, null: str = "") -> str:
    """Bytes as text: UTF-8, with U+FFFD for bytes that are not (kcat writes the raw bytes)."""
    return null if data is None else data.decode("utf-8", "replace")


def _headers_text(headers) -> str:
    return ",".join(f"{name}={text(value)}" for name, value in headers or ())


_FIELDS = {
    "%t": lambda r: r.topic,
    "%p": lambda r: str(r.partition),
    "%o": lambda r: str(r.offset),
    "%k": lambda r: text(r.key),
    "%K": lambda r: str(-1 if r.key is None else len(r.key)),
    "%s": lambda r: text(r.value),
    "%S": lambda r: str(-1 if r.value is None else len(r.value)),
    "%T": lambda r: str(r.timestamp),
    "%h": lambda r: _headers_text(r.headers),
}


def compile_format(fmt: str):
    """A function record -> str for a kcat -f string: %t topic, %p partition, %o offset, %k key,
    %K key length (-1 for none), %s value, %S value length (-1 for a tombstone), %T timestamp ms,
    %h headers (name=value,...), %% a percent sign; \\n \\t \\r \\\\ escapes. No newline is added."""
    parts = []
    for token in _TOKEN.findall(fmt):
        if token in _FIELDS:
            parts.append(_FIELDS[token])
        elif token == "%%":
            parts.append("%")
        elif token in _ESCAPES:
            parts.append(_ESCAPES[token])
        elif token == "%":
            raise InvalidConfigError(f"format {fmt!r}: '%' must be followed by one of t p o k K s S T h %")
        else:
            parts.append(token)
    return lambda r: "".join(p if isinstance(p, str) else p(r) for p in parts)


def json_record(r: ConsumerRecord) -> str:
    """One record as kcat -J writes it: headers as a flat [name, value, ...] list, key and payload
    as UTF-8 text (U+FFFD for invalid bytes), null when absent."""
    headers = [x for name, value in r.headers or () for x in (name, None if value is None else text(value))]
    return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                       "tstype": "logappend" if r.timestamp_type == 1 else "create", "ts": r.timestamp,
                       "headers": headers, "key": None if r.key is None else text(r.key),
                       "payload": None if r.value is None else text(r.value)}, ensure_ascii=False)


def console_line(print_key: bool, print_offset: bool, print_timestamp: bool, key_separator: str):
    """kafka-console-consumer's default formatter: the value, optionally after the timestamp, the
    partition:offset and the key; a null key or value prints as "null"."""
    def line(r: ConsumerRecord) -> str:
        out = []
        if print_timestamp:
            out.append(("LogAppendTime:" if r.timestamp_type == 1 else "CreateTime:") + str(r.timestamp))
        if print_offset:
            out.append(f"{r.partition}:{r.offset}")
        if print_key:
            out.append(text(r.key, "null"))
        out.append(text(r.value, "null"))
        return key_separator.join(out) + "\n"

    return line
