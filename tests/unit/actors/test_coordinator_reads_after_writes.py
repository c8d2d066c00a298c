"""A committed-offsets read is answered after every commit that reached the coordinator before it.

A short chaos run (fresh-clone CI, stop 66) saw a librdkafka group's committed offset of one
partition move back, 12625 then 12585, around a 5 s pause of its coordinator. The Kafka listener
stops waiting for a commit after offsets_commit_timeout_ms, but the call still runs at the
coordinator. The partition's next owner asked for the committed offset meanwhile, and
fetch_offsets read the coordinator's state without waiting for the commit being written ahead of
it. So the new owner started from the older offset and committed below the newer one. Kafka's
coordinator never answers with a commit that was accepted and not yet stored.

A GroupCoordinator used without Ray, as the replica is in test_replica_fetch_fencing.py: its
offsets partition's leader is a stand-in whose produce answers only when the test lets it.
"""

from __future__ import annotations

import asyncio

from actors.coordinator import GroupCoordinator


class _Leader:
    """The offsets partition's leader: a produce is held until ``release`` is set."""

    def __init__(self):
        self.writing = asyncio.Event()
        self.release = asyncio.Event()

    async def call(self, method: str, *args, **kwargs):
        assert method == "produce"
        self.writing.set()
        await self.release.wait()


async def _coordinator(leader: _Leader) -> GroupCoordinator:
    coordinator = GroupCoordinator(0, {})
    loaded = asyncio.get_running_loop().create_future()
    loaded.set_result(None)  # its partition replayed: empty
    coordinator._loaded, coordinator._lock = loaded, asyncio.Lock()
    coordinator._call_leader = leader.call
    return coordinator


def test_a_fetch_of_committed_offsets_waits_for_the_commit_being_written_ahead_of_it():
    async def scenario():
        leader = _Leader()
        coordinator = await _coordinator(leader)
        commit = asyncio.create_task(coordinator.commit_offsets("g", None, -1, [["t", 2, 12625, ""]]))
        await leader.writing.wait()
        fetch = asyncio.create_task(coordinator.fetch_offsets("g"))
        await asyncio.sleep(0)  # the fetch runs until it waits, or answers
        leader.release.set()
        await commit
        return await fetch

    assert asyncio.run(scenario()) == [["t", 2, 12625, ""]]


def test_a_fetch_with_no_write_ahead_of_it_answers_from_the_stored_offsets():
    async def scenario():
        leader = _Leader()
        leader.release.set()
        coordinator = await _coordinator(leader)
        await coordinator.commit_offsets("g", None, -1, [["t", 0, 5, "m"], ["t", 1, 7, ""]])
        return await coordinator.fetch_offsets("g", [["t", 1]]), await coordinator.fetch_offsets("other")

    assert asyncio.run(scenario()) == ([["t", 1, 7, ""]], [])
