"""A replica keeps the newest topic config it was told on disk: Ray restarts a crashed actor with
its creation arguments, which carry the config as it was when the replica was made."""

from __future__ import annotations

import asyncio

from actors.replica import PartitionReplica
from raylog.config import TopicConfig


def replica(path, config: dict, version: int = 0) -> PartitionReplica:
    return PartitionReplica("t", 0, 0, str(path), config, "topic-id", None, None, config_version=version)


def test_a_replica_restarted_with_its_creation_arguments_takes_the_config_it_was_told_since(tmp_path):
    created = TopicConfig(retention_ms=-1).to_dict()
    first = replica(tmp_path, created)
    first._apply_config(TopicConfig(retention_ms=60_000, max_message_bytes=2048).to_dict(), 1)
    assert first.log.config.max_message_bytes == 2048
    asyncio.run(first.close())
    again = replica(tmp_path, created)
    assert again.config == TopicConfig(retention_ms=60_000, max_message_bytes=2048)
    assert again.log.config == again.config, "the log opened with it too"
    asyncio.run(again.close())


def test_a_newer_config_in_the_arguments_wins_over_the_saved_one(tmp_path):
    first = replica(tmp_path, TopicConfig().to_dict())
    first._apply_config(TopicConfig(retention_ms=1000).to_dict(), 1)
    asyncio.run(first.close())
    again = replica(tmp_path, TopicConfig(retention_ms=2000).to_dict(), version=2)
    assert again.config.retention_ms == 2000
    asyncio.run(again.close())


def test_an_older_config_is_ignored(tmp_path):
    first = replica(tmp_path, TopicConfig(retention_ms=3000).to_dict(), version=3)
    first._apply_config(TopicConfig(retention_ms=1000).to_dict(), 2)
    assert first.config.retention_ms == 3000
    asyncio.run(first.close())
