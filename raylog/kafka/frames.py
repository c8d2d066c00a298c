"""Kafka request and response frames, read and written with kio's message classes.

kio is generated from Kafka's own JSON message schemas (every version, flexible or not, tagged
fields included) and tested against Kafka's, so raylog never hand-writes a message encoder. A
frame is a 4-byte big-endian size, then a request header (v1, or v2 for flexible versions) and
the request body; an answer is the size, a response header (ApiVersions' is always v0, so a
client that asked a version the broker does not have can read the refusal) and the body.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import DecodeError

from raylog.errors import CorruptRecordError

SIZE = struct.Struct(">i")
_API_AND_VERSION = struct.Struct(">hhi")

API_VERSIONS = 18
PRODUCE = 0
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 9),     # Produce: v3 is the first with v2 batches
    1: (4, 12),    # Fetch: v13 on names topics by id
    2: (1, 6),     # ListOffsets
    3: (0, 12),    # Metadata
    8: (2, 9),     # OffsetCommit: v9 (KIP-848 members') is v8
    9: (1, 9),     # OffsetFetch: v10 on names topics by id
    10: (0, 4),    # FindCoordinator
    11: (0, 7),    # JoinGroup
    12: (0, 4),    # Heartbeat
    13: (0, 5),    # LeaveGroup
    14: (0, 5),    # SyncGroup
    15: (0, 5),    # DescribeGroups
    16: (0, 5),    # ListGroups
    17: (0, 1),    # SaslHandshake: after v0 the tokens come as bare frames, not SaslAuthenticate
    18: (0, 3),    # ApiVersions
    19: (2, 7),    # CreateTopics
    20: (1, 5),    # DeleteTopics: v6 on names topics by id too
    21: (0, 2),    # DeleteRecords
    22: (0, 4),    # InitProducerId
    23: (2, 4),    # OffsetForLeaderEpoch
    32: (1, 4),    # DescribeConfigs
    33: (0, 2),    # AlterConfigs
    36: (0, 2),    # SaslAuthenticate
    37: (0, 3),    # CreatePartitions
    42: (0, 2),    # DeleteGroups
    44: (0, 1),    # IncrementalAlterConfigs
    47: (0, 0),    # OffsetDelete
    60: (0, 1),    # DescribeCluster
    68: (0, 1),    # ConsumerGroupHeartbeat (KIP-848)
    69: (0, 0),    # ConsumerGroupDescribe (KIP-848)
}
"""API key -> (lowest, highest) version served: what ApiVersions advertises."""


class UnsupportedVersion(Exception):
    """A request for an API or version not served: ``api_key``/``correlation_id`` say which."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"API {api_key} v{api_version} is not served")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    """The kio request entity."""


_readers: dict[type, Any] = {}
_writers: dict[type, Any] = {}


def _reader(cls: type):
    r = _readers.get(cls)
    if r is None:
        r = _readers[cls] = entity_reader(cls)
    return r


def _writer(cls: type):
    w = _writers.get(cls)
    if w is None:
        w = _writers[cls] = entity_writer(cls)
    return w


def parse_request(frame: bytes) -> Request:
    """A request frame's header and body (the size prefix already taken off). Raises
    UnsupportedVersion for an API or version not in SUPPORTED, CorruptRecordError for bytes that
    are not a request. Bytes after the body are ignored (a newer client's tagged fields)."""
    if len(frame) < _API_AND_VERSION.size:
        raise CorruptRecordError(f"a request of {len(frame)} bytes cannot hold a request header")
    api_key, api_version, correlation_id = _API_AND_VERSION.unpack_from(frame)
    low, high = SUPPORTED.get(api_key, (1, 0))
    if not low <= api_version <= high:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    cls = load_request_schema(api_key, api_version)
    try:
        header, used = _reader(cls.__header_schema__)(frame, 0)
        body, _ = _reader(cls)(frame, used)
    except (DecodeError, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"API {api_key} v{api_version} request does not decode: {exc}") from None
    return Request(api_key, api_version, correlation_id, getattr(header, "client_id", None), body)


def response_class(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """The whole answer frame, size prefix included."""
    cls = load_response_schema(api_key, api_version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_cls = cls.__header_schema__
    _writer(header_cls)(out, header_cls(correlation_id=correlation_id))
    _writer(cls)(out, body)
    frame = out.getbuffer()
    SIZE.pack_into(frame, 0, len(frame) - SIZE.size)
    return bytes(frame)


def unsupported_version_answer(correlation_id: int) -> bytes:
    """ApiVersions v0's refusal of a version it does not have, listing what it has (a client then
    asks again at a version both know)."""
    cls = load_response_schema(API_VERSIONS, 0)
    body = cls(error_code=ErrorCode.unsupported_version, api_keys=api_keys(cls))
    return encode_response(API_VERSIONS, 0, correlation_id, body)


def api_keys(response_cls: type) -> tuple:
    entry = item_type(response_cls, "api_keys")
    return tuple(entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(SUPPORTED.items()))


def item_type(cls: type, name: str) -> type:
    """The entity type of a tuple-valued field of the kio entity ``cls``."""
    return cls.__dataclass_fields__[name].type.__args__[0]


def make(cls: type, **values: Any):
    """A ``cls`` from the values it has fields for: each version of a message has its own subset,
    so one handler fills every version from one set of values."""
    fields = cls.__dataclass_fields__
    return cls(**{k: v for k, v in values.items() if k in fields})
