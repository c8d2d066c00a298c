"""A spy on the calls that decide what survives a power loss: fsync, rename and file creation.

Nothing is mocked: each call is recorded with the path it acts on, then the real call runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def disk_calls(monkeypatch):
    """Ordered ("fsync", path), ("replace", destination), ("create", path) and ("unlink", path)."""
    calls: list[tuple[str, Path]] = []
    real_fsync, real_replace, real_open, real_unlink = os.fsync, os.replace, os.open, os.unlink

    def fsync(fd):
        fd = fd if isinstance(fd, int) else fd.fileno()
        calls.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        calls.append(("replace", Path(dst)))

    def open_(path, flags, *args, **kwargs):
        existed = flags & os.O_CREAT and os.path.exists(path)
        fd = real_open(path, flags, *args, **kwargs)
        if flags & os.O_CREAT and not existed:
            calls.append(("create", Path(path)))
        return fd

    def unlink(path, *args, **kwargs):
        real_unlink(path, *args, **kwargs)
        calls.append(("unlink", Path(path)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "unlink", unlink)
    return calls


def last_index(calls, kind: str, path: Path) -> int:
    """Position of the last ``kind`` call on ``path`` in ``calls``; -1 if there is none."""
    for i in range(len(calls) - 1, -1, -1):
        if calls[i] == (kind, Path(path)):
            return i
    return -1


def directory_synced_after(calls, directory: Path, kind: str, path: Path) -> bool:
    """Whether ``directory`` was fsynced after the last ``kind`` call on ``path`` (and there was one)."""
    done = last_index(calls, kind, path)
    return done >= 0 and last_index(calls, "fsync", directory) > done
