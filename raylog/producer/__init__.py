"""The producer: kafka-python's KafkaProducer over raylog's partition replicas.

``producer.py`` is the public class; records gather in the accumulator
(``accumulator.py``), are cut into partition batches by the partitioner
(``partitioner.py``) and encoded once (``batch_builder.py``), shipped by the
sender thread (``sender.py``), and answered through futures (``futures.py``).
"""

from raylog.producer.producer import Producer

__all__ = ["Producer"]
