"""Simulated multi-node Ray clusters for tests (ray.cluster_utils.Cluster), always shut down.

Each simulated node is a raylet of its own on this machine, with its own Ray node id and its own
data directory (``<data root>/node-<k>``, given by the ``raylog.io/data-dir`` node label, as a
machine with its own disk would have), so raylog gives it its own raylog node id. ``restart``
removes a node and starts a new raylet on the same data directory: the same raylog node, under a
new Ray node id, as after a reboot. A whole-cluster restart is the ``simulated_cluster`` block
ending and a new one on the same data root (the head keeps ``<data root>/head``) adding nodes on
the old directories. Ray's health checks are sped up so a removed node is declared dead in about
2 s instead of 15, while a node only slow to answer is never declared dead for it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import raylog
from raylog.errors import KafkaTimeoutError
from placement.nodes import DATA_DIR_LABEL, HEAD_RESOURCE
from raylog.cluster import RAY_SYSTEM_CONFIG
from tests.support.disks import can_mount_tmpfs, mount_tmpfs, unmount

FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 30_000,
    "health_check_failure_threshold": 3,
}
"""A killed raylet's port refuses the GCS's check at once, so three checks half a second apart
declare it dead in 1.5 s. A raylet that is alive but busy has 30 s to answer each (Ray's own
default is 10 s): with a 500 ms timeout a head raylet starting workers on a loaded 2-core machine
missed three checks, was declared dead and exited, and the test process attached to it was ended
by its core worker with exit code 1 and no output (a CI run of make test-long ended so in the
rolling restart; one ended so again with 10 s, which tests/support/postmortem.py now explains)."""
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024, "node_ip_address": "127.0.0.1"}
"""Every simulated node on loopback: without node_ip_address, ray.cluster_utils binds the machine's
address and all interfaces (seen with ss), whatever RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER says. (A
client must then also keep 127.0.0.1: tests/conftest.py sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
before Ray is imported, or Ray rewrites it to the machine's address.)"""


class SimulatedCluster:
    def __init__(self, sim: Cluster, cluster: raylog.Cluster | None, data_root: str, head_args: dict,
                 disk_mb: int | None):
        self.sim = sim
        self.head_args = head_args
        self.cluster = cluster
        self.data_root = data_root
        self.disk_mb = disk_mb
        self.data_dirs: dict[str, str] = {}
        """Ray node id -> its data directory."""
        self.disks: dict[str, Path] = {}
        """Ray node id -> its data directory where that is a small tmpfs of its own (disk_mb)."""
        self._next = itertools.count()
        self._mounts: list[Path] = []
        self._addresses: dict[str, str] = {}
        """Data directory -> the loopback address its worker node binds (127.0.0.2 on; kept across
        its restarts, as a machine keeps its address). The head alone has 127.0.0.1, so a Java driver
        (RayDP's app master and Spark's driver) attaches to the head's raylet: Java's Ray picks the
        first live raylet with its own address, and a driver whose raylet goes down ends its job and
        every Spark executor with it."""

    def node_ids(self) -> list[str]:
        """The Ray node ids of the live nodes."""
        return [n["NodeID"] for n in ray.nodes() if n["Alive"]]

    def head_id(self) -> str:
        return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and HEAD_RESOURCE in n["Resources"])

    def new_data_dir(self) -> str:
        """A data directory no node has used (a new disk)."""
        while True:
            path = os.path.join(self.data_root, f"node-{next(self._next)}")
            if not os.path.exists(path):
                return path

    def raylog_node(self, ray_node_id: str, timeout_s: float = 120) -> int:
        """The raylog node id of a live Ray node, waiting for it to register (a node just added
        registers at the controller's next node check, once its agent has started)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                nodes = self.cluster.admin().describe_cluster()["nodes"]
            except KafkaTimeoutError:
                nodes = []  # a controller still starting on a loaded machine: ask again
            for node in nodes:
                if node["ray_node_id"] == ray_node_id:
                    return node["node_id"]
            if time.monotonic() > deadline:
                raise AssertionError(f"Ray node {ray_node_id} did not register with raylog in {timeout_s:.0f} s")
            time.sleep(0.2)

    def ray_node(self, raylog_node: int) -> str:
        """The Ray node id a raylog node runs on now ("" while missing)."""
        for node in self.cluster.admin().describe_cluster()["nodes"]:
            if node["node_id"] == raylog_node:
                return node["ray_node_id"]
        raise AssertionError(f"raylog node {raylog_node} is not registered")

    def remove(self, node_id: str) -> None:
        """Kill the Ray node's raylet and everything on it, as a lost machine would."""
        assert node_id != self.head_id(), "removing the head ends the cluster"
        node = next(n for n in self.sim.list_all_nodes() if n.node_id == node_id)
        self.sim.remove_node(node, allow_graceful=False)

    def add(self, data_dir: str | None = None) -> str:
        """Start a node on ``data_dir`` (a fresh one by default, on a tmpfs of disk_mb if set);
        returns its Ray node id."""
        mounted = self._mount(data_dir or self.new_data_dir())
        data_dir = str(mounted[0])
        node = self._add_node(data_dir)
        self.data_dirs[node] = data_dir
        if mounted[1]:
            self.disks[node] = mounted[0]
        return node

    def _mount(self, data_dir: str) -> tuple[Path, bool]:
        path = Path(data_dir)
        if self.disk_mb is None or not can_mount_tmpfs():
            return path, False
        if not os.path.ismount(path):
            mount_tmpfs(path, self.disk_mb)
            self._mounts.append(path)
        return path, True

    def _add_node(self, data_dir: str) -> str:
        address = self._addresses.setdefault(data_dir, f"127.0.0.{len(self._addresses) + 2}")
        node = self.sim.add_node(**{**NODE_ARGS, "node_ip_address": address}, labels={DATA_DIR_LABEL: data_dir})
        # Ray's default 30 s is a budget a loaded machine can overrun; this is only a bound on a hang.
        self.sim.wait_for_nodes(timeout=300)
        return node.node_id

    def worker_dirs(self) -> list[str]:
        """The data directories of the live worker nodes."""
        head = self.head_id()
        return [d for n, d in self.data_dirs.items() if n != head and n in set(self.node_ids())]

    def restart_all(self, workers: list[str], cluster_config: dict | None = None, log_to_driver: bool = True,
                    kill: bool = False) -> None:
        """End the whole Ray cluster, then start it again on the same disks: the head, raylog's
        controller, and a worker on each of ``workers`` in that order (add the others later to bring
        them back late). ``kill``: SIGKILL every process of the cluster (a power cut after the data
        reached the page cache) instead of stopping it."""
        if kill:
            self.power_cut()
        _shutdown(self.sim)
        head_dir = os.path.join(self.data_root, "head")
        self.sim = Cluster(initialize_head=True, head_node_args=self.head_args)
        self.data_dirs = {self.sim.head_node.node_id: head_dir}
        self.disks = {}
        self.cluster = raylog.connect(address=self.sim.address, data_root=self.data_root,
                                      cluster_config=harness_config(cluster_config), log_to_driver=log_to_driver)
        for data_dir in workers:
            self.add(data_dir)

    def power_cut(self) -> None:
        """SIGKILL every process of the cluster at once (see kill_cluster_processes). This process
        is a client, not part of the cluster: it detaches first, or its core worker may end it when
        its raylet dies (two chaos runs ended that way, silently)."""
        ray.shutdown()
        kill_cluster_processes()

    def unmount_all(self) -> None:
        for path in reversed(self._mounts):
            unmount(path)
        self._mounts.clear()

    def restart(self, node_id: str) -> str:
        """Stop a worker node and start it again on its disk (its data directory); returns its new
        Ray node id. raylog sees the same node come back."""
        data_dir = self.data_dirs[node_id]
        self.remove(node_id)
        return self.add(data_dir)


def _start(data_root: str, workers: int | list[str], head_resources: dict | None, head_cpus: int,
           disk_mb: int | None, health_checks: dict | None = None) -> SimulatedCluster:
    head_dir = os.path.join(data_root, "head")
    # No dashboard: its ten processes cost 1 GB and 3 s of CPU per cluster, and no test here reads
    # it (tests/integration/test_metrics.py starts its own Ray with one).
    head_args = {**NODE_ARGS, "num_cpus": head_cpus, "resources": head_resources or {}, "include_dashboard": False,
                 "labels": {DATA_DIR_LABEL: head_dir},
                 "_system_config": {**FAST_HEALTH_CHECKS, **(health_checks or {}), **RAY_SYSTEM_CONFIG}}
    sim = Cluster(initialize_head=True, head_node_args=head_args)
    out = SimulatedCluster(sim, None, data_root, head_args, disk_mb)
    out.data_dirs[sim.head_node.node_id] = head_dir
    try:
        for data_dir in (workers if isinstance(workers, list) else [None] * workers):
            out.add(data_dir)
    except BaseException:
        _stop(out)
        raise
    return out


@contextlib.contextmanager
def simulated_cluster(data_root: str, workers: int | list[str] = 3, cluster_config: dict | None = None,
                      log_to_driver: bool = True, head_resources: dict | None = None, head_cpus: int = 1,
                      disk_mb: int | None = None, health_checks: dict | None = None):
    """A head node and ``workers`` worker nodes: a count of new ones, or a list of data directories
    to start them on (a whole-cluster restart). ``head_resources``: custom resources of the head
    node only (to pin something there), which has ``head_cpus`` CPUs. ``disk_mb``: each worker's
    data directory is a tmpfs of that size, where the machine lets the test mount one (root);
    ``sim.disks`` lists them (empty where mounting is refused). ``health_checks``: Ray's
    health_check_* settings over FAST_HEALTH_CHECKS (a test that pauses a raylet gives it longer)."""
    out = _start(data_root, workers, head_resources, head_cpus, disk_mb, health_checks)
    try:
        out.cluster = raylog.connect(address=out.sim.address, data_root=data_root,
                                     cluster_config=harness_config(cluster_config), log_to_driver=log_to_driver)
        yield out
    finally:
        _stop(out)


def harness_config(cluster_config: dict | None) -> dict:
    """A simulated cluster's controller starts on the first request and makes __consumer_offsets
    when a group first asks, and it runs no Kafka listener (unless a test says otherwise): its tests
    place, count and kill replicas and actors node by node, and one the harness made unasked would
    be among them."""
    return {"offsets_topic_eager": False, "kafka_listener": "", **(cluster_config or {})}


def _stop(out: SimulatedCluster) -> None:
    try:
        _shutdown(out.sim)
    finally:
        out.unmount_all()


def _shutdown(sim: Cluster) -> None:
    ray.shutdown()
    try:
        sim.shutdown()
    except ValueError:
        # A client thread (a producer left open by a failed test) re-attached Ray after the
        # shutdown above; detach again so the simulated nodes can be stopped.
        ray.shutdown()
        sim.shutdown()


def kill_cluster_processes() -> int:
    """SIGKILL every process this process started for Ray (GCS, raylets, workers, actors, the
    dashboard), all at once, as a power cut would end them; returns how many. Their page cache
    stays, as it does across a crash of every process."""
    import psutil

    victims = psutil.Process().children(recursive=True)
    for proc in victims:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(victims, timeout=30)
    return len(victims)
