"""Random sequences of log operations against ModelLog (Redpanda's opfuzz, with hypothesis).

Rules: append, roll, truncate_to, delete_records (retention), flush, rolled
segments synced later (as the replica does) and reported, clean reopen, crash
(reopen without close), and a torn tail (the last batch cut mid-way on disk, as a
crash during the copy leaves it). After every step the real log holds exactly the
model's records, offsets strictly increase with no holes, and both ends agree.
"""

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage.log import PartitionLog
from tests.support.builders import read_all
from tests.support.model_log import ModelLog

CONFIG = TopicConfig(segment_bytes=2048, index_interval_bytes=128, retention_ms=-1)


class LogMachine(RuleBasedStateMachine):
    @initialize()
    def open(self):
        self.dir = tempfile.mkdtemp(prefix="raylog-model-")
        self.log = PartitionLog(self.dir, CONFIG)
        self.model = ModelLog()
        self.next_value = 0

    def teardown(self):
        self.log.close_unclean()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(count=st.integers(1, 12), size=st.integers(0, 300), lz4=st.booleans(), keyed=st.booleans())
    def append(self, count, size, lz4, keyed):
        values = [b"%d:" % (self.next_value + i) + b"v" * size for i in range(count)]
        keys = [b"k%d" % (self.next_value + i) for i in range(count)] if keyed else None
        self.next_value += count
        info = self.log.append(rb.build(values, keys=keys, timestamps_ms=self.next_value,
                                        compression="lz4" if lz4 else "none"))
        base = self.model.append(list(zip(keys or [None] * count, values)))
        assert info.base_offset == base

    @rule(data=st.data(), max_bytes=st.integers(1, 5000))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(self.model.log_start_offset, self.model.log_end_offset))
        buf = self.log.read(offset, max_bytes)
        batches = list(rb.iter_batches(buf))
        if offset == self.model.log_end_offset:
            assert buf == b""
        else:
            assert batches, "a read below the log end returns at least one batch"
            assert batches[0].base_offset <= offset <= batches[0].last_offset, \
                "the first batch returned holds the offset asked for: no batch is skipped"
            for before, after in zip(batches, batches[1:]):
                assert after.base_offset == before.last_offset + 1, "batches follow each other without a gap"
            assert sum(b.size for b in batches) == len(buf)
            assert len(batches) == 1 or len(buf) <= max_bytes

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(self.model.log_start_offset, self.model.log_end_offset))
        self.log.truncate_to(offset)
        self.model.truncate_to(offset)

    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.model.log_start_offset, self.model.log_end_offset))
        self.log.delete_records(offset)
        self.model.delete_records(offset)

    @rule(later=st.booleans())
    def sync_rolled_segments_later(self, later):
        """As the replica does: rolled segments stay unsynced, and recovery scans them, until reported."""
        self.log.sync_rolled_later = later

    @rule()
    def report_rolled_segments_synced(self):
        taken = self.log.take_unsynced()
        for seg in taken:
            seg.sync_data()
        self.log.mark_synced(taken)

    @rule()
    def flush(self):
        self.log.flush()

    @rule()
    def reopen(self):
        self.log.close()
        self.log = PartitionLog(self.dir, CONFIG)
        assert self.log.recovered_cleanly

    @rule()
    def crash(self):
        self.log.close_unclean()
        self.log = PartitionLog(self.dir, CONFIG)

    @precondition(lambda self: self.model.batches and not self.log.active.is_empty
                  and self.model.batches[-1][0] >= self.model.log_start_offset)
    @rule(fraction=st.floats(0.01, 0.99))
    def torn_tail(self, fraction):
        seg = self.log.active
        last = list(seg.batches())[-1]
        cut_at = last.position + max(1, int(last.size * fraction))
        path = seg.log_path
        self.log.close_unclean()
        os.truncate(path, cut_at)
        self.log = PartitionLog(self.dir, CONFIG)
        self.model.drop_last_batch()
        assert self.log.stats.bytes_cut_by_recovery > 0

    @invariant()
    def recovery_point_never_passes_the_log_end(self):
        assert 0 <= self.log.recovery_point <= self.log.log_end_offset

    @invariant()
    def same_records_as_the_model(self):
        assert (self.log.log_start_offset, self.log.log_end_offset) == \
            (self.model.log_start_offset, self.model.log_end_offset)
        got = read_all(self.log)
        assert got == self.model.records()
        offsets = [o for o, _, _ in got]
        assert offsets == list(range(self.model.log_start_offset, self.model.log_end_offset))


LogMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=20, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_log_matches_model = LogMachine.TestCase
