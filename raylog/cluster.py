"""raylog.connect(): attach to (or start) Ray and find (or start) raylog's controller."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import asdict

import ray
from ray._common.utils import get_ray_address_file
from ray._private.utils import read_ray_address

from raylog import memory, ray_calls
from raylog.config import ClusterConfig, config_from_mapping
from raylog.errors import ClusterNotAvailableError, ControllerNotAvailableError
from raylog.metadata import Metadata
from raylog.naming import CONTROLLER_ACTOR_NAME


logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
"""How long connect() waits for a Ray cluster's GCS port to accept a connection."""

RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 16 * 1024 * 1024}
"""Ray settings raylog uses when it starts Ray itself (a cluster it joins keeps its own; set the
same with ``ray start --system-config`` there). Ray puts call arguments and results above
max_direct_call_object_size (100 KiB by default) into the object store, and moving them costs
the raylets CPU per MB; raylog's batches and fetches are 1-8 MiB, so they go directly instead.
Measured here (bench/replication_bench.py on 3 simulated nodes): RF=3 acks='all' 310 K -> 504 K
records/s, RF=1 0.90 M -> 1.21 M, the raylets' CPU 2.0 s -> 0.08 s per million records."""


DASHBOARD_ENV = "RAYLOG_INCLUDE_DASHBOARD"
"""Set to 0 (or false, no, off) and a Ray that connect() starts runs without its dashboard."""


def dashboard_default() -> bool:
    """Whether a Ray that connect() starts runs Ray's dashboard (on loopback): yes unless
    RAYLOG_INCLUDE_DASHBOARD says no. The dashboard's agents also serve Ray's metrics endpoint
    (raylog's metrics, docs/metrics.md); what they cost is measured in docs/performance.md."""
    return os.environ.get(DASHBOARD_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class Cluster:
    """A connection to raylog on a Ray cluster: hands out producers, consumers and the admin client."""

    def __init__(self, controller, config: ClusterConfig):
        self.controller = controller
        self.config = config
        self.session = ray_calls.Session()
        self.metadata = Metadata(controller, config.request_timeout_ms / 1000, self.session)

    def producer(self, **configs):
        """A Producer with ProducerConfig settings (kafka-python names)."""
        from raylog.producer import Producer

        return Producer(cluster=self, **configs)

    def consumer(self, *topics: str, **configs):
        """A Consumer with ConsumerConfig settings; topics given here are assigned whole."""
        from raylog.consumer import Consumer

        return Consumer(*topics, cluster=self, **configs)

    def admin(self, **configs):
        """An AdminClient with AdminConfig settings (kafka-python names)."""
        from raylog.admin import AdminClient

        return AdminClient(cluster=self, **configs)

    @property
    def bootstrap_servers(self) -> str:
        """host:port of every node's Kafka listener (ClusterConfig.kafka_listener), comma-separated,
        the head's first: what Kafka clients and tools take as bootstrap servers. "" when off."""
        self.session.check()
        if not self.config.kafka_listener:
            return ""
        brokers = ray_calls.get(self.controller.kafka_brokers.remote(), self.config.request_timeout_ms / 1000 * 2)
        return ",".join(f"{b['host']}:{b['port']}" for b in brokers)

    def auto_creator(self, asked: bool | None):
        """What a client calls with a topic it does not find: a function creating it with the
        cluster's defaults when the cluster and the client's allow_auto_create_topics (``asked``)
        both allow it, else None (see ClusterConfig.auto_create_topics_enable)."""
        enabled = self.config.auto_create_topics_enable
        if asked is False or enabled is False or (enabled is None and asked is not True):
            return None
        return self._auto_create

    def _auto_create(self, topic: str) -> None:
        from raylog.errors import TopicAlreadyExistsError

        admin = self.admin()
        live = sum(n["state"] != "missing" for n in admin.describe_cluster().get("nodes", ())) or 1
        try:
            admin.create_topic(topic, self.config.num_partitions, min(self.config.default_replication_factor, live))
            logger.info("event=auto_create_topic topic=%s partitions=%d", topic, self.config.num_partitions)
        except TopicAlreadyExistsError:
            pass  # another client created it first


_default: Cluster | None = None


def connect(address: str | None = None, *, namespace: str = "raylog", data_root: str | None = None,
            request_timeout_ms: int = 30_000, cluster_config: dict | None = None, **ray_init_kwargs) -> Cluster:
    """Attach to the Ray cluster at ``address`` (or RAY_ADDRESS; with neither, the cluster last
    started on this machine if it answers, else a new local one; "local" always starts one), then
    to raylog's controller, starting it on Ray's head node if none runs yet. An address where no
    Ray answers raises ClusterNotAvailableError naming it.

    A local Ray started here listens on loopback only and runs Ray's dashboard, whose agents export
    raylog's metrics (docs/metrics.md); ``include_dashboard=False`` or RAYLOG_INCLUDE_DASHBOARD=0
    turns it off. ``data_root`` and ``cluster_config`` (more
    ClusterConfig fields, e.g. {"replica_lag_time_max_ms": 5000}) apply when this call starts the
    controller; a running controller keeps the settings it was started with.
    """
    global _default
    if not ray.is_initialized():
        # With this set, every listener of a local Ray binds 127.0.0.1 (DESIGN.md, checked with ss).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray_init_kwargs.setdefault("include_dashboard", dashboard_default())
        ray_init_kwargs.setdefault("dashboard_host", "127.0.0.1")
        ray_init_kwargs.setdefault("log_to_driver", True)
        address = _ray_address(address, min(request_timeout_ms / 1000, PROBE_TIMEOUT_S))
        if address == "local":
            ray_init_kwargs["_system_config"] = {**RAY_SYSTEM_CONFIG, **ray_init_kwargs.get("_system_config", {})}
        try:
            ray.init(address=address, namespace=namespace, **ray_init_kwargs)
        except ConnectionError as exc:
            raise ClusterNotAvailableError(f"cannot attach to a Ray cluster at {address!r}: {exc}") from None
    # Before any object of this connection exists: what is alive now lives as long as the process.
    memory.freeze_startup_heap()
    settings = {"namespace": namespace, "request_timeout_ms": request_timeout_ms,
                **({"data_root": data_root} if data_root else {}), **(cluster_config or {})}
    config = config_from_mapping(ClusterConfig, settings)
    controller = _controller(config)
    try:
        running = ray_calls.get(controller.cluster_config.remote(), request_timeout_ms / 1000)
    except Exception as exc:
        raise ControllerNotAvailableError(f"raylog controller did not answer: {exc}") from exc
    if running.get("offsets_topic_eager"):
        # Not waited for: recovery, and on a new cluster __consumer_offsets, go on in the background.
        controller.start.remote()
    _default = Cluster(controller, ClusterConfig(**running))
    return _default


def _ray_address(address: str | None, timeout_s: float) -> str:
    """The address for ray.init: one given (or in RAY_ADDRESS) must answer, else
    ClusterNotAvailableError; with none, the cluster last started on this machine if it still
    answers, else "local" (a new local Ray). Ray itself would wait on a recorded cluster that is
    gone, without end."""
    given = address or os.environ.get("RAY_ADDRESS") or None
    if given == "local":
        return "local"
    if given is None:
        recorded = read_ray_address()
        if recorded is None:
            return "local"
        if _answers(recorded, timeout_s):
            # "auto", not the address: Ray then attaches to the same recorded cluster and, as it does
            # only for a cluster it finds itself, presents the token authentication needs (Ray 2.60
            # turns it on for the local clusters it starts, raylog's included).
            return "auto"
        logger.warning("the Ray cluster last started on this machine (%s, recorded in %s) does not answer; "
                       "starting a new local Ray", recorded, get_ray_address_file(None))
        return "local"
    if given == "auto":
        recorded = read_ray_address()
        if recorded is None or _answers(recorded, timeout_s):
            return "auto"
        given = recorded
    elif given.startswith("ray://") or _answers(given, timeout_s):
        return given
    raise ClusterNotAvailableError(
        f"no Ray cluster answers at {given!r} (waited {timeout_s:.0f} s); start one with "
        "`ray start --head --node-ip-address=127.0.0.1`, or call raylog.connect('local') for a new local Ray")


def _answers(address: str, timeout_s: float) -> bool:
    """Whether something accepts TCP connections at the ``host:port`` of Ray's GCS."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return True  # not host:port: let Ray judge it
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def _controller(config: ClusterConfig):
    try:
        return ray.get_actor(CONTROLLER_ACTOR_NAME, namespace=config.namespace)
    except ValueError:
        pass
    from actors.controller import Controller  # the one place a client starts an actor: bootstrap
    from placement.nodes import head_ray_node_id, pinned

    # On the head node: its loss ends the Ray cluster anyway, so the metadata log there is lost only
    # with the cluster, never with a worker node.
    return ray.remote(Controller).options(
        name=CONTROLLER_ACTOR_NAME, namespace=config.namespace, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=-1, max_task_retries=-1, scheduling_strategy=pinned(head_ray_node_id()),
    ).remote(asdict(config))


def attached(namespace: str) -> Cluster:
    """The Cluster of ``namespace`` for code running inside Ray (a task, a Spark worker that has
    joined Ray): the last connect() of this process if it is that namespace's, else a new one."""
    if _default is not None and _default.config.namespace == namespace and _default.session.alive():
        return _default
    return connect(namespace=namespace)


def default_cluster() -> Cluster:
    """The Cluster of the last connect() in this process while its Ray session lasts, else a new
    connect() with defaults."""
    return _default if _default is not None and _default.session.alive() else connect()
