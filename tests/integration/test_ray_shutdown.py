"""Clients left open when their Ray session ends: ray.shutdown() under an open producer and
consumer group. Their threads must end without another Ray call (Ray's .remote() starts a new local
Ray when none is up: a consumer's heartbeat did, about ten seconds after the shutdown), and a client
of the ended session (admin included) refuses work with RaySessionEndedError, also once a new
session runs."""

from __future__ import annotations

import threading

import pytest
import ray

import raylog
from raylog.errors import RaySessionEndedError
from tests.support.topics import consume_all

RAY_ARGS = {"num_cpus": 2, "object_store_memory": 200 * 1024 * 1024}
JOIN_S = 60.0
"""Only a bound for a thread that never ends: each ends about a second after the shutdown."""


@pytest.fixture
def ray_down():
    """Each test starts (and may restart) its own Ray; Ray is down after it, passed or failed."""
    yield
    ray.shutdown()


def raylog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("raylog-")]


def test_a_producer_and_a_consumer_group_left_open_end_their_threads_at_ray_shutdown_and_start_no_ray(
        tmp_path, ray_down):
    cluster = raylog.connect(data_root=str(tmp_path), **RAY_ARGS)
    admin = raylog.AdminClient()
    admin.create_topic("t", num_partitions=2)
    producer = raylog.Producer()
    called = threading.Event()
    producer.send("t", b"before").add_callback(lambda _metadata: called.set()).get(timeout=60)
    consumer = raylog.Consumer("t", group_id="g", auto_offset_reset="earliest")
    assert [r.value for r in consume_all(consumer, 1, timeout_s=60)] == [b"before"]
    assert called.wait(60)
    lingering = raylog.Producer(linger_ms=600_000)
    pending = lingering.send("t", b"not sent yet")
    threads = raylog_threads()
    names = {t.name for t in threads}
    assert {"raylog-producer-sender", "raylog-heartbeat-g"} <= names, names

    ray.shutdown()

    for thread in threads:
        thread.join(JOIN_S)
    assert [t.name for t in threads if t.is_alive()] == []
    assert not ray.is_initialized(), "a client thread started a new Ray"
    with pytest.raises(RaySessionEndedError):
        pending.get(timeout=0)
    with pytest.raises(RaySessionEndedError):
        producer.send("t", b"after")
    with pytest.raises(RaySessionEndedError):
        consumer.poll(timeout_ms=100)
    with pytest.raises(RaySessionEndedError):
        admin.list_topics()
    with pytest.raises(RaySessionEndedError):
        cluster.bootstrap_servers()
    producer.close()
    lingering.close()
    consumer.close()
    assert not ray.is_initialized(), "closing a client of the ended session started a new Ray"
    assert raylog_threads() == []


def test_a_client_of_an_ended_session_refuses_and_the_next_session_serves_what_it_acknowledged(
        tmp_path, ray_down):
    raylog.connect(data_root=str(tmp_path), **RAY_ARGS)
    raylog.AdminClient().create_topic("t", num_partitions=1)
    old = raylog.Producer()
    old.send("t", b"acknowledged").get(timeout=60)
    old_sender = next(t for t in raylog_threads() if t.name == "raylog-producer-sender")

    ray.shutdown()
    raylog.connect(data_root=str(tmp_path), **RAY_ARGS)

    with pytest.raises(RaySessionEndedError):
        old.send("t", b"refused")
    old_sender.join(JOIN_S)
    assert not old_sender.is_alive()
    old.close()
    with raylog.Producer() as new:
        new.send("t", b"second").get(timeout=60)
    with raylog.Consumer("t", auto_offset_reset="earliest") as consumer:
        assert [r.value for r in consume_all(consumer, 2, timeout_s=60)] == [b"acknowledged", b"second"]
