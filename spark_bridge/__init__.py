"""Spark on Ray through RayDP, reading and writing raylog topics with the ``raylog`` format.

    import spark_bridge
    with spark_bridge.session() as spark:
        df = spark.read.format("raylog").option("subscribe", "events").load()
        df.groupBy("partition").count().show()
        df.select("key", "value").write.format("raylog").option("topic", "events-copy").save()

``session`` starts Spark with the connector (spark_bridge/jvm, built by ``make jar``) on its
classpath; the format takes the options and gives the schema of Spark's Kafka source, for
batch and streaming reads and writes. ``read`` (offsets fixed when called), ``write`` (returns
the count) and ``stream`` (foreachBatch with retries and consumer-group commits) are Python
shortcuts over it.
"""

from spark_bridge.launch import Session, session
from spark_bridge.read import KAFKA_DDL, KAFKA_DDL_WITH_HEADERS, read
from spark_bridge.stream import stream
from spark_bridge.write import write

__all__ = ["KAFKA_DDL", "KAFKA_DDL_WITH_HEADERS", "Session", "read", "session", "stream", "write"]
