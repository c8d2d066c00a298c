"""Opening a partition directory, after a clean close or a crash.

What may be on disk when a process dies (SIGKILL, power loss) and what this
module does with it:

- ``*.tmp`` (a checkpoint half written), ``*.cleaned`` (a compaction that had
  not finished), ``*.deleted`` (retention renamed, then died before unlinking):
  removed.
- ``<base>.log.swap``: a compaction finished writing and fsyncing a
  replacement; the swap is completed (replace ``<base>.log``, drop its indexes,
  rebuild them by recovering the new file).
- The last segment after an unclean shutdown (no ``.clean-shutdown`` marker):
  it was being appended to, so its file is at full capacity with a zero tail,
  its indexes untrimmed and its last batch possibly torn. Every batch is
  validated (length, magic, CRC, increasing offsets), the file is cut at the
  first invalid byte, the indexes are rebuilt.
- Older segments were flushed and trimmed when they were rolled; they are
  trusted unless their index fails a sanity check, which rebuilds it.
- A segment whose recovery cut bytes invalidates every later segment (a hole
  in the middle of the log): those are deleted, as Kafka's LogLoader does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from raylog.config import TopicConfig
from raylog.storage import files
from raylog.storage.segment import Segment


@dataclass(slots=True)
class LoadResult:
    segments: list[Segment]
    log_start_offset: int
    clean: bool
    bytes_cut: int


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
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / files.CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    must_recover = _remove_leftovers(directory)
    bases = sorted(b for p in directory.glob("*" + files.LOG_SUFFIX)
                   if (b := files.base_offset_of(p)) is not None)
    for p in list(directory.glob("*" + files.INDEX_SUFFIX)) + list(directory.glob("*" + files.TIME_INDEX_SUFFIX)):
        b = files.base_offset_of(p)
        if b is not None and b not in bases:
            p.unlink()

    segments: list[Segment] = []
    bytes_cut = 0
    for n, base in enumerate(bases):
        seg = Segment(directory, base, config)
        is_last = n == len(bases) - 1
        if (is_last and not clean) or base in must_recover or not _index_trustworthy(seg):
            cut = seg.recover()
        else:
            seg.load()
            cut = 0
        segments.append(seg)
        bytes_cut += cut
        if cut and not is_last:
            for later in bases[n + 1:]:
                doomed = Segment(directory, later, config)
                doomed.delete()
            break

    checkpoint = files.read_checkpoint(directory / files.LOG_START_OFFSET_FILE)
    first_base = segments[0].base_offset if segments else (checkpoint or 0)
    log_start = max(first_base, checkpoint or 0)
    if not segments:
        segments.append(Segment(directory, log_start, config))
    log_end = segments[-1].next_offset
    log_start = min(log_start, log_end)
    segments[-1].activate()
    marker.unlink(missing_ok=True)
    return LoadResult(segments, log_start, clean, bytes_cut)
