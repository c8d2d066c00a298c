"""What a replica publishes on its read view while its files change (issue 31, findings 5 and 6).

A PartitionReplica used without Ray: its log, its state and its page are plain objects; the
truncation is the one a follower makes after a leader change (``_truncate``)."""

from __future__ import annotations

import asyncio
import time

from actors.replica import PartitionReplica
from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage.log import PartitionLog
from raylog.storage.read_view import ROLE_NONE, ReadView


def replica(path) -> PartitionReplica:
    return PartitionReplica("t", 0, 0, str(path), TopicConfig().to_dict(), "topic-id", None, None)


def test_a_truncation_below_the_high_watermark_never_publishes_a_high_watermark_past_the_log_end(tmp_path):
    """Finding 5: the truncation's generation bump published the old high watermark before the
    state heard of the cut, so readers at the log end saw records above it and spun."""
    r = replica(tmp_path)
    for i in range(10):
        r.log.append(rb.build([b"%d" % i], timestamps_ms=[1]))
    r.state.on_leader_append(r.log.log_end_offset)
    r.state.high_watermark = 10  # as a leader alone in its ISR had it
    view = ReadView(tmp_path)
    seen = []
    publish = r._publish_view

    def recording():
        publish()
        seen.append(view.snapshot())
    r.log.on_files_changing = recording
    r._truncate(6)
    assert seen, "the truncation published its generation bumps"
    assert all(s.high_watermark <= s.log_end_offset for s in seen), [(s.high_watermark, s.log_end_offset) for s in seen]
    view.close()
    asyncio.run(r.close())


def test_a_replica_says_no_one_reads_its_files_until_its_log_is_open(tmp_path, monkeypatch):
    """Finding 6: a restarted replica ran recovery before its page writer marked the old page odd.
    What a reader sees of the page at the moment the log starts opening (recovery) is recorded."""
    first = replica(tmp_path)
    first.log.append(rb.build([b"x"], timestamps_ms=[1]))
    first._lease_until = time.monotonic() + 60
    first._publish_view()
    asyncio.run(first.close())
    view = ReadView(tmp_path)
    seen = []
    opening = PartitionLog.__init__

    def look_then_open(self, *args, **kwargs):
        seen.append(view.snapshot())
        opening(self, *args, **kwargs)
    monkeypatch.setattr(PartitionLog, "__init__", look_then_open)
    again = replica(tmp_path)
    monkeypatch.undo()
    assert seen and seen[0].role == ROLE_NONE and seen[0].generation % 2 == 1
    view.close()
    asyncio.run(again.close())
