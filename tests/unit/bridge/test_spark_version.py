"""The Spark the connector needs (finding 10 of issue 32: pyproject allowed pyspark 3.1.1, the jar
needs 3.3): the package's bound and the session's check agree, and an older pyspark is refused
before any JVM starts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from raylog.errors import InvalidConfigError
from spark_bridge.launch import MIN_SPARK, check_spark_version

ROOT = Path(__file__).resolve().parents[3]


def test_pyprojects_pyspark_bound_is_the_connectors_minimum():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pyspark = next(d for d in deps if d.startswith("pyspark"))
    lowest = re.search(r">=\s*(\d+)\.(\d+)", pyspark)
    assert (int(lowest[1]), int(lowest[2])) == MIN_SPARK, pyspark


@pytest.mark.parametrize("version", ["3.1.1", "3.2.4", "2.4.8"])
def test_an_older_pyspark_is_refused_naming_both_versions(version):
    with pytest.raises(InvalidConfigError, match=f"Spark 3.3 or later; this pyspark is {re.escape(version)}"):
        check_spark_version(version)


@pytest.mark.parametrize("version", ["3.3.0", "3.4.1", "3.5.7", "3.5.0.dev0"])
def test_a_supported_pyspark_passes(version):
    check_spark_version(version)
