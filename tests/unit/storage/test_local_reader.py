"""LocalReader answers exactly what the replica's fetch answers, or None, through appends, rolls,
retention, delete_records, truncation and compaction (hypothesis drives the log; the reader
reads the real files its page points at)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage.local_reader import LocalReader
from raylog.storage.log import PartitionLog
from raylog.storage.read_view import ROLE_FOLLOWER, ROLE_LEADER, ReadView, ReadViewWriter

TS = 1_700_000_000_000


def publish(writer: ReadViewWriter, log: PartitionLog, hw: int, epoch: int = 3, role: int = ROLE_LEADER) -> None:
    writer.publish(hw, epoch, role, **log.reader_state())


class LocalReadMachine(RuleBasedStateMachine):
    @initialize(compact=st.booleans(), segment_bytes=st.sampled_from([700, 2000, 1 << 20]))
    def open(self, compact, segment_bytes):
        self.dir = tempfile.mkdtemp(prefix="local-reader-")
        self.config = TopicConfig(segment_bytes=segment_bytes, index_interval_bytes=256,
                                  cleanup_policy="compact" if compact else "delete")
        self.log = PartitionLog(self.dir, self.config)
        self.writer = ReadViewWriter(self.dir)
        self.log.on_files_changing = self._publish
        self.hw = 0
        self._publish()
        self.reader = LocalReader(self.dir)
        self.rng = random.Random(0)

    def _publish(self) -> None:
        self.hw = min(self.hw, self.log.log_end_offset)
        publish(self.writer, self.log, self.hw)

    def teardown(self):
        self.log.close()
        self.writer.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(count=st.integers(1, 30), size=st.integers(0, 60), keys=st.integers(1, 4))
    def append(self, count, size, keys):
        values = [self.rng.randbytes(self.rng.randint(0, size)) for _ in range(count)]
        data = rb.build(values, keys=[b"k%d" % self.rng.randrange(keys) for _ in range(count)],
                        timestamps_ms=[TS + i for i in range(count)], compression=self.rng.choice(["lz4", "none"]))
        self.log.append(data)
        self._publish()

    @rule(fraction=st.floats(0, 1))
    def advance_high_watermark(self, fraction):
        self.hw = self.hw + int((self.log.log_end_offset - self.hw) * fraction)
        self._publish()

    @rule()
    def roll(self):
        self.log.roll()
        self._publish()

    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction):
        # Replication truncates at batch boundaries above the high watermark (unclean: below it).
        target = self.log.log_start_offset + int((self.log.log_end_offset - self.log.log_start_offset) * fraction)
        self.log.truncate_to(target)
        self._publish()

    @rule(fraction=st.floats(0, 1))
    def delete_records(self, fraction):
        target = self.log.log_start_offset + int((self.hw - self.log.log_start_offset) * fraction)
        self.log.delete_records(max(target, self.log.log_start_offset))
        self._publish()

    @rule()
    def compact(self):
        if self.config.cleanup_policy == "compact":
            self.log.compact(self.hw)
            self._publish()

    @rule(offset_fraction=st.floats(0, 1), max_bytes=st.sampled_from([1, 300, 5000, 1 << 20]))
    def read_matches_fetch(self, offset_fraction, max_bytes):
        start, end = self.log.log_start_offset, self.log.log_end_offset
        offset = start + int((end - start) * offset_fraction)
        got = self.reader.read(offset, max_bytes, leader_epoch=3)
        assert got is not None, "a stable page must serve every offset in [log start, log end]"
        data, hw = got
        assert hw == self.hw
        assert data == bytes(self.log.read(offset, max_bytes, self.hw))

    @invariant()
    def outside_the_log_the_reader_declines(self):
        if not hasattr(self, "log"):
            return
        assert self.reader.read(self.log.log_end_offset + 1, 1000) is None
        if self.log.log_start_offset > 0:
            assert self.reader.read(self.log.log_start_offset - 1, 1000) is None


TestLocalReads = LocalReadMachine.TestCase
TestLocalReads.settings = settings(max_examples=40, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])


def test_a_change_of_files_during_a_read_makes_the_reader_decline(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=600))
    writer = ReadViewWriter(tmp_path)
    for i in range(20):
        log.append(rb.build([b"v%d" % i] * 5, timestamps_ms=[TS] * 5))
    publish(writer, log, log.log_end_offset)
    reader = LocalReader(tmp_path)
    assert reader.read(0, 1 << 20)[0] == bytes(log.read(0, 1 << 20, log.log_end_offset))

    # The replica announces a change (odd generation) before it touches the files.
    log.on_files_changing = lambda: publish(writer, log, log.log_end_offset)
    with log.changing_files():
        assert reader.read(0, 1 << 20) is None
    assert reader.read(0, 1 << 20) is not None

    # A page from another leader epoch, a follower's page, or a dead writer's page is not served.
    assert reader.read(0, 100, leader_epoch=4) is None
    publish(writer, log, log.log_end_offset, role=ROLE_FOLLOWER)
    assert reader.read(0, 100) is None
    log.close()


def test_a_writer_killed_mid_publication_leaves_a_page_readers_skip_and_the_next_writer_fixes(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig())
    log.append(rb.build([b"x"] * 3, timestamps_ms=[TS] * 3))
    writer = ReadViewWriter(tmp_path)
    publish(writer, log, 3)
    with open(tmp_path / "read-view", "r+b") as f:  # sequence left odd, as a SIGKILL mid-write would
        f.seek(8)
        f.write((writer._sequence + 1).to_bytes(8, "little"))
    view = ReadView(tmp_path)
    assert view.snapshot() is None
    before = writer._base_generation
    writer = ReadViewWriter(tmp_path)  # the restarted replica
    publish(writer, log, 3)
    snap = view.snapshot()
    assert snap is not None and snap.generation > before and snap.writer_pid == os.getpid()
    log.close()
