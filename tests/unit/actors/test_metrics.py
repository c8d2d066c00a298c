"""actors/metrics.py: the declarations match docs/metrics.md; fetches are counted from headers."""

from __future__ import annotations

import re
from pathlib import Path

from actors.metrics import METRICS, fetched_offsets
from raylog.storage.batch import build

DOC = Path(__file__).parents[3] / "docs" / "metrics.md"


def test_every_metric_is_named_raylog_and_declared_once():
    names = [m.name for m in METRICS]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"raylog_[a-z_]+", n) for n in names)
    assert len({m.attr for m in METRICS}) == len(METRICS)


def test_the_docs_page_lists_exactly_the_declared_metrics_with_unit_and_tags():
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("raylog_"):
            rows[cells[0]] = cells
    assert set(rows) == {m.name for m in METRICS}
    for m in METRICS:
        name, kind, unit, tags = rows[m.name][:4]
        assert (kind, unit) == (m.kind, m.unit), m.name
        assert [t.strip().strip("`") for t in tags.split(",")] == list(m.tags), m.name


def test_a_fetch_counts_the_offsets_its_batches_cover_from_the_fetch_offset():
    first = build([b"a"] * 10, base_offset=100, compression="none")
    second = build([b"b"] * 5, base_offset=110, compression="none")
    data = bytes(first) + bytes(second)
    assert fetched_offsets(data, 100) == 15
    assert fetched_offsets(data, 104) == 11  # the first batch starts before the fetch offset
    assert fetched_offsets(b"", 0) == 0
    assert fetched_offsets(data[:-3], 100) == 10  # a torn last batch is not counted
