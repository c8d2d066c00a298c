"""KafkaListenerActor: one Ray node's Kafka listener (raylog/kafka/listener.py) in a Ray actor.

A thin shell, one per node, started by the controller as the node registers (named by the Ray
node id, as the node agent is; pinned there, detached, restarted there by Ray). It binds
ClusterConfig.kafka_listener on its node (the next free port if taken: simulated nodes on one
machine get one port each), answers with a BrokerApi over raylog's client, and tells callers
the address in use. Kafka clients know it by its node's raylog node id, stable across restarts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from typing import TYPE_CHECKING

import ray

from raylog.config import listener_address
from raylog.logs import configure_actor_logging

if TYPE_CHECKING:
    from raylog.kafka.listener import KafkaListener

logger = logging.getLogger(__name__)

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


class KafkaListenerActor:
    def __init__(self, namespace: str, node_id: int, head_node_id: int):
        configure_actor_logging()
        # raylog's client calls Ray synchronously; here it does so only from worker threads
        # (asyncio.to_thread), never on the loop, which Ray's warning cannot tell apart.
        os.environ["RAY_WARN_BLOCKING_GET_INSIDE_ASYNC"] = "0"
        self.namespace, self.node_id, self.head_node_id = namespace, node_id, head_node_id
        self._listener: KafkaListener | None = None
        self._starting = asyncio.Lock()
        self._expiry: asyncio.Task | None = None

    async def address(self) -> dict:
        """{"node_id", "host", "port"} Kafka clients reach this listener at; binds on the first call."""
        async with self._starting:
            if self._listener is None:
                listener = await asyncio.to_thread(self._build)
                port = await listener.start()
                listener.api.port = port
                self._listener = listener
                self._expiry = asyncio.get_running_loop().create_task(listener.api.expire_members_forever())
                logger.info("event=kafka_listener_started address=%s:%d node_id=%d", listener.api.host, port,
                            self.node_id)
        api = self._listener.api
        return {"node_id": self.node_id, "host": api.host, "port": api.port}

    def _build(self) -> KafkaListener:
        # The protocol's modules (kio's schemas: 0.8 s to import on an idle machine, far more at
        # Ray's worker niceness on a loaded one) load here, in the listener's process and off its
        # loop: the controller imports this module to start the actor, and an import of them on its
        # event loop held every heartbeat and creation behind it (a creation waited 40 s beside a
        # CPU hog).
        from raylog.cluster import attached
        from raylog.kafka.broker_api import BrokerApi
        from raylog.kafka.listener import KafkaListener

        cluster = attached(self.namespace)
        config = cluster.config
        host, port = listener_address(config.kafka_listener, config.kafka_listener_sasl)
        # A listener on every address is reached at its node's.
        advertised = ray.util.get_node_ip_address() if host in WILDCARD_HOSTS else host
        api = BrokerApi(cluster, self.node_id, advertised, port, self.head_node_id)
        tls = None
        if config.kafka_listener_tls_cert:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(config.kafka_listener_tls_cert, config.kafka_listener_tls_key)
        return KafkaListener(api, host, port, sasl=api.user_credentials if config.kafka_listener_sasl else None,
                             tls=tls)

    async def stats(self) -> dict:
        """Connections open and refused; partition fetches answered over the same-node channel and
        by Ray call."""
        listener = self._listener
        if listener is None:
            return {"connections": 0, "refused": 0, "fetches_by_channel": 0, "fetches_by_call": 0}
        return {"connections": listener.connections, "refused": listener.refused,
                "fetches_by_channel": listener.api.fetches_by_channel, "fetches_by_call": listener.api.fetches_by_call}

    async def ping(self) -> int:
        return os.getpid()
