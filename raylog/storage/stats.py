"""Plain counters a PartitionLog bumps; actors export them as metrics in one place."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class LogStats:
    batches_appended: int = 0
    records_appended: int = 0
    bytes_appended: int = 0
    bytes_read: int = 0
    segments_rolled: int = 0
    segments_deleted: int = 0
    bytes_cut_by_recovery: int = 0
    segments_recovered: int = 0
    """Segments the last open scanned batch by batch (those above the recovery point, and any whose
    index or tail could not be trusted)."""
    bytes_cut_by_truncation: int = 0
    flushes: int = 0
    compactions: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)
