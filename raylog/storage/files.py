"""Every file name raylog keeps in a partition directory, and the checkpoint file format.

A partition directory holds, per segment, three files named by the segment's
base offset as 20 zero-padded digits (so a directory listing sorts by offset):

    00000000000000000000.log         the record batches
    00000000000000000000.index       sparse offset index
    00000000000000000000.timeindex   sparse time index

Files in transition carry a suffix after that: ``.deleted`` (retention removed
the segment; unlinked right after the rename), ``.cleaned`` (compaction is
writing a replacement), ``.swap`` (the replacement is complete and about to
take the old file's place). Recovery finishes or undoes each of them.

Beside them: ``<20-digit offset>.snapshot`` (producer state as of that offset,
producer_state.py), ``leader-epoch-checkpoint`` (leader_epoch.py),
``partition.metadata`` (the id of the topic incarnation the directory belongs
to, so a topic deleted while a replica was down and created again under the
same name never reopens its files), ``high-watermark-checkpoint`` and
``recovery-point-offset-checkpoint`` (log.py).

Checkpoints are small text files: a first line ``raylog-checkpoint <version>``
and the value on the second. Every small file is written atomically and made
durable (``write_atomically``): temp file, fsync, rename, fsync of the
directory, since a rename is a change to the directory and without the last
step a power loss can bring back the old file, or none.
"""

from __future__ import annotations

import os
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"
SNAPSHOT_SUFFIX = ".snapshot"

CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
"""Present only between a clean close and the next open: its absence means recover."""
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
"""The log start offset, which can sit above the first segment's base (delete_records)."""
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
"""The last high watermark the replica knew, so a restarted leader does not hide committed records."""
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
"""The offset below which every segment's data was fsynced; recovery after a crash scans from it."""
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
TOPIC_CONFIG_FILE = "topic-config"
"""The newest topic config the replica was told (version and fields, JSON): a replica Ray restarts
gets its creation-time config as arguments and must not apply a retention since altered."""
READ_VIEW_FILE = "read-view"
"""The page the replica publishes for readers on its node (read_view.py): high watermark, log
start, active segment's written size, generation; read-only to everyone else."""

FILE_MODE = 0o600
"""Every file raylog writes in a data directory (segments, indexes, checkpoints, snapshots, the read
view, meta.properties): the replica's user only. The readers of the files on a node are Ray
workers of that same user, so this costs them nothing, and no other local user reads a record."""
DIR_MODE = 0o700

CHECKPOINT_VERSION = 1
OFFSET_DIGITS = 20


def filename_prefix(offset: int) -> str:
    return f"{offset:0{OFFSET_DIGITS}d}"


def log_path(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + LOG_SUFFIX)


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + INDEX_SUFFIX)


def time_index_path(directory: Path, base_offset: int) -> Path:
    return directory / (filename_prefix(base_offset) + TIME_INDEX_SUFFIX)


def segment_paths(directory: Path, base_offset: int) -> tuple[Path, Path, Path]:
    return (log_path(directory, base_offset), index_path(directory, base_offset),
            time_index_path(directory, base_offset))


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / (filename_prefix(offset) + SNAPSHOT_SUFFIX)


def base_offset_of(path: Path) -> int | None:
    """The base offset a segment file name encodes, or None for any other file."""
    stem = path.name.split(".", 1)[0]
    if len(stem) == OFFSET_DIGITS and stem.isdigit():
        return int(stem)
    return None


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries durable: files created, renamed or removed in it."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash or power loss leaves the old file or the new one.

    Raises OSError (ENOSPC on a full disk) with the old file in place and no temp file left.
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_checkpoint(path: Path, value: int) -> None:
    write_atomically(path, f"raylog-checkpoint {CHECKPOINT_VERSION}\n{value}\n".encode())


def read_checkpoint(path: Path) -> int | None:
    """The checkpointed value, or None if the file is missing or not a checkpoint."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) != 2 or lines[0] != f"raylog-checkpoint {CHECKPOINT_VERSION}":
        return None
    try:
        return int(lines[1])
    except ValueError:
        return None


def read_text_value(path: Path) -> str | None:
    """The second line of a small text file (partition.metadata), or None."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    return lines[1] if len(lines) == 2 else None


def write_text_value(path: Path, header: str, value: str) -> None:
    write_atomically(path, f"{header}\n{value}\n".encode())


def make_directory(directory: Path) -> None:
    """Create ``directory`` and the parents it lacks for their owner alone (mkdir's mode applies to
    the last one only), and make an existing ``directory`` so."""
    directory = Path(directory)
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for path in reversed(missing):
        path.mkdir(mode=DIR_MODE, exist_ok=True)
    target = missing[0] if missing else directory
    if target.stat().st_mode & 0o777 != DIR_MODE:
        target.chmod(DIR_MODE)


def restrict(directory: Path) -> None:
    """Give a directory written by an older raylog, whose files followed the umask (0644), the modes
    raylog writes with now: the directory 0700, its files 0600."""
    make_directory(directory)
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mode & 0o777 != FILE_MODE:
            os.chmod(entry.path, FILE_MODE)
