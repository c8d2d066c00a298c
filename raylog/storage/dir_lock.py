"""An exclusive lock on a directory, held by the one process that may write it (Kafka's ``.lock``).

A node's data directory is locked by the process that speaks for the node (its node agent, or the
controller for the head node), so two Ray nodes configured with one directory cannot both claim
its identity; a partition directory is locked by its replica process, so a replica started on a
restarted node never opens files that the previous process (a zombie of a removed node, which Ray
can leave running for seconds) is still writing. The lock is ``flock`` on ``<directory>/.lock``:
the kernel drops it when the process dies however it dies, so a crash never leaves a stale lock.
The file also holds the holder's pid, for the error message of whoever finds it taken.

Not thread-safe; one DirectoryLock per directory per process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from raylog.errors import DataDirectoryInUseError
from raylog.storage import files

LOCK_FILE = ".lock"


class DirectoryLock:
    def __init__(self, directory: str | Path, hint: str = ""):
        self.directory = Path(directory)
        self.hint = hint
        """Said after the holder when the lock is taken: what the user can do about it."""
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this process holds it (again) afterwards."""
        if self._fd is not None:
            return True
        files.make_directory(self.directory)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, files.FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def holder(self) -> int | None:
        """The pid written by the process holding (or that last held) the lock."""
        try:
            return int((self.directory / LOCK_FILE).read_text().strip() or "0") or None
        except (OSError, ValueError):
            return None

    def acquire(self, timeout_s: float = 0.0, poll_s: float = 0.1) -> None:
        """Take the lock, waiting up to ``timeout_s`` for its holder to exit; else
        DataDirectoryInUseError naming the directory and the holder's pid."""
        deadline = time.monotonic() + timeout_s
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                waited = f" (waited {timeout_s:.0f} s for it to exit)" if timeout_s else ""
                raise DataDirectoryInUseError(
                    f"{self.directory} is in use by another raylog process, pid {self.holder() or '?'}{waited}"
                    + (f": {self.hint}" if self.hint else ""))
            time.sleep(poll_s)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
