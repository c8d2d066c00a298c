"""The same-node produce channel over a real Unix socket, with a produce coroutine standing in
for the replica's (the replica runs its own produce behind it: tests/integration cover that)."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid

import pytest

from raylog import errors, produce_channel
from raylog.produce_channel import ProduceChannel, ProduceChannelServer

pytestmark = pytest.mark.skipif(not produce_channel.available, reason="abstract Unix sockets are Linux's")


class Replica:
    """An event loop on a thread serving a channel, as a replica's does."""

    def __init__(self, produce):
        self.name = produce_channel.socket_name(uuid.uuid4().hex[:8], 0, 0, 1)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ProduceChannelServer(self.name, produce)
        self.run(self.server.start())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def stop(self):
        self.run(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def replica_factory():
    made = []

    def make(produce):
        made.append(Replica(produce))
        return made[-1]
    yield make
    for r in made:
        r.stop()


def test_requests_are_answered_with_produces_response_matched_by_id(replica_factory):
    seen = []

    async def produce(records, acks, epoch, timeout_ms):
        seen.append((bytes(records), acks, epoch, timeout_ms))
        if records == b"slow":
            await asyncio.sleep(0.2)  # answered after the ones sent behind it
        return (len(seen), len(records), 7, 0, False)

    replica = replica_factory(produce)
    channel = ProduceChannel(replica.name)
    try:
        slow = channel.produce(b"slow", 1, 3, 1000)
        fast = [channel.produce(b"x" * n, -1, None, 500) for n in (1, 2, 100_000)]
        assert [f.result(10)[1] for f in fast] == [1, 2, 100_000]
        assert slow.result(10)[1] == 4
        assert seen[0] == (b"slow", 1, 3, 1000) and seen[1] == (b"x", -1, None, 500)
    finally:
        channel.close()


def test_a_raylog_error_comes_back_as_itself_with_its_fields(replica_factory):
    async def produce(records, acks, epoch, timeout_ms):
        if records == b"range":
            raise errors.OffsetOutOfRangeError("out", log_start_offset=5, log_end_offset=9)
        if records == b"bug":
            raise KeyError("oops")
        raise errors.NotLeaderForPartitionError("t-0: not the leader")

    replica = replica_factory(produce)
    channel = ProduceChannel(replica.name)
    try:
        with pytest.raises(errors.NotLeaderForPartitionError, match="not the leader") as caught:
            channel.produce(b"a", 1, None, 100).result(10)
        assert caught.value.retriable
        with pytest.raises(errors.OffsetOutOfRangeError) as caught:
            channel.produce(b"range", 1, None, 100).result(10)
        assert (caught.value.log_start_offset, caught.value.log_end_offset) == (5, 9)
        with pytest.raises(errors.ActorCallError, match="KeyError"):
            channel.produce(b"bug", 1, None, 100).result(10)
        # The connection outlives errors.
        with pytest.raises(errors.NotLeaderForPartitionError):
            channel.produce(b"b", 1, None, 100).result(10)
    finally:
        channel.close()


def test_a_replica_that_goes_away_fails_waiting_requests_as_retriable(replica_factory):
    release = None

    async def produce(records, acks, epoch, timeout_ms):
        nonlocal release
        release = asyncio.Event()
        await release.wait()
        return (0, 0, 0, 0, False)

    replica = replica_factory(produce)
    channel = ProduceChannel(replica.name)
    waiting = channel.produce(b"a", 1, None, 100)
    replica.run(replica.server.close())
    with pytest.raises(errors.ReplicaNotAvailableError) as caught:
        waiting.result(10)
    assert caught.value.retriable
    with pytest.raises(errors.ReplicaNotAvailableError):
        channel.produce(b"b", 1, None, 100).result(10)
    channel.close()
    with pytest.raises(OSError):
        ProduceChannel(replica.name, timeout_s=2)  # nothing listens there any more


def test_a_peer_that_is_not_a_producer_is_dropped_without_buffering_its_claim(replica_factory):
    calls = []

    async def produce(records, acks, epoch, timeout_ms):
        calls.append(records)
        return (0, 0, 0, 0, False)

    replica = replica_factory(produce)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.settimeout(10)
    raw.connect("\0" + replica.name[1:])
    raw.sendall(produce_channel.REQUEST.pack(produce_channel.MAX_REQUEST_BYTES + 1, 1, 1, -1, 100))
    assert raw.recv(1) == b""  # closed by the replica
    raw.close()
    assert calls == []
    channel = ProduceChannel(replica.name)  # others are still served
    assert channel.produce(b"ok", 1, None, 100).result(10) == (0, 0, 0, 0, False)
    channel.close()
