"""Hostile input straight at the actors, past the clients (issue 19).

Fault model: raylog's actors are named Ray actors, so any process Ray admits can call any
method with anything: garbage and truncated batches, wrong CRCs, absurd offsets, epochs and
sequences, wrong types, to a partition replica (produce, fetch, follower fetch, set_state), a
group coordinator (commit_offsets, heartbeat) and the controller (its admin and replica calls).

What must hold, for every case: the answer is one of raylog's own errors (never an
ActorCallError, which means an actor met something it did not expect); no actor process dies;
no log changes (end offsets and log starts of the data partition and of __consumer_offsets are
as they were); nothing is written outside the data directory. Hypothesis generates the cases
from the run's seed; the test prints how many ran.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest
import ray

import raylog
from actors.node_agent import NodeAgent
from raylog.errors import ActorCallError, RaylogError
from raylog.naming import CONTROLLER_ACTOR_NAME, OFFSETS_TOPIC, coordinator_actor_name
from raylog.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raylog.records import OffsetAndMetadata, TopicPartition
from raylog.storage import batch as record_batch

pytestmark = pytest.mark.ray

CASES = 400
TOPIC = "hostile"
GROUP = "hostile-group"

not_int = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.binary(max_size=80), st.lists(st.integers(-5, 5), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
    st.builds(lambda n: np.arange(n, dtype=np.int64), st.integers(0, 10)),
)
garbage = st.one_of(not_int, st.integers(-2**70, 2**70))
absurd_int = st.one_of(st.integers(-2**70, -3), st.integers(2**31, 2**70))
never_valid = st.one_of(not_int.filter(lambda v: v is not None and v is not False and not (
    hasattr(v, "__len__") and len(v) == 0)), absurd_int)
"""A value no argument of any call accepts (None, False and empty lists are valid for some)."""
bad_names = st.one_of(st.just(""), st.just("."), st.just(".."), st.just("../../escape"), st.just("a/b"),
                      st.just("x" * 300), st.text(min_size=1, max_size=20).filter(lambda s: not s.isalnum()),
                      st.just("/etc/passwd"), st.just("a\0b"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    cluster = raylog.connect(data_root=str(root / "data"), num_cpus=2, object_store_memory=300 * 1024 * 1024,
                             cluster_config={"offsets_topic_num_partitions": 1})
    cluster.admin().create_topic(TOPIC, 1)
    producer = cluster.producer()
    producer.send_batch(TOPIC, [b"%d" % i for i in range(50)]).wait(timeout=30)
    producer.close()
    committer = cluster.consumer(group_id=GROUP, enable_auto_commit=False)
    committer.assign([TopicPartition(TOPIC, 0)])
    committer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(7, "")})
    committer.close()
    yield cluster, root
    ray.shutdown()


def good_batch() -> bytearray:
    return record_batch.build([b"a", b"b", b"c"], keys=[b"k", None, b"k"], compression="none")


@st.composite
def produce_case(draw):
    """A batch the replica must refuse: garbage, cut, corrupted inside the CRC, or from a producer it
    does not know at a sequence past 0; or arguments of the wrong type."""
    kind = draw(st.sampled_from(["garbage", "truncated", "flipped", "extended", "sequence", "args"]))
    batch = good_batch()
    if kind == "garbage":
        data = draw(st.binary(min_size=0, max_size=200))
    elif kind == "truncated":
        data = bytes(batch[:draw(st.integers(0, len(batch) - 1))])
    elif kind == "flipped":
        at = draw(st.integers(21, len(batch) - 1))  # inside the CRC's coverage
        batch[at] ^= draw(st.integers(1, 255))
        data = bytes(batch)
    elif kind == "extended":
        data = bytes(batch) + draw(st.binary(min_size=1, max_size=64))
    elif kind == "sequence":
        data = bytes(record_batch.build([b"x"], compression="none", producer_id=draw(st.integers(0, 2**62)),
                                        producer_epoch=draw(st.integers(0, 32767)),
                                        base_sequence=draw(st.integers(1, 2**31 - 1))))
    else:
        return ("replica", "produce", (draw(garbage), draw(garbage), draw(garbage), draw(garbage)))
    acks = draw(st.sampled_from([1, -1, 0]))
    return ("replica", "produce", (np.frombuffer(data, dtype=np.uint8) if draw(st.booleans()) else data, acks))


@st.composite
def fetch_case(draw):
    kind = draw(st.sampled_from(["offset", "follower", "types"]))
    if kind == "offset":
        return ("replica", "fetch", (draw(st.one_of(absurd_int, st.integers(51, 2**40))), 1024, 0))
    if kind == "follower":
        return ("replica", "fetch", (draw(st.one_of(st.integers(0, 100), absurd_int)), 1024, 0, 1,
                                     draw(st.one_of(st.integers(0, 5), absurd_int)), draw(st.integers(-1, 2**31 - 1))))
    return ("replica", "fetch", (draw(garbage), draw(garbage), draw(garbage)))


@st.composite
def replica_admin_case(draw):
    kind = draw(st.sampled_from(["list_offsets", "delete_records", "set_state", "epoch"]))
    if kind == "list_offsets":
        return ("replica", "list_offsets", (draw(st.one_of(garbage, st.integers(-2**70, -3))),))
    if kind == "delete_records":
        return ("replica", "delete_records", (draw(st.one_of(not_int, st.integers(51, 2**70), absurd_int)),))
    if kind == "epoch":
        return ("replica", "end_offset_for_epoch", (draw(garbage), draw(garbage)))
    state = draw(st.one_of(garbage, st.fixed_dictionaries({
        "leader": garbage, "leader_epoch": absurd_int, "partition_epoch": garbage,
        "replicas": garbage, "isr": garbage, "leader_handle": never_valid})))
    return ("replica", "set_state", (state,))


@st.composite
def coordinator_case(draw):
    kind = draw(st.sampled_from(["commit", "heartbeat", "fetch", "reset"]))
    bad_row = st.one_of(never_valid, st.tuples(garbage, absurd_int, garbage, garbage),
                        st.tuples(bad_names, garbage, garbage, garbage))
    if kind == "commit":
        rows = draw(st.one_of(never_valid, st.tuples(
            st.lists(st.one_of(garbage, st.tuples(garbage, garbage, garbage, garbage)), max_size=2), bad_row
        ).map(lambda r: r[0] + [r[1]])))
        return ("coordinator", "commit_offsets", (draw(st.one_of(garbage, st.just(GROUP))), draw(garbage),
                                                  draw(st.one_of(garbage, absurd_int)), rows))
    if kind == "heartbeat":
        request = draw(st.one_of(garbage, st.fixed_dictionaries(
            {"group_id": st.one_of(garbage, st.just(GROUP)), "member_id": garbage, "member_epoch": garbage},
            optional={"owned_partitions": garbage, "subscribed_topics": garbage, "assignor": garbage,
                      "rebalance_timeout_ms": garbage}).map(lambda d: {**d, "bogus": 1})))
        return ("coordinator", "heartbeat", (request,))
    if kind == "fetch":
        return ("coordinator", "fetch_offsets", (draw(st.one_of(garbage, st.just(GROUP))), draw(garbage)))
    return ("coordinator", "reset_offsets", (draw(st.one_of(garbage, st.just(GROUP))),
                                             draw(st.one_of(never_valid, st.lists(bad_row, min_size=1, max_size=2)))))


@st.composite
def controller_case(draw):
    kind = draw(st.sampled_from(["create", "alter_isr", "heartbeat", "elect", "reassign", "grow", "delete"]))
    if kind == "create":
        return ("controller", "create_topic", (draw(st.one_of(garbage, bad_names)), draw(never_valid),
                                               draw(garbage), draw(garbage)))
    if kind == "alter_isr":
        return ("controller", "alter_isr", (draw(st.one_of(garbage, st.just(TOPIC))), draw(garbage),
                                            draw(garbage), draw(never_valid), draw(garbage), draw(garbage)))
    if kind == "heartbeat":
        return ("controller", "replica_heartbeat", tuple(draw(garbage) for _ in range(5)))
    if kind == "elect":
        return ("controller", "elect_leaders", (draw(st.one_of(garbage, st.lists(st.tuples(bad_names, garbage),
                                                                                  min_size=1, max_size=2))),))
    if kind == "reassign":
        return ("controller", "reassign_partitions", (draw(st.one_of(garbage, st.dictionaries(
            st.tuples(st.one_of(bad_names, st.just(TOPIC)), st.one_of(st.none(), st.integers(), st.text(max_size=5))),
            garbage, min_size=1, max_size=2))),))
    if kind == "grow":
        return ("controller", "create_partitions", (draw(st.one_of(garbage, bad_names, st.just(TOPIC))),
                                                    draw(st.one_of(not_int, st.integers(-5, 1)))))
    return ("controller", "delete_topic", (draw(st.one_of(garbage, bad_names).filter(lambda n: not (isinstance(n, str) and n == TOPIC))),))


cases = st.one_of(produce_case(), fetch_case(), replica_admin_case(), coordinator_case(), controller_case())


TOOL_FILES = (".hypothesis", "__pycache__", ".pytest_cache")
"""What the test tools themselves write (hypothesis' caches, bytecode), not raylog."""


def tree_outside(path: Path, data_root: Path) -> set[str]:
    """Every path under ``path`` but ``data_root``'s and the test tools', in one walk: a replica's
    checkpoint written to a .tmp file and renamed inside data_root while two walks ran (one of
    ``path``, one of ``data_root`` to subtract) was counted as written outside it."""
    found: set[str] = set()
    for directory, subdirectories, files in os.walk(path):
        here = Path(directory)
        subdirectories[:] = [d for d in subdirectories if d not in TOOL_FILES and here / d != data_root]
        found.update(str(here / name) for name in subdirectories + files if name not in TOOL_FILES)
    return found


def test_garbage_at_every_actor_is_refused_with_raylog_errors_and_changes_nothing(setup, seed, tmp_path):
    cluster, root = setup
    replica = cluster.metadata.leader(TOPIC, 0)
    coordinator = ray.get_actor(coordinator_actor_name(0), namespace="raylog")
    controller = ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog")
    actors = {"replica": replica, "coordinator": coordinator, "controller": controller}
    offsets_leader = cluster.metadata.leader(OFFSETS_TOPIC, 0)

    def logs():
        return [ray.get(h.list_offsets.remote(t)) for h in (replica, offsets_leader)
                for t in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)]

    pids = {name: ray.get(h.ping.remote()) if name != "replica" else ray.get(h.attach.remote())["pid"]
            for name, h in actors.items()}
    before_logs = logs()
    outside = [Path.cwd(), root.parent]
    before_trees = {str(p): tree_outside(p, root) for p in outside}
    ran: list = []

    batch: list = []

    @hypothesis.settings(max_examples=CASES, phases=[hypothesis.Phase.generate], deadline=None, database=None,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.seed(seed)
    @hypothesis.given(cases)
    def collect(case):
        batch.append(case)

    collect()
    # All at once: cases that wait (a sequence past 0 waits for the ones before it) wait together.
    refs = [getattr(actors[target], method).remote(*call_args) for target, method, call_args in batch]
    for (target, method, call_args), ref in zip(batch, refs):
        try:
            ray.get(ref, timeout=120)
            outcome = "answered"
        except ray.exceptions.RayTaskError as exc:
            outcome = exc.cause if isinstance(exc.cause, RaylogError) else exc
        ran.append((target, method, call_args, outcome))
    bugs = [(t, m, repr(a)[:200], repr(o)[:300]) for t, m, a, o in ran
            if isinstance(o, BaseException) and (not isinstance(o, RaylogError) or isinstance(o, ActorCallError))]
    assert not bugs, bugs[:5]
    harmless = ("fetch", "list_offsets", "end_offset_for_epoch", "fetch_offsets", "replica_heartbeat", "elect_leaders")
    changed = [(t, m, repr(a)[:200]) for t, m, a, o in ran
               if o == "answered" and m not in harmless and (m, a) != ("reassign_partitions", ({},))]
    assert not changed, f"requests that should have been refused were answered: {changed[:5]}"
    assert logs() == before_logs, "no log changed"
    after = {name: ray.get(h.ping.remote()) if name != "replica" else ray.get(h.attach.remote())["pid"]
             for name, h in actors.items()}
    assert after == pids, "no actor died"
    for p in outside:
        assert tree_outside(p, root) == before_trees[str(p)], f"nothing written outside the data directory in {p}"
    refused = Counter(type(o).__name__ for *_, o in ran if isinstance(o, BaseException))
    print(f"hostile input: {len(ran)} cases ran against {len({(t, m) for t, m, *_ in ran})} actor methods, "
          f"{sum(refused.values())} refused with raylog errors ({dict(refused.most_common())}), "
          f"{len(ran) - sum(refused.values())} harmless reads answered; seed {seed}")
    assert len(ran) >= CASES * 0.9


NEVER_VALID = [np.array([], dtype=np.int64), np.array([1]), np.array([0, 1]), np.array([[1]]), np.array(["x"]),
               np.float64("nan"), 1.0, np.bool_(True), object()]
"""Values no argument takes, numpy arrays first: their comparisons are element-wise, so a check
written as ``value in allowed`` or ``if value`` raises ValueError instead of refusing them."""

BASELINES = [
    ("replica", "produce", (b"\x00\x01\x02", 1, None, 1000)),
    ("replica", "fetch", (10**12, 1024, 0, 1, -1, -1)),
    ("replica", "end_offset_for_epoch", (0, -1)),
    ("replica", "list_offsets", (EARLIEST_TIMESTAMP,)),
    ("replica", "delete_records", (10**12,)),
    ("replica", "set_state", ({},)),
    ("replica", "set_config", ({"no.such.config": 1}, 0)),
    ("coordinator", "heartbeat", ({},)),
    ("coordinator", "commit_offsets", (GROUP, "no-such-member", 5, [])),
    ("coordinator", "fetch_offsets", (GROUP, None)),
    ("coordinator", "describe_group", (GROUP,)),
    ("coordinator", "delete_group", ("no-such-group",)),
    ("coordinator", "reset_offsets", (GROUP, [["a/b", 0, 0]])),
    ("controller", "replica_heartbeat", ("0" * 32, 0, 0, 0, 0, -1, -1)),
    ("controller", "elect_leaders", ([["no-such-topic", 0]],)),
    ("controller", "alter_isr", (TOPIC, 0, 99, 99, 99, [0])),
    ("controller", "reassign_partitions", ({("no-such-topic", 0): [0]},)),
    ("controller", "create_topic", ("a/b", 1, 1, None, False, None)),
    ("controller", "creation_progress", ("no-such-topic",)),
    ("controller", "create_partitions", (TOPIC, 1)),
    ("controller", "delete_topic", ("no-such-topic",)),
    ("controller", "describe_topic", (TOPIC,)),
    ("controller", "partition_states", (TOPIC,)),
    ("controller", "replica_handles", (TOPIC, 0)),
    ("controller", "high_watermarks", ([TOPIC],)),
    ("controller", "topic_config", (TOPIC,)),
    ("controller", "alter_topic_config", (TOPIC, {"no.such.config": "1"}, None, True, False)),
    ("controller", "check_topic", (TOPIC,)),
    ("controller", "drain_node", (99, True)),
    ("controller", "replica_corrupt", ("0" * 32, 0, 0, 0, 0)),
    ("agent", "identify", ("cluster-id",)),
    ("agent", "format", ("cluster-id", 7)),
    ("agent", "remove_partition", ("../outside", "0" * 32)),
]
"""A call per method, each harmless as it stands (a read, or refused for a reason the swept
argument does not touch), whose arguments are replaced one at a time."""


def test_every_argument_of_every_method_refuses_what_no_argument_takes(setup):
    """The random cases above reach a numpy array in a given argument by chance (CI met acks=array([])
    once in hundreds of runs): this sweep puts each never-valid value in each argument of each method."""
    cluster, root = setup
    actors = {"replica": cluster.metadata.leader(TOPIC, 0),
              "coordinator": ray.get_actor(coordinator_actor_name(0), namespace="raylog"),
              "controller": ray.get_actor(CONTROLLER_ACTOR_NAME, namespace="raylog"),
              # A node agent on the head node, whose data directory the controller holds: identify and
              # format refuse (the lock is taken), and so must every argument before that.
              "agent": ray.remote(NodeAgent).options(num_cpus=0).remote(str(root / "data"))}
    offsets_leader = cluster.metadata.leader(OFFSETS_TOPIC, 0)

    def logs():
        return [ray.get(h.list_offsets.remote(t)) for h in (actors["replica"], offsets_leader)
                for t in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)]

    before = logs()
    calls = [(target, method, base[:i] + (value,) + base[i + 1:])
             for target, method, base in BASELINES for i in range(len(base)) for value in NEVER_VALID]
    refs = [getattr(actors[target], method).remote(*call_args) for target, method, call_args in calls]
    wrong = []
    for (target, method, call_args), ref in zip(calls, refs):
        try:
            ray.get(ref, timeout=120)
            wrong.append((target, method, repr(call_args)[:160], "answered"))
        except ray.exceptions.RayTaskError as exc:
            if not isinstance(exc.cause, RaylogError) or isinstance(exc.cause, ActorCallError):
                wrong.append((target, method, repr(call_args)[:160], repr(exc.cause)[:200]))
    assert not wrong, f"{len(wrong)} of {len(calls)} calls not refused with raylog's own errors: {wrong[:8]}"
    assert logs() == before
