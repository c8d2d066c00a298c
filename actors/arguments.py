"""Checks of what reaches an actor method, before anything is read or changed.

raylog's actors are named Ray actors: any process Ray admits can call them with
anything, past the clients' own checks (raylog trusts what Ray admits, as Kafka
without ACLs trusts its clients, but a wrong type or an absurd value must never
crash an actor, reach a log or a file name). Each helper returns the value it
checked (an int, a buffer...) or raises InvalidRequestError naming the argument,
so a method starts with one line per argument. Values inside a batch are the
batch validator's (raylog/storage/batch.py) business; these check shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from raylog.errors import InvalidRequestError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_WAIT_MS = 10 * 60 * 1000
"""Longest any call may ask to be held (a fetch's wait, a produce's acks='all' timeout): ten minutes."""


def integer(name: str, value: Any, low: int, high: int = INT64_MAX) -> int:
    """An int (a numpy integer too, not a bool) in [low, high]."""
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidRequestError(f"{name} must be an int in [{low}, {high}], got {_shown(value)}")
    return value


def optional_integer(name: str, value: Any, low: int, high: int = INT64_MAX) -> int | None:
    """None, or ``integer``."""
    return None if value is None else integer(name, value, low, high)


def one_of(name: str, value: Any, allowed: tuple) -> Any:
    """One of ``allowed``, of the same plain type (a numpy integer is taken as an int; a bool,
    a float or an array never matches: ``in`` would compare them by value or element-wise)."""
    if isinstance(value, np.integer):
        value = int(value)
    if not any(type(value) is type(choice) and value == choice for choice in allowed):
        raise InvalidRequestError(f"{name} must be one of {allowed}, got {_shown(value)}")
    return value


def text(name: str, value: Any, max_length: int = 1024, empty: bool = False) -> str:
    """A str of at most ``max_length`` characters, non-empty unless ``empty``."""
    if not isinstance(value, str) or len(value) > max_length or (not value and not empty):
        raise InvalidRequestError(f"{name} must be a{'' if empty else ' non-empty'} string of at most "
                                  f"{max_length} characters, got {_shown(value)}")
    return value


def optional_text(name: str, value: Any, max_length: int = 1024) -> str | None:
    """None, or a possibly empty ``text``."""
    return None if value is None else text(name, value, max_length, empty=True)


def buffer(name: str, value: Any) -> Any:
    """Bytes of a record batch: bytes, bytearray, memoryview or a 1-d uint8 numpy array."""
    if isinstance(value, np.ndarray):
        if value.dtype != np.uint8 or value.ndim != 1:
            raise InvalidRequestError(f"{name} must be a 1-d uint8 array, got {value.dtype} of shape {value.shape}")
        return value
    if isinstance(value, (bytes, bytearray)):
        return value
    if isinstance(value, memoryview):
        if value.ndim != 1 or value.itemsize != 1:
            raise InvalidRequestError(f"{name} must be a byte buffer, got a {value.format!r} memoryview")
        return value
    raise InvalidRequestError(f"{name} must be bytes (or a uint8 array), got {type(value).__name__}")


def sequence(name: str, value: Any, max_length: int = 1_000_000) -> list | tuple:
    """A list or tuple of at most ``max_length`` items (their types are checked by the caller)."""
    if not isinstance(value, (list, tuple)) or len(value) > max_length:
        raise InvalidRequestError(f"{name} must be a list of at most {max_length} items, got {_shown(value)}")
    return value


def rows(name: str, value: Any, width: int, max_length: int = 1_000_000) -> list | tuple:
    """A list of ``width``-long lists or tuples (offsets, (topic, partition) pairs), as clients send them."""
    found = sequence(name, value, max_length)
    for row in found:
        if not isinstance(row, (list, tuple)) or len(row) != width:
            raise InvalidRequestError(f"each item of {name} must be a list of {width}, got {_shown(row)}")
    return found


def mapping(name: str, value: Any, required: tuple[str, ...] = (), allowed: frozenset | None = None) -> dict:
    """A dict with every ``required`` key and, when ``allowed`` is given, no other."""
    if not isinstance(value, dict):
        raise InvalidRequestError(f"{name} must be a dict, got {type(value).__name__}")
    missing = [k for k in required if k not in value]
    unknown = [k for k in value if allowed is not None and k not in allowed]
    if missing or unknown:
        raise InvalidRequestError(f"{name} is missing {missing} or has unknown keys {unknown[:5]}")
    return value


def _shown(value: Any) -> str:
    text_ = repr(value)
    return (text_ if len(text_) <= 60 else text_[:57] + "...") + f" ({type(value).__name__})"
