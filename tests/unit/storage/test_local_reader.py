"""LocalReader answers exactly what the replica's fetch answers, or None, through appends, rolls,
retention, delete_records, truncation and compaction (hypothesis drives the log; the reader
reads the real files its page points at), while a second reader on its own thread reads
throughout and checks every record it is given: a reader racing the writer never returns a
wrong or torn record. Readers sleeping on the page are woken by a publication, across processes."""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage.local_reader import LocalReader
from raylog.storage.log import PartitionLog
from raylog.storage import futex
from raylog.storage.batch import iter_batches
from raylog.storage.read_view import ROLE_FOLLOWER, ROLE_LEADER, ROLE_NONE, ReadView, ReadViewWriter

TS = 1_700_000_000_000


LEASE_NS = 3600 * 10**9


def publish(writer: ReadViewWriter, log: PartitionLog, hw: int, epoch: int = 3, role: int = ROLE_LEADER) -> None:
    """What the replica publishes, holding a lease (its controller answering its heartbeats)."""
    writer.lease(time.monotonic_ns() + LEASE_NS)
    writer.publish(hw, epoch, role, **log.reader_state())


class RacingReader(threading.Thread):
    """Reads the partition from random offsets, and onward, for as long as the writer works, and
    records every record that is not the one written at its offset. Each value names the offset
    it was appended at and a serial number, so a record from a stale, torn or wrong position
    cannot pass."""

    def __init__(self, directory: str, written: dict[int, set[bytes]], seed: int):
        super().__init__(daemon=True)
        self.reader = LocalReader(directory)
        self.written = written
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.wrong: list[str] = []
        self.records_checked = 0

    def run(self) -> None:
        offset = 0
        while not self.stop.is_set():
            snap = self.reader.snapshot()
            if snap is None or self.rng.random() < 0.2:
                offset = self.rng.randint(0, max(0, snap.log_end_offset if snap else 0))
            got = self.reader.read(offset, self.rng.choice([300, 5000, 1 << 20]), leader_epoch=3)
            if got is None or not got[0]:
                offset = snap.log_start_offset if snap else 0
                time.sleep(0.0001)
                continue
            data, hw = got
            for batch in iter_batches(data):
                cols = batch.columns()
                for o, v in zip(batch.offsets(cols), cols.values.to_pylist()):
                    o = int(o)
                    self.records_checked += 1
                    if o >= hw:
                        self.wrong.append(f"offset {o} at or above the high watermark {hw}")
                    elif not v.startswith(b"%d:" % o) or v not in self.written.get(o, ()):
                        self.wrong.append(f"offset {o} holds {v[:30]!r}, never written there")
                offset = batch.last_offset + 1

    def finish(self) -> list[str]:
        self.stop.set()
        self.join(30)
        self.reader.close()
        return self.wrong


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
        self.written: dict[int, set[bytes]] = {}
        self.serial = 0
        self.racer = RacingReader(self.dir, self.written, seed=segment_bytes)
        # Switch threads every 10 us instead of 5 ms, so the racing reader's steps fall between
        # the writer's: inside an append, a roll, a truncation, a compaction swap.
        self.switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        self.racer.start()

    def _publish(self) -> None:
        self.hw = min(self.hw, self.log.log_end_offset)
        publish(self.writer, self.log, self.hw)

    def teardown(self):
        wrong = self.racer.finish()
        sys.setswitchinterval(self.switch_interval)
        self.log.close()
        self.writer.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        assert not wrong, wrong[:5]

    @rule(count=st.integers(1, 30), size=st.integers(0, 60), keys=st.integers(1, 4))
    def append(self, count, size, keys):
        first = self.log.log_end_offset
        values = []
        for i in range(count):
            self.serial += 1
            values.append(b"%d:%d:" % (first + i, self.serial) + self.rng.randbytes(self.rng.randint(0, size)))
            # Written before the append: the racing reader may see the record as soon as it lands.
            self.written.setdefault(first + i, set()).add(values[-1])
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


def test_a_follower_reader_reads_only_a_follower_page_and_a_leader_reader_only_a_leader_page(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig())
    log.append(rb.build([b"a", b"b", b"c"], timestamps_ms=[TS] * 3))
    writer = ReadViewWriter(tmp_path)
    follower_reader, leader_reader = LocalReader(tmp_path, ROLE_FOLLOWER), LocalReader(tmp_path)
    publish(writer, log, 2, role=ROLE_FOLLOWER)
    assert follower_reader.read(0, 1 << 20, leader_epoch=3) == (bytes(log.read(0, 1 << 20, 2)), 2)
    assert leader_reader.read(0, 1 << 20, leader_epoch=3) is None
    publish(writer, log, 3, role=ROLE_NONE)  # a follower out of the ISR, or a replica with no role
    assert follower_reader.read(0, 1 << 20) is None and leader_reader.read(0, 1 << 20) is None
    publish(writer, log, 3)
    assert leader_reader.read(0, 1 << 20) == (bytes(log.read(0, 1 << 20, 3)), 3)
    assert follower_reader.read(0, 1 << 20) is None
    log.close()


def _wait_for_publication(directory: str, started, result) -> None:
    view = ReadView(directory)
    snap = view.snapshot()
    begun = time.monotonic()  # before the parent is told: a preemption here still counts as asleep
    started.set()
    view.wait(snap, 20.0)
    result.put((time.monotonic() - begun, view.snapshot().high_watermark))


def test_a_reader_asleep_on_the_page_in_another_process_wakes_when_the_replica_publishes(tmp_path):
    if not futex.available:
        import pytest
        pytest.skip("futexes are Linux's")
    log = PartitionLog(tmp_path, TopicConfig())
    writer = ReadViewWriter(tmp_path)
    publish(writer, log, 0)
    ctx = multiprocessing.get_context("fork")
    started, result = ctx.Event(), ctx.Queue()
    sleeper = ctx.Process(target=_wait_for_publication, args=(str(tmp_path), started, result))
    sleeper.start()
    try:
        assert started.wait(20)
        time.sleep(0.5)  # it sleeps in the kernel now: nothing else would end its wait before 20 s
        log.append(rb.build([b"x"], timestamps_ms=[TS]))
        publish(writer, log, 1)
        slept, hw = result.get(timeout=15)
    finally:
        sleeper.join(5)
        sleeper.kill()
    assert hw == 1
    assert 0.4 < slept < 15, f"slept {slept:.3f} s: woken by the publication, not the 20 s timeout"
    log.close()


def test_waiting_on_several_pages_wakes_on_any_of_them(tmp_path):
    if not futex.available:
        import pytest
        pytest.skip("futexes are Linux's")
    views, writers, logs = [], [], []
    for name in ("p0", "p1", "p2"):
        d = tmp_path / name
        d.mkdir()
        logs.append(PartitionLog(d, TopicConfig()))
        writers.append(ReadViewWriter(d))
        publish(writers[-1], logs[-1], 0)
        views.append(ReadView(d))
    words = [v.wait_word(v.snapshot()) for v in views]
    waker = threading.Timer(0.3, lambda: publish(writers[2], logs[2], 0, epoch=4))
    begun = time.monotonic()
    waker.start()
    futex.wait_any(words, 20.0)
    slept = time.monotonic() - begun
    waker.join()
    assert views[2].snapshot().leader_epoch == 4
    assert 0.2 < slept < 15, f"slept {slept:.3f} s"
    # A word that already moved returns at once.
    begun = time.monotonic()
    futex.wait_any(words, 20.0)
    assert time.monotonic() - begun < 15
    for log in logs:
        log.close()


def two_segments(tmp_path) -> PartitionLog:
    """Offsets 0-36 in the first segment (37 one-record batches), 37-73 in the second."""
    size = len(rb.build([b"r00"], timestamps_ms=[TS]))
    log = PartitionLog(tmp_path, TopicConfig(segment_bytes=37 * size))
    for i in range(74):
        log.append(rb.build([b"r%02d" % i], timestamps_ms=[TS]))
    assert [seg.base_offset for seg in log.segments][:2] == [0, 37], [seg.base_offset for seg in log.segments]
    return log


def test_a_batch_header_that_is_not_one_ends_the_read_and_never_skips_to_the_next_segment(tmp_path):
    """Finding 6 of issue 31: a length field that made no sense ended the segment's scan, and the
    next segment's batches came back: offsets 10-36 vanished for that reader."""
    log = two_segments(tmp_path)
    writer = ReadViewWriter(tmp_path)
    publish(writer, log, log.log_end_offset)
    reader = LocalReader(tmp_path)
    before = reader.read(10, 1 << 20)
    assert before is not None and rb.RecordBatch(before[0], 0).base_offset <= 10
    position = next(b.position for b in rb.iter_batches(bytes(log.read(0, 1 << 20, 37))) if b.base_offset == 10)
    with open(tmp_path / "00000000000000000000.log", "r+b") as f:  # bit rot in batch 10's length field
        f.seek(position + 8)
        f.write((2**31 - 1).to_bytes(4, "big"))
    reader.close()
    reader = LocalReader(tmp_path)
    assert reader.read(10, 1 << 20) is None, "the caller must fetch from the leader, which refuses visibly"
    assert reader.read(37, 1 << 20) is not None, "past the damage, reads go on"
    log.close()


def test_a_page_whose_lease_lapsed_is_not_read_until_the_replica_renews_it(tmp_path):
    """Finding 4 of issue 31: the page was trusted for 30 s and touched on every heartbeat, even by
    a leader whose lease had lapsed (paused, fenced): readers on its node stalled with it."""
    log = PartitionLog(tmp_path, TopicConfig())
    log.append(rb.build([b"x"] * 3, timestamps_ms=[TS] * 3))
    writer = ReadViewWriter(tmp_path)
    publish(writer, log, 3)
    reader = LocalReader(tmp_path)
    assert reader.read(0, 1 << 20) is not None
    writer.touch(time.monotonic_ns() - 1)  # its heartbeats stopped being answered: the lease ran out
    assert reader.read(0, 1 << 20) is None
    writer.touch(time.monotonic_ns() + LEASE_NS)
    assert reader.read(0, 1 << 20) is not None
    log.close()


def test_a_page_whose_writer_pid_now_names_another_process_is_not_read(tmp_path):
    """A SIGKILLed replica's page stays; its pid can be reused by a process that is not the writer."""
    log = PartitionLog(tmp_path, TopicConfig())
    log.append(rb.build([b"x"], timestamps_ms=[TS]))
    writer = ReadViewWriter(tmp_path)
    publish(writer, log, 1)
    reader = LocalReader(tmp_path)
    assert reader.read(0, 1 << 20) is not None
    writer._start_ticks += 1  # the same pid, started at another time: another process
    publish(writer, log, 1, epoch=4)
    assert reader.read(0, 1 << 20) is None
    log.close()


def test_a_replica_opening_its_log_says_first_that_no_one_reads_there(tmp_path):
    """The restarted replica's recovery may cut what the previous process's page described: the page
    says so (no role, an odd generation) before the log is opened."""
    log = PartitionLog(tmp_path, TopicConfig())
    log.append(rb.build([b"x"] * 3, timestamps_ms=[TS] * 3))
    publish(ReadViewWriter(tmp_path), log, 3)
    reader = LocalReader(tmp_path)
    assert reader.read(0, 1 << 20) is not None
    ReadViewWriter(tmp_path)  # the next process, before its log opens
    snap = reader.snapshot()
    assert snap.role == ROLE_NONE and snap.generation % 2 == 1
    assert reader.read(0, 1 << 20) is None
    log.close()


def test_the_page_has_its_blocks_before_it_is_mapped(tmp_path):
    """A store into an unallocated page of a shared mapping on a full disk kills the writer (SIGBUS)."""
    ReadViewWriter(tmp_path)
    page = os.stat(tmp_path / "read-view")
    assert page.st_size == 4096 and page.st_blocks * 512 >= 4096


def test_closing_a_view_while_another_thread_reads_it_crashes_nothing(tmp_path):
    """A producer's sender thread may be reading a page when the caller closes its view (or the
    interpreter exits): the page was unmapped under it and the process died of SIGSEGV. Run in a
    child so a crash is this test's failure, not the suite's end."""
    log = PartitionLog(tmp_path, TopicConfig())
    log.append(rb.build([b"x"] * 3, timestamps_ms=[TS] * 3))
    publish(ReadViewWriter(tmp_path), log, 3)
    log.close()
    code = f"""
import threading
from raylog.storage.read_view import ReadView
seen = []
for _ in range(200):
    view = ReadView({str(tmp_path)!r})
    reading = threading.Event()
    def read(view):
        while True:
            snap = view.snapshot()
            reading.set()
            if snap is not None and snap.valid_until_ns == 0:
                seen.append(snap)
                return
    thread = threading.Thread(target=read, args=(view,))
    thread.start()
    reading.wait()
    view.close()
    del view
    thread.join()
print(len(seen))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert done.returncode == 0, f"the reader died: {done.returncode} {done.stderr[-2000:]}"
    assert done.stdout.strip() == "200", "after close a reader sees a page with no lease, which no one trusts"
