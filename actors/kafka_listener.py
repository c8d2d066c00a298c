"""KafkaListenerActor: the head node's Kafka listener (raylog/kafka/listener.py) in a Ray actor.

A thin shell: it binds ClusterConfig.kafka_listener (the next free port if taken), answers with a
BrokerApi over raylog's client, and tells callers the address in use. One per namespace, on the
head node, detached and restarted by Ray (a restart binds again). It speaks for the head's raylog
node id, the stable id Kafka clients see as the broker's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl

from raylog import ray_calls
from raylog.config import listener_address
from raylog.kafka.broker_api import BrokerApi
from raylog.kafka.listener import KafkaListener
from raylog.logs import configure_actor_logging

logger = logging.getLogger(__name__)


class KafkaListenerActor:
    def __init__(self, namespace: str):
        configure_actor_logging()
        # raylog's client calls Ray synchronously; here it does so only from worker threads
        # (asyncio.to_thread), never on the loop, which Ray's warning cannot tell apart.
        os.environ["RAY_WARN_BLOCKING_GET_INSIDE_ASYNC"] = "0"
        self.namespace = namespace
        self._listener: KafkaListener | None = None
        self._starting = asyncio.Lock()

    async def address(self) -> dict:
        """{"host", "port", "node_id"} of the listener, started on the first call."""
        async with self._starting:
            if self._listener is None:
                self._listener = await asyncio.to_thread(self._build)
                port = await self._listener.start()
                self._listener.api.port = port
                self._expiry = asyncio.get_running_loop().create_task(self._listener.api.expire_members_forever())
                logger.info("event=kafka_listener_started address=%s:%d node_id=%d", self._listener.host, port,
                            self._listener.api.node_id)
        api = self._listener.api
        return {"host": self._listener.host, "port": self._listener.port, "node_id": api.node_id}

    def _build(self) -> KafkaListener:
        from raylog.cluster import attached

        cluster = attached(self.namespace)
        config = cluster.config
        host, port = listener_address(config.kafka_listener, config.kafka_listener_sasl)
        # The controller's answer, not the admin client's: that one asks this actor for its address.
        node_id = ray_calls.get(cluster.controller.describe_cluster.remote(), config.request_timeout_ms / 1000)["head_node"]
        api = BrokerApi(cluster, node_id, host, port)
        tls = None
        if config.kafka_listener_tls_cert:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(config.kafka_listener_tls_cert, config.kafka_listener_tls_key)
        return KafkaListener(api, host, port, sasl=api.user_credentials if config.kafka_listener_sasl else None,
                             tls=tls)

    async def stats(self) -> dict:
        listener = self._listener
        return {"connections": listener.connections if listener else 0, "refused": listener.refused if listener else 0}

    async def ping(self) -> int:
        return os.getpid()
