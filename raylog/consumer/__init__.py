"""The consumer: kafka-python's KafkaConsumer with KIP-848 consumer groups.

``consumer.py`` is the public class; the fetcher (``fetcher.py``) keeps
fetches in flight to partition leaders, fetched batches decode into column
views (``column_batch.py``), and group membership lives in
``group_member.py``.
"""

from raylog.consumer.consumer import Consumer

__all__ = ["Consumer"]
