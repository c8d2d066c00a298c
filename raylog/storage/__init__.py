"""raylog's storage engine: record batches, segments, indexes and the partition log.

Never imports Ray (tests/unit/storage/test_no_ray.py checks it), so it runs and
is tested in any Python process.
"""
