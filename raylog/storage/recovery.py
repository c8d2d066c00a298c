"""Opening a partition directory, after a clean close or a crash.

What may be on disk when a process dies (SIGKILL, power loss) and what this
module does with it:

- ``*.tmp`` (a checkpoint half written), ``*.cleaned`` (a compaction that had
  not finished), ``*.deleted`` (retention renamed, then died before unlinking):
  removed.
- ``<base>.log.swap``: a compaction finished writing and fsyncing a
  replacement; the swap is completed (replace ``<base>.log``, drop its indexes,
  rebuild them by recovering the new file).
- After an unclean shutdown (no ``.clean-shutdown`` marker), every segment
  whose data lies at or above the recovery point (``recovery-point-offset-
  checkpoint``, see log.py; Kafka's name and rule) is scanned: the one being
  appended to (file at full capacity with a zero tail, indexes untrimmed, last
  batch possibly torn) and any rolled segment whose fsync had not completed
  (after a power loss its last pages read back as zeros or old bytes, at the
  file's full size). Every batch is validated (length, magic, CRC, increasing
  offsets), the file is cut at the first invalid byte, the indexes are rebuilt.
  A missing checkpoint means every segment is scanned, as Kafka does.
- Segments below the recovery point were trimmed and fsynced; they are trusted
  unless their index fails a sanity check or their batch headers after the
  last index entry do not end exactly at the file's end, either of which
  rebuilds that segment.
- A segment whose recovery cut bytes invalidates every later segment (a hole
  in the middle of the log): those are deleted, as Kafka's LogLoader does, and
  the directory is fsynced, so a power loss cannot bring them back beside the
  records appended after the cut.

Scanned segments are valid but known to be in the page cache only: they are
returned as ``unsynced`` and the recovery point moves over them once fsynced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from raylog.config import TopicConfig
from raylog.storage import files
from raylog.storage.segment import Segment


@dataclass(frozen=True, slots=True)
class LoadResult:
    segments: list[Segment]
    log_start_offset: int
    clean: bool
    bytes_cut: int
    recovery_point: int
    """Below it every byte is on disk: the log end after a clean shutdown, else the checkpointed
    recovery point (the first segment's base when there is none), never above the log end."""
    recovery_point_on_disk: int | None
    """What the checkpoint file held (None: missing or unreadable)."""
    unsynced: list[Segment]
    """Inactive segments recovery scanned because they lay above the recovery point."""
    segments_recovered: int


def _remove_leftovers(directory: Path) -> set[int]:
    """Finish or undo multi-file operations; returns base offsets that must be recovered."""
    must_recover: set[int] = set()
    for path in sorted(directory.iterdir()):
        name = path.name
        if name.endswith((files.TMP_SUFFIX, files.CLEANED_SUFFIX, files.DELETED_SUFFIX)):
            path.unlink(missing_ok=True)
        elif name.endswith(files.LOG_SUFFIX + files.SWAP_SUFFIX):
            base = files.base_offset_of(path)
            if base is None:
                continue
            log, index, time_index = files.segment_paths(directory, base)
            index.unlink(missing_ok=True)
            time_index.unlink(missing_ok=True)
            os.replace(path, log)
            must_recover.add(base)
        elif name.endswith(files.SWAP_SUFFIX):
            path.unlink(missing_ok=True)
    return must_recover


def _index_trustworthy(seg: Segment) -> bool:
    for idx in (seg.index, seg.time_index):
        if idx.path.stat().st_size % idx.entry_size or not idx.sanity_ok():
            return False
    _, pos = seg.index.last_offset_position()
    return pos <= seg.size


def load(directory: Path, config: TopicConfig) -> LoadResult:
    files.restrict(directory)
    marker = directory / files.CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    checkpointed = files.read_checkpoint(directory / files.RECOVERY_POINT_FILE)
    must_recover = _remove_leftovers(directory)
    bases = sorted(b for p in directory.glob("*" + files.LOG_SUFFIX)
                   if (b := files.base_offset_of(p)) is not None)
    for p in list(directory.glob("*" + files.INDEX_SUFFIX)) + list(directory.glob("*" + files.TIME_INDEX_SUFFIX)):
        b = files.base_offset_of(p)
        if b is not None and b not in bases:
            p.unlink()

    segments: list[Segment] = []
    unsynced: list[Segment] = []
    bytes_cut = 0
    recovered = 0
    for n, base in enumerate(bases):
        seg = Segment(directory, base, config)
        is_last = n == len(bases) - 1
        # A segment may hold bytes at or above the recovery point unless the next one starts at or
        # below it. Missing checkpoint: all of them.
        above = not clean and (is_last or checkpointed is None or bases[n + 1] > checkpointed)
        if above or base in must_recover or not _index_trustworthy(seg) or not seg.load():
            cut = seg.recover()
            recovered += 1
            if above:
                unsynced.append(seg)
        else:
            cut = 0
        segments.append(seg)
        bytes_cut += cut
        if cut and not is_last:
            for later in bases[n + 1:]:
                doomed = Segment(directory, later, config)
                doomed.delete()
            files.fsync_dir(directory)
            break

    checkpoint = files.read_checkpoint(directory / files.LOG_START_OFFSET_FILE)
    first_base = segments[0].base_offset if segments else (checkpoint or 0)
    log_start = max(first_base, checkpoint or 0)
    if not segments:
        segments.append(Segment.create(directory, log_start, config))
    log_end = segments[-1].next_offset
    log_start = min(log_start, log_end)
    segments[-1].activate()
    if clean:
        recovery_point = log_end
    else:
        recovery_point = min(first_base if checkpointed is None else checkpointed, log_end)
    unsynced = [s for s in unsynced if s is not segments[-1]]
    marker.unlink(missing_ok=True)
    return LoadResult(segments, log_start, clean, bytes_cut, recovery_point, checkpointed, unsynced, recovered)
