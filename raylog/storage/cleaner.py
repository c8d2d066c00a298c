"""Compaction for cleanup_policy="compact": keep the last record per key.

One pass, as Kafka's LogCleaner does it but without its dedupe buffer bound:

1. Map every key in the inactive segments to the offset of its last record.
   The active segment is left out, as in Kafka: it can still be truncated by
   replication, and dropping an older record because of a newer one that is
   later truncated away would lose the key.
2. Rewrite each inactive segment keeping the records whose offset is their
   key's last; tombstones (null values) are kept until their segment is older
   than delete_retention_ms, so consumers get to see the delete. A batch that
   keeps every record is copied byte for byte; one that loses some is rebuilt
   with the same base offset, last_offset_delta, epoch and codec, and the kept
   records' offset deltas; one that keeps nothing disappears.
3. Swap, crash-safe: the new bytes go to ``<base>.log.cleaned``, fsync,
   rename to ``<base>.log.swap``; then the old segment's files are removed and
   the swap is renamed to ``<base>.log``. recovery.py deletes a leftover
   ``.cleaned`` and completes a leftover ``.swap``.

Segments are rewritten one for one (never merged), so a swap replaces exactly
one segment and recovery needs no record of which segments a swap covered.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from raylog.storage import batch as record_batch
from raylog.storage import files
from raylog.storage.segment import Segment

if TYPE_CHECKING:
    from raylog.storage.log import PartitionLog


def build_offset_map(segments: list[Segment]) -> dict[bytes, int]:
    last: dict[bytes, int] = {}
    for seg in segments:
        for batch in seg.batches():
            cols = batch.columns()
            last.update(zip(cols.keys.to_pylist(), batch.offsets(cols).tolist()))
    return last


def _rewrite(seg: Segment, last: dict[bytes, int], drop_tombstones: bool) -> tuple[list[bytes], bool]:
    """The segment's batches after cleaning, and whether anything changed."""
    out: list[bytes] = []
    changed = False
    for batch in seg.batches():
        cols = batch.columns()
        offsets = batch.offsets(cols).tolist()
        keys, values = cols.keys.to_pylist(), cols.values.to_pylist()
        keep = [i for i, (k, off) in enumerate(zip(keys, offsets))
                if last.get(k) == off and not (drop_tombstones and values[i] is None)]
        if len(keep) == len(offsets):
            out.append(bytes(batch.buf[batch.position:batch.position + batch.size]))
            continue
        changed = True
        if not keep:
            continue
        timestamps = batch.timestamps(cols).tolist()
        base = batch.base_offset
        rebuilt = record_batch.build(
            values=[values[i] for i in keep],
            keys=[keys[i] for i in keep],
            timestamps_ms=[timestamps[i] for i in keep],
            headers=[cols.headers[i] for i in keep] if cols.headers is not None else None,
            compression="lz4" if batch.codec == record_batch._payload.CODEC_LZ4 else "none",
            offset_deltas=[offsets[i] - base for i in keep],
            last_offset_delta=batch.last_offset_delta,
            base_offset=base,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
        )
        view = bytearray(rebuilt)
        record_batch.RecordBatch(view, 0).stamp(base, batch.leader_epoch)
        out.append(bytes(view))
    return out, changed


def clean(log: "PartitionLog", now_ms: int) -> int:
    """Compact ``log``'s inactive segments in place; returns the bytes removed."""
    inactive = log.segments[:-1]
    if not inactive:
        return 0
    last = build_offset_map(inactive)
    removed = 0
    for seg in inactive:
        drop_tombstones = seg.max_timestamp < now_ms - log.config.delete_retention_ms
        batches, changed = _rewrite(seg, last, drop_tombstones)
        if not changed:
            continue
        new_size = sum(len(b) for b in batches)
        removed += seg.size - new_size
        base = seg.base_offset
        log_file = files.log_path(log.directory, base)
        cleaned = log_file.with_name(log_file.name + files.CLEANED_SUFFIX)
        swap = log_file.with_name(log_file.name + files.SWAP_SUFFIX)
        with open(cleaned, "wb") as f:
            for b in batches:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(cleaned, swap)
        seg.delete()
        os.replace(swap, log_file)
        files.fsync_dir(log.directory)
        if batches:
            new = Segment(log.directory, base, log.config)
            new.recover()
            log.replace_segment(seg, new)
        else:
            log_file.unlink()
            log.replace_segment(seg, None)
    return removed
