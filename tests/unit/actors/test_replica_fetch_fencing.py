"""A fetch parked at a leader is answered by that leader, at that epoch, or not at all.

A short chaos run (CI, 2026-11-27) lost 17,487 committed records of one partition: its leader
found a rotted batch at offset 6,027, handed over and, now a follower, cut its log there to fetch
the rest again. A follower's fetch parked at it (long-poll) woke on that change, read past the new
log end and got OffsetOutOfRangeError carrying it; the follower, still in the ISR, cut its own log
to 6,027 as Kafka's fetcher does when the leader's log ends below its own, and was the replica the
controller had just made leader. Kafka's delayed fetch checks the leader epoch again as it
completes; so must this one.

A PartitionReplica used without Ray, as in test_replica_read_view.py: its log, state and page are
plain objects. The controller and the new leader are stand-ins that answer the one call each
makes (the hand-over, and a leader-epoch lookup that stays in flight).
"""

from __future__ import annotations

import asyncio

import pytest

from actors.replica import PartitionReplica
from raylog.config import TopicConfig
from raylog.errors import FencedLeaderEpochError, KafkaStorageError, NotLeaderForPartitionError
from raylog.storage import batch as rb

RECORDS = 30
ROTTED = 10


class _Call:
    def __init__(self, answer):
        self._answer = answer

    def remote(self, *args):
        return self._answer(*args)


class _Controller:
    """Grants the hand-over: replica 1 leads at the next epoch, the reporter leaves the ISR."""

    def __init__(self, handle):
        async def granted(topic_id, partition, replica_id, leader_epoch, partition_epoch):
            return state(leader=1, epoch=leader_epoch + 1, isr=[1, 2], handle=handle)
        self.replica_corrupt = _Call(granted)


class _Peer:
    """The new leader as the demoted replica's fetcher sees it: its lookup never answers here."""

    def __init__(self):
        self.fetch = _Call(lambda *a: asyncio.get_running_loop().create_future())
        self.end_offset_for_epoch = _Call(lambda *a: asyncio.get_running_loop().create_future())


def state(leader: int, epoch: int, isr: list[int], handle=None) -> dict:
    return {"leader": leader, "leader_epoch": epoch, "partition_epoch": epoch, "replicas": [0, 1, 2], "isr": isr,
            "leader_handle": handle}


def rotted_leader(path) -> PartitionReplica:
    """Replica 0 leads at epoch 1, every follower caught up; a byte of the batch at ROTTED flips."""
    r = PartitionReplica("t", 0, 0, str(path), TopicConfig().to_dict(), "topic-id", None, None)
    r._started = True
    r._changed, r._sequence_moved = asyncio.Event(), asyncio.Condition()
    r._forever = asyncio.get_running_loop().create_future()
    r._apply_state(state(leader=0, epoch=1, isr=[0, 1, 2]))
    for i in range(RECORDS):
        r.log.append(rb.build([b"record %d" % i], timestamps_ms=[1]), leader_epoch=1)
    r.state.on_leader_append(r.log.log_end_offset)
    for follower in (1, 2):
        r.state.on_follower_fetch(follower, r.log.log_end_offset)
    assert r.state.high_watermark == RECORDS
    segment = next(p for p in path.iterdir() if p.suffix == ".log")
    data = segment.read_bytes()
    batch = next(b for b in rb.iter_batches(data) if b.base_offset == ROTTED)
    with open(segment, "r+b") as f:
        f.seek(batch.position + batch.size - 1)
        f.write(bytes([data[batch.position + batch.size - 1] ^ 0xFF]))
    r._controller = _Controller(_Peer())
    return r


def test_a_follower_fetch_parked_at_a_leader_that_hands_over_is_refused_not_told_its_cut_log_end(tmp_path):
    async def scenario():
        r = rotted_leader(tmp_path)
        parked = asyncio.get_running_loop().create_task(
            r._fetch(RECORDS, 1 << 20, 60_000, 1, replica_id=1, leader_epoch=1))
        await asyncio.sleep(0)
        # A consumer reaches the rotted batch: the replica reports it, and the controller's answer
        # makes it a follower that cuts its log at the batch.
        with pytest.raises(KafkaStorageError):
            await r._fetch(ROTTED, 1 << 20, 0, 1, replica_id=-1, leader_epoch=-1)
        await r._corruption_report
        assert r.log.log_end_offset == ROTTED, "the demoted replica cut its log at the rotted batch"
        # Unanswered, the parked fetch would return empty at its 60 s deadline: the wait ends on
        # the role change, however slow the machine.
        with pytest.raises((NotLeaderForPartitionError, FencedLeaderEpochError)):
            await parked
        await r.close()
    asyncio.run(scenario())


def test_a_consumer_fetch_parked_at_a_leader_that_steps_down_is_refused(tmp_path):
    """The same for a consumer: what a replica no longer leading says of its log is not the partition's."""
    async def scenario():
        r = rotted_leader(tmp_path)
        parked = asyncio.get_running_loop().create_task(r._fetch(RECORDS, 1 << 20, 60_000, 1, -1, -1))
        await asyncio.sleep(0)
        r._apply_state(state(leader=1, epoch=2, isr=[0, 1, 2], handle=_Peer()))
        with pytest.raises((NotLeaderForPartitionError, FencedLeaderEpochError)):
            await parked
        await r.close()
    asyncio.run(scenario())
