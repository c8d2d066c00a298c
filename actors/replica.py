"""PartitionReplica: the Ray actor that owns one partition replica's log on its node.

An async actor, so a long-poll fetch waits on an event without blocking
appends. Every state change (validate, assign offsets, append, advance the
high watermark) runs without an ``await`` in between, so concurrent calls
never see half an append. The actor is placed by placement/ (pinned to its
node, num_cpus=0) and restarted by Ray on that node after a crash; reopening
the PartitionLog recovers whatever the crash left.

Replication (Kafka's design; the pure decisions are in replica_state.py):

- The controller tells each replica its role with ``set_state`` (leader
  epoch, partition epoch, replicas, ISR, the leader's handle); older states
  are ignored. A replica Ray restarted after a crash starts with no role and
  serves nothing until the controller, which saw it die, tells it again.
- A **follower** first asks the leader for the end offset of its own latest
  leader epoch and truncates what lies beyond (KIP-101), then pulls with the
  same ``fetch`` consumers use, several MB per call, and appends with
  ``append_as_follower``, recording producer sequences and epochs as it goes.
- The **leader** learns each follower's log end from its fetch offset,
  advances the high watermark, completes acks='all' produces once the high
  watermark passes them (a follower's fetch wakes them; no polling loop), and
  proposes ISR changes to the controller, which fences stale leaders.
- Consumers read only below the high watermark; followers read to the log end.

Liveness (Kafka's broker heartbeats and fencing, per replica): every replica
heartbeats the controller every replica_heartbeat_interval_ms, and a leader
holds a *lease* of replica_session_timeout_ms (less a margin) from the moment
it sent the last heartbeat the controller answered. The controller fences a
replica whose heartbeats stop for the session timeout (a paused or hung
process Ray still thinks alive) and elects another leader; since the lease
counts from before the controller's receipt, it lapses before the controller
can fence. A leader whose lease lapsed acknowledges nothing (produce,
acks='all' completions, delete_records) until a heartbeat answers again, and
that answer carries the partition's current state: a leader that was fenced
while it slept steps down. A controller that answers no heartbeat for the
session timeout and is not seen running (actors/process_state.py: a starved
one is waited for) is killed (once, by whichever replica gets there first) and
Ray restarts it from its metadata log.

Imports stay lean (no pyspark, pandas, pyarrow or raylog clients): every
replica is its own process and each import costs memory per partition.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np

from actors import arguments as args
from actors import process_state
from actors.metrics import ReplicaMetrics
from actors.replica_state import FOLLOWER, LEADER, NONE, ReplicaState, out_of_range_target, truncation_offset
from raylog import memory
from raylog.config import ClusterConfig, TopicConfig
from raylog.errors import (
    FencedLeaderEpochError, InvalidOffsetError, InvalidRequestError, KafkaStorageError, KafkaTimeoutError,
    LeaderNotAvailableError, NotEnoughReplicasError, NotLeaderForPartitionError, OffsetNotAvailableError,
    OffsetOutOfRangeError, OutOfOrderSequenceError, RaylogError,
)
from raylog.logs import configure_actor_logging, get_logger, log_event
from raylog.naming import CONTROLLER_ACTOR_NAME
from raylog import produce_channel
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ErrorReply, FetchBytesReply, ProduceBytesReply
from raylog.storage import files
from raylog.storage.dir_lock import DirectoryLock
from raylog.storage.batch import HEADER_SIZE, NO_PRODUCER_ID, RecordBatch, iter_batches
from raylog.storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochCache
from raylog.storage.log import PartitionLog, wall_clock_ms
from raylog.storage.read_view import ROLE_FOLLOWER, ROLE_LEADER, ROLE_NONE, ReadViewWriter
from raylog.storage.producer_state import BatchOutcome, ProducerStateManager, ProducerStateTable

COMPACTION_INTERVAL_S = 60.0
"""A compacted partition with dirty records runs a cleaning round at most this often (Kafka's
log.cleaner.backoff.ms is 15 s, but its cleaner also waits for a dirty ratio of 0.5)."""
RETENTION_CHECK_DELAY_S = 5.0
"""Maintenance runs no sooner than this after it is scheduled, as Kafka checks retention every
log.retention.check.interval.ms (5 min): records appended with old timestamps stay readable for
a moment, and a deadline that stays due cannot spin."""
MAX_TIMER_S = 3600.0
"""A maintenance deadline further away than this is re-checked then (the clock may jump)."""
SEQUENCE_WAIT_S = 10.0
"""How long a batch whose sequence skips ahead (or a first-seen producer's batch with sequence > 0)
waits for the batches before it; then it fails, not appended, and the producer re-sequences it."""
ACKS_ALL_TIMEOUT_MS = 30_000
"""How long an acks='all' produce waits for the ISR when the producer names no timeout."""
HW_CHECKPOINT_DELAY_S = 1.0
"""A changed high watermark is checkpointed this long after the change, once (not per append)."""
FOLLOWER_BACKOFF_S = (0.05, 1.0)
"""A follower whose fetch or append failed waits from the first to the second, doubling."""
LEASE_MARGIN_MS = 1000
"""A leader's lease ends this much (at most a tenth of the session) before the controller could fence
it: room for the two clocks' rates and the fencing check's own period."""
READ_LOCATION_LEASE_WAIT_S = 1.0
"""How long read_location waits for a heartbeat's answer when the replica holds no lease yet."""
CORRUPTION_REPORT_INTERVAL_S = 1.0
"""How often a leader holding a corrupt batch asks the controller again to hand over, while readers
still ask for the batch: it refuses while no other in-sync replica is alive (or the report was
stale), and one may be back in sync, or heartbeat again, at any time."""
DIRECTORY_LOCK_WAIT_S = 60.0
"""How long a starting replica waits for the previous process of its directory to exit (Ray ends the
processes of a removed node within about 15 s here) before it fails to start, and is started again."""
PARTITION_METADATA_HEADER = "raylog-partition 1"
TOPIC_CONFIG_HEADER = "raylog-topic-config 1"

logger = get_logger(__name__)


class PartitionReplica:
    """Owns ``PartitionLog(directory)`` for one replica of topic-partition; methods are named after
    Kafka requests."""

    def __init__(self, topic: str, partition: int, replica_id: int, directory: str, config: dict,
                 topic_id: str = "", cluster: dict | None = None, initial_state: dict | None = None,
                 config_version: int = 0):
        memory.tune(memory.REPLICA_TRIM_THRESHOLD_BYTES)
        configure_actor_logging()
        self.topic = topic
        self.partition = partition
        self.replica_id = replica_id
        self.directory = directory
        self.topic_id = topic_id
        self.cluster = ClusterConfig(**(cluster or {}))
        self._claim_directory()
        # The previous process of this replica may still be writing here: a zombie of a removed Ray
        # node runs for seconds after the node's restart brought this one up. Its lock goes with it.
        self._directory_lock = DirectoryLock(directory, "the replica's previous process has not exited")
        self._directory_lock.acquire(timeout_s=DIRECTORY_LOCK_WAIT_S)
        # Ray restarts an actor with its creation arguments: a config altered since is on disk.
        saved = _read_saved_config(directory)
        if saved is not None and saved[0] > config_version:
            config_version, config = saved
        self.config = TopicConfig.from_mapping(config)
        self._config_version = config_version
        """The version of the topic config held (the controller counts its alterations)."""
        # The page readers on this node read the segments by (local_reader.py): it says no one reads
        # here before the log opens (recovery may cut what the last process's page described), then
        # is published on every wake (new high watermark, new state), around every change of files,
        # and with the lease on heartbeats.
        self._view = ReadViewWriter(directory)
        opening = time.monotonic()
        self.log = PartitionLog(directory, self.config, on_roll=self._on_roll)
        if not self.log.recovered_cleanly and (self.log.log_end_offset or self.log.stats.bytes_cut_by_recovery):
            log_event(logger, "replica_recovery", topic=topic, partition=partition, replica=replica_id,
                      bytes_cut=self.log.stats.bytes_cut_by_recovery, segments_scanned=self.log.stats.segments_recovered,
                      log_end_offset=self.log.log_end_offset, ms=round((time.monotonic() - opening) * 1000, 1))
        self.log.sync_rolled_later = True
        self.log.cleaner.dedupe_buffer_bytes = self.cluster.log_cleaner_dedupe_buffer_size
        self.log.page_cache_window_bytes = self.cluster.log_page_cache_window_bytes
        self.epochs = LeaderEpochCache(self.log.directory)
        if self.epochs.latest_epoch() == UNDEFINED_EPOCH and self.log.log_end_offset > self.log.log_start_offset:
            self._rebuild_epochs()
        self.snapshots = ProducerStateManager(self.log.directory)
        self.producers: ProducerStateTable = self.snapshots.load(self.log)
        hw = files.read_checkpoint(self.log.directory / files.HIGH_WATERMARK_FILE)
        self._checkpointed_hw_lost = hw if hw is not None and hw > self.log.log_end_offset else None
        """The high watermark this replica had checkpointed, when its log as opened ends below it:
        records it knew were committed are gone from its disk. Until it has copied them again it is
        not in sync, and the controller must not elect it (status() says so)."""
        if self._checkpointed_hw_lost is not None:
            log_event(logger, "replica_lost_committed_records", logging.WARNING, topic=topic, partition=partition,
                      replica=replica_id, log_end_offset=self.log.log_end_offset, high_watermark=hw)
        self.state = ReplicaState(replica_id, self.log.log_start_offset, self.log.log_end_offset,
                                  hw if hw is not None else self.log.log_start_offset, wall_clock_ms)
        self.state.min_insync_replicas = self.config.min_insync_replicas
        self.log.on_files_changing = self._publish_view
        # Producers on this node send batches over a Unix socket to the same produce(), and the
        # Kafka listener here fetches through it (started on the first read_location, which is
        # how they find it).
        self._channel = produce_channel.ProduceChannelServer(
            produce_channel.socket_name(topic_id, partition, replica_id, os.getpid()), self.produce,
            lambda: self.config.max_message_bytes, self._channel_fetch) if produce_channel.available else None
        self._initial_state = initial_state if not _restarted() else None
        self._started = False
        self._generation = 0
        self._leader = None
        self._needs_truncation = False
        self._changed: asyncio.Event | None = None
        self._sequence_moved: asyncio.Condition | None = None
        self._acks_waiting: list[tuple[int, asyncio.Future]] = []
        self._hw_checkpointed = self.state.high_watermark
        self._hw_timer = None
        self._lag_timer = None
        self._maintenance_timer: asyncio.TimerHandle | None = None
        self._maintenance_due_ms = 0
        self._compaction: asyncio.Task | None = None
        self._last_compaction = time.monotonic()
        self._syncing = False
        self._controller = None
        self._forever: asyncio.Future | None = None
        self._deleted = False
        self._lease_until = 0.0
        """time.monotonic() until which this replica may act as a leader (see the module doc)."""
        self._corrupt_from: int | None = None
        """The first offset found corrupt on disk (a fetch's CRC check), cut and fetched again once
        this replica follows."""
        self._corruption_report: asyncio.Task | None = None
        """The replica_corrupt call under way, if any: one at a time."""
        self._corruption_reported_at = float("-inf")
        """time.monotonic() of the last answer (or failure) to it: asked again CORRUPTION_REPORT_INTERVAL_S on."""
        self._heartbeat: asyncio.Future | None = None
        self._heartbeat_sent_at = 0.0
        self._controller_pid: int | None = None
        self._controller_process: process_state.ProcessIdentity | None = None
        """The controller that last answered a heartbeat, to tell a busy one from a stopped one."""
        self._controller_busy_logged = False
        self._silence_mark: tuple = (None, 0.0, None)
        """(the unanswered heartbeat, when its silence was first noticed, the controller's CPU seconds then)."""
        self._idle_looks = 0
        """Looks in a row that saw the silent controller idle (process_state.IDLE_LOOKS)."""
        self._controller_seen_working_at = float("-inf")
        """time.monotonic() of the last look that saw the silent controller working."""
        self._follower_error: str | None = None
        self.replication_stats = {"follower_fetches_served": 0, "follower_bytes_served": 0,
                                  "fetches_as_follower": 0, "bytes_fetched_as_follower": 0}
        """Plain counters (bench/replication_bench.py reads them): replication's calls and bytes."""
        self._follower_fetches_open = 0
        """Followers' fetches this replica has taken and not answered yet (Kafka's fetch purgatory
        size, for followers): parked ones wait here for data or their max wait."""
        self.metrics = ReplicaMetrics(topic, partition, replica_id)

    # --- start-up -------------------------------------------------------------------------

    def _claim_directory(self) -> None:
        """A directory left by an earlier topic of the same name (deleted while this node was down)
        holds another topic id: its files are removed before the log opens."""
        path = Path(self.directory) / files.PARTITION_METADATA_FILE
        owner = files.read_text_value(path)
        if owner is not None and self.topic_id and owner != self.topic_id:
            shutil.rmtree(self.directory, ignore_errors=True)
        if self.topic_id and owner != self.topic_id:
            files.make_directory(Path(self.directory))
            files.write_text_value(path, PARTITION_METADATA_HEADER, self.topic_id)

    def _rebuild_epochs(self) -> None:
        """The epoch checkpoint is missing (an older raylog, or lost): rebuild it from batch headers."""
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 8 * 1024 * 1024)
            if not data:
                break
            for batch in iter_batches(data):
                self.epochs.assign(batch.leader_epoch, max(batch.base_offset, self.log.log_start_offset))
                offset = batch.next_offset

    def _ensure_started(self) -> None:
        """Create the loop-bound primitives and apply the creation-time role (first call only)."""
        if self._started:
            return
        self._started = True
        self._changed = asyncio.Event()
        self._sequence_moved = asyncio.Condition()
        self._forever = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().create_task(self._heartbeat_loop())
        self._schedule_maintenance()
        if self._initial_state is not None:
            self._apply_state(self._initial_state)
            self._initial_state = None

    def _on_roll(self, offset: int) -> None:
        self.snapshots.take_snapshot(self.producers, offset)

    # --- maintenance ----------------------------------------------------------------------

    # No loop wakes an idle replica: after each append (and each maintenance run) one timer is armed
    # for the next moment retention, a time-based flush or compaction has work, if any. Hundreds of
    # replicas on a node each polling every few seconds add up; bench/partitions_bench.py measures
    # idle replicas beside as many bare Ray actors.

    def _schedule_maintenance(self) -> None:
        if self._deleted or not self._started:
            return
        if self._unsynced_rolls():
            return
        due = self.log.next_maintenance_ms()
        if self._compaction_wanted():
            at = wall_clock_ms() + max(0.0, self._last_compaction + COMPACTION_INTERVAL_S - time.monotonic()) * 1000
            due = int(at) if due is None else min(due, int(at))
        if due is None:
            return
        due = max(due, wall_clock_ms() + int(RETENTION_CHECK_DELAY_S * 1000))
        if self._maintenance_timer is not None:
            if self._maintenance_due_ms <= due:
                return
            self._maintenance_timer.cancel()
        delay = min(max(0.0, (due - wall_clock_ms()) / 1000), MAX_TIMER_S)
        self._maintenance_due_ms = due
        self._maintenance_timer = asyncio.get_running_loop().call_later(delay, self._maintenance_due)

    def _compaction_wanted(self) -> bool:
        return (self.config.cleanup_policy == "compact" and self._compaction is None
                and self.log.cleaner.dirty(self.state.high_watermark))

    def _maintenance_due(self) -> None:
        self._maintenance_timer = None
        if self._deleted:
            return
        try:
            self.maintain(compact=False)
        except KafkaStorageError as exc:  # a full disk: retention and flush are tried again next time
            logger.warning("%s-%d: maintenance failed: %s", self.topic, self.partition, exc)
        if self._compaction_wanted() and time.monotonic() - self._last_compaction >= COMPACTION_INTERVAL_S:
            self._compaction = asyncio.get_running_loop().create_task(self._compact())
        self._schedule_maintenance()

    async def _compact(self) -> None:
        """One cleaning round, yielding to produce and fetch after every batch it reads."""
        try:
            for _ in self.log.cleaner.steps(wall_clock_ms(), self.state.high_watermark):
                await asyncio.sleep(0)
                if self._deleted:
                    return
        except Exception:  # noqa: BLE001 - the log changed under the round (truncated, closed): next round
            logger.exception("compaction of %s-%d stopped", self.topic, self.partition)
        finally:
            self._compaction = None
            self._last_compaction = time.monotonic()
        self._schedule_maintenance()

    def _unsynced_rolls(self) -> bool:
        """Start the fsync of freshly rolled segments on a thread; True while one runs."""
        if self._syncing:
            return True
        segments = self.log.take_unsynced()
        if not segments:
            return False
        self._syncing = True
        asyncio.get_running_loop().create_task(self._sync(segments))
        return True

    async def _sync(self, segments) -> None:
        try:
            await asyncio.to_thread(lambda: [seg.sync_data() for seg in segments])
        finally:
            self._syncing = False
            self.log.mark_synced(segments)  # the recovery point moves past them (or they are handed out again)
        self._schedule_maintenance()

    def maintain(self, compact: bool = True) -> dict:
        """Apply retention and the time-based flush now, and (for compacted topics, when ``compact``)
        run a whole cleaning round."""
        deleted = self.log.delete_old_segments()
        if deleted:
            self._advance_log_start(self.log.log_start_offset)
        self.log.maybe_flush()
        compacted = 0
        if compact and self.config.cleanup_policy == "compact":
            compacted = self.log.compact(self.state.high_watermark)
            self._last_compaction = time.monotonic()
        return {"segments_deleted": deleted, "bytes_compacted": compacted}

    # --- the controller's side ------------------------------------------------------------

    async def attach(self) -> dict:
        """The replica's status; the controller calls it when the replica starts or restarts."""
        self._ensure_started()
        return self.status()

    async def watch(self) -> None:
        """Never returns: the controller keeps one of these in flight per replica, and Ray fails
        it when this process dies. That is how the controller learns of a death without pinging."""
        self._ensure_started()
        await self._forever

    async def set_config(self, config: dict, config_version: int) -> dict:
        """Take the topic's altered config (ignored when older than the one held): retention, segment
        size and time, cleanup policy, flush, max_message_bytes and min_insync_replicas apply to the
        next produce, roll and maintenance run, and a maintenance run starts now, so a lowered
        retention deletes old segments at once. The newest config is kept on disk for restarts."""
        config = args.mapping("config", config)
        config_version = args.integer("config_version", config_version, 0, args.INT32_MAX)
        self._ensure_started()
        self._apply_config(config, config_version)
        return {"config_version": self._config_version, "config": self.config.to_dict()}

    def _apply_config(self, config: dict, version: int) -> None:
        if version <= self._config_version or self._deleted:
            return
        new = TopicConfig.from_mapping(config)
        try:
            files.write_text_value(self.log.directory / files.TOPIC_CONFIG_FILE, TOPIC_CONFIG_HEADER,
                                   json.dumps({"version": version, "config": new.to_dict()}))
        except OSError as exc:  # a full disk: applied in memory; after a restart the controller tells it again
            logger.warning("%s-%d: cannot save the altered topic config: %s", self.topic, self.partition, exc)
        compaction_starts = new.cleanup_policy == "compact" and self.config.cleanup_policy != "compact"
        self.config = new
        self._config_version = version
        self.log.reconfigure(new)
        self.state.min_insync_replicas = new.min_insync_replicas
        logger.info("%s-%d replica %d: topic config version %d applied", self.topic, self.partition,
                    self.replica_id, version)
        if compaction_starts:
            self._last_compaction = time.monotonic() - COMPACTION_INTERVAL_S
        if self._started:
            if self._maintenance_timer is not None:
                self._maintenance_timer.cancel()
            self._maintenance_timer = None
            self._maintenance_due()  # retention as altered, now (then the next run is scheduled as usual)

    async def set_state(self, state: dict) -> dict:
        """Take the role the controller decided (ignored when older than the one held)."""
        self._ensure_started()
        self._apply_state(_checked_state(state))
        return self.status()

    def _apply_state(self, st: dict) -> None:
        if st.get("deleted"):
            self._become_none(NotLeaderForPartitionError(f"{self.topic}-{self.partition} was deleted"))
            return
        if st.get("config") is not None:
            self._apply_config(st["config"], st["config_version"])
        same_epoch = st["leader_epoch"] == self.state.leader_epoch
        freed = "ineligible" in st and self.state.set_ineligible(st["ineligible"], st["leader_epoch"],
                                                                 st["partition_epoch"])
        if not self.state.is_newer(st["leader_epoch"], st["partition_epoch"]):
            if freed and self.state.role == LEADER:
                self._maybe_propose_isr()  # a drained node restarted: its caught-up follower rejoins now
            return  # whatever the role: a late, older state must not make an offline replica lead again
        replicas, isr, leader = st["replicas"], st["isr"], st["leader"]
        if leader == self.replica_id:
            if not (same_epoch and self.state.role == LEADER):
                self._generation += 1
                self._leader = None
                self.epochs.assign(st["leader_epoch"], self.log.log_end_offset)
            self.state.become_leader(st["leader_epoch"], st["partition_epoch"], replicas, isr)
            self._high_watermark_moved()
            self._schedule_lag_check()
        elif leader < 0 or self.replica_id not in replicas:
            self.state.leader_epoch, self.state.partition_epoch = st["leader_epoch"], st["partition_epoch"]
            self._become_none(LeaderNotAvailableError(f"{self.topic}-{self.partition} has no leader"))
        else:
            new_leader = not (same_epoch and self.state.role == FOLLOWER and self.state.leader_id == leader)
            self.state.become_follower(leader, st["leader_epoch"], st["partition_epoch"], replicas, isr)
            if self._corrupt_from is not None and self._corrupt_from < self.log.log_end_offset:
                self._truncate(self._corrupt_from)  # the leader has these records: fetched again
                self._corrupt_from = None
            self._fail_waiting(NotLeaderForPartitionError(
                f"replica {self.replica_id} of {self.topic}-{self.partition} is no longer the leader"))
            if new_leader or self._leader is None:
                self._generation += 1
                self._leader = st["leader_handle"]
                self._needs_truncation = True
                asyncio.get_running_loop().create_task(self._follow(self._generation))
        self._wake()

    def _become_none(self, error: BaseException) -> None:
        self._generation += 1
        self._leader = None
        self.state.become_none()
        self._fail_waiting(error)
        self._publish_view()

    def status(self) -> dict:
        import ray

        return {
            "topic": self.topic, "partition": self.partition, "replica_id": self.replica_id,
            "topic_id": self.topic_id, "pid": os.getpid(), "ray_node_id": ray.get_runtime_context().get_node_id(),
            "directory": self.directory, "role": self.state.role, "leader_id": self.state.leader_id,
            "leader_epoch": self.state.leader_epoch, "partition_epoch": self.state.partition_epoch,
            "isr": sorted(self.state.isr), "log_start_offset": self.log.log_start_offset,
            "log_end_offset": self.log.log_end_offset, "high_watermark": self.state.high_watermark,
            "latest_epoch": self.epochs.latest_epoch(),
            "replication": {**self.replication_stats, "follower_fetches_open": self._follower_fetches_open},
            "lease_ms_left": max(0, int((self._lease_until - time.monotonic()) * 1000)),
            "follower_error": self._follower_error, "config_version": self._config_version,
            "lost_committed": self._lost_committed(),
        }

    def _lost_committed(self) -> bool:
        """Whether this replica's log still ends below the high watermark it checkpointed before it
        opened (its disk lost committed records and it has not copied them back yet)."""
        lost = self._checkpointed_hw_lost
        if lost is not None and self.log.log_end_offset >= lost:
            self._checkpointed_hw_lost = lost = None
        return lost is not None

    # --- liveness: heartbeats, the lease, a silent controller --------------------------------

    async def _heartbeat_loop(self) -> None:
        interval_s = self.cluster.replica_heartbeat_interval_ms / 1000
        while not self._deleted:
            try:
                await self._heartbeat_round(interval_s)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug here must not end the heartbeats (the lease would lapse)
                logger.exception("%s-%d replica %d: heartbeat failed", self.topic, self.partition, self.replica_id)
            self._report_metrics()
            await asyncio.sleep(interval_s)

    def _report_metrics(self) -> None:
        self.metrics.report(self.log.log_end_offset, self.state.high_watermark, self.log.size_bytes,
                            len(self.log.segments), self.state.follower_end if self.state.role == LEADER else None)

    async def _heartbeat_round(self, wait_s: float, judge_silence: bool = True) -> None:
        """Send a heartbeat, unless one is still unanswered (a silent controller must not find a pile
        of them when it wakes), and wait up to ``wait_s`` for the answer: it renews the lease and
        carries the partition's state when the controller holds a newer one than ours. With
        ``judge_silence``, a controller silent past the session timeout may be restarted."""
        self._view.touch(int(self._lease_until * 1e9))
        if self._heartbeat is None:
            try:
                controller = self._controller_handle()
            except ValueError:
                return  # no controller registered (restarting): try again next round
            self._heartbeat_sent_at = time.monotonic()
            ref = controller.replica_heartbeat.remote(self.topic_id, self.partition, self.replica_id,
                                                      self.state.leader_epoch, self.state.partition_epoch,
                                                      self._config_version, high_watermark=self.state.high_watermark,
                                                      pid=os.getpid())
            self._heartbeat = asyncio.wrap_future(ref.future())
        heartbeat, sent_at = self._heartbeat, self._heartbeat_sent_at
        try:
            reply = await asyncio.wait_for(asyncio.shield(heartbeat), wait_s)
        except asyncio.TimeoutError:
            if not judge_silence:
                return
            silent_s = time.monotonic() - sent_at
            session_s = self.cluster.replica_session_timeout_ms / 1000
            if self._silence_mark[0] is not heartbeat:
                # What the controller's CPU clock said early in the silence: a controller that used
                # its share of a CPU since the last look was working, whatever its threads do now.
                self._silence_mark = (heartbeat, time.monotonic(), process_state.cpu_seconds(self._controller_process))
            if silent_s > session_s:
                working = await asyncio.to_thread(process_state.is_working, self._controller_process,
                                                  since=self._silence_mark[1:])
                if heartbeat.done():
                    return  # answered while we looked: not silent after all (the next round reads it)
                # The next check measures from this one: a controller that hung after a busy spell
                # stops counting as working one round later, not after its spell averages out.
                now = time.monotonic()
                self._silence_mark = (heartbeat, now, process_state.cpu_seconds(self._controller_process))
                self._idle_looks = self._idle_looks + 1 if working is False else 0
                if working:
                    self._controller_seen_working_at = now
                idle_s = now - max(sent_at, self._controller_seen_working_at)
                if process_state.should_restart(silent_s, session_s, working, self._idle_looks, idle_s):
                    if self._heartbeat is heartbeat:
                        self._heartbeat = None
                    await self._restart_silent_controller(silent_s)
                elif not self._controller_busy_logged:
                    self._controller_busy_logged = True
                    log_event(logger, "controller_busy", logging.WARNING, topic=self.topic, partition=self.partition,
                              replica=self.replica_id, silent_ms=round(silent_s * 1000),
                              consequence="waiting_for_its_answer")
            return
        except Exception:  # noqa: BLE001 - the controller died or restarts: find it again next round
            if self._heartbeat is heartbeat:
                self._heartbeat = None
            self._controller = None
            return
        if self._heartbeat is heartbeat:
            self._heartbeat = None
        self._idle_looks = 0
        self._controller_pid = reply["controller_pid"]
        self._controller_process = process_state.ProcessIdentity.from_list(reply["controller_process"])
        self._controller_busy_logged = False
        if reply["member"]:
            session_ms = self.cluster.replica_session_timeout_ms
            lease_ms = session_ms - min(LEASE_MARGIN_MS, session_ms // 10)
            self._lease_until = max(self._lease_until, sent_at + lease_ms / 1000)
            self._view.touch(int(self._lease_until * 1e9))
        if reply["state"] is not None and not self._deleted:
            self._apply_state(reply["state"])

    def _lease_held(self) -> bool:
        return time.monotonic() < self._lease_until

    def _check_lease(self) -> None:
        if not self._lease_held():
            raise NotLeaderForPartitionError(
                f"replica {self.replica_id} of {self.topic}-{self.partition} holds no lease: the controller has "
                f"answered none of its heartbeats for {self.cluster.replica_session_timeout_ms} ms (it was paused, "
                "or the controller was), so it may have been replaced; it acknowledges nothing until the "
                "controller answers again")

    async def _ensure_lease(self) -> None:
        """Before acting as the leader with a lapsed lease: one heartbeat, whose answer may say this
        replica was fenced meanwhile (the role check after it then refuses the request)."""
        if not self._lease_held():
            await self._heartbeat_round(min(self.cluster.request_timeout_ms / 1000,
                                            self.cluster.replica_session_timeout_ms / 1000), judge_silence=False)

    async def _restart_silent_controller(self, silent_s: float) -> None:
        """The controller answered no heartbeat for the session timeout and is not seen working
        (actors/process_state.py): it is paused or hung (Ray only notices dead processes). Have Ray
        kill and restart it; the new one replays its metadata log. Every replica sees the same
        silence, so the first to claim that controller process in Ray's key-value store does it,
        once. A replica that never had an answer leaves it to others: it cannot tell a hung
        controller from one still replaying a long metadata log."""
        pid, namespace = self._controller_pid, self.cluster.namespace
        # The start time tells a later process that reuses the pid from the one already claimed.
        claim = f"{pid}-{self._controller_process.start_ticks}" if self._controller_process else f"{pid}"

        def kill() -> bool:
            import ray
            from ray.experimental import internal_kv

            if pid is None or internal_kv._internal_kv_put(
                    f"controller-restart/{claim}", b"1", overwrite=False, namespace=namespace):
                return False
            ray.kill(ray.get_actor(CONTROLLER_ACTOR_NAME, namespace=namespace), no_restart=False)
            return True

        try:
            if await asyncio.to_thread(kill):
                log_event(logger, "controller_restarted", logging.WARNING, topic=self.topic, partition=self.partition,
                          replica=self.replica_id, controller_pid=pid, silent_ms=round(silent_s * 1000),
                          reason="no_heartbeat_answer")
        except Exception:  # noqa: BLE001 - not registered (already restarting): nothing to kill
            pass
        self._controller = None

    # --- leader: ISR and high watermark ------------------------------------------------------

    def _publish_view(self) -> None:
        # A follower's files are read only while it is in the ISR it last heard of: one that fell
        # behind would hold readers back (what it holds below its high watermark stays right).
        role = ROLE_LEADER if self.state.role == LEADER else \
            ROLE_FOLLOWER if self.state.role == FOLLOWER and self.replica_id in self.state.isr else ROLE_NONE
        # Capped at the log end: a truncation below the high watermark publishes before the state
        # hears of it, and a page with the high watermark past the log end keeps readers spinning.
        self._view.lease(int(self._lease_until * 1e9))
        self._view.publish(min(self.state.high_watermark, self.log.log_end_offset), self.state.leader_epoch, role,
                           **self.log.reader_state())

    def _wake(self) -> None:
        """Wake every parked fetch (new data or a new high watermark) and local readers."""
        self._publish_view()
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    def _high_watermark_moved(self) -> None:
        hw = self.state.high_watermark
        if self._maintenance_timer is None:
            self._schedule_maintenance()  # a compacted log may have become cleanable
        if self._acks_waiting:
            done = [(o, f) for o, f in self._acks_waiting if o <= hw]
            if done:
                self._acks_waiting = [(o, f) for o, f in self._acks_waiting if o > hw]
                short = len(self.state.isr) < self.config.min_insync_replicas
                leased = self._lease_held()
                for _, fut in done:
                    if fut.done():
                        continue
                    if not leased:
                        # Woken from a pause, this replica may have been replaced: the batch is retried
                        # (same sequence) at whoever leads now, which knows whether it has it.
                        fut.set_exception(NotLeaderForPartitionError(
                            f"{self.topic}-{self.partition}: replica {self.replica_id} lost its lease before the "
                            "batch was acknowledged"))
                    elif short:
                        fut.set_exception(NotEnoughReplicasError(
                            f"{self.topic}-{self.partition}: the batch was appended but the ISR shrank to "
                            f"{len(self.state.isr)}, below min_insync_replicas {self.config.min_insync_replicas}"))
                    else:
                        fut.set_result(None)
        self._wake()
        if hw != self._hw_checkpointed and self._hw_timer is None:
            self._hw_timer = asyncio.get_running_loop().call_later(HW_CHECKPOINT_DELAY_S, self._checkpoint_hw)

    def _checkpoint_hw(self) -> None:
        self._hw_timer = None
        if self._deleted:
            return
        hw = self.state.high_watermark
        try:
            files.write_checkpoint(self.log.directory / files.HIGH_WATERMARK_FILE, hw)
        except OSError as exc:  # a full disk: the next change tries again (a stale checkpoint only hides less)
            logger.warning("%s-%d: high watermark checkpoint failed: %s", self.topic, self.partition, exc)
            return
        self._hw_checkpointed = hw

    def _fail_waiting(self, error: BaseException) -> None:
        waiting, self._acks_waiting = self._acks_waiting, []
        for _, fut in waiting:
            if not fut.done():
                fut.set_exception(error)

    def _maybe_propose_isr(self) -> None:
        isr = self.state.isr_to_propose(self.cluster.replica_lag_time_max_ms)
        if isr is not None:
            self.state.propose(isr)
            asyncio.get_running_loop().create_task(self._propose_isr(isr))

    async def _propose_isr(self, isr) -> None:
        epochs = (self.state.leader_epoch, self.state.partition_epoch)
        try:
            controller = self._controller_handle()
            new = await controller.alter_isr.remote(self.topic, self.partition, self.replica_id, *epochs, sorted(isr))
        except Exception:  # noqa: BLE001 - refused (fenced) or unreachable: the controller decides next
            if (self.state.leader_epoch, self.state.partition_epoch) == epochs:
                self.state.on_isr_refused()
            return
        if self.state.role == LEADER and new["leader"] == self.replica_id and \
                new["leader_epoch"] == self.state.leader_epoch:
            if self.state.on_isr_committed(new["isr"], new["partition_epoch"],
                                           [r["replica_id"] for r in new["replicas"]]):
                self._high_watermark_moved()
            self._maybe_propose_isr()

    def _schedule_lag_check(self) -> None:
        if self._lag_timer is not None:
            self._lag_timer.cancel()
            self._lag_timer = None
        due = self.state.next_lag_deadline_ms(self.cluster.replica_lag_time_max_ms)
        if due is not None:
            delay = max(0.0, (due - wall_clock_ms()) / 1000)
            self._lag_timer = asyncio.get_running_loop().call_later(delay, self._lag_check)

    def _lag_check(self) -> None:
        self._lag_timer = None
        if self.state.role == LEADER:
            self._maybe_propose_isr()
            self._schedule_lag_check()

    def _controller_handle(self):
        if self._controller is None:
            import ray

            self._controller = ray.get_actor(CONTROLLER_ACTOR_NAME, namespace=self.cluster.namespace)
        return self._controller

    # --- follower ------------------------------------------------------------------------------

    async def _follow(self, generation: int) -> None:
        """Copy the leader's log until the role or generation changes. Nothing ends this loop but
        that: a failed fetch or append (the leader moved or died, a full disk, a log start that
        moved under the fetch) is reported once and retried with a backoff."""
        backoff = FOLLOWER_BACKOFF_S[0]
        while self._generation == generation and self.state.role == FOLLOWER and not self._deleted:
            leader = self._leader
            try:
                if leader is None:
                    raise LeaderNotAvailableError(f"{self.topic}-{self.partition} has no leader to follow now")
                if self._needs_truncation:
                    await self._truncate_by_epoch(leader, generation)
                else:
                    await self._fetch_from_leader(leader, generation)
                backoff = FOLLOWER_BACKOFF_S[0]
                self._follower_error = None
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - sorted below; the loop never dies
                err = _unwrap(exc)
                if self._generation != generation:
                    return
                if isinstance(err, OffsetOutOfRangeError):
                    self._fetch_out_of_range(err)
                elif isinstance(err, InvalidOffsetError):
                    self._needs_truncation = True  # our log and the leader's disagree: re-check by epoch
                text = f"{type(err).__name__}: {err}"
                if text != self._follower_error:
                    routine = isinstance(err, RaylogError) and not isinstance(err, (KafkaStorageError, InvalidOffsetError))
                    logger.log(logging.INFO if routine else logging.WARNING,
                               "%s-%d replica %d: following the leader failed (%s); retrying",
                               self.topic, self.partition, self.replica_id, text)
                self._follower_error = text
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, FOLLOWER_BACKOFF_S[1])

    async def _fetch_from_leader(self, leader, generation: int) -> None:
        response = await leader.fetch.remote(
            self.log.log_end_offset, self.cluster.replica_fetch_max_bytes,
            self.cluster.replica_fetch_wait_max_ms, 1, self.replica_id, self.state.leader_epoch)
        if self._generation != generation:
            return
        records, leader_hw, leader_start = response[0], response[1], response[2]
        self.replication_stats["fetches_as_follower"] += 1
        self.replication_stats["bytes_fetched_as_follower"] += len(records)
        if len(records):
            self._append_as_follower(records)
        # The leader's log start moves with delete_records and retention; a follower that kept its
        # own would serve the deleted records again after a failover (Kafka's followers take it from
        # every fetch response).
        if leader_start > self.log.log_start_offset:
            self._advance_log_start(min(leader_start, self.log.log_end_offset))
        self.state.on_follower_append(self.log.log_end_offset, leader_hw)
        self._publish_view()
        if self.state.high_watermark != self._hw_checkpointed and self._hw_timer is None:
            self._hw_timer = asyncio.get_running_loop().call_later(HW_CHECKPOINT_DELAY_S, self._checkpoint_hw)

    def _fetch_out_of_range(self, err: OffsetOutOfRangeError) -> None:
        action = out_of_range_target(self.log.log_end_offset, err.log_start_offset, err.log_end_offset)
        if action is None:
            self._needs_truncation = True
        elif action[0] == "start_at":
            self._truncate_fully(action[1])
        else:
            self._truncate(action[1])

    def _append_as_follower(self, records) -> None:
        first = RecordBatch(records, 0).base_offset
        if first < self.log.log_end_offset == self.log.log_start_offset:
            # The leader's log start is inside this batch (delete_records, retention) and our log is
            # empty from there: take the batch whole from its base, as Kafka's follower does on an
            # UnexpectedAppendOffsetException; the leader's log start, applied next, hides the records
            # below it again.
            self._truncate_fully(first)
        self.log.append_as_follower(records)
        for batch in iter_batches(records):
            if batch.leader_epoch > self.epochs.latest_epoch():
                self.epochs.assign(batch.leader_epoch, batch.base_offset)
        self.producers.record_batches(records)
        self._schedule_maintenance()

    def _advance_log_start(self, offset: int) -> None:
        """Move the log start up to ``offset`` (delete_records, the leader's, or retention's)."""
        if offset > self.log.log_start_offset:
            self.log.delete_records(offset)
        self.state.on_log_start_moved(self.log.log_start_offset)
        self.epochs.truncate_from_start(self.log.log_start_offset)
        self._publish_view()

    async def _truncate_by_epoch(self, leader, generation: int) -> None:
        """KIP-101: ask the leader where our latest epoch ends there, cut what lies beyond."""
        latest = self.epochs.latest_epoch()
        if latest == UNDEFINED_EPOCH:
            self._needs_truncation = False
            return
        epoch, end = await leader.end_offset_for_epoch.remote(latest, self.state.leader_epoch)
        if self._generation != generation:
            return
        target = truncation_offset(self.epochs, self.log.log_end_offset, latest, epoch, end,
                                   self.state.high_watermark)
        if target < self.log.log_end_offset:
            self._truncate(target)
        self._needs_truncation = False

    def _truncate(self, offset: int) -> None:
        cut_before, end_before = self.log.stats.bytes_cut_by_truncation, self.log.log_end_offset
        self.log.truncate_to(offset)
        end = self.log.log_end_offset
        log_event(logger, "truncation", topic=self.topic, partition=self.partition, replica=self.replica_id,
                  log_end_offset=end, records_cut=end_before - end,
                  bytes_cut=self.log.stats.bytes_cut_by_truncation - cut_before, leader_epoch=self.state.leader_epoch)
        self.epochs.truncate_from_end(end)
        self.snapshots.truncate(end)
        self.producers = self.snapshots.load(self.log)
        self.state.on_truncate(self.log.log_start_offset, end)

    def _truncate_fully(self, start_offset: int) -> None:
        self.log.truncate_fully_and_start_at(start_offset)
        self.epochs.clear()
        self.snapshots.clear()
        self.producers = ProducerStateTable()
        self.state.on_truncate(start_offset, start_offset)

    async def end_offset_for_epoch(self, epoch: int, leader_epoch: int = -1) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch: (the largest epoch <= ``epoch`` this leader knows, where it
        ended). Only the leader answers, at the caller's leader epoch."""
        epoch = args.integer("epoch", epoch, -1, args.INT32_MAX)
        self._check_leader(args.integer("leader_epoch", leader_epoch, -1, args.INT32_MAX))
        return self.epochs.end_offset_for(epoch, self.log.log_end_offset)

    def _check_leader(self, leader_epoch: int | None) -> None:
        if self.state.role != LEADER:
            if self.state.role == NONE and self.state.leader_id < 0:
                raise LeaderNotAvailableError(
                    f"replica {self.replica_id} of {self.topic}-{self.partition} has no role (offline or starting)")
            raise NotLeaderForPartitionError(
                f"replica {self.replica_id} of {self.topic}-{self.partition} is not the leader "
                f"(leader epoch {self.state.leader_epoch})")
        if leader_epoch is not None and leader_epoch >= 0 and leader_epoch != self.state.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.partition}: request at leader epoch {leader_epoch}, the leader is at "
                f"{self.state.leader_epoch}")

    # --- requests ------------------------------------------------------------------------------

    async def produce(self, records, acks: int = 1, leader_epoch: int | None = None,
                      timeout_ms: int = ACKS_ALL_TIMEOUT_MS) -> tuple:
        """Append one producer batch (a bytes-like buffer) and return where it landed, as a
        ProduceResponse tuple (see protocol.py for why a plain tuple).

        Idempotent batches (producer id set) are appended once, in sequence
        order: a retry returns the first append's response (or the error that
        rejected it), and a batch that overtook an earlier one waits for it.
        With acks='all' (-1) the answer waits until every ISR member has the
        batch; below min_insync_replicas it fails with NotEnoughReplicasError.
        """
        started = time.monotonic()
        records = args.buffer("records", records)
        acks = args.one_of("acks", acks, (-1, 0, 1))
        leader_epoch = args.optional_integer("leader_epoch", leader_epoch, -1, args.INT32_MAX)
        timeout_ms = args.integer("timeout_ms", timeout_ms, 0, args.MAX_WAIT_MS)
        self._ensure_started()
        self._check_leader(leader_epoch)
        await self._ensure_lease()
        self._check_leader(leader_epoch)
        self._check_lease()
        if acks == -1 and len(self.state.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition} has {len(self.state.isr)} in-sync replicas, below "
                f"min_insync_replicas {self.config.min_insync_replicas}; the batch was not appended")
        batch = RecordBatch(records, 0)
        pid = batch.producer_id if len(records) >= HEADER_SIZE else NO_PRODUCER_ID
        if pid == NO_PRODUCER_ID:
            response = self._append(records)
        else:
            response = await self._append_idempotent(records, batch, pid, leader_epoch)
        if acks == -1:
            await self._wait_replicated(response[1] + 1, timeout_ms)
        self.metrics.produced(0 if response[4] else response[1] - response[0] + 1, len(records),
                              time.monotonic() - started)
        return response

    async def _append_idempotent(self, records, batch: RecordBatch, pid: int, leader_epoch: int | None) -> tuple:
        epoch, base_seq, count = batch.producer_epoch, batch.base_sequence, batch.record_count
        start = time.monotonic()
        async with self._sequence_moved:
            while True:
                verdict, previous = self.producers.check(pid, epoch, base_seq)
                if verdict != ProducerStateTable.WAIT:
                    break
                remaining = start + SEQUENCE_WAIT_S - time.monotonic()
                if remaining <= 0:
                    # Never taken as a fresh start: the batches before it may still be on their way,
                    # and appending it first would reorder them. The producer re-sequences it from 0
                    # under a new epoch (KIP-360), which also covers producer state lost to retention.
                    known = "" if self.producers.knows(pid, epoch) else " (a producer or epoch this replica does not know)"
                    raise OutOfOrderSequenceError(
                        f"producer {pid} batch with sequence {base_seq}{known} waited {SEQUENCE_WAIT_S}s "
                        "for the batches before it; it was not appended")
                try:
                    await asyncio.wait_for(self._sequence_moved.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
                self._check_leader(leader_epoch)
                self._check_lease()
            if verdict == ProducerStateTable.DUPLICATE:
                if isinstance(previous, BaseException):
                    raise previous
                return (previous.base_offset, previous.last_offset, previous.log_append_time_ms,
                        self.log.log_start_offset, True)
            # Entering the condition's lock can wait (others hold it or queue for it), and a new state
            # may have arrived meanwhile: appending under a newer leader's epoch would make truncation
            # keep a batch this replica had no right to append.
            self._check_leader(leader_epoch)
            self._check_lease()
            try:
                response = self._append(records)
            except RaylogError as exc:
                if exc.retriable:
                    raise
                # Rejected for good: the sequence is used up, so the batches after it need not wait.
                self.producers.record(pid, epoch, base_seq, count, exc)
                self._sequence_moved.notify_all()
                raise
            self.producers.record(pid, epoch, base_seq, count, BatchOutcome(response[0], response[1], response[2]))
            self._sequence_moved.notify_all()
            return response

    def _append(self, records) -> tuple:
        info = self.log.append(records, self.state.leader_epoch)
        if self.state.on_leader_append(self.log.log_end_offset):
            self._high_watermark_moved()
        else:
            self._wake()
        self._schedule_maintenance()
        return (info.base_offset, info.last_offset, info.log_append_time_ms, self.log.log_start_offset, False)

    async def _wait_replicated(self, end_offset: int, timeout_ms: int) -> None:
        if self.state.high_watermark >= end_offset:
            self._check_lease()
            if len(self.state.isr) < self.config.min_insync_replicas:
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.partition}: appended, but the ISR is {len(self.state.isr)}, below "
                    f"min_insync_replicas {self.config.min_insync_replicas}")
            return
        fut = asyncio.get_running_loop().create_future()
        self._acks_waiting.append((end_offset, fut))
        try:
            await asyncio.wait_for(fut, timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise KafkaTimeoutError(
                f"{self.topic}-{self.partition}: the ISR {sorted(self.state.isr)} did not replicate offset "
                f"{end_offset - 1} within {timeout_ms} ms") from None

    async def fetch(self, offset: int, max_bytes: int, max_wait_ms: int = 0, min_bytes: int = 1,
                    replica_id: int = -1, leader_epoch: int = -1) -> tuple:
        """Whole batches from ``offset`` as a FetchResponse tuple; waits up to ``max_wait_ms`` for
        ``min_bytes``. Consumers (replica_id -1) read below the high watermark; a follower reads to
        the log end, and its fetch offset tells the leader its progress. Raises
        OffsetOutOfRangeError outside [log_start, log_end]."""
        data, hw, log_start, log_end = await self._fetch(offset, max_bytes, max_wait_ms, min_bytes, replica_id,
                                                         leader_epoch)
        return np.frombuffer(data, dtype=np.uint8), hw, log_start, log_end

    async def _channel_fetch(self, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int,
                             leader_epoch: int | None) -> tuple:
        """``fetch`` for the same-node channel: a consumer's, always (see produce_channel)."""
        return await self._fetch(offset, max_bytes, max_wait_ms, min_bytes, -1,
                                 -1 if leader_epoch is None else leader_epoch)

    async def _fetch(self, offset: int, max_bytes: int, max_wait_ms: int, min_bytes: int, replica_id: int,
                     leader_epoch: int) -> tuple:
        started = time.monotonic()
        offset = args.integer("offset", offset, 0)
        max_bytes = args.integer("max_bytes", max_bytes, 1, args.INT32_MAX)
        max_wait_ms = args.integer("max_wait_ms", max_wait_ms, 0, args.MAX_WAIT_MS)
        min_bytes = args.integer("min_bytes", min_bytes, 0, args.INT32_MAX)
        replica_id = args.integer("replica_id", replica_id, -1, args.INT32_MAX)
        leader_epoch = args.integer("leader_epoch", leader_epoch, -1, args.INT32_MAX)
        self._ensure_started()
        # A consumer that names the leader epoch it looked up (KIP-320) is fenced like a follower: a
        # deposed leader that has not heard yet must not answer for the partition's log end.
        self._check_leader(leader_epoch)
        follower = replica_id >= 0
        if follower and (replica_id not in self.state.replicas or replica_id == self.replica_id):
            raise InvalidRequestError(f"replica {replica_id} is not a follower of {self.topic}-{self.partition} "
                                      f"(replicas {list(self.state.replicas)})")
        if follower:
            if offset > self.log.log_end_offset or offset < self.log.log_start_offset:
                raise OffsetOutOfRangeError(
                    f"follower fetch at {offset} is outside [{self.log.log_start_offset}, {self.log.log_end_offset}]",
                    self.log.log_start_offset, self.log.log_end_offset)
            if self.state.on_follower_fetch(replica_id, offset):
                self._high_watermark_moved()
            self._maybe_propose_isr()
            self._schedule_lag_check()
        deadline = time.monotonic() + max_wait_ms / 1000.0
        self._follower_fetches_open += follower
        try:
            while True:
                # A parked fetch is answered by a leader (at the epoch named) or refused: once this
                # replica hands over it may cut its log (a rotted batch), and a follower told that
                # shorter log end cuts its own to it (a short chaos run lost committed records so).
                self._check_leader(leader_epoch)
                event = self._changed
                limit = None if follower else self.state.high_watermark
                data = self.log.read(offset, max_bytes, limit)
                remaining = deadline - time.monotonic()
                if len(data) >= min_bytes or remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(event.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        finally:
            self._follower_fetches_open -= follower
        data = self._intact(data)
        if follower:
            self.replication_stats["follower_fetches_served"] += 1
            self.replication_stats["follower_bytes_served"] += len(data)
        else:
            self.metrics.fetched(data, offset, time.monotonic() - started)
        return data, self.state.high_watermark, self.log.log_start_offset, self.log.log_end_offset

    def _intact(self, data):
        """``data`` up to its first batch whose CRC fails: a byte of the log rotted on disk (the bytes
        passed their CRC when appended). What is served is never corrupt: the batches before it, or
        KafkaStorageError (retriable) when it is the first; and this replica gives up leadership
        (``replica_corrupt`` at the controller) and, as a follower, cuts its log there and fetches
        the rest again from the new leader."""
        corrupt = next((b for b in iter_batches(data) if b.compute_crc() != b.crc), None)
        if corrupt is None:
            return data
        offset = corrupt.base_offset
        if self._corrupt_from is None or offset < self._corrupt_from:
            self._corrupt_from = offset
            log_event(logger, "corrupt_batch", logging.ERROR, topic=self.topic, partition=self.partition,
                      replica=self.replica_id, offset=offset, directory=self.directory,
                      consequence="not_served_leadership_given_up_refetched_as_follower")
        if self.state.role == LEADER and self._corruption_report is None \
                and time.monotonic() - self._corruption_reported_at >= CORRUPTION_REPORT_INTERVAL_S:
            self._corruption_report = asyncio.get_running_loop().create_task(self._report_corruption())
        if corrupt.position:
            return data[:corrupt.position]
        raise KafkaStorageError(f"replica {self.replica_id} of {self.topic}-{self.partition} holds a corrupt batch at "
                                f"offset {offset} (its CRC fails) in {self.directory}: it is not served; another "
                                "in-sync replica takes over and this one fetches it again")

    async def _report_corruption(self) -> None:
        try:
            controller = self._controller_handle()
            state = await controller.replica_corrupt.remote(self.topic_id, self.partition, self.replica_id,
                                                            self.state.leader_epoch, self.state.partition_epoch)
        except Exception:  # noqa: BLE001 - the controller is away: the next fetch of the batch reports it again
            state = None
        finally:
            self._corruption_report = None
            self._corruption_reported_at = time.monotonic()
        if state is not None:
            self._apply_state(_checked_state(state))
        if self.state.role == LEADER and self._corrupt_from is not None:
            log_event(logger, "corrupt_batch_kept", logging.WARNING, topic=self.topic, partition=self.partition,
                      replica=self.replica_id, offset=self._corrupt_from,
                      consequence="no_in_sync_replica_takes_over_nothing_served_past_it_asked_again_while_read")

    # --- cross-language calls (the Spark connector's JVM) -------------------------------------
    # Ray's Java API passes ints, strings, bytes and lists; an exception reaches Java as a
    # CrossLanguageException carrying only text. So these answer lists, with a raylog error as
    # [class name, message, retriable, log start, log end] in the last slot ([] when none).

    async def fetch_bytes(self, offset: int, max_bytes: int, max_wait_ms: int = 0, leader_epoch: int = -1) -> list:
        """``fetch`` for a consumer in another language: [batch bytes, high watermark, log start,
        log end, error]; with ``leader_epoch`` (>= 0) only a leader at that epoch answers."""
        try:
            data, hw, log_start, log_end = await self._fetch(offset, max_bytes, max_wait_ms, 1, -1, leader_epoch)
        except RaylogError as exc:
            return list(FetchBytesReply(b"", -1, -1, -1, _error_fields(exc)))
        return list(FetchBytesReply(data, hw, log_start, log_end, []))

    async def log_bounds(self, offset: int, leader_epoch: int = -1) -> list:
        """``fetch_bytes``' answer without records: [b"", high watermark, log start, log end, error],
        the error OffsetOutOfRangeError when ``offset`` is no longer (or not yet) in the log. For a
        reader that only counts (Spark's COUNT(*)): a fetch would ship the whole batch holding it."""
        try:
            offset = args.integer("offset", offset, 0)
            leader_epoch = args.integer("leader_epoch", leader_epoch, -1, args.INT32_MAX)
            self._ensure_started()
            self._check_leader(leader_epoch)
            self.log.check_offset(offset)
        except RaylogError as exc:
            return list(FetchBytesReply(b"", -1, -1, -1, _error_fields(exc)))
        return list(FetchBytesReply(b"", self.state.high_watermark, self.log.log_start_offset,
                                    self.log.log_end_offset, []))

    async def produce_bytes(self, records: bytes, acks: int = -1, timeout_ms: int = ACKS_ALL_TIMEOUT_MS) -> list:
        """``produce`` of one batch for a producer in another language: [base offset, error]."""
        try:
            response = await self.produce(records, acks, None, timeout_ms)
        except RaylogError as exc:
            return list(ProduceBytesReply(-1, _error_fields(exc)))
        return list(ProduceBytesReply(response[0], []))

    async def list_offsets(self, timestamp: int) -> tuple[int, int, int]:
        """(offset, timestamp, leader epoch) for EARLIEST_TIMESTAMP, LATEST_TIMESTAMP or a time in ms;
        (-1, -1, -1) when no record is that recent. The epoch is that of the record before the offset
        (Kafka's ListOffsets leaderEpoch): a reader that got there checks with it, through
        end_offset_for_epoch, that the log it reads on in did not diverge since."""
        timestamp = args.integer("timestamp", timestamp, EARLIEST_TIMESTAMP)
        self._ensure_started()
        self._check_leader(None)
        if timestamp == EARLIEST_TIMESTAMP:
            offset, found_ts = self.log.log_start_offset, -1
        elif timestamp == LATEST_TIMESTAMP:
            if self.state.high_watermark < self.state.epoch_start_offset:
                raise OffsetNotAvailableError(
                    f"{self.topic}-{self.partition}: the new leader's high watermark {self.state.high_watermark} is "
                    f"below the start of its epoch {self.state.epoch_start_offset}; its followers have not fetched yet")
            offset, found_ts = self.state.high_watermark, -1
        else:
            found = self.log.offset_for_timestamp(timestamp)
            if found is None or found[0] >= self.state.high_watermark:
                return -1, -1, -1
            offset, found_ts = found
        before = offset - 1
        return offset, found_ts, (self.epochs.epoch_of(before) if before >= self.log.log_start_offset else -1)

    async def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (at most the high watermark)."""
        offset = args.integer("offset", offset, LATEST_TIMESTAMP)
        self._ensure_started()
        self._check_leader(None)
        await self._ensure_lease()
        self._check_leader(None)
        self._check_lease()
        if offset == LATEST_TIMESTAMP:
            offset = self.state.high_watermark
        if offset > self.state.high_watermark:
            raise OffsetOutOfRangeError(f"cannot delete records before {offset}: it is above the high watermark "
                                        f"{self.state.high_watermark}", self.log.log_start_offset,
                                        self.state.high_watermark)
        self._advance_log_start(offset)
        return self.log.log_start_offset

    async def read_location(self) -> list:
        """[Ray node id, partition directory, produce channel name or "", the channel's secret (hex)
        or ""]: where a reader on this node finds the segments and the read view
        (raylog/storage/local_reader.py), and where a producer on this node sends batches without
        a Ray call (raylog/produce_channel.py). The secret is handed out only here, to callers
        Ray's token admitted: the channel takes no connection without it."""
        import ray

        self._ensure_started()
        if not self._lease_held() and not self._deleted:
            # Readers trust the page only under a lease: a replica asked before its first heartbeat
            # was answered (just started) waits for that answer, briefly, so their first reads are
            # local. A silent controller does not hold the caller up longer than that (judging it is
            # the heartbeat loop's).
            await self._heartbeat_round(READ_LOCATION_LEASE_WAIT_S, judge_silence=False)
        name = secret = ""
        channel = self._channel  # _close_channel may drop it while start() waits
        if channel is not None and not self._deleted:
            try:
                await channel.start()
                name, secret = channel.name, channel.secret.hex()
            except OSError as exc:
                logger.warning("%s-%s: no produce channel (%s); producers here use Ray calls",
                               self.topic, self.partition, exc)
                if self._channel is channel:
                    self._channel = None
        return [ray.get_runtime_context().get_node_id(), str(self.directory), name, secret]

    async def describe(self) -> dict:
        self._ensure_started()
        return {**self.status(), "size_bytes": self.log.size_bytes, "segments": len(self.log.segments),
                "recovered_cleanly": self.log.recovered_cleanly, "stats": self.log.stats.to_dict()}

    async def maintain_now(self) -> dict:
        """Retention, flush and (compacted topics) a whole cleaning round now, the round yielding to
        produce and fetch between batches as the scheduled ones do."""
        self._ensure_started()
        out = self.maintain(compact=False)
        if self.config.cleanup_policy == "compact":
            while self._compaction is not None:
                await self._compaction
            self._compaction = asyncio.get_running_loop().create_task(self._compact())
            await self._compaction
            out["bytes_compacted"] = self.log.cleaner.bytes_removed
        return out

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        """Close the log cleanly (the process may then be killed without a recovery scan)."""
        self._deleted = True
        if self.state.high_watermark != self._hw_checkpointed:
            files.write_checkpoint(self.log.directory / files.HIGH_WATERMARK_FILE, self.state.high_watermark)
        await self._close_channel()
        self._view.close()
        self.log.close()
        self._directory_lock.release()

    async def _close_channel(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def delete_data(self) -> None:
        """Topic deletion or a reassignment that moved this replica away: remove its directory."""
        self._deleted = True
        self._generation += 1
        self.state.become_none()
        self._fail_waiting(NotLeaderForPartitionError(f"{self.topic}-{self.partition} was deleted here"))
        await self._close_channel()
        self._view.close()
        self.log.close_unclean()
        # Only if the directory is still this topic's: a new topic of the same name may own the path now.
        if files.read_text_value(Path(self.directory) / files.PARTITION_METADATA_FILE) in (None, self.topic_id):
            shutil.rmtree(self.directory, ignore_errors=True)
        self._directory_lock.release()


def _error_fields(exc: RaylogError) -> list:
    return list(ErrorReply(type(exc).__name__, str(exc), int(exc.retriable), int(getattr(exc, "log_start_offset", -1)),
                           int(getattr(exc, "log_end_offset", -1))))


def _checked_state(st) -> dict:
    """The controller's partition state, as set_state and heartbeat answers carry it."""
    st = args.mapping("state", st)
    if st.get("deleted"):
        return st
    args.mapping("state", st, required=("leader", "leader_epoch", "partition_epoch", "replicas", "isr",
                                        "leader_handle"))
    args.integer("leader", st["leader"], -1, args.INT32_MAX)
    args.integer("leader_epoch", st["leader_epoch"], 0, args.INT32_MAX)
    args.integer("partition_epoch", st["partition_epoch"], 0, args.INT32_MAX)
    for name in ("replicas", "isr", "ineligible"):
        for r in args.sequence(name, st.get(name, ()), 1024):
            args.integer(name, r, 0, args.INT32_MAX)
    handle = st["leader_handle"]
    if handle is not None and not hasattr(handle, "fetch"):
        raise InvalidRequestError(f"leader_handle must be a replica actor handle, got {type(handle).__name__}")
    if st.get("config") is not None:
        args.mapping("config", st["config"])
        args.integer("config_version", st.get("config_version"), 0, args.INT32_MAX)
    return st


def _read_saved_config(directory: str) -> tuple[int, dict] | None:
    """(version, config) of the topic config this replica last saved, or None."""
    text = files.read_text_value(Path(directory) / files.TOPIC_CONFIG_FILE)
    if text is None:
        return None
    try:
        saved = json.loads(text)
        return int(saved["version"]), dict(saved["config"])
    except (ValueError, KeyError, TypeError):
        return None  # torn or foreign: the controller tells the current config again


def _restarted() -> bool:
    """Whether Ray restarted this actor after a crash (its creation-time role is then stale)."""
    import warnings

    try:
        import ray

        if not ray.is_initialized():
            return False  # a plain object in a unit test: asking would start a local Ray
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Ray 2.60 reads a deprecated property inside this one
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # noqa: BLE001 - outside Ray (unit tests) nothing restarts
        return False


def _unwrap(exc: BaseException) -> BaseException:
    from raylog.ray_calls import translate

    return translate(exc)
