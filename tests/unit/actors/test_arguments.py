"""actors/arguments.py: whatever reaches an actor method is either returned as the checked
plain value or refused with InvalidRequestError, never another exception (numpy arrays,
whose comparisons are element-wise, included: CI's hostile-input run sent acks=array([]))."""

from __future__ import annotations

import math

import numpy as np
import pytest

from actors import arguments as args
from raylog.errors import InvalidRequestError

HOSTILE = [
    np.array([], dtype=np.int64), np.array([1]), np.array([0, 1]), np.array([[1]]), np.float64("nan"),
    math.inf, -1.5, 1.0, True, None, "1", b"\x01", [1], (1,), {1: 1}, {1}, object(), np.bool_(True),
]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_one_of_returns_an_allowed_plain_value_or_refuses(value):
    try:
        got = args.one_of("acks", value, (-1, 0, 1))
    except InvalidRequestError:
        return
    assert type(got) is int and got in (-1, 0, 1)


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_every_helper_refuses_what_it_does_not_take_with_its_own_error(value):
    checks = [
        lambda: args.integer("n", value, 0),
        lambda: args.optional_integer("n", value, 0),
        lambda: args.text("name", value),
        lambda: args.optional_text("name", value),
        lambda: args.buffer("records", value),
        lambda: args.sequence("items", value),
        lambda: args.rows("items", value, 2),
        lambda: args.mapping("config", value),
    ]
    for check in checks:
        try:
            got = check()
        except InvalidRequestError:
            continue
        assert not isinstance(got, np.ndarray) or got.dtype == np.uint8, (check, got)


def test_numpy_integers_are_taken_as_ints():
    assert type(args.one_of("acks", np.int64(-1), (-1, 0, 1))) is int
    assert type(args.integer("n", np.int32(7), 0)) is int


def test_one_of_a_string_choice():
    assert args.one_of("policy", "delete", ("delete", "compact")) == "delete"
    with pytest.raises(InvalidRequestError):
        args.one_of("policy", np.str_("nope"), ("delete", "compact"))
