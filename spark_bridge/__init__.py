"""Spark on Ray through RayDP, reading and writing raylog topics through the replicas' actors.

    import spark_bridge
    with spark_bridge.session() as spark:
        df = spark_bridge.read(spark, "events", starting_offsets="earliest")
        df.groupBy("partition").count().show()
        spark_bridge.write(df.select("key", "value"), topic="events-copy")

``read`` gives Spark's Kafka source schema and takes its options (snake_case), ``write``
takes its sink columns, ``stream`` runs micro-batches from a consumer group's offsets.
"""

from spark_bridge.launch import Session, session
from spark_bridge.read import KAFKA_DDL, KAFKA_DDL_WITH_HEADERS, read
from spark_bridge.stream import MicroBatchStream, stream
from spark_bridge.write import write

__all__ = ["KAFKA_DDL", "KAFKA_DDL_WITH_HEADERS", "MicroBatchStream", "Session", "read", "session", "stream", "write"]
