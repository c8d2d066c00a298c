"""A connection's pipelined produce requests issue their appends in the order they came (no Ray):
whatever order their decoding ends in, and whether or not a request issues anything at all."""

from __future__ import annotations

import asyncio
import random

from raylog.kafka.broker_api import SubmitOrder


async def _requests(seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    order = SubmitOrder()
    issued: list[int] = []

    async def request(ticket: int, decode_s: float, issues: bool) -> None:
        try:
            await asyncio.sleep(decode_s)
            if issues:
                await order.turn(ticket)
                issued.append(ticket)
        finally:
            order.done(ticket)
            order.done(ticket)  # a second call (an ended request's cleanup) changes nothing

    plan = [(order.ticket(), rng.random() / 200, rng.random() < 0.7) for _ in range(12)]
    await asyncio.gather(*(request(*step) for step in plan))
    return issued, [ticket for ticket, _, issues in plan if issues]


def test_appends_are_issued_in_request_order_whatever_order_decoding_ends_in():
    for seed in range(30):
        issued, expected = asyncio.run(_requests(seed))
        assert issued == expected, seed


def test_a_request_cancelled_while_it_waits_its_turn_does_not_hold_the_next():
    async def main() -> list[int]:
        order = SubmitOrder()
        first, second, third = order.ticket(), order.ticket(), order.ticket()
        issued: list[int] = []

        async def request(ticket: int) -> None:
            try:
                await order.turn(ticket)
                issued.append(ticket)
            finally:
                order.done(ticket)

        waiting = asyncio.create_task(request(second))
        last = asyncio.create_task(request(third))
        await asyncio.sleep(0)
        waiting.cancel()  # its connection closed while the first request was still decoding
        await asyncio.sleep(0)
        order.done(first)
        await last
        return issued

    assert asyncio.run(main()) == [2]
