"""Benchmarks that reproduce rows of Kafka's reference table; each prints medians and ratios."""
