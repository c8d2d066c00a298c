"""Fixtures shared by the storage tests."""

from tests.unit.storage.disk_calls import disk_calls  # noqa: F401 - a fixture, found by name
