"""Kafka's wire protocol in front of raylog: its record batches, its request frames and the
listener that serves them (docs/kafka-protocol.md). Internal: Kafka clients are its users."""
