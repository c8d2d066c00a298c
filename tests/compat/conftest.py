"""The compat tests run on the integration tests' real local Ray (one per module)."""

from tests.integration.conftest import cluster, data_root  # noqa: F401 - fixtures shared by name
